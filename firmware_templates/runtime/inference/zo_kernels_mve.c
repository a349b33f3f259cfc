/* zo_kernels_mve.c - Helium (MVE) versions of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED for
 * the Cortex-M55, bit-exact with the portable kernels of zo_kernels_conv.c (and so with TFLM's
 * reference kernels).  Compiled to nothing where ZO_KERNELS_MVE is not set (zo_kernels.h).
 *
 * - Requantisation on 4 lanes, TFLM's MultiplyByQuantizedMultiplier exactly: VQRDMULH is
 *   gemmlowp's SaturatingRoundingDoublingHighMul (same rounding, same saturation), and the
 *   rounding right shift is made ties-away-from-zero (TFLM) rather than VRSHL's ties-up
 *   (CMSIS-NN) by first moving negative values down by one.
 * - CONV_2D and FULLY_CONNECTED are matrix products: int8 dot products of 16 lanes (VMLADAVA)
 *   with the input zero point folded into the bias, as the portable kernels do; four weight rows
 *   share each input vector.  Non-1x1 convolutions gather each output pixel's receptive field
 *   into a patch on the stack first (im2col).
 * - DEPTHWISE_CONV_2D: 16 channels in registers, int16 lanes (x - zp fits, w fits), even and
 *   odd channels widened by VMULLB/VMULLT into int32 accumulators.
 * Tails are predicated (VCTP): no load or store goes past a buffer.
 */
#include "zo_kernels.h"

#if defined(ZO_KERNELS_MVE)

#include <arm_mve.h>
#include <stddef.h>

#include "zo_fixedpoint.h"

/* Same limits as the portable kernels. */
#ifndef ZO_CONV_PATCH_MAX
#define ZO_CONV_PATCH_MAX 2048
#endif
#define ZO_MVE_OC_BLOCK 64

/* The output side of a requantisation: zero point and activation clamp. */
typedef struct {
    int32_t zp, act_min, act_max;
} zo_mve_out_t;

/* TFLM MultiplyByQuantizedMultiplier on 4 lanes (shift > 0: left, < 0: right). */
static inline int32x4_t zo_mve_mbqm(int32x4_t x, int32x4_t mult, int32x4_t shift)
{
    const int32x4_t zero = vdupq_n_s32(0);
    const int32x4_t right = vminq_s32(shift, zero); /* <= 0: VRSHL shifts right by -right */
    x = vqrdmulhq_s32(vshlq_s32(x, vmaxq_s32(shift, zero)), mult);
    /* x & right has the sign bit only when x < 0 and there is a right shift: then x - 1 (never
     * wrapping: saturating), so the ties that VRSHL rounds up go away from zero instead. */
    x = vqaddq_s32(x, vshrq_n_s32(vandq_s32(x, right), 31));
    return vrshlq_s32(x, right);
}

/* Requantise 4 accumulators of channels [0, n) (n <= 4 lanes used) and clamp. */
static inline int32x4_t zo_mve_requant(int32x4_t acc, const int32_t *mult, const int32_t *shift, mve_pred16_t p,
                                       const zo_mve_out_t *q)
{
    int32x4_t v = zo_mve_mbqm(acc, vldrwq_z_s32(mult, p), vldrwq_z_s32(shift, p));
    v = vaddq_n_s32(v, q->zp);
    return vminq_s32(vmaxq_s32(v, vdupq_n_s32(q->act_min)), vdupq_n_s32(q->act_max));
}

/* ------------------------------------------------------------------ matrix products */

/* eff[j] = bias[j] - input_zp * sum(w row j), as zo_fold_bias (wrapping int32). */
static void zo_mve_fold_bias(const int8_t *w, int32_t k, int32_t n, const int32_t *bias, int32_t input_zp,
                             int32_t *eff)
{
    for (int32_t j = 0; j < n; ++j) {
        const int8_t *row = w + (size_t)j * (size_t)k;
        int32_t s = 0;
        for (int32_t i = 0; i < k; i += 16) {
            s = vaddvaq_s8(s, vldrbq_z_s8(row + i, vctp8q((uint32_t)(k - i))));
        }
        const int32_t b = bias != NULL ? bias[j] : 0;
        eff[j] = zo_wrap_sub(b, zo_wrap_mul(input_zp, s));
    }
}

