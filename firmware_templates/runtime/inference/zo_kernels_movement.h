/* zo_kernels_movement.h - TRANSPOSE, SLICE, STRIDED_SLICE, PACK (with zo_concat_s8), UNPACK, SPLIT, SPLIT_V,
 * GATHER, DEPTH_TO_SPACE and SPACE_TO_DEPTH (zo_kernels_movement.c). */
#ifndef ZO_KERNELS_MOVEMENT_H
#define ZO_KERNELS_MOVEMENT_H

#include "zo_kernels_base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- DEPTH_TO_SPACE / SPACE_TO_DEPTH (NHWC, batch 1), one the other's inverse: the depth-side tensor
 * [height][width][block][block][depth] is the space-side tensor [height][block][width][block][depth]
 * with its axes 1 and 2 swapped. height and width are the depth side's (DEPTH_TO_SPACE's input,
 * SPACE_TO_DEPTH's output), depth the space side's channels. */
typedef struct {
    int32_t height, width;
    int32_t block;
    int32_t depth;
} zo_depth_space_params_t;

void zo_strided_copy_s8(const zo_strided_copy_params_t *p, const int8_t *input, int8_t *output);
void zo_split_s8(const zo_split_params_t *p, const int8_t *input, int8_t *const *outputs);
void zo_gather_s8(const zo_gather_params_t *p, const int8_t *input, int8_t *output);
void zo_depth_to_space_s8(const zo_depth_space_params_t *p, const int8_t *input, int8_t *output);
void zo_space_to_depth_s8(const zo_depth_space_params_t *p, const int8_t *input, int8_t *output);

#ifdef __cplusplus
}
#endif

#endif /* ZO_KERNELS_MOVEMENT_H */
