/* zo_train_math.h - the static maths of one zeroth-order (ZO) training step.
 *
 * Static file, copied verbatim into each bundle.  Perturbation, update and loss are plain C11
 * with float32 arithmetic only (no libm, no malloc, no state) and are bit-identical to the
 * NumPy mirror host/zoflash/reference/zo_math.py on any IEEE-754 binary32 target, provided:
 *   - the code is compiled with -ffp-contract=off (or as ISO -std=c11), never -ffast-math;
 *   - float expressions are evaluated in float (FLT_EVAL_METHOD 0: x86-64/SSE, Arm VFP/MVE;
 *     not 32-bit x87);
 *   - signed right shifts are not relied upon (none are used here).
 * Rules and proofs: docs/zo-math.md.
 */
#ifndef ZO_TRAIN_MATH_H
#define ZO_TRAIN_MATH_H

#include <stdint.h>
#include "zo_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Trainable int8 weights live in [-w_max, w_max] with w_max = 127 - eps (eps = the perturbation
 * size in LSB, 1..126), so that the +eps, -2eps, +eps perturbations never wrap and the restore
 * pass is exact.  The update takes w_max as an argument; ZO_W_MIN/ZO_W_MAX are the bound for
 * the default eps = 1. */
#define ZO_W_MIN (-126)
#define ZO_W_MAX 126

typedef enum {
    ZO_ROUND_SPLIT16 = 0,    /* int8 weight + int8 residual master (default) */
    ZO_ROUND_NEAREST = 1,    /* w -= round(u) */
    ZO_ROUND_STOCHASTIC = 2  /* w -= floor(u + xi), xi uniform in [0, 1) */
} zo_rounding_t;

/* float32 -> int32, nearest with ties away from zero.  NaN -> 0; the argument is first
 * clamped to [-2^30, 2^30] (so infinities and huge values saturate there). */
int32_t zo_round_f32(float x);
/* float32 -> int32, floor.  NaN -> 0; the argument is first clamped to [-2^30, 2^30]. */
int32_t zo_floor_f32(float x);

/* w[k] += sign * z_k for k < n (sign = +eps, -2eps, +eps for the +eps, -2eps and restore
 * passes).  The int8 store wraps; with w in [-(127 - eps), 127 - eps] it never does. */
void zo_perturb_s8(int8_t *w, int32_t n, int32_t sign, const zo_dir_t *d);

/* b[k] += sign * eps_b[k] * z_k in wrapping (mod 2^32) arithmetic, so restore is always exact. */
void zo_perturb_s32(int32_t *b, int32_t n, int32_t sign, const int32_t *eps_b, const zo_dir_t *d);
/* The same for the int64 biases of 16x8 layers, modulo 2^64. */
void zo_perturb_s64(int64_t *b, int32_t n, int32_t sign, const int32_t *eps_b, const zo_dir_t *d);

/* Update after q directions, c[i] = lr * delta_i / q (i = 0..q-1).
 * u_k = sum_i c[i] * z_ik in float32, starting from 0.0f, in increasing i, terms with
 * z_ik = 0 skipped; z_ik regenerated from the hash with d0's seed/step/stream/density and
 * direction = i (d0->direction is ignored).  Then per mode (R = zo_round_f32, F = zo_floor_f32):
 *   SPLIT16:    m = 256*w + r - R(256*u); w' = clamp(floor((m + 128) / 256), -w_max, w_max);
 *               r' = clamp(m - 256*w', -128, 127)  (the clamp only acts when w' was clamped)
 *               (residual must not be NULL in this mode)
 *   NEAREST:    w' = clamp(w - R(u), -w_max, w_max); residual untouched (may be NULL)
 *   STOCHASTIC: w' = clamp(w - F(u + xi_k), -w_max, w_max); xi_k = zo_u01_from_hash(
 *               zo_hash(seed, step, 0, stream | ZO_STREAM_ROUNDING, k)); residual untouched.
 * w_max = 127 - eps must be in [1, 126] (not checked; ZO_W_MAX for eps = 1).  Input weights
 * outside [-w_max, w_max] are accepted and come out clamped into it. */
