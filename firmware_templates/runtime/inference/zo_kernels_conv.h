/* zo_kernels_conv.h - CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (zo_kernels_conv.c; Helium:
 * zo_kernels_conv_mve.c). */
#ifndef ZO_KERNELS_CONV_H
#define ZO_KERNELS_CONV_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CONV_2D: filter OHWI [output_c][filter_h][filter_w][filter_c]; bias int32 [output_c] or NULL.
 * filter_c == input_c, or input_c / groups for a grouped convolution. */
typedef struct {
    int32_t input_h, input_w, input_c;
    int32_t output_h, output_w, output_c;
    int32_t filter_h, filter_w, filter_c;
    int32_t stride_h, stride_w;
    int32_t dilation_h, dilation_w;
    int32_t pad_h, pad_w;          /* padding before (top, left), as TFLM computes it */
    int32_t input_zp, output_zp;
    int32_t act_min, act_max;
    const int32_t *multiplier;     /* [output_c] */
    const int32_t *shift;          /* [output_c] */
    /* [output_c]: bias - input_zp * sum(filter row), precomputed for constant weights; NULL: the
     * kernel computes it (weights that change at run time, as in training) */
    const int32_t *folded_bias;
} zo_conv2d_params_t;

/* ---- DEPTHWISE_CONV_2D: filter [1][filter_h][filter_w][output_c], output channel
 * oc = ic * depth_multiplier + m; bias int32 [output_c] or NULL. */
typedef struct {
    int32_t input_h, input_w, input_c;
    int32_t output_h, output_w, output_c;
    int32_t filter_h, filter_w;
    int32_t depth_multiplier;
    int32_t stride_h, stride_w;
    int32_t dilation_h, dilation_w;
    int32_t pad_h, pad_w;
    int32_t input_zp, output_zp;
    int32_t act_min, act_max;
    const int32_t *multiplier;     /* [output_c] */
    const int32_t *shift;          /* [output_c] */
} zo_depthwise_conv2d_params_t;

/* ---- FULLY_CONNECTED: weights [units][depth]; input is rows x depth; output rows x units. */
typedef struct {
    int32_t rows, depth, units;
    int32_t input_zp, output_zp;
    int32_t act_min, act_max;
    const int32_t *multiplier;     /* [units] (a per-tensor scale is repeated) */
    const int32_t *shift;          /* [units] */
    const int32_t *folded_bias;    /* [units] or NULL, as zo_conv2d_params_t's */
} zo_fully_connected_params_t;

void zo_conv2d_s8(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                  const int32_t *bias, int8_t *output);
void zo_depthwise_conv2d_s8(const zo_depthwise_conv2d_params_t *p, const int8_t *input,
                            const int8_t *filter, const int32_t *bias, int8_t *output);
void zo_fully_connected_s8(const zo_fully_connected_params_t *p, const int8_t *input,
                           const int8_t *weights, const int32_t *bias, int8_t *output);

/* The portable CONV_2D path for receptive fields over ZO_CONV_PATCH_MAX bytes (no patch buffer). */
void zo_conv2d_s8_direct(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                         const int32_t *bias, int8_t *output);

#if defined(ZO_KERNELS_MVE)
/* The portable kernels the Helium ones replace (zo_kernels_base.h). */
void zo_conv2d_s8_portable(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                           const int32_t *bias, int8_t *output);
void zo_depthwise_conv2d_s8_portable(const zo_depthwise_conv2d_params_t *p, const int8_t *input,
                                     const int8_t *filter, const int32_t *bias, int8_t *output);
void zo_fully_connected_s8_portable(const zo_fully_connected_params_t *p, const int8_t *input,
                                    const int8_t *weights, const int32_t *bias, int8_t *output);
#endif

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_CONV_H */
