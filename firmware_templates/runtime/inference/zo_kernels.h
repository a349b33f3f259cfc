/* zo_kernels.h - static int8 kernels, bit-exact with the TFLite Micro reference kernels.
 *
 * Every kernel NAME has a parameter struct zo_NAME_params_t, filled at compile time by the
 * code generator from host/zoflash/kernels.py (NAME_params), and a function zo_NAME_s8.
 * All tensors are batch 1, NHWC, int8 unless stated.  Multipliers/shifts follow TFLM:
 * value * multiplier / 2^31 * 2^shift (shift > 0 is a left shift).
 *
 * No heap, no libm, no VLAs: scratch space is small fixed-size stack arrays.
 */
#ifndef ZO_KERNELS_H
#define ZO_KERNELS_H

#include <stdint.h>

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

/* ---- AVERAGE_POOL_2D / MAX_POOL_2D (input and output share scale and zero point). */
typedef struct {
    int32_t input_h, input_w, channels;
    int32_t output_h, output_w;
    int32_t filter_h, filter_w;
    int32_t stride_h, stride_w;
    int32_t pad_h, pad_w;
    int32_t act_min, act_max;
} zo_pool_params_t;

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

/* ---- PAD / PADV2: input shape right-aligned to 5-D (leading 1s), paddings per dimension. */
typedef struct {
    int32_t in_d0, in_d1, in_d2, in_d3, in_d4;
    int32_t before0, before1, before2, before3, before4;
    int32_t after0, after1, after2, after3, after4;
    int32_t pad_value;
} zo_pad_params_t;

/* ---- CONCATENATION: output = for each of `outer` blocks, input 0's chunk, input 1's chunk, ...
 * chunk[i] = input i's size along the axis * product of the dimensions after the axis. */
typedef struct {
    int32_t num_inputs;
    int32_t outer;
    const int32_t *chunk;          /* [num_inputs] */
} zo_concat_params_t;

/* ---- MEAN over a contiguous run of axes: input viewed as [outer][reduce][inner]. The
 * multiplier/shift already include TFLM's 1/reduce folding. */
typedef struct {
    int32_t outer, reduce, inner;
    int32_t input_zp, output_zp;
    int32_t multiplier, shift;
} zo_mean_params_t;

/* ---- SOFTMAX over the last dimension (output scale 1/256, zero point -128). */
typedef struct {
    int32_t outer, depth;
    int32_t input_multiplier, input_left_shift;
    int32_t diff_min;
} zo_softmax_params_t;

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

void zo_conv2d_s8(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                  const int32_t *bias, int8_t *output);
void zo_depthwise_conv2d_s8(const zo_depthwise_conv2d_params_t *p, const int8_t *input,
                            const int8_t *filter, const int32_t *bias, int8_t *output);
void zo_fully_connected_s8(const zo_fully_connected_params_t *p, const int8_t *input,
                           const int8_t *weights, const int32_t *bias, int8_t *output);
