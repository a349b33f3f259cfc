/* zo_kernels_mve.h - what the Helium (MVE) kernels (zo_kernels_<family>_mve.c) share: TFLM's
 * MultiplyByQuantizedMultiplier on 4 lanes, exactly: VQRDMULH is gemmlowp's
 * SaturatingRoundingDoublingHighMul (same rounding, same saturation), and the rounding right shift
 * is made ties-away-from-zero (TFLM) rather than VRSHL's ties-up (CMSIS-NN) by first moving
 * negative values down by one.  Included only where ZO_KERNELS_MVE is set (zo_kernels_base.h).
 */
#ifndef ZO_KERNELS_MVE_H
#define ZO_KERNELS_MVE_H

#include <arm_mve.h>
#include <stddef.h>

#include "zo_fixedpoint.h"
/* The output side of a requantisation: zero point and activation clamp; right_only set when every
 * channel's shift is negative (zo_mve_right_only), for the shorter form of zo_mve_mbqm_lr. */
typedef struct {
    int32_t zp, act_min, act_max;
    int32_t right_only;
} zo_mve_out_t;

/* TFLM MultiplyByQuantizedMultiplier on 4 lanes, the shift split into left >= 0 and right <= 0
 * (VRSHL shifts right by -right). */
static inline int32x4_t zo_mve_mbqm_lr(int32x4_t x, int32x4_t mult, int32x4_t left, int32x4_t right)
{
    x = vqrdmulhq_s32(vshlq_s32(x, left), mult);
    /* x & right has the sign bit only when x < 0 and there is a right shift: then x - 1 (never
     * wrapping: saturating), so the ties that VRSHL rounds up go away from zero instead. */
    x = vqaddq_s32(x, vshrq_n_s32(vandq_s32(x, right), 31));
    return vrshlq_s32(x, right);
}

/* zo_mve_mbqm_lr when every lane's shift is negative (right < 0, left 0): no left shift, and
 * x & right has x's sign bit, so the ties correction needs no mask. */
static inline int32x4_t zo_mve_mbqm_right(int32x4_t x, int32x4_t mult, int32x4_t right)
{
    x = vqrdmulhq_s32(x, mult);
    x = vqaddq_s32(x, vshrq_n_s32(x, 31));
    return vrshlq_s32(x, right);
}

/* Whether shift[0..n) are all negative (right shifts only). */
static inline int32_t zo_mve_right_only(const int32_t *shift, int32_t n)
{
    int32_t top = INT32_MIN;
    for (int32_t j = 0; j < n; j += 4) {
        top = vmaxvq_p_s32(top, vldrwq_z_s32(shift + j, vctp32q((uint32_t)(n - j))), vctp32q((uint32_t)(n - j)));
    }
    return top < 0;
}

/* The same with TFLM's shift (> 0: left, < 0: right). */
static inline int32x4_t zo_mve_mbqm(int32x4_t x, int32x4_t mult, int32x4_t shift)
{
    const int32x4_t zero = vdupq_n_s32(0);
    return zo_mve_mbqm_lr(x, mult, vmaxq_s32(shift, zero), vminq_s32(shift, zero));
}

/* TFLM's per-tensor requantisation constants as vectors: multiplier, left and right shift. */
typedef struct {
    int32x4_t m, left, right;
} zo_mve_scale_t;

static inline zo_mve_scale_t zo_mve_scale(int32_t multiplier, int32_t shift)
{
    const zo_mve_scale_t s = {vdupq_n_s32(multiplier), vdupq_n_s32(shift > 0 ? shift : 0),
                              vdupq_n_s32(shift > 0 ? 0 : shift)};
    return s;
}

/* sum w[k] * (x[k] - zp) over k < n in wrapping int32 arithmetic (the recurrent kernels' row
 * products), as sum w * x - zp * sum w: equal modulo 2^32. */
static inline int32_t zo_mve_dot_s8_zp(const int8_t *x, int32_t zp, const int8_t *w, int32_t n)
{
    int32_t dot = 0, wsum = 0;
    for (int32_t k = 0; k < n; k += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - k));
        const int8x16_t wv = vldrbq_z_s8(w + k, p);
        dot = vmladavaq_s8(dot, vldrbq_z_s8(x + k, p), wv);
        wsum = vaddvaq_s8(wsum, wv);
    }
    return (int32_t)((uint32_t)dot - (uint32_t)zp * (uint32_t)wsum);
}

/* zo_mve_dot_s8_zp of x against four weight rows (w, w + stride, ...) into out[0..3], each input
 * vector loaded once. */
static inline void zo_mve_dot4_s8_zp(const int8_t *x, int32_t zp, const int8_t *w, size_t stride, int32_t n,
                                     int32_t *out)
{
    int32_t d0 = 0, d1 = 0, d2 = 0, d3 = 0, s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int32_t k = 0; k < n; k += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(n - k));
        const int8x16_t xv = vldrbq_z_s8(x + k, p);
        const int8x16_t w0 = vldrbq_z_s8(w + k, p), w1 = vldrbq_z_s8(w + stride + k, p);
        const int8x16_t w2 = vldrbq_z_s8(w + 2 * stride + k, p), w3 = vldrbq_z_s8(w + 3 * stride + k, p);
        d0 = vmladavaq_s8(d0, xv, w0);
        d1 = vmladavaq_s8(d1, xv, w1);
        d2 = vmladavaq_s8(d2, xv, w2);
        d3 = vmladavaq_s8(d3, xv, w3);
        s0 = vaddvaq_s8(s0, w0);
        s1 = vaddvaq_s8(s1, w1);
        s2 = vaddvaq_s8(s2, w2);
        s3 = vaddvaq_s8(s3, w3);
    }
    out[0] = (int32_t)((uint32_t)d0 - (uint32_t)zp * (uint32_t)s0);
    out[1] = (int32_t)((uint32_t)d1 - (uint32_t)zp * (uint32_t)s1);
    out[2] = (int32_t)((uint32_t)d2 - (uint32_t)zp * (uint32_t)s2);
    out[3] = (int32_t)((uint32_t)d3 - (uint32_t)zp * (uint32_t)s3);
}

/* The same over int16 values and weights. */
static inline int32_t zo_mve_dot_s16_zp(const int16_t *x, int32_t zp, const int16_t *w, int32_t n)
{
    int32_t dot = 0, wsum = 0;
    for (int32_t k = 0; k < n; k += 8) {
        const mve_pred16_t p = vctp16q((uint32_t)(n - k));
        const int16x8_t wv = vldrhq_z_s16(w + k, p);
        dot = vmladavaq_s16(dot, vldrhq_z_s16(x + k, p), wv);
        wsum = vaddvaq_s16(wsum, wv);
    }
    return (int32_t)((uint32_t)dot - (uint32_t)zp * (uint32_t)wsum);
}

/* dst[i] = src[i] for i < bytes, in increasing i: a copy towards lower addresses (dst < src) may
 * overlap, since each block is loaded before anything at or past it is stored. */
static inline void zo_mve_copy_down(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 16) {
        const mve_pred16_t p = vctp8q((uint32_t)(bytes - i < 16 ? bytes - i : 16));
        vstrbq_p_u8(dst + i, vldrbq_z_u8(src + i, p), p);
    }
}

#endif /* ZO_KERNELS_MVE_H */
