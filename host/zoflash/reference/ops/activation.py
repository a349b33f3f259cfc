"""Reference kernels of the activation family: SOFTMAX, LOGISTIC, TANH, RELU*, HARD_SWISH, RSQRT,
QUANTIZE, DEQUANTIZE; the int16 variants read from TFLM's reference kernels independently of the
C (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import (
    I32_MAX,
    I32_MIN,
    exp_on_negative_values,
    log_x_for_x_ge_1,
    mbqm,
    one_over_one_plus_x_for_x_in_0_1,
    rounding_divide_by_pot,
    saturating_left_shift,
    srdhm,
    wrap_int32,
)


def logistic_q4(a) -> np.ndarray:
    """gemmlowp logistic() of a Q4.27 value; result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    abs_a = np.where(a > 0, a, -a)
    pos = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-abs_a, 4))
    neg = wrap_int32(I32_MAX - pos)
    return np.where(a == 0, 1 << 30, np.where(a > 0, pos, neg))


def requantize_s8(p, x) -> np.ndarray:
    x = np.asarray(x).astype(np.int64) - p["input_zp"]
    out = mbqm(x, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def dequantize_s8(p, x) -> np.ndarray:
    """TFLM's formula literally: (float)((double)scale * (q - zp))."""
    x = np.asarray(x).astype(np.int64) - p["zero_point"]
    return (np.float64(p["scale"]) * x.astype(np.float64)).astype(np.float32)


def logistic_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    radius = p["input_range_radius"]
    inside = (v > -radius) & (v < radius)
    q4 = mbqm(np.where(inside, v, 0), p["input_multiplier"], p["input_left_shift"])
    y = rounding_divide_by_pot(logistic_q4(q4), 23) - 128
    y = np.clip(y, -128, 127)
    y = np.where(v <= -radius, -128, np.where(v >= radius, 127, y))
    return y.astype(np.int8)


def softmax_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= p["diff_min"]
    scaled = mbqm(np.where(used, diff, 0), p["input_multiplier"], p["input_left_shift"])
    e = exp_on_negative_values(scaled, 5)
    sum_of_exps = wrap_int32(np.where(used, rounding_divide_by_pot(e, 12), 0).sum(axis=1, keepdims=True))
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        s = int(sum_of_exps[r, 0]) & 0xFFFFFFFF
        clz = 32 - s.bit_length()
        num_bits_over_unit = 12 - clz
        shifted_sum_minus_one = int(wrap_int32(((s << clz) & 0xFFFFFFFF) - (1 << 31)))
        scale = one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
        exponent = num_bits_over_unit + 31 - 8
        y = rounding_divide_by_pot(srdhm(scale, e[r]), exponent) - 128
        out[r] = np.where(used[r], np.clip(y, -128, 127), -128)
    return out.astype(np.int8)


def log_softmax_s8(p, x) -> np.ndarray:
    """TFLM's LogSoftmaxQuantized<int8>: log(sum of exps) in Q5.26 subtracted from each scaled
    difference, in 1/16 units + 127; differences below the reverse-scaled bound give -128."""
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= p["diff_min"]
    scaled = mbqm(diff, p["input_multiplier"], p["input_left_shift"])
    e = exp_on_negative_values(np.where(used, scaled, 0), 5)
    out = np.empty_like(x)
    for r in range(len(x)):
        total = int(wrap_int32(np.where(used[r], rounding_divide_by_pot(e[r], 12), 0).sum()))
        log_sum = log_x_for_x_ge_1(total, 12, 5)
        bound = int(mbqm(int(wrap_int32(log_sum + I32_MIN)), p["reverse_divisor"], p["reverse_shift"]))
        adjusted_diff_min = max(p["diff_min"] - 1, bound)
        y = rounding_divide_by_pot(wrap_int32(scaled[r] - log_sum), 31 - 5 - 4) + 127
        out[r] = np.where(diff[r] > adjusted_diff_min, np.clip(y, -128, 127), -128)
    return out.astype(np.int8)


def requantize_u8_s8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def requantize_s8_u8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, 0, 255).astype(np.uint8)


def quantize_f32_s8(p, x) -> np.ndarray:
    """TFLM's AffineQuantize: round(x / scale) in float32, halves away from zero, plus the zero
    point, saturated; NaN gives the zero point (TFLM's cast of it is undefined)."""
    with np.errstate(over="ignore"):  # overflows to infinity, which saturates
        v = (np.asarray(x, np.float32) / np.float32(p["scale"])).astype(np.float64)  # the float32 quotient
    v = np.nan_to_num(v, nan=0.0, posinf=1024.0, neginf=-1024.0)
    a = np.abs(v)
    r = np.copysign(np.floor(a + 0.5), v)  # in float64, exactly round half away for a float32 a
    return np.clip(np.clip(r, -1024, 1024) + p["zero_point"], -128, 127).astype(np.int8)


