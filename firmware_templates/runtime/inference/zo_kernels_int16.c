/* zo_kernels_int16.c - int16 activations (16x8 quantization): SOFTMAX int8 -> int16 and
 * int16 -> int16, the QUANTIZE conversions between int8, int16 and int32, float32 <-> int16,
 * bit-exact with the TFLite Micro reference kernels. */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>
#include <string.h>

/* TFLM's LUTLookup for int16: the high 9 bits index a 513-entry table, the low 7 bits
 * interpolate linearly to the next entry.  TFLM keeps the slope in an int16_t: so does this. */
static int16_t zo_lut_lookup_s16(int16_t value, const int16_t *lut)
{
    const int32_t index = 256 + (value >> 7);
    const int32_t offset = value & 0x7f;
    const int16_t slope = (int16_t)(lut[index + 1] - lut[index]);
    const int32_t delta = ((int32_t)slope * offset + 64) >> 7;
    return (int16_t)(lut[index] + delta);
}

/* ------------------------------------------------------------------------------------ softmax */

/* TFLM's SoftmaxInt16: exp of the rescaled difference to the row maximum from a LUT over
 * [-10, 0], the sum in Q16.15, its reciprocal from a 1 / (1 + x) LUT, output in 1/32768 units.
 * The exps are kept in the output row meanwhile, as TFLM does. */
void zo_softmax_s16(const zo_softmax_s16_params_t *p, const int16_t *input, int16_t *output)
{
    const int32_t depth = p->depth;
    for (int32_t r = 0; r < p->outer; ++r) {
        const int16_t *x = input + (size_t)r * (size_t)depth;
        int16_t *y = output + (size_t)r * (size_t)depth;
        int32_t max_in_row = -32768;
        for (int32_t c = 0; c < depth; ++c) {
            max_in_row = x[c] > max_in_row ? x[c] : max_in_row;
        }
        int32_t sum_of_exps = 0;
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t scaled = zo_mbqm((int32_t)x[c] - max_in_row, p->input_multiplier, p->input_left_shift);
            y[c] = zo_lut_lookup_s16((int16_t)zo_clamp32(scaled + 32767, -32768, 32767), p->exp_lut);
            sum_of_exps += y[c];
        }
        const int32_t headroom_plus_one = zo_clz32((uint32_t)sum_of_exps);
        const int32_t shifted_sum =
            (int32_t)((((int64_t)sum_of_exps << (headroom_plus_one - 1)) + (1 << 13)) >> 14);
        /* the LUT takes x = sum - 1, recentred from [0, 65535] to [-32768, 32767] */
        const int32_t sym_shifted_sum = shifted_sum - ((1 << 15) + (1 << 16));
        const int32_t reciprocal = zo_lut_lookup_s16((int16_t)zo_clamp32(sym_shifted_sum, -32768, 32767),
                                                     p->one_over_one_plus_x_lut);
        const int32_t right_shift = 31 - headroom_plus_one;
        const int64_t round = (int64_t)1 << (right_shift - 1);
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t v = (int32_t)(((int64_t)y[c] * reciprocal + round) >> right_shift);
            y[c] = (int16_t)zo_clamp32(v, 0, 32767);
        }
    }
}

/* ----------------------------------------------------------------------------------- quantize */

/* TFLM's Requantize: clamp(MultiplyByQuantizedMultiplier(in - input_zp) + output_zp), for each
 * pair of integer types its QUANTIZE runs. */
#define ZO_REQUANTIZE_BODY(lo, hi, out_type)                                                        \
    for (int32_t i = 0; i < p->size; ++i) {                                                        \
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp; \
        output[i] = (out_type)zo_clamp32(v, lo, hi);                                                \
    }

void zo_requantize_s8_s16(const zo_requantize_params_t *p, const int8_t *input, int16_t *output)
{
    ZO_REQUANTIZE_BODY(-32768, 32767, int16_t)
}

