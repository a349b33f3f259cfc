/* zo_kernels_elementwise.h - ADD and MUL (Helium: zo_kernels_elementwise_mve.c), LOGISTIC, QUANTIZE int8 -> int8 and
 * DEQUANTIZE (zo_kernels_elementwise.c). */
#ifndef ZO_KERNELS_ELEMENTWISE_H
#define ZO_KERNELS_ELEMENTWISE_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ADD with broadcasting.  The output is walked as a 4-D box out_d0..out_d3 (the builder
 * merges dimensions); inN_sK is input N's element stride along output dimension K (0 when
 * broadcast).  broadcast == 0 means all three are the same flat size out_d0*..*out_d3. */
typedef struct {
    int32_t out_d0, out_d1, out_d2, out_d3;
    int32_t in1_s0, in1_s1, in1_s2, in1_s3;
    int32_t in2_s0, in2_s1, in2_s2, in2_s3;
    int32_t broadcast;
    int32_t input1_zp, input2_zp, output_zp;
    int32_t left_shift;
    int32_t input1_multiplier, input1_shift;
    int32_t input2_multiplier, input2_shift;
    int32_t output_multiplier, output_shift;
    int32_t act_min, act_max;
} zo_add_params_t;

/* ---- MUL with broadcasting (same shape fields as ADD). */
typedef struct {
    int32_t out_d0, out_d1, out_d2, out_d3;
    int32_t in1_s0, in1_s1, in1_s2, in1_s3;
    int32_t in2_s0, in2_s1, in2_s2, in2_s3;
    int32_t broadcast;
    int32_t input1_zp, input2_zp, output_zp;
    int32_t output_multiplier, output_shift;
    int32_t act_min, act_max;
} zo_mul_params_t;

/* ---- LOGISTIC (output zero point -128; TFLM assumes scale 1/256). */
typedef struct {
    int32_t size;
    int32_t input_zp;
    int32_t input_range_radius;
    int32_t input_multiplier, input_left_shift;
} zo_logistic_params_t;

/* ---- QUANTIZE int8 -> int8 (rescale). */
typedef struct {
    int32_t size;
    int32_t input_zp, output_zp;
    int32_t multiplier, shift;
} zo_requantize_params_t;

/* ---- DEQUANTIZE int8 -> float32: out = scale * (q - zero_point). */
typedef struct {
    int32_t size;
    int32_t zero_point;
    float scale;
} zo_dequantize_params_t;

void zo_add_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_mul_s8(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_logistic_s8(const zo_logistic_params_t *p, const int8_t *input, int8_t *output);
void zo_requantize_s8(const zo_requantize_params_t *p, const int8_t *input, int8_t *output);
void zo_dequantize_s8(const zo_dequantize_params_t *p, const int8_t *input, float *output);

#if defined(ZO_KERNELS_MVE)
/* The portable kernels the Helium ones replace (zo_kernels_base.h). */
void zo_add_s8_portable(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_mul_s8_portable(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
#endif

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_ELEMENTWISE_H */
