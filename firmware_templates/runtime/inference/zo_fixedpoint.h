/* zo_fixedpoint.h - integer helpers that reproduce TFLite Micro's int8 arithmetic bit for bit.
 *
 * Conventions follow TFLM's default (double-rounding) build: a quantized multiplier is an int32
 * meaning m / 2^31, a shift is > 0 for a left shift and < 0 for a right shift.  Signed overflow
 * that TFLM lets wrap (two's complement in practice) is done here on uint32_t so it is defined
 * behaviour in C.  Right shifts of negative values assume an arithmetic shift (GCC, Clang and
 * armcc all do this).
 */
#ifndef ZO_FIXEDPOINT_H
#define ZO_FIXEDPOINT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_INT32_MIN ((int32_t)(-2147483647 - 1))
#define ZO_INT32_MAX ((int32_t)2147483647)

static inline int32_t zo_wrap_add(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a + (uint32_t)b);
}

static inline int32_t zo_wrap_sub(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a - (uint32_t)b);
}

static inline int32_t zo_wrap_mul(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a * (uint32_t)b);
}

static inline int32_t zo_min32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t zo_max32(int32_t a, int32_t b) { return a > b ? a : b; }

/* Leading zeros of a 32-bit word (32 for 0). */
static inline int32_t zo_clz32(uint32_t x)
{
#if defined(__GNUC__)
    return x == 0 ? 32 : (int32_t)__builtin_clz(x);
#else
    int32_t n = 0;
    for (uint32_t bit = 0x80000000u; bit != 0 && !(x & bit); bit >>= 1) {
        ++n;
    }
    return n;
#endif
}