void zo_requantize_s16_s16(const zo_requantize_params_t *p, const int16_t *input, int16_t *output)
{
    ZO_REQUANTIZE_BODY(-32768, 32767, int16_t)
}

void zo_requantize_s16_s32(const zo_requantize_params_t *p, const int16_t *input, int32_t *output)
{
    ZO_REQUANTIZE_BODY(ZO_INT32_MIN, ZO_INT32_MAX, int32_t)
}

void zo_requantize_s8_s32(const zo_requantize_params_t *p, const int8_t *input, int32_t *output)
{
    ZO_REQUANTIZE_BODY(ZO_INT32_MIN, ZO_INT32_MAX, int32_t)
}

/* DEQUANTIZE int16 -> float32: TFLM's (float)((double)scale * (q - zp)); the double product is
 * exact (24 x 17 bits), so the float32 product rounds to the same number. */
void zo_dequantize_s16(const zo_dequantize_params_t *p, const int16_t *input, float *output)
{
    const float scale = p->scale;
    for (int32_t i = 0; i < p->size; ++i) {
        output[i] = scale * (float)((int32_t)input[i] - p->zero_point);
    }
}

/* Any |v| beyond this gives a saturated int16 whatever the zero point; clamping first keeps the
 * int32 conversion defined. */
#define ZO_QUANTIZE_S16_LIMIT 65536.0f

/* QUANTIZE float32 -> int16, TFLM's AffineQuantize: clamp(round(x / scale) + zero_point), the
 * division in float32, halves away from zero (the fraction of a float is exact); NaN gives the
 * zero point. */
void zo_quantize_f32_s16(const zo_quantize_params_t *p, const float *input, int16_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        float v = input[i] / p->scale;
        if (v != v) {
            v = 0.0f;
        } else if (v > ZO_QUANTIZE_S16_LIMIT) {
            v = ZO_QUANTIZE_S16_LIMIT;
        } else if (v < -ZO_QUANTIZE_S16_LIMIT) {
            v = -ZO_QUANTIZE_S16_LIMIT;
        }
        int32_t t = (int32_t)v;
        const float frac = v - (float)t;
        t += frac >= 0.5f ? 1 : (frac <= -0.5f ? -1 : 0);
        output[i] = (int16_t)zo_clamp32(t + p->zero_point, -32768, 32767);
    }
}

/* ------------------------------------------------------- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED */

/* 16x8 CONV_2D (also grouped): int16 input and output with zero point 0, int8 weights, int64 bias
 * or NULL; padded taps are skipped, as TFLM does. */
void ZO_PORTABLE(zo_conv2d_s16)(const zo_conv2d_params_t *p, const int16_t *input, const int8_t *filter,
                                const int64_t *bias, int16_t *output)
{
    const int32_t fc = p->filter_c;
    const int32_t per_group = p->output_c / (p->input_c / fc);
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c;
            for (int32_t oc = 0; oc < p->output_c; ++oc) {
                const int32_t c0 = (oc / per_group) * fc;
                int64_t acc = 0;
                for (int32_t ky = 0; ky < p->filter_h; ++ky) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dilation_h;
                    if (iy < 0 || iy >= p->input_h) {
                        continue;
                    }
                    for (int32_t kx = 0; kx < p->filter_w; ++kx) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dilation_w;
                        if (ix < 0 || ix >= p->input_w) {
                            continue;
                        }
                        const int16_t *x = input + ((size_t)iy * (size_t)p->input_w + (size_t)ix) * (size_t)p->input_c
                                           + (size_t)c0;
                        const size_t tap = ((size_t)oc * (size_t)p->filter_h + (size_t)ky) * (size_t)p->filter_w
                                           + (size_t)kx;
                        const int8_t *w = filter + tap * (size_t)fc;
                        for (int32_t i = 0; i < fc; ++i) {
                            acc += (int32_t)x[i] * w[i];
                        }
                    }
                }
                y[oc] = zo_requant_s16(acc, bias, oc, p->multiplier, p->shift, p->act_min, p->act_max);
            }
        }
    }
}