/* out[j] = requant(eff[j] + dot(x, w row j)) for n rows of k weights; four rows share each load
 * of x (a last group of fewer rows repeats the last row and stores only the real ones). */
static void zo_mve_gemv(const int8_t *x, const int8_t *w, int32_t k, int32_t n, const int32_t *eff,
                        const int32_t *mult, const int32_t *shift, const zo_mve_out_t *q, int8_t *out)
{
    for (int32_t j = 0; j < n; j += 4) {
        const int8_t *w0 = w + (size_t)j * (size_t)k;
        const int8_t *w1 = w + (size_t)zo_min32(j + 1, n - 1) * (size_t)k;
        const int8_t *w2 = w + (size_t)zo_min32(j + 2, n - 1) * (size_t)k;
        const int8_t *w3 = w + (size_t)zo_min32(j + 3, n - 1) * (size_t)k;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int32_t i = 0; i < k; i += 16) {
            const mve_pred16_t p = vctp8q((uint32_t)(k - i));
            const int8x16_t xv = vldrbq_z_s8(x + i, p);
            a0 = vmladavaq_s8(a0, xv, vldrbq_z_s8(w0 + i, p));
            a1 = vmladavaq_s8(a1, xv, vldrbq_z_s8(w1 + i, p));
            a2 = vmladavaq_s8(a2, xv, vldrbq_z_s8(w2 + i, p));
            a3 = vmladavaq_s8(a3, xv, vldrbq_z_s8(w3 + i, p));
        }
        const mve_pred16_t p = vctp32q((uint32_t)(n - j));
        int32x4_t acc = vdupq_n_s32(a0);
        acc = vsetq_lane_s32(a1, acc, 1);
        acc = vsetq_lane_s32(a2, acc, 2);
        acc = vsetq_lane_s32(a3, acc, 3);
        acc = vaddq_s32(acc, vldrwq_z_s32(eff + j, p));
        vstrbq_p_s32(out + j, zo_mve_requant(acc, mult + j, shift + j, p, q), p);
    }
}

static inline void zo_mve_copy(int8_t *dst, const int8_t *src, int32_t n)
{
    for (int32_t i = 0; i < n; i += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - i));
        vstrbq_p_s8(dst + i, vldrbq_z_s8(src + i, p), p);
    }
}

static inline void zo_mve_fill(int8_t *dst, int8_t v, int32_t n)
{
    const int8x16_t vv = vdupq_n_s8(v);
    for (int32_t i = 0; i < n; i += 16) {
        vstrbq_p_s8(dst + i, vv, vctp8q((uint32_t)(n - i)));
    }
}

/* Taps kx in [lo, hi) of a filter row read inside the image: ix0 + kx * d in [0, size). */
static inline void zo_mve_tap_range(int32_t ix0, int32_t d, int32_t size, int32_t taps, int32_t *lo, int32_t *hi)
{
    int32_t a = ix0 < 0 ? (-ix0 + d - 1) / d : 0;
    int32_t b = size - ix0 <= 0 ? 0 : (size - ix0 + d - 1) / d;
    *lo = zo_min32(a, taps);
    *hi = zo_max32(zo_min32(b, taps), *lo);
}

/* The receptive field of output pixel (oy, ox), channels [c0, c0 + fc), laid out like a filter
 * row; taps outside the image get the input zero point (whose folded contribution is zero). */
static void zo_mve_im2col(const zo_conv2d_params_t *p, const int8_t *input, int32_t oy, int32_t ox, int32_t c0,
                          int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t c = p->input_c;
    const int8_t zp = (int8_t)p->input_zp;
    const int32_t iy0 = oy * p->stride_h - p->pad_h;
    const int32_t ix0 = ox * p->stride_w - p->pad_w;
    const int32_t row_bytes = p->filter_w * fc;
    int32_t lo, hi;
    zo_mve_tap_range(ix0, p->dilation_w, p->input_w, p->filter_w, &lo, &hi);
    for (int32_t ky = 0; ky < p->filter_h; ++ky) {
        int8_t *dst = patch + (size_t)ky * (size_t)row_bytes;
        const int32_t iy = iy0 + ky * p->dilation_h;
        if (iy < 0 || iy >= p->input_h || lo == hi) {
            zo_mve_fill(dst, zp, row_bytes);
            continue;
        }
        const int8_t *src = input + ((size_t)iy * (size_t)p->input_w + (size_t)(ix0 + lo * p->dilation_w)) * (size_t)c
                            + (size_t)c0;
        zo_mve_fill(dst, zp, lo * fc);
        if (p->dilation_w == 1 && fc == c) {
            zo_mve_copy(dst + lo * fc, src, (hi - lo) * fc); /* the valid taps are one run */
        } else {
            for (int32_t kx = lo; kx < hi; ++kx) {
                zo_mve_copy(dst + kx * fc, src, fc);
                src += (size_t)p->dilation_w * (size_t)c;
            }
        }
        zo_mve_fill(dst + hi * fc, zp, (p->filter_w - hi) * fc);
    }
}

