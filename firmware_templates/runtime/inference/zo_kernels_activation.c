/* zo_kernels_activation.c - SUB, MINIMUM, MAXIMUM, SQUARED_DIFFERENCE, PRELU (broadcasting) and
 * RELU, RELU6, LEAKY_RELU, TANH, HARD_SWISH, RSQRT, int8, bit-exact with the TFLite Micro
 * reference kernels. */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>

/* The broadcast walk of zo_add_s8 (see zo_add_params_t): ONE(p, a, b) gives one output value. */
#define ZO_BROADCAST_WALK(p, input1, input2, output, ONE)                                           \
    do {                                                                                            \
        if (!(p)->broadcast) {                                                                      \
            const int32_t size_ = (p)->out_d0 * (p)->out_d1 * (p)->out_d2 * (p)->out_d3;            \
            for (int32_t i_ = 0; i_ < size_; ++i_) {                                                \
                (output)[i_] = ONE((p), (input1)[i_], (input2)[i_]);                                \
            }                                                                                       \
            break;                                                                                  \
        }                                                                                           \
        int8_t *out_ = (output);                                                                    \
        for (int32_t i0 = 0; i0 < (p)->out_d0; ++i0) {                                              \
            for (int32_t i1 = 0; i1 < (p)->out_d1; ++i1) {                                          \
                for (int32_t i2 = 0; i2 < (p)->out_d2; ++i2) {                                      \
                    const int8_t *a_ = (input1) + (ptrdiff_t)i0 * (p)->in1_s0 +                     \
                                       (ptrdiff_t)i1 * (p)->in1_s1 + (ptrdiff_t)i2 * (p)->in1_s2;   \
                    const int8_t *b_ = (input2) + (ptrdiff_t)i0 * (p)->in2_s0 +                     \
                                       (ptrdiff_t)i1 * (p)->in2_s1 + (ptrdiff_t)i2 * (p)->in2_s2;   \
                    for (int32_t i3 = 0; i3 < (p)->out_d3; ++i3) {                                  \
                        *out_++ = ONE((p), a_[(ptrdiff_t)i3 * (p)->in1_s3],                         \
                                      b_[(ptrdiff_t)i3 * (p)->in2_s3]);                             \
                    }                                                                               \
                }                                                                               \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* TFLM SubElementwise: ADD's arithmetic with the second input subtracted. */
static inline int8_t zo_sub_one(const zo_add_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t r1 = zo_mbqm((x1 - p->input1_zp) * (1 << p->left_shift), p->input1_multiplier, p->input1_shift);
    const int32_t r2 = zo_mbqm((x2 - p->input2_zp) * (1 << p->left_shift), p->input2_multiplier, p->input2_shift);
    const int32_t raw = zo_mbqm(r1 - r2, p->output_multiplier, p->output_shift) + p->output_zp;
    return (int8_t)zo_clamp32(raw, p->act_min, p->act_max);
}

void zo_sub_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    ZO_BROADCAST_WALK(p, input1, input2, output, zo_sub_one);
}

/* TFLM SquaredDifference (int8): the rescaled difference squared, then one multiplier that may
 * exceed one; the clamp is to int8 (act_min/act_max are -128/127). */
static inline int8_t zo_squared_difference_one(const zo_add_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t r1 = zo_mbqm((x1 - p->input1_zp) * (1 << p->left_shift), p->input1_multiplier, p->input1_shift);
    const int32_t r2 = zo_mbqm((x2 - p->input2_zp) * (1 << p->left_shift), p->input2_multiplier, p->input2_shift);
    const int32_t d = r1 - r2;
    const int32_t raw = zo_mbqm(d * d, p->output_multiplier, p->output_shift) + p->output_zp;
    return (int8_t)zo_clamp32(raw, p->act_min, p->act_max);
}

void zo_squared_difference_s8(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2,
                              int8_t *output)
{
    ZO_BROADCAST_WALK(p, input1, input2, output, zo_squared_difference_one);
}

/* TFLM MAXIMUM / MINIMUM compare the stored int8 values (no rescaling). */
#define ZO_MAX_ONE(p, a, b) ((a) > (b) ? (a) : (b))
#define ZO_MIN_ONE(p, a, b) ((a) < (b) ? (a) : (b))

void zo_maximum_s8(const zo_minmax_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    ZO_BROADCAST_WALK(p, input1, input2, output, ZO_MAX_ONE);
}

void zo_minimum_s8(const zo_minmax_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    ZO_BROADCAST_WALK(p, input1, input2, output, ZO_MIN_ONE);
}

/* TFLM BroadcastPrelu4DSlow: identity multiplier for x >= 0, x * alpha's multiplier below. */
static inline int8_t zo_prelu_one(const zo_prelu_params_t *p, int32_t x, int32_t alpha)
{
    const int32_t v = x - p->input_zp;
    const int32_t raw = v >= 0 ? zo_mbqm(v, p->identity_multiplier, p->identity_shift)
                               : zo_mbqm(v * (alpha - p->alpha_zp), p->alpha_multiplier, p->alpha_shift);
    return (int8_t)zo_clamp32(raw + p->output_zp, -128, 127);
}

void zo_prelu_s8(const zo_prelu_params_t *p, const int8_t *input, const int8_t *alpha, int8_t *output)
{
    ZO_BROADCAST_WALK(p, input, alpha, output, zo_prelu_one);
}

/* RELU, RELU6 and LEAKY_RELU do the same arithmetic on int8 and on int16 (16x8) tensors: each body
 * is written once, for the element type and its range. */

/* TFLM ReluQuantized: rescale to the output, clamp below at the output's zero. */
#define ZO_RELU_BODY(type)                                                                               \
    for (int32_t i = 0; i < p->size; ++i) {                                                              \
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp; \
        output[i] = (type)zo_clamp32(v, p->act_min, p->act_max);                                         \
    }

/* TFLM Relu6Quantized: a clamp of the stored values to the input's 0 and 6 (no rescaling). */
#define ZO_RELU6_BODY(type)                                                                              \
    for (int32_t i = 0; i < p->size; ++i) {                                                              \
        output[i] = (type)zo_clamp32(input[i], p->lower, p->upper);                                      \
    }

/* TFLM QuantizeLeakyRelu: a negative alpha multiplier is applied as its magnitude, then negated. */
#define ZO_LEAKY_RELU_BODY(type, lo, hi)                                                                 \
    const int32_t negative = p->alpha_multiplier < 0;                                                    \
    const int32_t alpha_magnitude = negative ? -p->alpha_multiplier : p->alpha_multiplier;               \
    for (int32_t i = 0; i < p->size; ++i) {                                                              \
        const int32_t v = (int32_t)input[i] - p->input_zp;                                               \
        int32_t out = p->output_zp;                                                                      \
        if (v >= 0) {                                                                                    \
            out += zo_mbqm(v, p->identity_multiplier, p->identity_shift);                                \
        } else {                                                                                         \
            const int32_t scaled = zo_mbqm(v, alpha_magnitude, p->alpha_shift);                          \
            out += negative ? -scaled : scaled;                                                          \
        }                                                                                                \
        output[i] = (type)zo_clamp32(out, lo, hi);                                                       \
    }

void zo_relu_s8(const zo_relu_params_t *p, const int8_t *input, int8_t *output) { ZO_RELU_BODY(int8_t) }
void zo_relu_s16(const zo_relu_params_t *p, const int16_t *input, int16_t *output) { ZO_RELU_BODY(int16_t) }
void zo_relu6_s8(const zo_relu6_params_t *p, const int8_t *input, int8_t *output) { ZO_RELU6_BODY(int8_t) }
void zo_relu6_s16(const zo_relu6_params_t *p, const int16_t *input, int16_t *output) { ZO_RELU6_BODY(int16_t) }

void zo_leaky_relu_s8(const zo_leaky_relu_params_t *p, const int8_t *input, int8_t *output)
{
    ZO_LEAKY_RELU_BODY(int8_t, -128, 127)
}

void zo_leaky_relu_s16(const zo_leaky_relu_params_t *p, const int16_t *input, int16_t *output)
{
    ZO_LEAKY_RELU_BODY(int16_t, -32768, 32767)
}

/* gemmlowp (1 - a) / (1 + a) for a Q0.31 a in [0, 1): LOGISTIC's Newton-Raphson reciprocal of
 * (1 + a) / 2, minus one, in Q2.29. */
static int32_t zo_one_minus_x_over_one_plus_x_q0(int32_t a)
{
    const int32_t half_denominator = zo_rounding_half_sum(a, ZO_Q0_ONE);
    const int32_t f2_one = 1 << 29;
    int32_t x = zo_wrap_add(1515870810, zo_srdhm(half_denominator, -1010580540));
    for (int i = 0; i < 3; ++i) {
        const int32_t one_minus = zo_wrap_sub(f2_one, zo_srdhm(half_denominator, x));
        x = zo_wrap_add(x, zo_sat_shl(zo_srdhm(x, one_minus), 2));
    }
    return zo_sat_shl(zo_wrap_sub(x, f2_one), 2);
}

/* gemmlowp tanh() of a Q4.27 value, result Q0.31: for n = -|a|, -tanh(n) = (1 - e^2n) / (1 + e^2n),
 * where 2n is the same raw value read with 5 integer bits. */
static int32_t zo_tanh_q4(int32_t a)
{
    if (a == 0) {
        return 0;
    }
    const int32_t n = a < 0 ? a : -a;
    const int32_t t = zo_one_minus_x_over_one_plus_x_q0(zo_exp_on_negative_values(n, 5));
    return a < 0 ? -t : t;
}

/* TFLM reference_integer_ops::Tanh (int8): the output is Q0.7 whatever the output tensor says. */
void zo_tanh_s8(const zo_logistic_params_t *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t x = (int32_t)input[i] - p->input_zp;
        if (x <= -p->input_range_radius) {
            output[i] = -128;
        } else if (x >= p->input_range_radius) {
            output[i] = 127;
        } else {
            const int32_t q4 = zo_mbqm(x, p->input_multiplier, p->input_left_shift);
            output[i] = (int8_t)zo_clamp32(zo_rdbpot(zo_tanh_q4(q4), 24), -128, 127);
        }
    }
}

/* gemmlowp SaturatingRoundingDoublingHighMul on int16. */
static inline int32_t zo_srdhm16(int32_t a, int32_t b)
{
    if (a == b && a == -32768) {
        return 32767;
    }
    const int32_t ab = a * b;
    return (int16_t)((ab + (ab >= 0 ? (1 << 14) : 1 - (1 << 14))) / (1 << 15));
}

/* TFLM SaturatingLeftShift on int16 (amount 0..30). */
static inline int32_t zo_sat_shl16(int32_t v, int32_t amount)
{
    const int64_t r = (int64_t)v * ((int64_t)1 << amount);
    return r > 32767 ? 32767 : r < -32768 ? -32768 : (int32_t)r;
}

/* TFLM reference_ops::HardSwish (int8): int16 fixed point with the reluish and output multipliers
 * cut to 16 bits. */
void zo_hard_swish_s8(const zo_hard_swish_params_t *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t hires = ((int32_t)input[i] - p->input_zp) * 128;
        const int32_t preshift_output = zo_srdhm16(hires, p->output_multiplier);
        int32_t reluish = hires;
        if (p->reluish_shift > 0) {
            reluish = zo_sat_shl16(reluish, p->reluish_shift - 1);
        }
        reluish = zo_srdhm16(reluish, p->reluish_multiplier);
        if (p->reluish_shift > 0) {
            reluish = zo_sat_shl16(reluish, 1);
        }
        if (p->reluish_shift < 0) {
            reluish = zo_rdbpot(reluish, -p->reluish_shift);
        }
        reluish = (reluish + (1 << 15)) >> 1;  /* [-1, 1] -> [0, 1] */
        /* SaturatingDoublingHighMul: truncating, and the int16 operands never both reach -32768. */
        const int32_t product = (int16_t)((reluish * preshift_output) / (1 << 15));
        const int32_t v = (int16_t)(zo_rdbpot(product, -p->output_shift) + p->output_zp);
        output[i] = (int8_t)zo_clamp32(v, -128, 127);
    }
}

