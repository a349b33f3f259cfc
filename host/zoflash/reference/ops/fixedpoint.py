"""The reference kernels' shared fixed-point arithmetic (an independent oracle for the C code).

Each reference kernel (reference/ops/<family>.py, the family names of compiler/ops/) takes the
params dict its op family's params builder makes and numpy arrays, and computes the TFLite Micro
reference arithmetic directly from its definition: int32 accumulation of filter * (input - zero
point), skipping taps outside the image, then MultiplyByQuantizedMultiplier (saturating rounding
doubling high multiply, then rounding divide by a power of two). Nothing here is shared with the C
kernels except the params dict; clarity wins over speed, but everything is vectorised over the
output.
"""

from __future__ import annotations

import numpy as np

I32_MIN = -(1 << 31)


I32_MAX = (1 << 31) - 1


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 (C int32 arithmetic)."""
    x = np.asarray(x, dtype=np.int64)
    return (((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int64)


def srdhm(a, b) -> np.ndarray:
    """Saturating rounding doubling high multiply of int32 values (round half away, truncation)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    num = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    q = np.where(num >= 0, num >> 31, -((-num) >> 31))  # divide by 2^31 toward zero
    return np.where((a == I32_MIN) & (b == I32_MIN), I32_MAX, q).astype(np.int64)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """x / 2^exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def mbqm(x, multiplier, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier for int32 x (wrapping left shift, as compiled C++ does)."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(srdhm(wrap_int32(x << left), multiplier), right)


def requant(acc, p, mult, shift):
    out = mbqm(acc, mult, shift) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def saturating_left_shift(x, e: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT with a positive exponent."""
    x = np.asarray(x, dtype=np.int64)
    threshold = (1 << (31 - e)) - 1
    return np.where(x > threshold, I32_MAX, np.where(x < -threshold, I32_MIN, x << e))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a):
    a = np.asarray(a, dtype=np.int64)
    constant_term = 1895147668  # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = wrap_int32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    inner = wrap_int32(srdhm(wrap_int32(x4_over_4 + x3), constant_1_over_3) + x2)
    x4_over_24_plus_x3_over_6_plus_x2_over_2 = rounding_divide_by_pot(inner, 1)
    return wrap_int32(constant_term + srdhm(constant_term, wrap_int32(x + x4_over_24_plus_x3_over_6_plus_x2_over_2)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values for FixedPoint<int32, integer_bits>; result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    a_mod = wrap_int32((a & (one_quarter - 1)) - one_quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(saturating_left_shift(a_mod, integer_bits))
    remainder = wrap_int32(a_mod - a)
    for exponent, multiplier in (
        (-2, 1672461947),
        (-1, 1302514674),
        (0, 790015084),
        (1, 290630308),
        (2, 39332535),
        (3, 720401),
        (4, 242),
    ):
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, I32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp Newton-Raphson 1/(1+x) for Q0.31 x in [0, 1); result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    s = a + I32_MAX
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # round half away
    x = wrap_int32(1515870810 + srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        one_minus = wrap_int32((1 << 29) - srdhm(half_denominator, x))
        x = wrap_int32(x + saturating_left_shift(srdhm(x, one_minus), 2))
    return saturating_left_shift(x, 1)


def _clz32(x: int) -> int:
    return 32 - (int(x) & 0xFFFFFFFF).bit_length()


def _saturate(x: int) -> int:
    return min(max(int(x), I32_MIN), I32_MAX)


def log_x_for_x_ge_1(z_a: int, input_bits: int, output_bits: int) -> int:
    """gemmlowp / TFLM log_x_for_x_greater_than_or_equal_to_1 on one raw value: x in
    Q(input_bits), log(x) in Q(output_bits), through an accumulator of output_bits + 1 integer bits
    (a rational approximation of log around sqrt(sqrt(1/2)) plus the power of two)."""
    log_2, sqrt_sqrt_half, sqrt_half = 1488522236, 1805811301, 1518500250
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    accum = output_bits + 1

    def mul(a, b) -> int:
        return int(srdhm(a, b))

    def shl(x, e) -> int:
        return int(saturating_left_shift(x, e)) if e > 0 else int(x)

    def wrap(x) -> int:
        return int(wrap_int32(x))

    shifted_quarter = int(rounding_divide_by_pot(1 << 29, accum))
    za_h1 = _clz32(z_a)
    r_a = shl(mul(shl(z_a, za_h1 - 1), sqrt_half), 1)
    za_pow2 = _saturate(shl(input_bits - za_h1, 31 - accum) + shifted_quarter)
    z_b = mul(z_a, sqrt_half)
    zb_h = _clz32(z_b) - 1
    r_b = shl(z_a, zb_h)
    zb_pow2 = _saturate(shl(input_bits - zb_h, 31 - accum) - shifted_quarter)
    r, pow2 = min(r_a, r_b), max(za_pow2, zb_pow2)
    total = r + sqrt_sqrt_half  # RoundingHalfSum: halves away from zero
    p = (total + 1) // 2 if total >= 0 else -((1 - total) // 2)
    q = wrap(r - sqrt_sqrt_half)
    q = wrap(q + q)
    sq = mul(q, q)
    num = wrap(mul(q, r) + mul(mul(q, sq), alpha_n))
    denom_minus_one = wrap(mul(p, wrap(wrap(alpha_i + q) + mul(alpha_d, sq))) + mul(alpha_f, q))
    recip = int(one_over_one_plus_x_for_x_in_0_1(denom_minus_one))
    out = wrap(mul(pow2, log_2) + mul(int(rounding_divide_by_pot(num, accum)), recip))
    return shl(out, accum - output_bits)


def mbqm64(x, multiplier, shift) -> np.ndarray:
    """TFLM's MultiplyByQuantizedMultiplier(int64_t x, ...): the multiplier rounded to Q0.15, then
    one shift by 15 - shift, rounding half up; the int32 result wraps."""
    m = np.asarray(multiplier, np.int64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - np.asarray(shift, np.int64)
    return wrap_int32((np.asarray(x, np.int64) * reduced + (np.int64(1) << (total - 1))) >> total)


def requant16(acc, p, b):
    if b is not None:
        acc = acc + np.asarray(b, np.int64)
    out = mbqm64(acc, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int16)