/* The matrix product over output pixels: 1x1 without padding reads pixels in place (patch NULL),
 * the others through im2col. */
static void zo_mve_conv2d_gemm(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                               const int32_t *bias, int8_t *output, int8_t *patch)
{
    const int32_t fc = p->filter_c;
    const int32_t groups = p->input_c / fc;
    const int32_t oc_per_group = p->output_c / groups;
    const int32_t k = p->filter_h * p->filter_w * fc;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max};
    int32_t eff[ZO_MVE_OC_BLOCK];
    for (int32_t g = 0; g < groups; ++g) {
        const int32_t c0 = g * fc;
        const int32_t oc_end = (g + 1) * oc_per_group;
        for (int32_t oc0 = g * oc_per_group; oc0 < oc_end; oc0 += ZO_MVE_OC_BLOCK) {
            const int32_t n = zo_min32(ZO_MVE_OC_BLOCK, oc_end - oc0);
            const int8_t *w = filter + (size_t)oc0 * (size_t)k;
            zo_mve_fold_bias(w, k, n, bias != NULL ? bias + oc0 : NULL, p->input_zp, eff);
            for (int32_t oy = 0; oy < p->output_h; ++oy) {
                for (int32_t ox = 0; ox < p->output_w; ++ox) {
                    const int8_t *x;
                    if (patch == NULL) {
                        x = input + ((size_t)(oy * p->stride_h) * (size_t)p->input_w + (size_t)(ox * p->stride_w))
                                        * (size_t)p->input_c + (size_t)c0;
                    } else {
                        zo_mve_im2col(p, input, oy, ox, c0, patch);
                        x = patch;
                    }
                    int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c
                                  + (size_t)oc0;
                    zo_mve_gemv(x, w, k, n, eff, p->multiplier + oc0, p->shift + oc0, &q, out);
                }
            }
        }
    }
}

/* Kept out of line so only this path's stack frame holds the patch buffer. */
__attribute__((noinline)) static void zo_mve_conv2d_im2col(const zo_conv2d_params_t *p, const int8_t *input,
                                                           const int8_t *filter, const int32_t *bias,
                                                           int8_t *output)
{
    int8_t patch[ZO_CONV_PATCH_MAX];
    zo_mve_conv2d_gemm(p, input, filter, bias, output, patch);
}

void zo_conv2d_s8(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter, const int32_t *bias,
                  int8_t *output)
{
    const int32_t k = p->filter_h * p->filter_w * p->filter_c;
    if (p->filter_h == 1 && p->filter_w == 1 && p->pad_h == 0 && p->pad_w == 0) {
        zo_mve_conv2d_gemm(p, input, filter, bias, output, NULL);
    } else if (k <= ZO_CONV_PATCH_MAX) {
        zo_mve_conv2d_im2col(p, input, filter, bias, output);
    } else {
        zo_conv2d_s8_portable(p, input, filter, bias, output);
    }
}

void zo_fully_connected_s8(const zo_fully_connected_params_t *p, const int8_t *input, const int8_t *weights,
                           const int32_t *bias, int8_t *output)
{
    const int32_t k = p->depth;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max};
    int32_t eff[ZO_MVE_OC_BLOCK];
    for (int32_t oc0 = 0; oc0 < p->units; oc0 += ZO_MVE_OC_BLOCK) {
        const int32_t n = zo_min32(ZO_MVE_OC_BLOCK, p->units - oc0);
        const int8_t *w = weights + (size_t)oc0 * (size_t)k;
        zo_mve_fold_bias(w, k, n, bias != NULL ? bias + oc0 : NULL, p->input_zp, eff);
        for (int32_t r = 0; r < p->rows; ++r) {
            zo_mve_gemv(input + (size_t)r * (size_t)k, w, k, n, eff, p->multiplier + oc0, p->shift + oc0, &q,
                        output + (size_t)r * (size_t)p->units + (size_t)oc0);
        }
    }
}