static inline int32_t zo_clamp32(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* (a * b * 2) >> 32 rounded to nearest; the only overflow, INT32_MIN^2, saturates.
 * gemmlowp adds a sign-dependent nudge and divides toward zero; that is exactly a floor of
 * (a * b + 2^30) / 2^31 (ties go up), which is one add and one arithmetic shift. */
static inline int32_t zo_srdhm(int32_t a, int32_t b)
{
    if (a == b && a == ZO_INT32_MIN) {
        return ZO_INT32_MAX;
    }
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
}

/* Divide by 2^exponent (0..31), rounding to nearest with ties away from zero. */
static inline int32_t zo_rdbpot(int32_t x, int32_t exponent)
{
    const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* TFLM MultiplyByQuantizedMultiplier(int32_t x, m, shift). The left shift wraps like the
 * int32 multiply TFLM does; builders reject shifts > 30 so it is always a plain shift. */
static inline int32_t zo_mbqm(int32_t x, int32_t multiplier, int32_t shift)
{
    const int32_t left = shift > 0 ? shift : 0;
    const int32_t right = shift > 0 ? 0 : -shift;
    return zo_rdbpot(zo_srdhm((int32_t)((uint32_t)x << left), multiplier), right);
}

/* gemmlowp SaturatingRoundingMultiplyByPOT with a positive exponent: saturating x * 2^e. */
static inline int32_t zo_sat_shl(int32_t x, int32_t exponent)
{
    const int32_t threshold = (int32_t)((1u << (31 - exponent)) - 1u);
    if (x > threshold) {
        return ZO_INT32_MAX;
    }
    if (x < -threshold) {
        return ZO_INT32_MIN;
    }
    return (int32_t)((uint32_t)x << exponent);
}

/* gemmlowp RoundingHalfSum on int32: (a + b) / 2 rounded away from zero. */
static inline int32_t zo_rounding_half_sum(int32_t a, int32_t b)
{
    const int64_t sum = (int64_t)a + (int64_t)b;
    const int64_t sign = sum >= 0 ? 1 : -1;
    return (int32_t)((sum + sign) / 2);
}

/* Q0.31 constants used by gemmlowp's exp / reciprocal approximations. */
#define ZO_Q0_ONE ZO_INT32_MAX

/* exp(x) for x in [-1/4, 0), x and result in Q0.31 (Taylor series around -1/8). */
static inline int32_t zo_exp_on_interval_q0(int32_t a)
{
    const int32_t constant_term = 1895147668;     /* exp(-1/8) */
    const int32_t constant_1_over_3 = 715827883;  /* 1/3 */
    const int32_t x = zo_wrap_add(a, 1 << 28);    /* a + 1/8 */
    const int32_t x2 = zo_srdhm(x, x);
    const int32_t x3 = zo_srdhm(x2, x);
    const int32_t x4 = zo_srdhm(x2, x2);
    const int32_t x4_over_4 = zo_rdbpot(x4, 2);
    const int32_t poly = zo_rdbpot(
        zo_wrap_add(zo_srdhm(zo_wrap_add(x4_over_4, x3), constant_1_over_3), x2), 1);
    return zo_wrap_add(constant_term, zo_srdhm(constant_term, zo_wrap_add(x, poly)));
}

/* exp(a) for a <= 0 where a has `integer_bits` integer bits (Q(ib).(31-ib)); result Q0.31.
 * Splits a into a multiple of 1/4 (handled by a barrel of exp(-2^k) factors) and a remainder in
 * [-1/4, 0) (handled by the polynomial). integer_bits is 4 or 5 in the kernels here. */
static inline int32_t zo_exp_on_negative_values(int32_t a, int32_t integer_bits)
{
    const int32_t frac_bits = 31 - integer_bits;
    const int32_t one_quarter = (int32_t)1 << (frac_bits - 2);
    const int32_t mask = one_quarter - 1;
    const int32_t a_mod_quarter_minus_one_quarter = zo_wrap_sub(a & mask, one_quarter);
    int32_t result = zo_exp_on_interval_q0(zo_sat_shl(a_mod_quarter_minus_one_quarter, integer_bits));
    const int32_t remainder = zo_wrap_sub(a_mod_quarter_minus_one_quarter, a);
    /* exp(-2^k) in Q0.31 for k = -2 .. 4 */
    static const int32_t barrel[7] = {1672461947, 1302514674, 790015084, 290630308,
                                      39332535, 720401, 242};
    for (int32_t k = -2; k <= 4; ++k) {
        if (integer_bits > k) {
            const int32_t bit = frac_bits + k;
            if (remainder & ((int32_t)1 << bit)) {
                result = zo_srdhm(result, barrel[k + 2]);
            }
        }
    }
    /* gemmlowp clamps to 0 below -32 only when integer_bits > 5; never the case here. */
    if (a == 0) {
        result = ZO_Q0_ONE;
    }
    return result;
}

/* 1 / (1 + a) for a in [0, 1) in Q0.31; the result (in [1/2, 1]) is Q0.31.
 * Newton-Raphson with the 48/17 - 32/17 x initial guess, three iterations, in Q2.29. */
static inline int32_t zo_one_over_one_plus_x_q0(int32_t a)
{
    const int32_t half_denominator = zo_rounding_half_sum(a, ZO_Q0_ONE);
    const int32_t constant_48_over_17 = 1515870810;
    const int32_t constant_neg_32_over_17 = -1010580540;
    const int32_t f2_one = 1 << 29;
    int32_t x = zo_wrap_add(constant_48_over_17, zo_srdhm(half_denominator, constant_neg_32_over_17));
    for (int i = 0; i < 3; ++i) {
        const int32_t half_denominator_times_x = zo_srdhm(half_denominator, x);
        const int32_t one_minus = zo_wrap_sub(f2_one, half_denominator_times_x);
        x = zo_wrap_add(x, zo_sat_shl(zo_srdhm(x, one_minus), 2));
    }
    return zo_sat_shl(x, 1);
}

/* sum w[k] * (x[k] - zp) over k < n in wrapping int32 arithmetic: the row products of the
 * recurrent kernels (LSTM, SVDF); zo_kernels_mve.h has their Helium form. */
static inline int32_t zo_dot_s8_zp(const int8_t *x, int32_t zp, const int8_t *w, int32_t n)
{
    uint32_t acc = 0u;
    for (int32_t k = 0; k < n; ++k) {
        acc += (uint32_t)((int32_t)w[k] * ((int32_t)x[k] - zp));
    }
    return (int32_t)acc;
}

static inline int32_t zo_dot_s16_zp(const int16_t *x, int32_t zp, const int16_t *w, int32_t n)
{
    uint32_t acc = 0u;
    for (int32_t k = 0; k < n; ++k) {
        acc += (uint32_t)((int32_t)w[k] * ((int32_t)x[k] - zp));
    }
    return (int32_t)acc;
}

/* TFLM's MultiplyByQuantizedMultiplier(int64_t x, ...) of the 16x8 kernels: the multiplier rounded
 * to 16 bits, one rounding shift (shift < 8, which the builders check). */
static inline int32_t zo_mbqm64(int64_t x, int32_t multiplier, int32_t shift)
{
    const int64_t reduced = multiplier < 0x7FFF0000 ? (multiplier + (1 << 15)) >> 16 : 0x7FFF;
    const int32_t total_shift = 15 - shift;
    return (int32_t)((x * reduced + ((int64_t)1 << (total_shift - 1))) >> total_shift);
}

/* The output of a 16x8 CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED from its int64 sum (channel c). */
static inline int16_t zo_requant_s16(int64_t acc, const int64_t *bias, int32_t c, const int32_t *multiplier,
                                     const int32_t *shift, int32_t act_min, int32_t act_max)
{
    if (bias != (const int64_t *)0) {
        acc += bias[c];
    }
    return (int16_t)zo_clamp32(zo_mbqm64(acc, multiplier[c], shift[c]), act_min, act_max);
}

#ifdef __cplusplus
}
#endif

#endif /* ZO_FIXEDPOINT_H */
