/* zo_kernels_misc.h - PAD, CONCATENATION, MEAN, SOFTMAX and LOG_SOFTMAX (zo_kernels_misc.c; Helium
 * MEAN: zo_kernels_misc_mve.c). */
#ifndef ZO_KERNELS_MISC_H
#define ZO_KERNELS_MISC_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- LOG_SOFTMAX over the last dimension (output scale 16/256, zero point 127): TFLM's
 * LogSoftmaxQuantized; reverse_shift is the (non-positive) shift of reverse_divisor. */
typedef struct {
    int32_t outer, depth;
    int32_t input_multiplier, input_left_shift;
    int32_t reverse_divisor, reverse_shift;
    int32_t diff_min;
} zo_log_softmax_params_t;

void zo_pad_s8(const zo_pad_params_t *p, const int8_t *input, int8_t *output);
void zo_concat_s8(const zo_concat_params_t *p, const int8_t *const *inputs, int8_t *output);
void zo_mean_s8(const zo_mean_params_t *p, const int8_t *input, int8_t *output);
void zo_softmax_s8(const zo_softmax_params_t *p, const int8_t *input, int8_t *output);
void zo_log_softmax_s8(const zo_log_softmax_params_t *p, const int8_t *input, int8_t *output);

#if defined(ZO_KERNELS_MVE)
/* The portable kernel the Helium one replaces (zo_kernels_base.h). */
void zo_mean_s8_portable(const zo_mean_params_t *p, const int8_t *input, int8_t *output);
#endif

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_MISC_H */