/* TFLM GetInvSqrtQuantizedMultiplierExp for 2 <= x < 2^29 (reverse_shift -1): 1/sqrt(x) as a
 * Q0.31 multiplier and a left shift, by Newton-Raphson in Q3.28 on x normalised to [2^27, 2^29). */
static void zo_inv_sqrt(int32_t x, int32_t *multiplier, int32_t *shift)
{
    int32_t right_shift = 11;
    const int32_t pairs = (__builtin_clz((uint32_t)x) - 1) / 2 - 1;
    right_shift -= pairs;
    x = (int32_t)((uint32_t)x << (2 * pairs));
    const int32_t half_input = zo_rdbpot(x >> 1, 1);
    const int32_t half_three = (1 << 28) + (1 << 27);
    int32_t y = 1 << 28;
    for (int i = 0; i < 5; ++i) {
        const int32_t y3 = zo_sat_shl(zo_srdhm(zo_srdhm(y, y), y), 6);
        y = zo_sat_shl(zo_wrap_sub(zo_srdhm(half_three, y), zo_srdhm(half_input, y3)), 3);
    }
    y = zo_srdhm(y, 1518500250);  /* sqrt(2) / 2 */
    if (right_shift < 0) {
        y = (int32_t)((uint32_t)y << -right_shift);
        right_shift = 0;
    }
    *multiplier = y;
    *shift = -right_shift;
}

/* TFLM RsqrtEvalQuantized (int8).  TFLM stops with an error on an input below the zero point;
 * here such an input gives 127, like the zero point itself. */
void zo_rsqrt_s8(const zo_rsqrt_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t k_shift = 20;
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t v = (int32_t)input[i] - p->input_zp;
        if (v <= 0) {
            output[i] = 127;
            continue;
        }
        int32_t m = ZO_INT32_MAX, s = 0;
        if (v > 1) {
            zo_inv_sqrt(v, &m, &s);
        }
        const int32_t data = zo_mbqm(1, m, s + k_shift);
        const int32_t out = zo_mbqm(data, p->multiplier, p->shift - k_shift) + p->output_zp;
        output[i] = (int8_t)zo_clamp32(out, -128, 127);
    }
}
