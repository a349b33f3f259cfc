/* zo_kernels_misc_mve.c - Helium (MVE) MEAN for the Cortex-M55, bit-exact with the portable kernel
 * (zo_kernels_misc.c): 8 channels per vector summed in int16 lanes over blocks of at most 256
 * rows (|sum| <= 256 * 128 fits), the blocks added in int32, then TFLM's requantisation 4 lanes at
 * a time.  Compiled to nothing where ZO_KERNELS_MVE is not set.  Tails are predicated (VCTP): no
 * load or store goes past a buffer.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include "zo_kernels_mve.h"

/* Rows an int16 lane sums before it is widened. */
#define ZO_MVE_MEAN_ROWS 256

/* MEAN over [outer][reduce][inner]: out = requant(sum over reduce - input_zp * reduce) (wrapping
 * int32, as TFLM). */
void zo_mean_s8(const zo_mean_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t inner = (size_t)p->inner;
    const int32_t zp_times_n = zo_wrap_mul(p->input_zp, p->reduce);
    const zo_mve_scale_t sc = zo_mve_scale(p->multiplier, p->shift);
    const int32x4_t lo = vdupq_n_s32(-128), hi = vdupq_n_s32(127);
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *base = input + (size_t)o * (size_t)p->reduce * inner;
        int8_t *out = output + (size_t)o * inner;
        for (int32_t i0 = 0; i0 < p->inner; i0 += 8) {
            const mve_pred16_t pc = vctp16q((uint32_t)(p->inner - i0));
            int32x4_t even = vdupq_n_s32(0), odd = even; /* channels i0 + 0, 2, 4, 6 and 1, 3, 5, 7 */
            for (int32_t r0 = 0; r0 < p->reduce; r0 += ZO_MVE_MEAN_ROWS) {
                const int32_t rows = zo_min32(ZO_MVE_MEAN_ROWS, p->reduce - r0);
                const int8_t *x = base + (size_t)r0 * inner + (size_t)i0;
                int16x8_t s = vdupq_n_s16(0);
                for (int32_t r = 0; r < rows; ++r, x += inner) {
                    s = vaddq_s16(s, vldrbq_z_s16(x, pc));
                }
                even = vaddq_s32(even, vmovlbq_s16(s));
                odd = vaddq_s32(odd, vmovltq_s16(s));
            }
            /* back to channel order: 4 lanes each, then requantised */
            int32_t sums[8] __attribute__((aligned(16)));
            int32x4x2_t eo = {{even, odd}};
            vst2q_s32(sums, eo);
            for (int32_t j = 0; j < 8 && i0 + j < p->inner; j += 4) {
                int32x4_t v = vsubq_n_s32(vldrwq_s32(sums + j), zp_times_n);
                v = zo_mve_mbqm_lr(v, sc.m, sc.left, sc.right);
                v = vminq_s32(vmaxq_s32(vaddq_n_s32(v, p->output_zp), lo), hi);
                vstrbq_p_s32(out + i0 + j, v, vctp32q((uint32_t)(p->inner - i0 - j)));
            }
        }
    }
}

#else
typedef int zo_kernels_misc_mve_unused; /* ISO C: a translation unit is never empty */
#endif /* ZO_KERNELS_MVE */