def relu_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    out = mbqm(v, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def relu6_s8(p, x) -> np.ndarray:
    return np.clip(np.asarray(x).astype(np.int64), p["lower"], p["upper"]).astype(np.int8)


def leaky_relu_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    identity = mbqm(v, p["identity_multiplier"], p["identity_shift"])
    alpha = np.sign(p["alpha_multiplier"]) * mbqm(v, abs(p["alpha_multiplier"]), p["alpha_shift"])
    return np.clip(np.where(v >= 0, identity, alpha) + p["output_zp"], -128, 127).astype(np.int8)


def tanh_q4(a) -> np.ndarray:
    """gemmlowp tanh() of a Q4.27 value; result Q0.31.  With e = exp(-2|a|) (the raw -|a| read as
    Q5.26), tanh|a| = (1 - e) / (1 + e) = 2 / (1 + e) - 1: Newton-Raphson for 1 / ((1 + e) / 2) in Q2.29,
    minus one, back to Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    e = exp_on_negative_values(-np.abs(a), 5)
    s = e + I32_MAX
    d = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # (1 + e) / 2, rounded half away
    x = wrap_int32(1515870810 + srdhm(d, -1010580540))
    for _ in range(3):
        x = wrap_int32(x + saturating_left_shift(srdhm(x, wrap_int32((1 << 29) - srdhm(d, x))), 2))
    t = saturating_left_shift(wrap_int32(x - (1 << 29)), 2)
    return np.where(a == 0, 0, np.where(a < 0, -t, t))


def tanh_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    radius = p["input_range_radius"]
    q4 = mbqm(np.clip(v, -radius, radius), p["input_multiplier"], p["input_left_shift"])
    y = np.clip(rounding_divide_by_pot(tanh_q4(q4), 24), -128, 127)
    return np.where(v <= -radius, -128, np.where(v >= radius, 127, y)).astype(np.int8)


def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul for int16 (the -32768^2 case never occurs here)."""
    ab = np.asarray(a, dtype=np.int64) * b
    num = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    return np.where(num >= 0, num >> 15, -((-num) >> 15))


def hard_swish_s8(p, x) -> np.ndarray:
    """x * relu6(x + 3) / 6 in TFLM's int16 fixed point: the input at scale in/128, a 'reluish'
    factor in [0, 1] (Q0.15, -3..3 mapped onto it with saturation) times the input on the output scale."""
    hires = (np.asarray(x).astype(np.int64) - p["input_zp"]) * 128
    on_output = _srdhm16(hires, p["output_multiplier"])
    e = p["reluish_shift"]
    r = hires
    if e > 0:  # all but one bit of the left shift before the multiply, the last one after
        r = np.clip(r << (e - 1), -32768, 32767)
    r = _srdhm16(r, p["reluish_multiplier"])
    if e > 0:
        r = np.clip(r * 2, -32768, 32767)
    elif e < 0:
        r = rounding_divide_by_pot(r, -e)
    factor = (r + 32768) >> 1
    prod = factor * on_output
    prod = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))  # doubling high mul, truncated
    out = rounding_divide_by_pot(prod, -p["output_shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def _inv_sqrt(v: int) -> tuple[int, int]:
    """TFLM GetInvSqrtQuantizedMultiplierExp(v, -1) for v >= 2: (multiplier, left shift)."""
    shift, pairs = 11, 0
    while v << (2 * pairs) < (1 << 27):  # v * 4^pairs in [2^27, 2^29)
        pairs += 1
    shift -= pairs
    v <<= 2 * pairs
    half = int(rounding_divide_by_pot(v >> 1, 1))
    y = 1 << 28  # 1.0 in Q3.28
    for _ in range(5):
        y3 = int(saturating_left_shift(srdhm(srdhm(y, y), y), 6))
        y = int(saturating_left_shift(wrap_int32(srdhm(3 << 27, y) - srdhm(half, y3)), 3))
    y = int(srdhm(y, 1518500250))
    if shift < 0:
        y, shift = int(wrap_int32(y << -shift)), 0
    return y, -shift


def rsqrt_s8(p, x) -> np.ndarray:
    """1 / sqrt(x) per input value; the zero point (and, unlike TFLM, which stops, anything below) gives 127."""
    table = np.full(256, 127, dtype=np.int64)
    for q in range(-128, 128):
        v = q - p["input_zp"]
        if v > 0:
            m, s = _inv_sqrt(v) if v > 1 else (I32_MAX, 0)
            data = mbqm(1, m, s + 20)
            table[q + 128] = np.clip(mbqm(data, p["multiplier"], p["shift"] - 20) + p["output_zp"], -128, 127)
    return table[np.asarray(x).astype(np.int64) + 128].astype(np.int8)


_LIMITS = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def lut_lookup_s16(value, lut) -> np.ndarray:
    """TFLM LUTLookup(int16): entry value // 128 + 256, plus the slope to the next entry (an int16
    in TFLM) times value mod 128, rounded."""
    v = np.asarray(value, np.int64)
    lut = np.asarray(lut, np.int64)
    index = 256 + (v >> 7)
    slope = (lut[index + 1] - lut[index]).astype(np.int16).astype(np.int64)
    return (lut[index] + ((slope * (v & 0x7F) + 64) >> 7)).astype(np.int16)


def softmax_s8_s16(p, x) -> np.ndarray:
    """TFLM's Softmax<int8, int16>: the int8 arithmetic, exponent 31 - 16 + bits over unit."""
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= p["diff_min"]
    e = exp_on_negative_values(mbqm(np.where(used, diff, 0), p["input_multiplier"], p["input_left_shift"]), 5)
    out = np.empty_like(x)
    for r in range(len(x)):
        s = int(wrap_int32(np.where(used[r], rounding_divide_by_pot(e[r], 12), 0).sum())) & 0xFFFFFFFF
        clz = 32 - s.bit_length()
        scale = one_over_one_plus_x_for_x_in_0_1(int(wrap_int32(((s << clz) & 0xFFFFFFFF) - (1 << 31))))
        y = rounding_divide_by_pot(srdhm(scale, e[r]), 12 - clz + 31 - 16) - 32768
        out[r] = np.where(used[r], np.clip(y, -32768, 32767), -32768)
    return out.astype(np.int16)


def softmax_s16(p, x) -> np.ndarray:
    """TFLM's SoftmaxInt16: exp from the LUT of the difference to the row maximum mapped onto
    [-65535, 0] and recentred by 32767; 1 / sum from the reciprocal LUT of the normalised sum."""
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    scaled = mbqm(x - x.max(axis=1, keepdims=True), p["input_multiplier"], p["input_left_shift"])
    e = lut_lookup_s16(np.clip(scaled + 32767, -32768, 32767), p["exp_lut"]).astype(np.int64)
    out = np.empty_like(x)
    for r in range(len(x)):
        total = int(e[r].sum())
        headroom_plus_one = 32 - total.bit_length()
        shifted = ((total << (headroom_plus_one - 1)) + (1 << 13)) >> 14
        reciprocal = int(
            lut_lookup_s16(np.clip(shifted - (1 << 15) - (1 << 16), -32768, 32767), p["one_over_one_plus_x_lut"])
        )
        right = 31 - headroom_plus_one
        out[r] = np.clip((e[r] * reciprocal + (1 << (right - 1))) >> right, 0, 32767)
    return out.astype(np.int16)


def requantize(p, x, output_dtype: str) -> np.ndarray:
    """TFLM's Requantize between integer types."""
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, *_LIMITS[output_dtype]).astype(output_dtype)


def dequantize_s16(p, x) -> np.ndarray:
    """(float)((double)scale * (q - zp))."""
    return (np.float64(p["scale"]) * (np.asarray(x).astype(np.float64) - p["zero_point"])).astype(np.float32)


def quantize_f32_s16(p, x) -> np.ndarray:
    """TFLM's AffineQuantize to int16: round(x / scale) in float32, halves away from zero; NaN gives
    the zero point."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = (np.asarray(x, np.float32) / np.float32(p["scale"])).astype(np.float64)
    v = np.clip(np.nan_to_num(v, nan=0.0, posinf=65536.0, neginf=-65536.0), -65536, 65536)
    r = np.copysign(np.floor(np.abs(v) + 0.5), v)
    return np.clip(r + p["zero_point"], -32768, 32767).astype(np.int16)


def relu_s16(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int16)


def relu6_s16(p, x) -> np.ndarray:
    return np.clip(np.asarray(x), p["lower"], p["upper"]).astype(np.int16)


def leaky_relu_s16(p, x) -> np.ndarray:
    """x >= 0 by the identity multiplier, below by alpha's (its magnitude, the sign applied after)."""
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    a = p["alpha_multiplier"]
    below = np.sign(a) * mbqm(v, abs(a), p["alpha_shift"])
    out = p["output_zp"] + np.where(v >= 0, mbqm(v, p["identity_multiplier"], p["identity_shift"]), below)
    return np.clip(out, -32768, 32767).astype(np.int16)
