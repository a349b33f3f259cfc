/* zo_kernels_resize.c - REDUCE_MAX, ARG_MAX, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR and
 * TRANSPOSE_CONV, int8, bit-exact with the TFLite Micro reference kernels.
 */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>
#include <string.h>

#define ZO_REDUCE_MAX_RANK 6

/* ---------------------------------------------------------------------------------- reduce max */

/* One pass over the input in memory order; an odometer over the dimensions follows the output
 * element each input element folds into. */
void zo_reduce_max_s8(const zo_reduce_max_params_t *p, const int8_t *input, int8_t *output)
{
    int32_t idx[ZO_REDUCE_MAX_RANK] = {0};
    size_t total = 1;
    for (int32_t k = 0; k < p->rank; ++k) {
        total *= (size_t)p->dims[k];
    }
    for (int32_t i = 0; i < p->output_size; ++i) {
        output[i] = -128;
    }
    size_t o = 0;
    for (size_t i = 0; i < total; ++i) {
        if (input[i] > output[o]) {
            output[o] = input[i];
        }
        for (int32_t k = p->rank - 1; k >= 0; --k) {
            o += (size_t)p->out_stride[k];
            if (++idx[k] < p->dims[k]) {
                break;
            }
            o -= (size_t)p->out_stride[k] * (size_t)p->dims[k];
            idx[k] = 0;
        }
    }
}

/* ------------------------------------------------------------------------------------- arg max */

/* The index of the first maximum (a later equal value does not replace it, as in TFLM). */
static int32_t zo_arg_max_one(const int8_t *x, int32_t n, size_t stride)
{
    int8_t best = x[0];
    int32_t at = 0;
    for (int32_t i = 1; i < n; ++i) {
        const int8_t v = x[(size_t)i * stride];
        if (v > best) {
            best = v;
            at = i;
        }
    }
    return at;
}

void zo_arg_max_s8(const zo_arg_max_params_t *p, const int8_t *input, int32_t *output)
{
    const size_t inner = (size_t)p->inner;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *base = input + (size_t)o * (size_t)p->axis * inner;
        for (size_t i = 0; i < inner; ++i) {
            output[(size_t)o * inner + i] = zo_arg_max_one(base + i, p->axis, inner);
        }
    }
}

/* ----------------------------------------------------------------------------- resize bilinear */

/* TFLM ComputeInterpolationValuesInteger: the source position in 1/1024 units and the two
 * neighbouring rows (columns).  C division truncates towards zero, as in TFLM. */
static void zo_interp(int32_t v, int32_t scale_10, int32_t half_pixel, int32_t size, int32_t *pos,
                      int32_t *lo, int32_t *hi)
{
    *pos = half_pixel ? v * scale_10 + scale_10 / 2 - (1 << 9) : v * scale_10;
    *lo = zo_max32(*pos / (1 << 10), 0);
    *hi = zo_min32((*pos + (1 << 10) - 1) / (1 << 10), size - 1);
}

/* The weights are in [-512, 1536] and each pair sums to 1024, so |sum| < 128 * 2048 * 2048 = 2^29:
 * int32 holds TFLM's int64 sum exactly. */
void zo_resize_bilinear_s8(const zo_resize_bilinear_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t c = (size_t)p->channels;
    const size_t row = (size_t)p->input_w * c;
    for (int32_t y = 0; y < p->output_h; ++y) {
        int32_t iy, y0, y1;
        zo_interp(y, p->height_scale_10, p->half_pixel_centers, p->input_h, &iy, &y0, &y1);
        const int32_t wy1 = iy - (1 << 10) * y0;
        const int32_t wy0 = (1 << 10) - wy1;
        for (int32_t x = 0; x < p->output_w; ++x) {
            int32_t ix, x0, x1;
            zo_interp(x, p->width_scale_10, p->half_pixel_centers, p->input_w, &ix, &x0, &x1);
            const int32_t wx1 = ix - (1 << 10) * x0;
            const int32_t wx0 = (1 << 10) - wx1;
            const int8_t *p00 = input + (size_t)y0 * row + (size_t)x0 * c;
            const int8_t *p10 = input + (size_t)y1 * row + (size_t)x0 * c;
            const int8_t *p01 = input + (size_t)y0 * row + (size_t)x1 * c;
            const int8_t *p11 = input + (size_t)y1 * row + (size_t)x1 * c;
            int8_t *out = output + ((size_t)y * (size_t)p->output_w + (size_t)x) * c;
            for (size_t k = 0; k < c; ++k) {
                const int32_t v = p00[k] * wy0 * wx0 + p10[k] * wy1 * wx0 + p01[k] * wy0 * wx1
                                  + p11[k] * wy1 * wx1;
                /* TFLM's default (double) rounding: half away from zero, then truncation. */
                const int32_t round = v > 0 ? (1 << 19) : -(1 << 19);
                out[k] = (int8_t)((v + round) / (1 << 20));
            }
        }
    }
}

/* ------------------------------------------------------------------------------ resize nearest */

void zo_resize_nearest_s8(const zo_resize_nearest_params_t *p, const int8_t *input, int8_t *output)
{
    const size_t c = (size_t)p->channels;
    const size_t row = (size_t)p->input_w * c;
    for (int32_t y = 0; y < p->output_h; ++y) {
        const int8_t *src = input + (size_t)p->y_index[y] * row;
        for (int32_t x = 0; x < p->output_w; ++x) {
            memcpy(output, src + (size_t)p->x_index[x] * c, c);
            output += c;
        }
    }
}

/* ------------------------------------------------------------------------------ transpose conv */

/* TFLM scatters every input pixel into an int32 scratch copy of the output.  We gather instead:
 * each output element sums the same products (input - zp) * w over the input pixels whose
 * window covers it, with no scratch buffer.  Integer addition is associative modulo 2^32, and
 * depth filter_h * filter_w * input_c <= 2^16 keeps the sum exact. */
void zo_transpose_conv_s8(const zo_transpose_conv_params_t *p, const int8_t *input, const int8_t *filter,
                          const int32_t *bias, int8_t *output)
{
    const size_t ic = (size_t)p->input_c;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int8_t *out = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c;
            for (int32_t oc = 0; oc < p->output_c; ++oc) {
                int32_t acc = 0;
                for (int32_t fy = 0; fy < p->filter_h; ++fy) {
                    const int32_t ty = oy + p->pad_h - fy;  /* = iy * stride_h for a contributing row */
                    if (ty < 0 || ty % p->stride_h != 0 || ty / p->stride_h >= p->input_h) {
                        continue;
                    }
                    for (int32_t fx = 0; fx < p->filter_w; ++fx) {
                        const int32_t tx = ox + p->pad_w - fx;
                        if (tx < 0 || tx % p->stride_w != 0 || tx / p->stride_w >= p->input_w) {
                            continue;
                        }
                        const int8_t *x = input + ((size_t)(ty / p->stride_h) * (size_t)p->input_w
                                                   + (size_t)(tx / p->stride_w)) * ic;
                        const int8_t *w = filter + (((size_t)oc * (size_t)p->filter_h + (size_t)fy)
                                                    * (size_t)p->filter_w + (size_t)fx) * ic;
                        for (size_t k = 0; k < ic; ++k) {
                            acc += (x[k] - p->input_zp) * w[k];
                        }
                    }
                }
                if (bias != NULL) {
                    acc = zo_wrap_add(acc, bias[oc]);
                }
                const int32_t v = zo_mbqm(acc, p->multiplier[oc], p->shift[oc]) + p->output_zp;
                out[oc] = (int8_t)zo_clamp32(v, p->act_min, p->act_max);
            }
        }
    }
}