/* 16x8 DEPTHWISE_CONV_2D: output channel oc = ic * depth_multiplier + m. */
void ZO_PORTABLE(zo_depthwise_conv2d_s16)(const zo_depthwise_conv2d_params_t *p, const int16_t *input,
                                          const int8_t *filter, const int64_t *bias, int16_t *output)
{
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * (size_t)p->output_c;
            for (int32_t oc = 0; oc < p->output_c; ++oc) {
                const int32_t ic = oc / p->depth_multiplier;
                int64_t acc = 0;
                for (int32_t ky = 0; ky < p->filter_h; ++ky) {
                    const int32_t iy = oy * p->stride_h - p->pad_h + ky * p->dilation_h;
                    if (iy < 0 || iy >= p->input_h) {
                        continue;
                    }
                    for (int32_t kx = 0; kx < p->filter_w; ++kx) {
                        const int32_t ix = ox * p->stride_w - p->pad_w + kx * p->dilation_w;
                        if (ix < 0 || ix >= p->input_w) {
                            continue;
                        }
                        const int32_t xv = input[((size_t)iy * (size_t)p->input_w + (size_t)ix) * (size_t)p->input_c
                                                 + (size_t)ic];
                        const int32_t wv = filter[((size_t)ky * (size_t)p->filter_w + (size_t)kx) * (size_t)p->output_c
                                                  + (size_t)oc];
                        acc += xv * wv;
                    }
                }
                y[oc] = zo_requant_s16(acc, bias, oc, p->multiplier, p->shift, p->act_min, p->act_max);
            }
        }
    }
}

/* 16x8 FULLY_CONNECTED: rows x depth int16 input, weights [units][depth], int64 accumulator. */
void ZO_PORTABLE(zo_fully_connected_s16)(const zo_fully_connected_params_t *p, const int16_t *input,
                                         const int8_t *weights, const int64_t *bias, int16_t *output)
{
    for (int32_t r = 0; r < p->rows; ++r) {
        const int16_t *x = input + (size_t)r * (size_t)p->depth;
        for (int32_t u = 0; u < p->units; ++u) {
            const int8_t *w = weights + (size_t)u * (size_t)p->depth;
            int64_t acc = 0;
            for (int32_t i = 0; i < p->depth; ++i) {
                acc += (int32_t)x[i] * w[i];
            }
            output[(size_t)r * (size_t)p->units + (size_t)u] =
                zo_requant_s16(acc, bias, u, p->multiplier, p->shift, p->act_min, p->act_max);
        }
    }
}

/* ---------------------------------------------------------------------------- pooling, PAD, CONCATENATION */

/* TFLM's int16 AVERAGE_POOL_2D: the int32 sum of the window's taps inside the image, divided by
 * their count rounding half away from zero. */
void zo_avg_pool_s16(const zo_pool_params_t *p, const int16_t *input, int16_t *output)
{
    const size_t ch = (size_t)p->channels;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h, ix0 = ox * p->stride_w - p->pad_w;
            const int32_t ky0 = zo_max32(0, -iy0), ky1 = zo_min32(p->filter_h, p->input_h - iy0);
            const int32_t kx0 = zo_max32(0, -ix0), kx1 = zo_min32(p->filter_w, p->input_w - ix0);
            const int32_t count = (ky1 - ky0) * (kx1 - kx0);
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * ch;
            for (size_t c = 0; c < ch; ++c) {
                int32_t acc = 0;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        acc += input[((size_t)(iy0 + ky) * (size_t)p->input_w + (size_t)(ix0 + kx)) * ch + c];
                    }
                }
                int32_t v = 0;
                if (count > 0) {
                    v = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
                }
                y[c] = (int16_t)zo_clamp32(v, p->act_min, p->act_max);
            }
        }
    }
}

