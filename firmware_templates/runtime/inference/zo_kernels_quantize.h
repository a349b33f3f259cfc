/* zo_kernels_quantize.h - QUANTIZE at the model's edges: uint8 <-> int8, float32 -> int8 (zo_kernels_quantize.c). */
#ifndef ZO_KERNELS_QUANTIZE_H
#define ZO_KERNELS_QUANTIZE_H

#include "zo_kernels_base.h"
#include "zo_kernels_elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_QUANTIZE_H */
