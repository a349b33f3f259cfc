/* zo_kernels_int16.h - int16 activations, 16x8 quantization (zo_kernels_int16.c), with the int8 kernels'
 * params. */
#ifndef ZO_KERNELS_INT16_H
#define ZO_KERNELS_INT16_H

#include "zo_kernels_base.h"
#include "zo_kernels_conv.h"
#include "zo_kernels_pool.h"
#include "zo_kernels_elementwise.h"
#include "zo_kernels_misc.h"
#include "zo_kernels_quantize.h"
#include "zo_kernels_movement.h"
#include "zo_kernels_activation.h"
#include "zo_kernels_resize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SOFTMAX int8 -> int16 (output scale 1/65536, zero point -32768): zo_softmax_params_t. */
void zo_softmax_s8_s16(const zo_softmax_params_t *p, const int8_t *input, int16_t *output);

/* ---- SOFTMAX int16 -> int16 (zero points 0, output scale 1/32768).  input_multiplier and
 * input_left_shift map the difference to the row maximum onto [-65535, 0] = [-10, 0]; the two
 * 513-entry tables are exp over [-10, 0] and 1 / (1 + x) over [0, 1], as TFLM builds them. */
typedef struct {
    int32_t outer, depth;
    int32_t input_multiplier, input_left_shift;
    const int16_t *exp_lut;
    const int16_t *one_over_one_plus_x_lut;
} zo_softmax_s16_params_t;

void zo_softmax_s16(const zo_softmax_s16_params_t *p, const int16_t *input, int16_t *output);

/* QUANTIZE between integer types (zo_requantize_params_t, zero points in each side's range). */
void zo_requantize_s8_s16(const zo_requantize_params_t *p, const int8_t *input, int16_t *output);
void zo_requantize_s16_s16(const zo_requantize_params_t *p, const int16_t *input, int16_t *output);
void zo_requantize_s16_s32(const zo_requantize_params_t *p, const int16_t *input, int32_t *output);
void zo_requantize_s8_s32(const zo_requantize_params_t *p, const int8_t *input, int32_t *output);
/* DEQUANTIZE int16 -> float32 (zo_dequantize_params_t) and QUANTIZE float32 -> int16. */
void zo_dequantize_s16(const zo_dequantize_params_t *p, const int16_t *input, float *output);
void zo_quantize_f32_s16(const zo_quantize_params_t *p, const float *input, int16_t *output);
/* 16x8 CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: int16 input and output (zero points 0, the
 * params' input_zp and output_zp), int8 weights, int64 bias or NULL, the int8 kernels' params. */
void zo_conv2d_s16(const zo_conv2d_params_t *p, const int16_t *input, const int8_t *filter,
                   const int64_t *bias, int16_t *output);
void zo_depthwise_conv2d_s16(const zo_depthwise_conv2d_params_t *p, const int16_t *input,
                             const int8_t *filter, const int64_t *bias, int16_t *output);
void zo_fully_connected_s16(const zo_fully_connected_params_t *p, const int16_t *input,
                            const int8_t *weights, const int64_t *bias, int16_t *output);
#if defined(ZO_KERNELS_MVE)
/* The portable kernels beside the Helium ones (zo_kernels_int16_mve.c). */
void zo_conv2d_s16_portable(const zo_conv2d_params_t *p, const int16_t *input, const int8_t *filter,
                            const int64_t *bias, int16_t *output);
void zo_depthwise_conv2d_s16_portable(const zo_depthwise_conv2d_params_t *p, const int16_t *input,
                                      const int8_t *filter, const int64_t *bias, int16_t *output);
void zo_fully_connected_s16_portable(const zo_fully_connected_params_t *p, const int16_t *input,
                                     const int8_t *weights, const int64_t *bias, int16_t *output);
#endif
/* AVERAGE_POOL_2D, MAX_POOL_2D, PAD / PADV2 and CONCATENATION on int16 (the int8 kernels' params). */
void zo_avg_pool_s16(const zo_pool_params_t *p, const int16_t *input, int16_t *output);
void zo_max_pool_s16(const zo_pool_params_t *p, const int16_t *input, int16_t *output);
void zo_pad_s16(const zo_pad_params_t *p, const int16_t *input, int16_t *output);
void zo_concat_s16(const zo_concat_params_t *p, const int16_t *const *inputs, int16_t *output);
/* ADD, SUB (left shift 15) and MUL (zero points 0) on int16, with the int8 kernels' params. */
void zo_add_s16(const zo_add_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void zo_sub_s16(const zo_add_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void zo_mul_s16(const zo_mul_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output);
/* RELU, RELU6, LEAKY_RELU and MEAN on int16, with the int8 kernels' params. */
void zo_relu_s16(const zo_relu_params_t *p, const int16_t *input, int16_t *output);
void zo_relu6_s16(const zo_relu6_params_t *p, const int16_t *input, int16_t *output);
void zo_leaky_relu_s16(const zo_leaky_relu_params_t *p, const int16_t *input, int16_t *output);
void zo_mean_s16(const zo_mean_params_t *p, const int16_t *input, int16_t *output);
/* TRANSPOSE, SLICE, STRIDED_SLICE, SPLIT / SPLIT_V / UNPACK and GATHER on int16 (the int8 kernels'
 * params, which count elements; PACK is zo_concat_s16). */
void zo_strided_copy_s16(const zo_strided_copy_params_t *p, const int16_t *input, int16_t *output);
void zo_split_s16(const zo_split_params_t *p, const int16_t *input, int16_t *const *outputs);
void zo_gather_s16(const zo_gather_params_t *p, const int16_t *input, int16_t *output);
/* MAXIMUM, MINIMUM and RESIZE_NEAREST_NEIGHBOR on int16 (the int8 kernels' params). */
void zo_maximum_s16(const zo_minmax_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void zo_minimum_s16(const zo_minmax_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output);
void zo_resize_nearest_s16(const zo_resize_nearest_params_t *p, const int16_t *input, int16_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_INT16_H */