void zo_max_pool_s16(const zo_pool_params_t *p, const int16_t *input, int16_t *output)
{
    const size_t ch = (size_t)p->channels;
    for (int32_t oy = 0; oy < p->output_h; ++oy) {
        for (int32_t ox = 0; ox < p->output_w; ++ox) {
            const int32_t iy0 = oy * p->stride_h - p->pad_h, ix0 = ox * p->stride_w - p->pad_w;
            const int32_t ky0 = zo_max32(0, -iy0), ky1 = zo_min32(p->filter_h, p->input_h - iy0);
            const int32_t kx0 = zo_max32(0, -ix0), kx1 = zo_min32(p->filter_w, p->input_w - ix0);
            int16_t *y = output + ((size_t)oy * (size_t)p->output_w + (size_t)ox) * ch;
            for (size_t c = 0; c < ch; ++c) {
                int32_t mx = -32768;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const size_t at = (size_t)(iy0 + ky) * (size_t)p->input_w + (size_t)(ix0 + kx);
                        mx = zo_max32(mx, input[at * ch + c]);
                    }
                }
                y[c] = (int16_t)zo_clamp32(mx, p->act_min, p->act_max);
            }
        }
    }
}

/* PAD / PADV2 on int16: zo_pad_s8's walk over 5-D output rows, two bytes an element. */
void zo_pad_s16(const zo_pad_params_t *p, const int16_t *input, int16_t *output)
{
    const int32_t in_d[5] = {p->in_d0, p->in_d1, p->in_d2, p->in_d3, p->in_d4};
    const int32_t before[5] = {p->before0, p->before1, p->before2, p->before3, p->before4};
    int32_t out_d[5];
    out_d[0] = p->in_d0 + p->before0 + p->after0;
    out_d[1] = p->in_d1 + p->before1 + p->after1;
    out_d[2] = p->in_d2 + p->before2 + p->after2;
    out_d[3] = p->in_d3 + p->before3 + p->after3;
    out_d[4] = p->in_d4 + p->before4 + p->after4;
    const int16_t *in = input;
    int16_t *out = output;
    for (int32_t o0 = 0; o0 < out_d[0]; ++o0) {
        for (int32_t o1 = 0; o1 < out_d[1]; ++o1) {
            for (int32_t o2 = 0; o2 < out_d[2]; ++o2) {
                for (int32_t o3 = 0; o3 < out_d[3]; ++o3) {
                    const int32_t o[4] = {o0, o1, o2, o3};
                    int inside = 1;
                    for (int k = 0; k < 4; ++k) {
                        inside = inside && o[k] >= before[k] && o[k] < before[k] + in_d[k];
                    }
                    for (int32_t i = 0; i < out_d[4]; ++i) {
                        const int32_t j = i - before[4];
                        out[i] = inside && j >= 0 && j < in_d[4] ? in[j] : (int16_t)p->pad_value;
                    }
                    in += inside ? in_d[4] : 0;
                    out += out_d[4];
                }
            }
        }
    }
}

void zo_concat_s16(const zo_concat_params_t *p, const int16_t *const *inputs, int16_t *output)
{
    int16_t *out = output;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->num_inputs; ++i) {
            const int32_t n = p->chunk[i];
            const int16_t *src = inputs[i] + (size_t)o * (size_t)n;
            memcpy(out, src, (size_t)n * sizeof *out);
            out += n;
        }
    }
}

/* ---------------------------------------------------------------------------------- ADD, SUB, MUL */

