/* zo_kernels_cast.h - CAST: int8, int16, int32, float32; float32 to float32 only (zo_kernels_cast.c). */
#ifndef ZO_KERNELS_CAST_H
#define ZO_KERNELS_CAST_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { ZO_CAST_S8 = 0, ZO_CAST_S16 = 1, ZO_CAST_S32 = 2, ZO_CAST_F32 = 3 };  /* element types */
typedef struct {
    int32_t size;                  /* elements */
    int32_t input_type, output_type;
} zo_cast_params_t;

void zo_cast(const zo_cast_params_t *p, const void *input, void *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_CAST_H */
