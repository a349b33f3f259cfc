/* zo_kernels_elementwise_mve.c - Helium (MVE) ADD and MUL for the Cortex-M55, bit-exact with the
 * portable kernels (zo_kernels_elementwise.c): 4 lanes of TFLM's per-element arithmetic along
 * rows whose elements are contiguous in both operands (the whole tensor without broadcasting; each
 * innermost row when one operand is broadcast over the outer dimensions, as a per-channel scale
 * or shift is); other broadcasts take the portable kernel.  Compiled to nothing where
 * ZO_KERNELS_MVE is not set.  Tails are predicated (VCTP): no load or store goes past a buffer.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include "zo_kernels_mve.h"

/* TFLM's MultiplyByQuantizedMultiplier with a shift <= 0 on 4 lanes: VQRDMULH alone at shift 0
 * (`at_zero`, a constant at each use), else the right-shift form. */
__attribute__((always_inline)) static inline int32x4_t zo_mve_mbqm_le0(int32x4_t x, int32x4_t m, int32x4_t right,
                                                                        const int at_zero)
{
    return at_zero ? vqrdmulhq_s32(x, m) : zo_mve_mbqm_right(x, m, right);
}

/* ADD over n contiguous elements when no rescale shifts left (input shifts <= 0, output shift < 0);
 * zero1/zero2: that input's shift is 0 (constants at each call). */
__attribute__((always_inline)) static inline void zo_mve_add_right(const zo_add_params_t *p, const int8_t *input1,
                                                                   const int8_t *input2, int8_t *output, int32_t n,
                                                                   const int zero1, const int zero2)
{
    const zo_mve_scale_t s1 = zo_mve_scale(p->input1_multiplier, p->input1_shift);
    const zo_mve_scale_t s2 = zo_mve_scale(p->input2_multiplier, p->input2_shift);
    const zo_mve_scale_t so = zo_mve_scale(p->output_multiplier, p->output_shift);
    const int32x4_t lo = vdupq_n_s32(p->act_min), hi = vdupq_n_s32(p->act_max);
    const int32x4_t ls = vdupq_n_s32(p->left_shift);
    const int32_t zp1 = p->input1_zp, zp2 = p->input2_zp, zpo = p->output_zp;
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t pr = vctp32q((uint32_t)(n - i));
        const int32x4_t a = vshlq_s32(vsubq_n_s32(vldrbq_z_s32(input1 + i, pr), zp1), ls);
        const int32x4_t b = vshlq_s32(vsubq_n_s32(vldrbq_z_s32(input2 + i, pr), zp2), ls);
        const int32x4_t sum = vaddq_s32(zo_mve_mbqm_le0(a, s1.m, s1.right, zero1),
                                        zo_mve_mbqm_le0(b, s2.m, s2.right, zero2));
        const int32x4_t v = vaddq_n_s32(zo_mve_mbqm_right(sum, so.m, so.right), zpo);
        vstrbq_p_s32(output + i, vminq_s32(vmaxq_s32(v, lo), hi), pr);
    }
}

/* ADD (zo_add_one on 4 lanes) over n contiguous elements. */
static void zo_mve_add_row(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output,
                           int32_t n)
{
    if (p->input1_shift <= 0 && p->input2_shift <= 0 && p->output_shift < 0) {
        /* the usual case: no rescale shifts left (shorter forms); the input of the larger scale is
         * at shift 0 (multiplier 1/2) */
        const int z1 = p->input1_shift == 0, z2 = p->input2_shift == 0;
        if (z1 && z2) {
            zo_mve_add_right(p, input1, input2, output, n, 1, 1);
        } else if (z1) {
            zo_mve_add_right(p, input1, input2, output, n, 1, 0);
        } else if (z2) {
            zo_mve_add_right(p, input1, input2, output, n, 0, 1);
        } else {
            zo_mve_add_right(p, input1, input2, output, n, 0, 0);
        }
        return;
    }
    const zo_mve_scale_t s1 = zo_mve_scale(p->input1_multiplier, p->input1_shift);
    const zo_mve_scale_t s2 = zo_mve_scale(p->input2_multiplier, p->input2_shift);
    const zo_mve_scale_t so = zo_mve_scale(p->output_multiplier, p->output_shift);
    const int32x4_t lo = vdupq_n_s32(p->act_min), hi = vdupq_n_s32(p->act_max);
    const int32x4_t ls = vdupq_n_s32(p->left_shift);
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t pr = vctp32q((uint32_t)(n - i));
        const int32x4_t a = vshlq_s32(vsubq_n_s32(vldrbq_z_s32(input1 + i, pr), p->input1_zp), ls);
        const int32x4_t b = vshlq_s32(vsubq_n_s32(vldrbq_z_s32(input2 + i, pr), p->input2_zp), ls);
        const int32x4_t sum = vaddq_s32(zo_mve_mbqm_lr(a, s1.m, s1.left, s1.right),
                                        zo_mve_mbqm_lr(b, s2.m, s2.left, s2.right));
        int32x4_t v = vaddq_n_s32(zo_mve_mbqm_lr(sum, so.m, so.left, so.right), p->output_zp);
        vstrbq_p_s32(output + i, vminq_s32(vmaxq_s32(v, lo), hi), pr);
    }
}