/* The 4-D broadcasting walk of the int8 binary kernels, on int16 (strides 0 where an input broadcasts). */
#define ZO_BINARY_S16(p, input1, input2, output, one)                                                   \
    do {                                                                                               \
        int16_t *out_ = (output);                                                                      \
        for (int32_t i0 = 0; i0 < (p)->out_d0; ++i0) {                                                 \
            for (int32_t i1 = 0; i1 < (p)->out_d1; ++i1) {                                             \
                for (int32_t i2 = 0; i2 < (p)->out_d2; ++i2) {                                         \
                    const int16_t *a_ = (input1) + (ptrdiff_t)i0 * (p)->in1_s0 + (ptrdiff_t)i1 * (p)->in1_s1 \
                                        + (ptrdiff_t)i2 * (p)->in1_s2;                                 \
                    const int16_t *b_ = (input2) + (ptrdiff_t)i0 * (p)->in2_s0 + (ptrdiff_t)i1 * (p)->in2_s1 \
                                        + (ptrdiff_t)i2 * (p)->in2_s2;                                 \
                    for (int32_t i3 = 0; i3 < (p)->out_d3; ++i3) {                                     \
                        *out_++ = one((p), a_[(ptrdiff_t)i3 * (p)->in1_s3], b_[(ptrdiff_t)i3 * (p)->in2_s3]); \
                    }                                                                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    } while (0)

/* TFLM's int16 ADD and SUB (the general path, which TFLM Micro always takes): the int8
 * arithmetic with a left shift of 15 (in the params). */
static inline int16_t zo_add_one_s16(const zo_add_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t r1 = zo_mbqm((x1 - p->input1_zp) * (1 << p->left_shift), p->input1_multiplier, p->input1_shift);
    const int32_t r2 = zo_mbqm((x2 - p->input2_zp) * (1 << p->left_shift), p->input2_multiplier, p->input2_shift);
    const int32_t raw = zo_mbqm(zo_wrap_add(r1, r2), p->output_multiplier, p->output_shift) + p->output_zp;
    return (int16_t)zo_clamp32(raw, p->act_min, p->act_max);
}

static inline int16_t zo_sub_one_s16(const zo_add_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t r1 = zo_mbqm((x1 - p->input1_zp) * (1 << p->left_shift), p->input1_multiplier, p->input1_shift);
    const int32_t r2 = zo_mbqm((x2 - p->input2_zp) * (1 << p->left_shift), p->input2_multiplier, p->input2_shift);
    const int32_t raw = zo_mbqm(zo_wrap_sub(r1, r2), p->output_multiplier, p->output_shift) + p->output_zp;
    return (int16_t)zo_clamp32(raw, p->act_min, p->act_max);
}

/* TFLM's int16 MUL (zero points 0): the int32 product rescaled once. */
static inline int16_t zo_mul_one_s16(const zo_mul_params_t *p, int32_t x1, int32_t x2)
{
    return (int16_t)zo_clamp32(zo_mbqm(x1 * x2, p->output_multiplier, p->output_shift), p->act_min, p->act_max);
}

void zo_add_s16(const zo_add_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output)
{
    ZO_BINARY_S16(p, input1, input2, output, zo_add_one_s16);
}

void zo_sub_s16(const zo_add_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output)
{
    ZO_BINARY_S16(p, input1, input2, output, zo_sub_one_s16);
}

void zo_mul_s16(const zo_mul_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output)
{
    ZO_BINARY_S16(p, input1, input2, output, zo_mul_one_s16);
}

/* ------------------------------------------------------------------------------------------ MEAN */

/* TFLM's QuantizedMeanOrSum on int16: the int32 sum minus zp * count, one multiplier that folds
 * in 1 / count, plus the output zero point. */
void zo_mean_s16(const zo_mean_params_t *p, const int16_t *input, int16_t *output)
{
    const int32_t zp_times_n = zo_wrap_mul(p->input_zp, p->reduce);
    const size_t inner = (size_t)p->inner;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int16_t *base = input + (size_t)o * (size_t)p->reduce * inner;
        for (size_t j = 0; j < inner; ++j) {
            int32_t acc = 0;
            for (int32_t r = 0; r < p->reduce; ++r) {
                acc = zo_wrap_add(acc, base[(size_t)r * inner + j]);
            }
            const int32_t v = zo_mbqm(zo_wrap_sub(acc, zp_times_n), p->multiplier, p->shift) + p->output_zp;
            output[(size_t)o * inner + j] = (int16_t)zo_clamp32(v, -32768, 32767);
        }
    }
}

/* ------------------------------------------- TRANSPOSE, SLICE, STRIDED_SLICE, SPLIT, UNPACK, GATHER */

/* The int8 movement kernels (zo_kernels_movement.c) on int16: the params count elements. */
void zo_strided_copy_s16(const zo_strided_copy_params_t *p, const int16_t *input, int16_t *output)
{
    int16_t *out = output;
    for (int32_t i0 = 0; i0 < p->out_d0; ++i0) {
        for (int32_t i1 = 0; i1 < p->out_d1; ++i1) {
            for (int32_t i2 = 0; i2 < p->out_d2; ++i2) {
                for (int32_t i3 = 0; i3 < p->out_d3; ++i3) {
                    for (int32_t i4 = 0; i4 < p->out_d4; ++i4) {
                        const int32_t o = p->offset + i0 * p->in_s0 + i1 * p->in_s1 + i2 * p->in_s2 + i3 * p->in_s3
                                          + i4 * p->in_s4;
                        for (int32_t i5 = 0; i5 < p->out_d5; ++i5) {
                            *out++ = input[o + i5 * p->in_s5];
                        }
                    }
                }
            }
        }
    }
}

void zo_split_s16(const zo_split_params_t *p, const int16_t *input, int16_t *const *outputs)
{
    const int16_t *src = input;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->num_outputs; ++i) {
            const int32_t n = p->chunk[i];
            int16_t *dst = outputs[i] + (size_t)o * (size_t)n;
            memcpy(dst, src, (size_t)n * sizeof *dst);
            src += n;
        }
    }
}

