/* zo_kernels_elementwise.c - ADD, MUL (with broadcasting), QUANTIZE (int8 -> int8), DEQUANTIZE
 * and LOGISTIC, int8, bit-exact with the TFLite Micro reference kernels. */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>

/* TFLM AddFunc: both inputs are shifted left by left_shift (20 for int8) for headroom, scaled
 * to a common scale by multipliers < 1, summed, then scaled to the output. */
static inline int8_t zo_add_one(const zo_add_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t s1 = (x1 - p->input1_zp) * (1 << p->left_shift);
    const int32_t s2 = (x2 - p->input2_zp) * (1 << p->left_shift);
    const int32_t r1 = zo_mbqm(s1, p->input1_multiplier, p->input1_shift);
    const int32_t r2 = zo_mbqm(s2, p->input2_multiplier, p->input2_shift);
    const int32_t raw = zo_mbqm(zo_wrap_add(r1, r2), p->output_multiplier, p->output_shift) + p->output_zp;
    return (int8_t)zo_clamp32(raw, p->act_min, p->act_max);
}

void ZO_PORTABLE(zo_add_s8)(const zo_add_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    if (!p->broadcast) {
        const int32_t size = p->out_d0 * p->out_d1 * p->out_d2 * p->out_d3;
        for (int32_t i = 0; i < size; ++i) {
            output[i] = zo_add_one(p, input1[i], input2[i]);
        }
        return;
    }
    int8_t *out = output;
    for (int32_t i0 = 0; i0 < p->out_d0; ++i0) {
        for (int32_t i1 = 0; i1 < p->out_d1; ++i1) {
            for (int32_t i2 = 0; i2 < p->out_d2; ++i2) {
                const int8_t *a = input1 + (ptrdiff_t)i0 * p->in1_s0 + (ptrdiff_t)i1 * p->in1_s1 + (ptrdiff_t)i2 * p->in1_s2;
                const int8_t *b = input2 + (ptrdiff_t)i0 * p->in2_s0 + (ptrdiff_t)i1 * p->in2_s1 + (ptrdiff_t)i2 * p->in2_s2;
                for (int32_t i3 = 0; i3 < p->out_d3; ++i3) {
                    *out++ = zo_add_one(p, a[(ptrdiff_t)i3 * p->in1_s3], b[(ptrdiff_t)i3 * p->in2_s3]);
                }
            }
        }
    }
}

/* TFLM MulElementwise: the product of the offset inputs is rescaled once. */
static inline int8_t zo_mul_one(const zo_mul_params_t *p, int32_t x1, int32_t x2)
{
    const int32_t prod = (x1 - p->input1_zp) * (x2 - p->input2_zp);
    const int32_t raw = zo_mbqm(prod, p->output_multiplier, p->output_shift) + p->output_zp;
    return (int8_t)zo_clamp32(raw, p->act_min, p->act_max);
}

void ZO_PORTABLE(zo_mul_s8)(const zo_mul_params_t *p, const int8_t *input1, const int8_t *input2, int8_t *output)
{
    if (!p->broadcast) {
        const int32_t size = p->out_d0 * p->out_d1 * p->out_d2 * p->out_d3;
        for (int32_t i = 0; i < size; ++i) {
            output[i] = zo_mul_one(p, input1[i], input2[i]);
        }
        return;
    }
    int8_t *out = output;
    for (int32_t i0 = 0; i0 < p->out_d0; ++i0) {
        for (int32_t i1 = 0; i1 < p->out_d1; ++i1) {
            for (int32_t i2 = 0; i2 < p->out_d2; ++i2) {
                const int8_t *a = input1 + (ptrdiff_t)i0 * p->in1_s0 + (ptrdiff_t)i1 * p->in1_s1 + (ptrdiff_t)i2 * p->in1_s2;
                const int8_t *b = input2 + (ptrdiff_t)i0 * p->in2_s0 + (ptrdiff_t)i1 * p->in2_s1 + (ptrdiff_t)i2 * p->in2_s2;
                for (int32_t i3 = 0; i3 < p->out_d3; ++i3) {
                    *out++ = zo_mul_one(p, a[(ptrdiff_t)i3 * p->in1_s3], b[(ptrdiff_t)i3 * p->in2_s3]);
                }
            }
        }
    }
}

void zo_requantize_s8(const zo_requantize_params_t *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t v = zo_mbqm((int32_t)input[i] - p->input_zp, p->multiplier, p->shift) + p->output_zp;
        output[i] = (int8_t)zo_clamp32(v, -128, 127);
    }
}

/* TFLM computes (float)((double)scale * (q - zp)).  The double product of a float32 scale and a
 * 9-bit integer is exact, so rounding it once to float equals the float32 product. */
void zo_dequantize_s8(const zo_dequantize_params_t *p, const int8_t *input, float *output)
{
    const float scale = p->scale;
    for (int32_t i = 0; i < p->size; ++i) {
        output[i] = scale * (float)((int32_t)input[i] - p->zero_point);
    }
}

/* gemmlowp logistic() for a Q4.27 input; result Q0.31. */
static int32_t zo_logistic_q4(int32_t a)
{
    if (a == 0) {
        return 1 << 30;  /* exactly 1/2 */
    }
    const int32_t abs_a = a > 0 ? a : -a;
    const int32_t pos = zo_one_over_one_plus_x_q0(zo_exp_on_negative_values(-abs_a, 4));
    return a > 0 ? pos : zo_wrap_sub(ZO_Q0_ONE, pos);
}

void zo_logistic_s8(const zo_logistic_params_t *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t x = (int32_t)input[i] - p->input_zp;
        if (x <= -p->input_range_radius) {
            output[i] = -128;
        } else if (x >= p->input_range_radius) {
            output[i] = 127;
        } else {
            const int32_t in_q4 = zo_mbqm(x, p->input_multiplier, p->input_left_shift);
            const int32_t out_q0 = zo_logistic_q4(in_q4);
            /* Q0.31 -> 8 fractional bits, re-centred on zero point -128. */
            const int32_t v = zo_rdbpot(out_q0, 23) - 128;
            output[i] = (int8_t)zo_clamp32(v, -128, 127);
        }
    }
}
