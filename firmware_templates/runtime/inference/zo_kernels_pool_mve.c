/* zo_kernels_pool_mve.c - Helium (MVE) MAX_POOL_2D (16 channels per vector) and AVERAGE_POOL_2D
 * (8: int16 sums, the division as an exact high multiply) for the Cortex-M55, bit-exact with the
 * portable kernels (zo_kernels_pool.c).  Compiled to nothing where ZO_KERNELS_MVE is not set.
 * Tails are predicated (VCTP): no load or store goes past a buffer.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include "zo_kernels_mve.h"

/* The window of output pixel (oy, ox) clipped to the image: `rows` x `cols` taps, the first at
 * `first` (channel 0), each row `row_step` bytes after the previous one. */
typedef struct {
    const int8_t *first;
    int32_t rows, cols;
    size_t row_step;
} zo_mve_window_t;

static inline zo_mve_window_t zo_mve_pool_window(const zo_pool_params_t *p, const int8_t *input, int32_t oy,
                                                 int32_t ox)
{
    const int32_t iy0 = oy * p->stride_h - p->pad_h, ix0 = ox * p->stride_w - p->pad_w;
    const int32_t ky0 = zo_max32(0, -iy0), ky1 = zo_min32(p->filter_h, p->input_h - iy0);
    const int32_t kx0 = zo_max32(0, -ix0), kx1 = zo_min32(p->filter_w, p->input_w - ix0);
    const size_t ch = (size_t)p->channels;
    zo_mve_window_t win = {input + ((size_t)(iy0 + ky0) * (size_t)p->input_w + (size_t)(ix0 + kx0)) * ch,
                           zo_max32(0, ky1 - ky0), zo_max32(0, kx1 - kx0), (size_t)p->input_w * ch};
    return win;
}

/* MAX_POOL_2D, 16 channels per vector: the running maximum of the window's taps, clamped. */
void zo_max_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t ch = p->channels;
    const int8x16_t lo = vdupq_n_s8((int8_t)p->act_min), hi = vdupq_n_s8((int8_t)p->act_max);
    int8_t *out = output;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const zo_mve_window_t win = zo_mve_pool_window(p, input, oy, ox);
            for (int32_t c0 = 0; c0 < ch; c0 += 16) {
                const mve_pred16_t pr = vctp8q((uint32_t)(ch - c0));
                int8x16_t m = vdupq_n_s8(-128);
                for (int32_t r = 0; r < win.rows; ++r) {
                    const int8_t *x = win.first + (size_t)r * win.row_step + (size_t)c0;
                    for (int32_t k = 0; k < win.cols; ++k) {
                        m = vmaxq_s8(m, vldrbq_z_s8(x, pr));
                        x += ch;
                    }
                }
                vstrbq_p_s8(out + c0, vminq_s8(vmaxq_s8(m, lo), hi), pr);
            }
            out += ch;
        }
    }
}

/* Windows of at most this many taps: their int8 sums fit the int16 lanes (256 * -128 = INT16_MIN). */
#define ZO_MVE_AVG_TAPS 256

/* TFLM's average of 4 sums over `count` taps: (|s| + count / 2) / count with the sign of s, the
 * division exact as a high multiply by m = floor((2^32 - 1) / count) + 1 (|s| + count / 2 < 2^16,
 * far below the 2^32 / count up to which that is exact); count 1 is the sum itself. */
static inline int32x4_t zo_mve_average(int32x4_t s, int32_t count, uint32_t m)
{
    if (count == 1) {
        return s;
    }
    const uint32x4_t a = vreinterpretq_u32_s32(vaddq_n_s32(vabsq_s32(s), count / 2));
    const int32x4_t q = vreinterpretq_s32_u32(vmulhq_u32(a, vdupq_n_u32(m)));
    const int32x4_t sign = vshrq_n_s32(s, 31); /* -1 where s < 0 */
    return vsubq_s32(veorq_s32(q, sign), sign);
}

/* AVERAGE_POOL_2D, 8 channels per int16 vector: the window's taps summed, averaged, clamped.
 * Larger windows take the portable kernel. */
void zo_avg_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output)
{
    if (p->filter_h * p->filter_w > ZO_MVE_AVG_TAPS) {
        zo_avg_pool_s8_portable(p, input, output);
        return;
    }
    const int32_t ch = p->channels;
    const int16x8_t lo = vdupq_n_s16((int16_t)p->act_min), hi = vdupq_n_s16((int16_t)p->act_max);
    int8_t *out = output;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const zo_mve_window_t win = zo_mve_pool_window(p, input, oy, ox);
            const int32_t count = win.rows * win.cols;
            const uint32_t m = count > 1 ? 0xFFFFFFFFu / (uint32_t)count + 1u : 0u;
            for (int32_t c0 = 0; c0 < ch; c0 += 8) {
                const mve_pred16_t pr = vctp16q((uint32_t)(ch - c0));
                int16x8_t sum = vdupq_n_s16(0);
                for (int32_t r = 0; r < win.rows; ++r) {
                    const int8_t *x = win.first + (size_t)r * win.row_step + (size_t)c0;
                    for (int32_t k = 0; k < win.cols; ++k) {
                        sum = vaddq_s16(sum, vldrbq_z_s16(x, pr));
                        x += ch;
                    }
                }
                int16x8_t v = vdupq_n_s16(0);
                if (count > 0) { /* TFLM leaves an empty window's average at 0 */
                    /* even and odd channels widened, averaged, narrowed back into their lanes */
                    v = vmovnbq_s32(v, zo_mve_average(vmovlbq_s16(sum), count, m));
                    v = vmovntq_s32(v, zo_mve_average(vmovltq_s16(sum), count, m));
                }
                vstrbq_p_s16(out + c0, vminq_s16(vmaxq_s16(v, lo), hi), pr);
            }
            out += ch;
        }
    }
}

#else
typedef int zo_kernels_pool_mve_unused; /* ISO C: a translation unit is never empty */
#endif /* ZO_KERNELS_MVE */