/* ------------------------------------------------------------------------ depthwise */

/* One tap for 16 output channels: x (16 input values, or gathered through offs when the depth
 * multiplier is not 1) minus the zero point, times w, widened and added to the even/odd channel
 * accumulators. */
__attribute__((always_inline)) static inline void zo_mve_dw_tap(const int8_t *x, const int8_t *w, int gather,
                                                                uint16x8_t offs0, uint16x8_t offs1, int16_t zp,
                                                                mve_pred16_t p0, mve_pred16_t p1, int32x4_t *acc)
{
    int16x8_t x0, x1;
    if (gather) {
        x0 = vldrbq_gather_offset_z_s16(x, offs0, p0);
        x1 = vldrbq_gather_offset_z_s16(x, offs1, p1);
    } else {
        x0 = vldrbq_z_s16(x, p0);
        x1 = vldrbq_z_s16(x + 8, p1);
    }
    x0 = vsubq_n_s16(x0, zp);
    x1 = vsubq_n_s16(x1, zp);
    const int16x8_t w0 = vldrbq_z_s16(w, p0);
    const int16x8_t w1 = vldrbq_z_s16(w + 8, p1);
    acc[0] = vaddq_s32(acc[0], vmullbq_int_s16(x0, w0));
    acc[1] = vaddq_s32(acc[1], vmulltq_int_s16(x0, w0));
    acc[2] = vaddq_s32(acc[2], vmullbq_int_s16(x1, w1));
    acc[3] = vaddq_s32(acc[3], vmulltq_int_s16(x1, w1));
}

/* Requantise 8 channels held as even (e) and odd (o) lanes and store them in order. */
static inline void zo_mve_dw_store(int32x4_t e, int32x4_t o, const int32_t *mult, const int32_t *shift,
                                   int32_t n, const zo_mve_out_t *q, int8_t *out)
{
    const uint32x4_t even = vidupq_n_u32(0, 2); /* 0, 2, 4, 6 */
    const uint32x4_t odd = vaddq_n_u32(even, 1);
    const mve_pred16_t pe = vctp32q((uint32_t)((n + 1) / 2)); /* channels 0, 2, .. below n */
    const mve_pred16_t po = vctp32q((uint32_t)(n / 2));
    const zo_mve_out_t qq = *q;
    int32x4_t re = zo_mve_mbqm(e, vldrwq_gather_shifted_offset_z_s32(mult, even, pe),
                               vldrwq_gather_shifted_offset_z_s32(shift, even, pe));
    int32x4_t ro = zo_mve_mbqm(o, vldrwq_gather_shifted_offset_z_s32(mult, odd, po),
                               vldrwq_gather_shifted_offset_z_s32(shift, odd, po));
    const int32x4_t lo = vdupq_n_s32(qq.act_min), hi = vdupq_n_s32(qq.act_max);
    re = vminq_s32(vmaxq_s32(vaddq_n_s32(re, qq.zp), lo), hi);
    ro = vminq_s32(vmaxq_s32(vaddq_n_s32(ro, qq.zp), lo), hi);
    /* interleave back: even lanes from re, odd from ro, as int16, then store the low bytes */
    int16x8_t v = vmovnbq_s32(vdupq_n_s16(0), re);
    v = vmovntq_s32(v, ro);
    vstrbq_p_s16(out, v, vctp16q((uint32_t)n));
}

/* Even/odd lanes of 8 consecutive int32 values (the bias), zero past n. */
static inline void zo_mve_dw_load_bias(const int32_t *b, int32_t n, int32x4_t *e, int32x4_t *o)
{
    const uint32x4_t even = vidupq_n_u32(0, 2);
    if (b == NULL || n <= 0) {
        *e = vdupq_n_s32(0);
        *o = vdupq_n_s32(0);
        return;
    }
    *e = vldrwq_gather_shifted_offset_z_s32(b, even, vctp32q((uint32_t)((n + 1) / 2)));
    *o = vldrwq_gather_shifted_offset_z_s32(b, vaddq_n_u32(even, 1), vctp32q((uint32_t)(n / 2)));
}