void zo_update_s8(int8_t *w, int8_t *residual, int32_t n, const float *c, int32_t q,
                  const zo_dir_t *d0, zo_rounding_t mode, int32_t w_max);

/* Bias update: b[k] = sat32(b[k] - clamp(R((float)eps_b[k] * u_k), -max_step, max_step)),
 * with u_k as in zo_update_s8.  max_step >= 0 (INT32_MAX for no bound). */
void zo_update_s32(int32_t *b, int32_t n, const float *c, int32_t q, const int32_t *eps_b,
                   int32_t max_step, const zo_dir_t *d0);
/* The same for the int64 biases of 16x8 layers, saturating at the int64 range. */
void zo_update_s64(int64_t *b, int32_t n, const float *c, int32_t q, const int32_t *eps_b,
                   int32_t max_step, const zo_dir_t *d0);

/* exp(x) for float32, argument clamped to [-87, 88] (NaN -> -87): the result is always a
 * normal finite float.  zo_expf(0) == 1 exactly. */
float zo_expf(float x);
/* log(x) for float32, argument clamped to [FLT_MIN, FLT_MAX] (NaN -> FLT_MIN).
 * zo_logf(1) == 0 exactly. */
float zo_logf(float x);

/* Cross-entropy of dequantized logits x_j = scale * (float)(logits[j] - zero_point):
 * m = max_j x_j; s = sum_j zo_expf(x_j - m) (increasing j, from 0.0f);
 * loss = zo_logf(s) - (x_label - m). */
float zo_cross_entropy_s8(const int8_t *logits, int32_t classes, float scale, int32_t zero_point,
                          int32_t label);
/* The same over int16 logits (16x8 models); so are the other _s16 functions. */
float zo_cross_entropy_s16(const int16_t *logits, int32_t classes, float scale, int32_t zero_point,
                           int32_t label);

/* The training losses (host/zoflash/spec/training.py LOSSES). */
typedef enum { ZO_LOSS_SOFTMAX_CE = 0, ZO_LOSS_SIGMOID_BCE = 1, ZO_LOSS_MSE = 2 } zo_loss_t;

/* Binary cross-entropy of sigmoid(x), x = scale * (float)(logit - zero_point), label 0 or 1, in
 * the form that never overflows: loss = ((x > 0 ? x : 0) - (label ? x : 0)) + zo_logf(1.0f +
 * zo_expf(-|x|)).  The logit is an int8 or int16 output's value. */
float zo_sigmoid_bce(int32_t logit, float scale, int32_t zero_point, int32_t label);

/* Mean squared error of x_j = scale * (float)(out[j] - zero_point) against target[j]:
 * d = x_j - target[j]; s += d * d (increasing j, from 0.0f); loss = s / (float)n. */
float zo_mse_s8(const int8_t *out, int32_t n, float scale, int32_t zero_point, const float *target);
float zo_mse_s16(const int16_t *out, int32_t n, float scale, int32_t zero_point, const float *target);

/* The update coefficients as IEEE binary16 (the device applies and logs c_i as this 16-bit
 * value, docs/zo-math.md "Coefficients as binary16"): round to nearest, ties to even, subnormals
 * kept; beyond the largest finite half (65504) it saturates (infinities too) and NaN gives +0
 * (no update).  zo_f32_from_f16 is exact. */
uint16_t zo_f16_from_f32(float x);
float zo_f32_from_f16(uint16_t h);

/* Index of the first maximum of x[0..n-1]. */
int32_t zo_argmax_s8(const int8_t *x, int32_t n);
int32_t zo_argmax_s16(const int16_t *x, int32_t n);

#ifdef __cplusplus
}
#endif

#endif /* ZO_TRAIN_MATH_H */
