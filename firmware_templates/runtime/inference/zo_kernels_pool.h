/* zo_kernels_pool.h - AVERAGE_POOL_2D and MAX_POOL_2D (zo_kernels_pool.c; Helium: zo_kernels_pool_mve.c). */
#ifndef ZO_KERNELS_POOL_H
#define ZO_KERNELS_POOL_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- AVERAGE_POOL_2D / MAX_POOL_2D (input and output share scale and zero point). */
typedef struct {
    int32_t input_h, input_w, channels;
    int32_t output_h, output_w;
    int32_t filter_h, filter_w;
    int32_t stride_h, stride_w;
    int32_t pad_h, pad_w;
    int32_t act_min, act_max;
} zo_pool_params_t;

void zo_avg_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
void zo_max_pool_s8(const zo_pool_params_t *p, const int8_t *input, int8_t *output);

#if defined(ZO_KERNELS_MVE)
/* The portable kernels the Helium ones replace (zo_kernels_base.h). */
void zo_max_pool_s8_portable(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
void zo_avg_pool_s8_portable(const zo_pool_params_t *p, const int8_t *input, int8_t *output);
#endif

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_POOL_H */
