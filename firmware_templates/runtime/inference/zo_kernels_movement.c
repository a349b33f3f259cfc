/* zo_kernels_movement.c - TRANSPOSE, SLICE, STRIDED_SLICE, UNPACK, SPLIT, SPLIT_V, GATHER,
 * DEPTH_TO_SPACE and SPACE_TO_DEPTH on int8 tensors. They only move bytes, so they are bit-exact
 * with TFLite Micro by construction; the compiler computes every index at build time
 * (compiler/ops/movement_params.py). */
#include "zo_kernels.h"

#include <stddef.h>
#include <string.h>

/* ------------------------------------------------------------------------------ strided copy */

void zo_strided_copy_s8(const zo_strided_copy_params_t *p, const int8_t *input, int8_t *output)
{
    int8_t *out = output;
    for (int32_t i0 = 0; i0 < p->out_d0; ++i0) {
        const int32_t o0 = p->offset + i0 * p->in_s0;
        for (int32_t i1 = 0; i1 < p->out_d1; ++i1) {
            const int32_t o1 = o0 + i1 * p->in_s1;
            for (int32_t i2 = 0; i2 < p->out_d2; ++i2) {
                const int32_t o2 = o1 + i2 * p->in_s2;
                for (int32_t i3 = 0; i3 < p->out_d3; ++i3) {
                    const int32_t o3 = o2 + i3 * p->in_s3;
                    for (int32_t i4 = 0; i4 < p->out_d4; ++i4) {
                        const int32_t o4 = o3 + i4 * p->in_s4;
                        if (p->in_s5 == 1) {  /* a contiguous innermost run */
                            memcpy(out, input + o4, (size_t)p->out_d5);
                            out += p->out_d5;
                            continue;
                        }
                        for (int32_t i5 = 0; i5 < p->out_d5; ++i5) {
                            *out++ = input[o4 + i5 * p->in_s5];
                        }
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------- split */

void zo_split_s8(const zo_split_params_t *p, const int8_t *input, int8_t *const *outputs)
{
    const int8_t *src = input;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->num_outputs; ++i) {
            const int32_t n = p->chunk[i];
            memcpy(outputs[i] + (size_t)o * (size_t)n, src, (size_t)n);
            src += n;
        }
    }
}

/* ------------------------------------------------------------------------------------ gather */

void zo_gather_s8(const zo_gather_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t inner = (size_t)p->inner;
    int8_t *out = output;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *block = input + (size_t)o * (size_t)p->axis_size * inner;
        for (int32_t j = 0; j < p->num_indices; ++j) {
            memcpy(out, block + (size_t)p->indices[j] * inner, inner);
            out += inner;
        }
    }
}

/* ----------------------------------------------------------- depth to space, space to depth */

/* A row of `block` pixels of `depth` channels is contiguous on both sides, so each op is one memcpy
 * per (h, block row, w): the depth side walked in [h][w][block row] order, the space side in
 * [h][block row][w] order. */

void zo_depth_to_space_s8(const zo_depth_space_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t run = (size_t)p->block * (size_t)p->depth;
    int8_t *out = output;
    for (int32_t h = 0; h < p->height; ++h) {
        for (int32_t by = 0; by < p->block; ++by) {
            for (int32_t w = 0; w < p->width; ++w) {
                const size_t pixel = ((size_t)h * (size_t)p->width + (size_t)w) * (size_t)p->block + (size_t)by;
                memcpy(out, input + pixel * run, run);
                out += run;
            }
        }
    }
}

void zo_space_to_depth_s8(const zo_depth_space_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t run = (size_t)p->block * (size_t)p->depth;
    const int8_t *in = input;
    for (int32_t h = 0; h < p->height; ++h) {
        for (int32_t by = 0; by < p->block; ++by) {
            for (int32_t w = 0; w < p->width; ++w) {
                const size_t pixel = ((size_t)h * (size_t)p->width + (size_t)w) * (size_t)p->block + (size_t)by;
                memcpy(output + pixel * run, in, run);
                in += run;
            }
        }
    }
}
