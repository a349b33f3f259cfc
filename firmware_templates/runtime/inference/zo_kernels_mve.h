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

#endif /* ZO_KERNELS_MVE_H */
