/* zo_kernels_variables.h - resource variables: READ_VARIABLE / ASSIGN_VARIABLE (zo_kernels_variables.c). */
#ifndef ZO_KERNELS_VARIABLES_H
#define ZO_KERNELS_VARIABLES_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A variable's bytes copied from the state array to the arena (READ) or back (ASSIGN). */
typedef struct {
    int32_t size;                  /* bytes */
} zo_copy_params_t;

void zo_copy_s8(const zo_copy_params_t *p, const int8_t *input, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_VARIABLES_H */