/* MUL (zo_mul_one on 4 lanes) over n contiguous elements. */
static void zo_mve_mul_row(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output,
                           int32_t n)
{
    const zo_mve_scale_t so = zo_mve_scale(p->output_multiplier, p->output_shift);
    const int32x4_t lo = vdupq_n_s32(p->act_min), hi = vdupq_n_s32(p->act_max);
    for (int32_t i = 0; i < n; i += 4) {
        const mve_pred16_t pr = vctp32q((uint32_t)(n - i));
        const int32x4_t a = vsubq_n_s32(vldrbq_z_s32(input1 + i, pr), p->input1_zp);
        const int32x4_t b = vsubq_n_s32(vldrbq_z_s32(input2 + i, pr), p->input2_zp);
        int32x4_t v = vaddq_n_s32(zo_mve_mbqm_lr(vmulq_s32(a, b), so.m, so.left, so.right), p->output_zp);
        vstrbq_p_s32(output + i, vminq_s32(vmaxq_s32(v, lo), hi), pr);
    }
}

/* A broadcast whose innermost dimension is contiguous in both operands (in1_s3 == in2_s3 == 1), as
 * a per-channel scale or shift is: out_d0 * out_d1 * out_d2 rows of out_d3 elements, each row by
 * `row` (the shape fields, read from either params struct). */
typedef struct {
    int32_t d[4], s1[3], s2[3];
} zo_mve_rows_t;
#define ZO_MVE_ROWS_OF(p)                                                                                   \
    {{(p)->out_d0, (p)->out_d1, (p)->out_d2, (p)->out_d3},                                                  \
     {(p)->in1_s0, (p)->in1_s1, (p)->in1_s2},                                                               \
     {(p)->in2_s0, (p)->in2_s1, (p)->in2_s2}}
typedef void (*zo_mve_row_fn)(const void *p, const int8_t *a, const int8_t *b, int8_t *out, int32_t n);

static void zo_mve_for_rows(const zo_mve_rows_t *r, const void *p, const int8_t *input1, const int8_t *input2,
                            int8_t *out, zo_mve_row_fn row)
{
    for (int32_t i0 = 0; i0 < r->d[0]; ++i0) {
        for (int32_t i1 = 0; i1 < r->d[1]; ++i1) {
            for (int32_t i2 = 0; i2 < r->d[2]; ++i2) {
                const ptrdiff_t o1 = (ptrdiff_t)i0 * r->s1[0] + (ptrdiff_t)i1 * r->s1[1] + (ptrdiff_t)i2 * r->s1[2];
                const ptrdiff_t o2 = (ptrdiff_t)i0 * r->s2[0] + (ptrdiff_t)i1 * r->s2[1] + (ptrdiff_t)i2 * r->s2[2];
                row(p, input1 + o1, input2 + o2, out, r->d[3]);
                out += r->d[3];
            }
        }
    }
}

static void zo_mve_add_row_of(const void *p, const int8_t *a, const int8_t *b, int8_t *out, int32_t n)
{
    zo_mve_add_row((const zo_add_params_t *)p, a, b, out, n);
}

static void zo_mve_mul_row_of(const void *p, const int8_t *a, const int8_t *b, int8_t *out, int32_t n)
{
    zo_mve_mul_row((const zo_mul_params_t *)p, a, b, out, n);
}

void zo_add_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    if (!p->broadcast) {
        zo_mve_add_row(p, input1, input2, output, p->out_d0 * p->out_d1 * p->out_d2 * p->out_d3);
    } else if (p->in1_s3 == 1 && p->in2_s3 == 1) {
        const zo_mve_rows_t rows = ZO_MVE_ROWS_OF(p);
        zo_mve_for_rows(&rows, p, input1, input2, output, zo_mve_add_row_of);
    } else {
        zo_add_s8_portable(p, input1, input2, output);
    }
}

void zo_mul_s8(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    if (!p->broadcast) {
        zo_mve_mul_row(p, input1, input2, output, p->out_d0 * p->out_d1 * p->out_d2 * p->out_d3);
    } else if (p->in1_s3 == 1 && p->in2_s3 == 1) {
        const zo_mve_rows_t rows = ZO_MVE_ROWS_OF(p);
        zo_mve_for_rows(&rows, p, input1, input2, output, zo_mve_mul_row_of);
    } else {
        zo_mul_s8_portable(p, input1, input2, output);
    }
}

#else
typedef int zo_kernels_elementwise_mve_unused; /* ISO C: a translation unit is never empty */
#endif /* ZO_KERNELS_MVE */
