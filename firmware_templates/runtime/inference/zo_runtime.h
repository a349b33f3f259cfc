/* zoflash runtime: the types every generated model shares.
 * Static file, copied verbatim into each bundle. */
#ifndef ZO_RUNTIME_H
#define ZO_RUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the arena and the constant tables go; a board's build flags may override these
 * (for example to place the arena in a given SRAM region through a linker section). */
#ifndef ZO_ARENA_ATTR
#define ZO_ARENA_ATTR __attribute__((aligned(16)))
#endif
#ifndef ZO_CONST_ATTR
#define ZO_CONST_ATTR __attribute__((aligned(16)))
#endif
/* Trainable weights: written by the training loop, so in RAM. */
#ifndef ZO_TRAIN_ATTR
#define ZO_TRAIN_ATTR __attribute__((aligned(16)))
#endif

/* ZO_INT32: ARG_MAX's indices; ZO_INT16: an int16 input read by QUANTIZE (keyword models). */
typedef enum { ZO_INT8 = 0, ZO_FLOAT32 = 1, ZO_UINT8 = 2, ZO_INT32 = 3, ZO_INT16 = 4 } zo_dtype_t;

#define ZO_MAX_RANK 6

/* Describes one model input or output: how to fill it and how to read it. */
typedef struct {
    const char *name;       /* the tensor name from the .tflite file */
    zo_dtype_t dtype;
    int32_t rank;
    int32_t shape[ZO_MAX_RANK];
    int32_t bytes;
    float scale;            /* real = scale * (q - zero_point) */
    int32_t zero_point;
} zo_io_desc_t;

#ifdef __cplusplus
}
#endif

#endif /* ZO_RUNTIME_H */
