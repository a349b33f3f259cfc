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
/* The output side of a requantisation: zero point and activation clamp. */
typedef struct {
    int32_t zp, act_min, act_max;
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
