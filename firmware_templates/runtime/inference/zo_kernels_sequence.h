/* zo_kernels_sequence.h - SVDF, for stateful models (zo_kernels_sequence.c). */
#ifndef ZO_KERNELS_SEQUENCE_H
#define ZO_KERNELS_SEQUENCE_H

#include "zo_kernels_base.h"
#include "zo_kernels_elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_SEQUENCE_H */