__attribute__((always_inline)) static inline void zo_mve_dw_pixels(const zo_depthwise_conv2d_params_t *p,
                                                                   const int8_t *input, const int8_t *filter,
                                                                   const int32_t *bias, int8_t *output, int gather)
{
    const int32_t oc_total = p->output_c;
    const int32_t dm = p->depth_multiplier;
    const size_t in_c = (size_t)p->input_c;
    const int16_t zp = (int16_t)p->input_zp;
    const zo_mve_out_t q = {p->output_zp, p->act_min, p->act_max};
    for (int32_t oc0 = 0; oc0 < oc_total; oc0 += 16) {
        const int32_t n = zo_min32(16, oc_total - oc0);
        const mve_pred16_t p0 = vctp16q((uint32_t)n);
        const mve_pred16_t p1 = vctp16q((uint32_t)(n > 8 ? n - 8 : 0));
        /* gather: output channel oc0 + j reads input channel (oc0 + j) / dm; offsets from oc0 / dm */
        uint16x8_t offs0 = vdupq_n_u16(0), offs1 = vdupq_n_u16(0);
        const int32_t ic0 = oc0 / dm;
        if (gather) {
            uint16_t t[16];
            for (int32_t l = 0; l < 16; ++l) {
                t[l] = (uint16_t)((oc0 + l) / dm - ic0);
            }
            offs0 = vld1q_u16(t);
            offs1 = vld1q_u16(t + 8);
        }
        for (int32_t oy = 0; oy < p->output_h; ++oy) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h;
            int32_t ky_lo, ky_hi;
            zo_mve_tap_range(iy0, p->dilation_h, p->input_h, p->filter_h, &ky_lo, &ky_hi);
            for (int32_t ox = 0; ox < p->output_w; ++ox) {
                const int32_t ix0 = ox * p->stride_w - p->pad_w;
                int32_t kx_lo, kx_hi;
                zo_mve_tap_range(ix0, p->dilation_w, p->input_w, p->filter_w, &kx_lo, &kx_hi);
                int32x4_t acc[4];
                /* TFLM adds the bias last; int32 addition wraps, so starting from it is the same */
                zo_mve_dw_load_bias(bias != NULL ? bias + oc0 : NULL, n, &acc[0], &acc[1]);
                zo_mve_dw_load_bias(bias != NULL ? bias + oc0 + 8 : NULL, n - 8, &acc[2], &acc[3]);
                for (int32_t ky = ky_lo; ky < ky_hi; ++ky) {
                    const int32_t iy = iy0 + ky * p->dilation_h;
                    const int8_t *x = input + ((size_t)iy * (size_t)p->input_w + (size_t)(ix0 + kx_lo * p->dilation_w))
                                                  * in_c + (size_t)ic0;
                    const int8_t *w = filter + ((size_t)ky * (size_t)p->filter_w + (size_t)kx_lo) * (size_t)oc_total
                                      + (size_t)oc0;
                    for (int32_t kx = kx_lo; kx < kx_hi; ++kx) {
                        zo_mve_dw_tap(x, w, gather, offs0, offs1, zp, p0, p1, acc);
                        x += (size_t)p->dilation_w * in_c;
                        w += oc_total;
                    }
                }
                int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)oc_total + (size_t)oc0;
                zo_mve_dw_store(acc[0], acc[1], p->multiplier + oc0, p->shift + oc0, zo_min32(n, 8), &q, out);
                if (n > 8) {
                    zo_mve_dw_store(acc[2], acc[3], p->multiplier + oc0 + 8, p->shift + oc0 + 8, n - 8, &q, out + 8);
                }
            }
        }
    }
}

void zo_depthwise_conv2d_s8(const zo_depthwise_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                            const int32_t *bias, int8_t *output)
{
    if (p->depth_multiplier == 1) {
        zo_mve_dw_pixels(p, input, filter, bias, output, 0);
    } else {
        zo_mve_dw_pixels(p, input, filter, bias, output, 1);
    }
}

#else
typedef int zo_kernels_mve_unused; /* ISO C: a translation unit is never empty */
#endif /* ZO_KERNELS_MVE */