void zo_gather_s16(const zo_gather_params_t *p, const int16_t *input, int16_t *output)
{
    const size_t inner = (size_t)p->inner;
    int16_t *out = output;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int16_t *block = input + (size_t)o * (size_t)p->axis_size * inner;
        for (int32_t j = 0; j < p->num_indices; ++j) {
            const int16_t *src = block + (size_t)p->indices[j] * inner;
            memcpy(out, src, inner * sizeof *out);
            out += inner;
        }
    }
}

/* ------------------------------------------------------- MAXIMUM, MINIMUM, RESIZE_NEAREST_NEIGHBOR */

/* TFLM compares the stored int16 values (no rescaling), as for int8. */
#define ZO_MAX_ONE_S16(p, a, b) ((a) > (b) ? (a) : (b))
#define ZO_MIN_ONE_S16(p, a, b) ((a) < (b) ? (a) : (b))

void zo_maximum_s16(const zo_minmax_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output)
{
    ZO_BINARY_S16(p, input1, input2, output, ZO_MAX_ONE_S16);
}

void zo_minimum_s16(const zo_minmax_params_t *p, const int16_t *input1, const int16_t *input2, int16_t *output)
{
    ZO_BINARY_S16(p, input1, input2, output, ZO_MIN_ONE_S16);
}

/* The int8 kernel's source rows and columns (y_index, x_index), two bytes an element. */
void zo_resize_nearest_s16(const zo_resize_nearest_params_t *p, const int16_t *input, int16_t *output)
{
    const size_t c = (size_t)p->channels;
    for (int32_t y = 0; y < p->output_h; ++y) {
        const int16_t *src = input + (size_t)p->y_index[y] * (size_t)p->input_w * c;
        for (int32_t x = 0; x < p->output_w; ++x) {
            const int16_t *px = src + (size_t)p->x_index[x] * c;
            memcpy(output, px, c * sizeof *output);
            output += c;
        }
    }
}