void zo_avg_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
void zo_max_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
void zo_add_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_mul_s8(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_pad_s8(const zo_pad_params_t *p, const int8_t *input, int8_t *output);
void zo_concat_s8(const zo_concat_params_t *p, const int8_t *const *inputs, int8_t *output);
void zo_mean_s8(const zo_mean_params_t *p, const int8_t *input, int8_t *output);
void zo_softmax_s8(const zo_softmax_params_t *p, const int8_t *input, int8_t *output);
void zo_logistic_s8(const zo_logistic_params_t *p, const int8_t *input, int8_t *output);
void zo_requantize_s8(const zo_requantize_params_t *p, const int8_t *input, int8_t *output);
void zo_dequantize_s8(const zo_dequantize_params_t *p, const int8_t *input, float *output);

/* ---- begin QUANTIZE at the model's edges (zo_kernels_quantize.c) ---- */
/* uint8 <-> int8 requantization uses zo_requantize_params_t (zero points in each side's range). */
void zo_requantize_u8_s8(const zo_requantize_params_t *p, const uint8_t *input, int8_t *output);
void zo_requantize_s8_u8(const zo_requantize_params_t *p, const int8_t *input, uint8_t *output);

/* QUANTIZE float32 -> int8: out = clamp(round_half_away(x / scale) + zero_point), in float32. */
typedef struct {
    int32_t size;
    int32_t zero_point;
    float scale;
} zo_quantize_params_t;

void zo_quantize_f32_s8(const zo_quantize_params_t *p, const float *input, int8_t *output);
/* ---- end QUANTIZE at the model's edges ---- */

/* ==== data movement (zo_kernels_movement.c): TRANSPOSE, SLICE, STRIDED_SLICE, PACK (with
 * zo_concat_s8), UNPACK, SPLIT, SPLIT_V and GATHER. */

/* ---- TRANSPOSE / SLICE / STRIDED_SLICE: output[i0]..[i5] = input[offset + i0 * s0 + ... + i5 * s5],
 * the output shape right-aligned to 6-D (leading 1s), input strides in elements (negative for
 * STRIDED_SLICE's negative strides). */
typedef struct {
    int32_t out_d0, out_d1, out_d2, out_d3, out_d4, out_d5;
    int32_t in_s0, in_s1, in_s2, in_s3, in_s4, in_s5;
    int32_t offset;
} zo_strided_copy_params_t;

/* ---- UNPACK / SPLIT / SPLIT_V, CONCATENATION's inverse: for each of `outer` blocks of the input,
 * chunk[0] bytes to output 0, chunk[1] to output 1, ... */
typedef struct {
    int32_t num_outputs;
    int32_t outer;
    const int32_t *chunk;          /* [num_outputs] */
} zo_split_params_t;

/* ---- GATHER along one axis with constant indices: the input viewed as [outer][axis_size][inner],
 * the output as [outer][num_indices][inner]. */
typedef struct {
    int32_t outer, axis_size, inner;
    int32_t num_indices;
    const int32_t *indices;        /* [num_indices], each in [0, axis_size) */
} zo_gather_params_t;

void zo_strided_copy_s8(const zo_strided_copy_params_t *p, const int8_t *input, int8_t *output);
void zo_split_s8(const zo_split_params_t *p, const int8_t *input, int8_t *const *outputs);
void zo_gather_s8(const zo_gather_params_t *p, const int8_t *input, int8_t *output);
/* ==== end of data movement */

/* ---- element-wise and activation ops (zo_kernels_activation.c) ---------------------------- */

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
/* ---- end of element-wise and activation ops ------------------------------------------------ */

/* ==== reductions, resizing, transposed convolution (zo_kernels_resize.c) ==================== */

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
/* ==== end of reductions, resizing, transposed convolution =================================== */

/* ==== sequence ops: SVDF (stateful models) ================================================== */
/* ---- SVDF: input int8 [batches][input_size]; weights_feature int8 [filters][input_size];
 * weights_time (int8 or int16, the state's type) [filters][memory]; bias int32 [units] or NULL;
 * state [batches][filters][memory], a variable tensor updated in place (filters = units * rank).
 * multiplier_1/shift_1: input_scale * feature_scale / state_scale; multiplier_2/shift_2:
 * state_scale * time_scale / output_scale. */
typedef struct {
    int32_t batches, input_size, num_filters, num_units, rank, memory_size;
    int32_t input_zp, state_zp, output_zp;
    int32_t multiplier_1, shift_1;
    int32_t multiplier_2, shift_2;
} zo_svdf_params_t;

void zo_svdf_s8(const zo_svdf_params_t *p, const int8_t *input, const int8_t *weights_feature,
                const int8_t *weights_time, const int32_t *bias, int8_t *state, int8_t *output);
void zo_svdf_s8_s16(const zo_svdf_params_t *p, const int8_t *input, const int8_t *weights_feature,
                    const int16_t *weights_time, const int32_t *bias, int16_t *state, int8_t *output);
/* QUANTIZE int16 -> int8 (an int16 model input, keyword models). */
void zo_requantize_s16_s8(const zo_requantize_params_t *p, const int16_t *input, int8_t *output);
/* ==== end of sequence ops =================================================================== */

/* ==== UNIDIRECTIONAL_SEQUENCE_LSTM (int8, int16 cell state) ================================= */
/* ---- input int8 [batches][time][input_size] ([time][batches][input_size] when time_major);
 * per gate (input, forget, cell, output) input weights int8 [units][input_size], recurrent
 * weights int8 [units][units] and a bias int32 [units]; hidden int8 and cell int16 [batches][units],
 * variable tensors updated in place; output int8 in the input's layout, every step's hidden state.
 * The per-gate arrays [4] hold the fully connected layers' multipliers to Q3.12; forget_*: the
 * forget gate x cell state, input_gate_*: the input gate x cell gate (both to the cell scale);
 * hidden_*: tanh(cell) x the output gate, to the hidden state's scale. tanh_multiplier/tanh_shift
 * scale the cell state for the int16 tanh; cell_clip applies when use_cell_clip is set. */
typedef struct {
    int32_t batches, time_steps, input_size, units, time_major;
    int32_t input_zp, hidden_zp;
    const int32_t *input_multiplier, *input_shift;         /* [4] */
    const int32_t *recurrent_multiplier, *recurrent_shift; /* [4] */
    int32_t forget_multiplier, forget_shift;
    int32_t input_gate_multiplier, input_gate_shift;
    int32_t hidden_multiplier, hidden_shift;
    int32_t tanh_multiplier, tanh_shift;
    int32_t use_cell_clip, cell_clip;
} zo_lstm_params_t;

void zo_lstm_s8_s16(const zo_lstm_params_t *p, const int8_t *input, const int8_t *w_input, const int8_t *w_forget,
                    const int8_t *w_cell, const int8_t *w_output, const int8_t *r_input, const int8_t *r_forget,
                    const int8_t *r_cell, const int8_t *r_output, const int32_t *b_input, const int32_t *b_forget,
                    const int32_t *b_cell, const int32_t *b_output, int8_t *hidden, int16_t *cell, int8_t *output);
/* ==== end of UNIDIRECTIONAL_SEQUENCE_LSTM =================================================== */

/* ==== resource variables (zo_kernels_variables.c): READ_VARIABLE / ASSIGN_VARIABLE ========== */
/* A variable's bytes copied from the state array to the arena (READ) or back (ASSIGN). */
typedef struct {
    int32_t size;                  /* bytes */
} zo_copy_params_t;

void zo_copy_s8(const zo_copy_params_t *p, const int8_t *input, int8_t *output);
/* ==== end of resource variables ============================================================= */

/* ==== CAST (zo_kernels_cast.c): int8, int16, int32, float32 (float32 to float32 only) ======== */
enum { ZO_CAST_S8 = 0, ZO_CAST_S16 = 1, ZO_CAST_S32 = 2, ZO_CAST_F32 = 3 };  /* element types */
typedef struct {
    int32_t size;                  /* elements */
    int32_t input_type, output_type;
} zo_cast_params_t;

void zo_cast(const zo_cast_params_t *p, const void *input, void *output);
/* ==== end of CAST =========================================================================== */

/* ==== int16 activations (16x8 quantization, zo_kernels_int16.c) ============================ */
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
/* ==== end of int16 activations ============================================================== */

/* The portable CONV_2D path for receptive fields over ZO_CONV_PATCH_MAX bytes (no patch buffer). */
void zo_conv2d_s8_direct(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                         const int32_t *bias, int8_t *output);

/* ==== Helium (MVE) kernels (zo_kernels_mve.c) ============================================== */
/* On targets with integer MVE (the Cortex-M55), unless ZO_NO_MVE is defined, zo_kernels_mve.c
 * defines the public entry points below with Helium kernels, bit-exact with the portable C; the
 * portable kernels then keep a _portable name (the MVE ones call them for shapes they do not take,
 * and the tests compare the two on the emulated M55). Elsewhere ZO_PORTABLE(name) is just name. */
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1) && !defined(ZO_NO_MVE)
#define ZO_KERNELS_MVE 1
#define ZO_PORTABLE(name) name##_portable
void zo_conv2d_s8_portable(const zo_conv2d_params_t *p, const int8_t *input, const int8_t *filter,
                           const int32_t *bias, int8_t *output);
void zo_depthwise_conv2d_s8_portable(const zo_depthwise_conv2d_params_t *p, const int8_t *input,
                                     const int8_t *filter, const int32_t *bias, int8_t *output);
void zo_fully_connected_s8_portable(const zo_fully_connected_params_t *p, const int8_t *input,
                                    const int8_t *weights, const int32_t *bias, int8_t *output);
void zo_add_s8_portable(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_mul_s8_portable(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output);
void zo_max_pool_s8_portable(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
void zo_avg_pool_s8_portable(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
#else
#define ZO_PORTABLE(name) name
#endif
/* ==== end of Helium kernels ================================================================= */

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_H */
