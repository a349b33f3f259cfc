/* zo_kernels_activation.h - element-wise and activation ops: SUB, SQUARED_DIFFERENCE, MINIMUM, MAXIMUM, PRELU, RELU,
 * RELU6, LEAKY_RELU, TANH, HARD_SWISH, RSQRT (zo_kernels_activation.c). */
#ifndef ZO_KERNELS_ACTIVATION_H
#define ZO_KERNELS_ACTIVATION_H

#include "zo_kernels_base.h"
#include "zo_kernels_elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- MINIMUM / MAXIMUM with broadcasting: ADD's walk, no arithmetic. */
typedef struct {
    int32_t out_d0, out_d1, out_d2, out_d3;
    int32_t in1_s0, in1_s1, in1_s2, in1_s3;
    int32_t in2_s0, in2_s1, in2_s2, in2_s3;
    int32_t broadcast;
} zo_minmax_params_t;

/* ---- PRELU: input and alpha broadcast (ADD's walk); identity multiplier for x >= 0,
 * alpha multiplier for (x - input_zp) * (alpha - alpha_zp) below. */
typedef struct {
    int32_t out_d0, out_d1, out_d2, out_d3;
    int32_t in1_s0, in1_s1, in1_s2, in1_s3;
    int32_t in2_s0, in2_s1, in2_s2, in2_s3;
    int32_t broadcast;
    int32_t input_zp, alpha_zp, output_zp;
    int32_t identity_multiplier, identity_shift;
    int32_t alpha_multiplier, alpha_shift;
} zo_prelu_params_t;

/* ---- RELU: rescale, clamp to [act_min, act_max]. */
typedef struct {
    int32_t size;
    int32_t input_zp, output_zp;
    int32_t multiplier, shift;
    int32_t act_min, act_max;
} zo_relu_params_t;

/* ---- RELU6: clamp of the stored values to [lower, upper] (the input's 0 and 6). */
typedef struct {
    int32_t size;
    int32_t lower, upper;
} zo_relu6_params_t;

/* ---- LEAKY_RELU: identity multiplier for x >= 0, alpha multiplier (negative for alpha < 0) below. */
typedef struct {
    int32_t size;
    int32_t input_zp, output_zp;
    int32_t identity_multiplier, identity_shift;
    int32_t alpha_multiplier, alpha_shift;
} zo_leaky_relu_params_t;

/* ---- HARD_SWISH: 16-bit multipliers (Q0.15) and their shifts (output_shift <= 0). */
typedef struct {
    int32_t size;
    int32_t input_zp, output_zp;
    int32_t output_multiplier, output_shift;
    int32_t reluish_multiplier, reluish_shift;
} zo_hard_swish_params_t;

/* ---- RSQRT: multiplier 1 / (sqrt(input scale) * output scale). */
typedef struct {
    int32_t size;
    int32_t input_zp, output_zp;
    int32_t multiplier, shift;
} zo_rsqrt_params_t;

/* SUB and SQUARED_DIFFERENCE use zo_add_params_t; TANH uses zo_logistic_params_t. */
void zo_sub_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_squared_difference_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2,
                              int8_t *output);
void zo_maximum_s8(const zo_minmax_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_minimum_s8(const zo_minmax_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_prelu_s8(const zo_prelu_params_t *p, const int8_t *input, const int8_t *alpha, int8_t *output);
void zo_relu_s8(const zo_relu_params_t *p, const int8_t *input, int8_t *output);
void zo_relu6_s8(const zo_relu6_params_t *p, const int8_t *input, int8_t *output);
void zo_leaky_relu_s8(const zo_leaky_relu_params_t *p, const int8_t *input, int8_t *output);
void zo_tanh_s8(const zo_logistic_params_t *p, const int8_t *input, int8_t *output);
void zo_hard_swish_s8(const zo_hard_swish_params_t *p, const int8_t *input, int8_t *output);
void zo_rsqrt_s8(const zo_rsqrt_params_t *p, const int8_t *input, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_ACTIVATION_H */
