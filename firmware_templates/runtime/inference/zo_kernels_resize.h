/* zo_kernels_resize.h - REDUCE_MAX, ARG_MAX, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR and TRANSPOSE_CONV
 * (zo_kernels_resize.c). */
#ifndef ZO_KERNELS_RESIZE_H
#define ZO_KERNELS_RESIZE_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- REDUCE_MAX: the input as `rank` dimensions (neighbours with the same role merged);
 * out_stride[k] is the output element stride along input dimension k, 0 where it is reduced.
 * Input and output share scale and zero point (TFLM), so the maximum is copied as is. */
typedef struct {
    int32_t rank;
    int32_t output_size;
    const int32_t *dims;           /* [rank] */
    const int32_t *out_stride;     /* [rank] */
} zo_reduce_max_params_t;

/* ---- ARG_MAX: the input as [outer][axis][inner]; the output [outer][inner] holds the index of
 * the first maximum along the axis (int32: TFLM computes no other index type). */
typedef struct {
    int32_t outer, axis, inner;
} zo_arg_max_params_t;

/* ---- RESIZE_BILINEAR (int8, TFLM's integer path): scales in 1/1024 units; input and output
 * share the quantization. */
typedef struct {
    int32_t input_h, input_w, channels;
    int32_t output_h, output_w;
    int32_t height_scale_10, width_scale_10;
    int32_t half_pixel_centers;
} zo_resize_bilinear_params_t;

/* ---- RESIZE_NEAREST_NEIGHBOR: the source row and column of every output row and column, which
 * TFLM computes in float32 (the builder does so at compile time). */
typedef struct {
    int32_t input_h, input_w, channels;
    int32_t output_h, output_w;
    const int32_t *y_index;        /* [output_h] */
    const int32_t *x_index;        /* [output_w] */
} zo_resize_nearest_params_t;

/* ---- TRANSPOSE_CONV: filter OHWI [output_c][filter_h][filter_w][input_c]; bias int32
 * [output_c] or NULL; pad_h, pad_w as TFLM computes them from the output size. */
typedef struct {
    int32_t input_h, input_w, input_c;
    int32_t output_h, output_w, output_c;
    int32_t filter_h, filter_w;
    int32_t stride_h, stride_w;
    int32_t pad_h, pad_w;
    int32_t input_zp, output_zp;
    int32_t act_min, act_max;
    const int32_t *multiplier;     /* [output_c] */
    const int32_t *shift;          /* [output_c] */
} zo_transpose_conv_params_t;

void zo_reduce_max_s8(const zo_reduce_max_params_t *p, const int8_t *input, int8_t *output);
void zo_arg_max_s8(const zo_arg_max_params_t *p, const int8_t *input, int32_t *output);
void zo_resize_bilinear_s8(const zo_resize_bilinear_params_t *p, const int8_t *input, int8_t *output);
void zo_resize_nearest_s8(const zo_resize_nearest_params_t *p, const int8_t *input, int8_t *output);
void zo_transpose_conv_s8(const zo_transpose_conv_params_t *p, const int8_t *input, const int8_t *filter,
                          const int32_t *bias, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_RESIZE_H */
