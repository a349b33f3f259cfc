/* zo_kernels_misc.c - PAD, CONCATENATION, MEAN, SOFTMAX and LOG_SOFTMAX, int8,
 * bit-exact with the TFLite Micro reference kernels (Helium MEAN: zo_kernels_misc_mve.c). */
#include "zo_kernels.h"
#include "zo_fixedpoint.h"

#include <stddef.h>
#include <string.h>

/* Channels (or inner elements) whose running sums are kept on the stack. */
#define ZO_CH_BLOCK 64

/* ---------------------------------------------------------------------------------------- pad */

static inline void zo_fill(int8_t *dst, int8_t v, int32_t n)
{
    memset(dst, (uint8_t)v, (size_t)n);
}

void zo_pad_s8(const zo_pad_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_d[5] = {p->in_d0, p->in_d1, p->in_d2, p->in_d3, p->in_d4};
    const int32_t before[5] = {p->before0, p->before1, p->before2, p->before3, p->before4};
    const int32_t after[5] = {p->after0, p->after1, p->after2, p->after3, p->after4};
    int32_t out_d[5];
    for (int k = 0; k < 5; ++k) {
        out_d[k] = in_d[k] + before[k] + after[k];
    }
    const int8_t v = (int8_t)p->pad_value;
    const int32_t row = out_d[4];
    const int8_t *in = input;
    int8_t *out = output;
    /* Walk output rows along the last dimension; a row is either all padding or
     * [before4 pad | one input row | after4 pad]. */
    for (int32_t o0 = 0; o0 < out_d[0]; ++o0) {
        const int pad0 = o0 < before[0] || o0 >= before[0] + in_d[0];
        for (int32_t o1 = 0; o1 < out_d[1]; ++o1) {
            const int pad1 = pad0 || o1 < before[1] || o1 >= before[1] + in_d[1];
            for (int32_t o2 = 0; o2 < out_d[2]; ++o2) {
                const int pad2 = pad1 || o2 < before[2] || o2 >= before[2] + in_d[2];
                for (int32_t o3 = 0; o3 < out_d[3]; ++o3) {
                    const int pad3 = pad2 || o3 < before[3] || o3 >= before[3] + in_d[3];
                    if (pad3) {
                        zo_fill(out, v, row);
                    } else {
                        zo_fill(out, v, before[4]);
                        memcpy(out + before[4], in, (size_t)in_d[4]);
                        zo_fill(out + before[4] + in_d[4], v, after[4]);
                        in += in_d[4];
                    }
                    out += row;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------ concatenation */

void zo_concat_s8(const zo_concat_params_t *p, const int8_t *const *inputs, int8_t *output)
{
    int8_t *out = output;
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t i = 0; i < p->num_inputs; ++i) {
            const int32_t n = p->chunk[i];
            memcpy(out, inputs[i] + (size_t)o * (size_t)n, (size_t)n);
            out += n;
        }
    }
}

/* --------------------------------------------------------------------------------------- mean */

void ZO_PORTABLE(zo_mean_s8)(const zo_mean_params_t *p, const int8_t *input, int8_t *output)
{
    int32_t acc[ZO_CH_BLOCK];
    const size_t inner = (size_t)p->inner;
    /* TFLM subtracts zp * count from the int32 sum (wrapping). */
    const int32_t zp_times_n = zo_wrap_mul(p->input_zp, p->reduce);
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *base = input + (size_t)o * (size_t)p->reduce * inner;
        for (int32_t i0 = 0; i0 < p->inner; i0 += ZO_CH_BLOCK) {
            const int32_t n = zo_min32(ZO_CH_BLOCK, p->inner - i0);
            for (int32_t j = 0; j < n; ++j) {
                acc[j] = 0;
            }
            for (int32_t r = 0; r < p->reduce; ++r) {
                const int8_t *x = base + (size_t)r * inner + (size_t)i0;
                for (int32_t j = 0; j < n; ++j) {
                    acc[j] = zo_wrap_add(acc[j], x[j]);
                }
            }
            for (int32_t j = 0; j < n; ++j) {
                const int32_t v = zo_mbqm(zo_wrap_sub(acc[j], zp_times_n), p->multiplier, p->shift) + p->output_zp;
                output[(size_t)o * inner + (size_t)i0 + (size_t)j] = (int8_t)zo_clamp32(v, -128, 127);
            }
        }
    }
}

/* ------------------------------------------------------------------------------------ softmax */

/* exp(beta * diff) in Q0.31: not inlined, its fixed-point polynomial is most of the kernel's code and
 * a row is a few classes. */
__attribute__((noinline)) static int32_t softmax_exp(const zo_softmax_params_t *p, int32_t diff)
{
    return zo_exp_on_negative_values(zo_mbqm(diff, p->input_multiplier, p->input_left_shift), 5);
}

/* TFLM's int8 softmax: exp of the beta-scaled difference to the row maximum in Q5.26, summed in
 * Q12.19, reciprocal by Newton-Raphson, output = exp * (1 / sum) in 1/2^out_bits units - 2^(out_bits-1).
 * One routine for both output widths (TFLM's int8 and int16 outputs differ only there): exactly one
 * of y8 / y16 is the output. */
static void softmax_s8_rows(const zo_softmax_params_t *p, const int8_t *input, int8_t *y8, int16_t *y16,
                            int32_t out_bits)
{
    const int32_t depth = p->depth;
    const int32_t offset = (int32_t)1 << (out_bits - 1);
    for (int32_t r = 0; r < p->outer; ++r) {
        const int8_t *x = input + (size_t)r * (size_t)depth;
        const size_t row = (size_t)r * (size_t)depth;
        int32_t max_in_row = -128;
        for (int32_t c = 0; c < depth; ++c) {
            max_in_row = x[c] > max_in_row ? x[c] : max_in_row;
        }
        /* a row of at most ZO_CH_BLOCK keeps its exps for the output pass (TFLM computes them twice) */
        int32_t exps[ZO_CH_BLOCK];
        const int kept = depth <= ZO_CH_BLOCK;
        int32_t sum_of_exps = 0;
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)x[c] - max_in_row;
            if (diff >= p->diff_min) {
                const int32_t e = softmax_exp(p, diff);
                if (kept) {
                    exps[c] = e;
                }
                sum_of_exps = zo_wrap_add(sum_of_exps, zo_rdbpot(e, 12));
            }
        }
        /* 1 / sum: normalise sum to [1, 2) and take 1 / (1 + frac). */
        const int32_t headroom_plus_one = zo_clz32((uint32_t)sum_of_exps);
        const int32_t num_bits_over_unit = 12 - headroom_plus_one;
        const int32_t shifted_sum_minus_one =
            (int32_t)(((uint32_t)sum_of_exps << headroom_plus_one) - 0x80000000u);
        const int32_t shifted_scale = zo_one_over_one_plus_x_q0(shifted_sum_minus_one);
        /* TFLM CHECKs 0 <= exponent <= 31 (sums of exps stay below 2^28); clamp to stay defined. */
        const int32_t exponent = zo_clamp32(num_bits_over_unit + 31 - out_bits, 0, 31);
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)x[c] - max_in_row;
            int32_t v = -offset;
            if (diff >= p->diff_min) {
                const int32_t e = kept ? exps[c] : softmax_exp(p, diff);
                v = zo_clamp32(zo_rdbpot(zo_srdhm(shifted_scale, e), exponent) - offset, -offset, offset - 1);
            }
            if (y8 != NULL) {
                y8[row + (size_t)c] = (int8_t)v;
            } else {
                y16[row + (size_t)c] = (int16_t)v;
            }
        }
    }
}

void zo_softmax_s8(const zo_softmax_params_t *p, const int8_t *input, int8_t *output)
{
    softmax_s8_rows(p, input, output, NULL, 8);
}

/* SOFTMAX int8 -> int16: the result in 1/65536 units - 32768. */
void zo_softmax_s8_s16(const zo_softmax_params_t *p, const int8_t *input, int16_t *output)
{
    softmax_s8_rows(p, input, NULL, output, 16);
}

/* ------------------------------------------------------------------------------ log_softmax */

/* a + b saturated to int32 (TFLM's SaturatingAddNonGemmlowp / SaturatingSub). */
static inline int32_t zo_sat_add64(int32_t a, int32_t b)
{
    const int64_t sum = (int64_t)a + (int64_t)b;
    return sum > ZO_INT32_MAX ? ZO_INT32_MAX : (sum < ZO_INT32_MIN ? ZO_INT32_MIN : (int32_t)sum);
}

/* log(x) for x >= 1, x in Q12.19 (the sum of exps), result in Q5.26: gemmlowp's
 * log_x_for_x_greater_than_or_equal_to_1<5>, with its accumulator of 6 integer bits. */
static int32_t zo_log_x_ge_1_q12_to_q5(int32_t z_a)
{
    const int32_t log_2 = 1488522236, sqrt_sqrt_half = 1805811301, sqrt_half = 1518500250;
    const int32_t alpha_n = 117049297, alpha_d = 127690142, alpha_i = 1057819769, alpha_f = 638450708;
    const int32_t in_bits = 12, accum_bits = 6;
    const int32_t shifted_quarter = zo_rdbpot(536870912, accum_bits); /* 1/4, Q0.31 -> Q6.25 */
    const int32_t z_a_headroom_plus_1 = zo_clz32((uint32_t)z_a);
    const int32_t r_a_tmp = zo_sat_shl(z_a, z_a_headroom_plus_1 - 1);
    const int32_t r_a = zo_sat_shl(zo_srdhm(r_a_tmp, sqrt_half), 1);
    const int32_t z_a_pow_2_adj = zo_sat_add64(zo_sat_shl(in_bits - z_a_headroom_plus_1, 31 - accum_bits), shifted_quarter);
    const int32_t z_b = zo_srdhm(z_a, sqrt_half);
    const int32_t z_b_headroom = zo_clz32((uint32_t)z_b) - 1;
    const int32_t r_b = zo_sat_shl(z_a, z_b_headroom);
    const int32_t z_b_pow_2_adj = zo_sat_add64(zo_sat_shl(in_bits - z_b_headroom, 31 - accum_bits), -shifted_quarter);
    const int32_t r = zo_min32(r_a, r_b);
    const int32_t z_pow_2_adj = zo_max32(z_a_pow_2_adj, z_b_pow_2_adj);
    const int32_t p = zo_rounding_half_sum(r, sqrt_sqrt_half);
    int32_t q = zo_wrap_sub(r, sqrt_sqrt_half);
    q = zo_wrap_add(q, q);
    const int32_t common_sq = zo_srdhm(q, q);
    const int32_t num = zo_wrap_add(zo_srdhm(q, r), zo_srdhm(zo_srdhm(q, common_sq), alpha_n));
    const int32_t inner = zo_wrap_add(zo_wrap_add(alpha_i, q), zo_srdhm(alpha_d, common_sq));
    const int32_t denom_minus_one = zo_wrap_add(zo_srdhm(p, inner), zo_srdhm(alpha_f, q));
    const int32_t recip_denom = zo_one_over_one_plus_x_q0(denom_minus_one);
    const int32_t num_scaled = zo_rdbpot(num, accum_bits);
    const int32_t sum = zo_wrap_add(zo_srdhm(z_pow_2_adj, log_2), zo_srdhm(num_scaled, recip_denom));
    return zo_sat_shl(sum, 1); /* Q6.25 -> Q5.26 */
}

/* LOG_SOFTMAX int8: log(softmax) in 1/16 units + 127, over the last dimension. */
void zo_log_softmax_s8(const zo_log_softmax_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->depth;
    for (int32_t r = 0; r < p->outer; ++r) {
        const int8_t *x = input + (size_t)r * (size_t)depth;
        int8_t *y = output + (size_t)r * (size_t)depth;
        int32_t max_in_row = -128;
        for (int32_t c = 0; c < depth; ++c) {
            max_in_row = x[c] > max_in_row ? x[c] : max_in_row;
        }
        int32_t sum_of_exps = 0; /* Q12.19 */
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)x[c] - max_in_row;
            if (diff >= p->diff_min) {
                const int32_t scaled = zo_mbqm(diff, p->input_multiplier, p->input_left_shift);
                sum_of_exps = zo_wrap_add(sum_of_exps, zo_rdbpot(zo_exp_on_negative_values(scaled, 5), 12));
            }
        }
        const int32_t log_sum = zo_log_x_ge_1_q12_to_q5(sum_of_exps);
        const int32_t adjusted_diff_min = zo_max32(
            p->diff_min - 1, zo_mbqm(zo_wrap_add(log_sum, ZO_INT32_MIN), p->reverse_divisor, p->reverse_shift));
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t diff = (int32_t)x[c] - max_in_row;
            int32_t v = -128;
            if (diff > adjusted_diff_min) {
                const int32_t scaled = zo_mbqm(diff, p->input_multiplier, p->input_left_shift);
                v = zo_clamp32(zo_rdbpot(zo_wrap_sub(scaled, log_sum), 31 - 5 - 4) + 127, -128, 127);
            }
            y[c] = (int8_t)v;
        }
    }
}
