"""The activation family's params (SOFTMAX, LOG_SOFTMAX, LOGISTIC, TANH, RELU*, HARD_SWISH, RSQRT, QUANTIZE,
DEQUANTIZE; the int16 variants and their LUTs): what TFLM computes at prepare time (conventions:
compiler/ops/params_common.py)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    INT16_MAX,
    INT16_MIN,
    check_shift,
    checked_int,
    checked_scale,
    checked_zp,
    checked_zp16,
)

_SOFTMAX_OUTPUT_SCALE = 1.0 / 256.0


def softmax_params(*, outer, depth, beta, input_scale, input_zp, output_scale, output_zp) -> dict:
    """SOFTMAX int8 -> int8 over the last dimension.  TFLM requires output zero point -128 and
    output scale exactly 1/256.  It also CHECK-fails at run time if a row's sum of exps reaches
    2^28 (about 512 entries equal to the row maximum), so very deep rows can abort in TFLM."""
    outer = checked_int("outer", outer, 1)
    depth = checked_int("depth", depth, 1)
    in_s = checked_scale("input_scale", input_scale)
    checked_zp("input_zp", input_zp)
    if checked_zp("output_zp", output_zp) != -128:
        raise ValueError(f"softmax: output zero point must be -128 (TFLM), got {output_zp}")
    if quant.f32(output_scale) != _SOFTMAX_OUTPUT_SCALE:
        raise ValueError(f"softmax: output scale must be exactly 1/256 (TFLM), got {output_scale!r}")
    b = quant.f32(float(beta))
    if not b > 0:
        raise ValueError(f"softmax: beta must be positive, got {beta!r}")
    try:
        mult, left_shift = quant.preprocess_softmax_scaling(b, in_s, 5)
    except ValueError:
        raise ValueError(f"softmax: beta * input scale = {b * in_s!r} is too small (TFLM needs it > 2^-26)") from None
    diff_min = -quant.calculate_input_radius(5, left_shift, 31)
    return dict(outer=outer, depth=depth, input_multiplier=mult, input_left_shift=left_shift, diff_min=diff_min)


_LOG_SOFTMAX_OUTPUT_SCALE = 16.0 / 256.0
_LOG_SOFTMAX_OUTPUT_ZP = 127


def log_softmax_params(*, outer, depth, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LOG_SOFTMAX int8 -> int8 over the last dimension (beta 1).  TFLM requires output zero point
    127 and output scale exactly 16/256; its prepare also derives the reverse scaling of the input
    multiplier (PreprocessLogSoftmaxScalingExp), which bounds the differences that stay above -16."""
    outer = checked_int("outer", outer, 1)
    depth = checked_int("depth", depth, 1)
    in_s = checked_scale("input_scale", input_scale)
    checked_zp("input_zp", input_zp)
    if checked_zp("output_zp", output_zp) != _LOG_SOFTMAX_OUTPUT_ZP:
        raise ValueError(f"log_softmax: output zero point must be 127 (TFLM), got {output_zp}")
    if quant.f32(output_scale) != _LOG_SOFTMAX_OUTPUT_SCALE:
        raise ValueError(f"log_softmax: output scale must be exactly 16/256 (TFLM), got {output_scale!r}")
    try:
        mult, left_shift = quant.preprocess_softmax_scaling(1.0, in_s, 5)
    except ValueError:
        raise ValueError(f"log_softmax: input scale {in_s!r} is too small (TFLM needs it > 2^-26)") from None
    reverse, reverse_shift = quant.quantize_multiplier_smaller_than_one_exp(float(1 << (31 - left_shift)) / mult)
    diff_min = -quant.calculate_input_radius(5, left_shift, 31)
    return dict(
        outer=outer,
        depth=depth,
        input_multiplier=mult,
        input_left_shift=left_shift,
        reverse_divisor=reverse,
        reverse_shift=reverse_shift,
        diff_min=diff_min,
    )


def logistic_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LOGISTIC int8 -> int8.  TFLM requires output zero point -128 and then assumes an output
    scale of 1/256 without checking it: the result is bit-exact with TFLM for any output scale,
    but only means sigmoid() when the scale is 1/256."""
    size = checked_int("size", size, 1)
    in_s = checked_scale("input_scale", input_scale)
    in_zp = checked_zp("input_zp", input_zp)
    checked_scale("output_scale", output_scale)
    if checked_zp("output_zp", output_zp) != -128:
        raise ValueError(f"logistic: output zero point must be -128 (TFLM), got {output_zp}")
    mult, left_shift, radius = quant.logistic_input_params(in_s)
    return dict(
        size=size, input_zp=in_zp, input_range_radius=radius, input_multiplier=mult, input_left_shift=left_shift
    )


def requantize_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """QUANTIZE int8 -> int8: multiplier input_scale / output_scale (double)."""
    size = checked_int("size", size, 1)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    check_shift("requantize", s)
    return dict(
        size=size,
        input_zp=checked_zp("input_zp", input_zp),
        output_zp=checked_zp("output_zp", output_zp),
        multiplier=m,
        shift=s,
    )


def dequantize_params(*, size, scale, zp) -> dict:
    """DEQUANTIZE int8 -> float32.  TFLM computes (float)((double)scale * (q - zp)); the double
    product is exact, so the kernel's float32 product is the same number.  `scale` is returned
    as the float32 value (a Python float that round-trips through '%.9g')."""
    return dict(size=checked_int("size", size, 1), zero_point=checked_zp("zp", zp), scale=checked_scale("scale", scale))


_ZP_RANGES = {"int8": (quant.INT8_MIN, quant.INT8_MAX), "uint8": (0, 255)}


def requantize_u8_params(*, size, input_scale, input_zp, output_scale, output_zp, input_dtype, output_dtype) -> dict:
    """QUANTIZE uint8 -> int8 or int8 -> uint8: TFLM's Requantize with multiplier input_scale /
    output_scale (double), each zero point in its own type's range."""
    size = checked_int("size", size, 1)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    check_shift("requantize", s)
    return dict(
        size=size,
        input_zp=checked_int("input_zp", input_zp, *_ZP_RANGES[input_dtype]),
        output_zp=checked_int("output_zp", output_zp, *_ZP_RANGES[output_dtype]),
        multiplier=m,
        shift=s,
    )


def quantize_f32_params(*, size, output_scale, output_zp) -> dict:
    """QUANTIZE float32 -> int8: TFLM divides by the output scale as a float32 (the double it keeps
    is the float32 scale widened), rounds half away from zero and adds the zero point."""
    return dict(
        size=checked_int("size", size, 1),
        zero_point=checked_zp("output_zp", output_zp),
        scale=checked_scale("output_scale", output_scale),
    )


def relu_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RELU (int8): rescale by input/output scale (float32), clamp below at the output zero point."""
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(quant.f32(in_s / out_s))
    check_shift("relu", s)
    zpo = checked_zp("output_zp", output_zp)
    return dict(
        size=checked_int("size", size, 1),
        input_zp=checked_zp("input_zp", input_zp),
        output_zp=zpo,
        multiplier=m,
        shift=s,
        act_min=zpo,
        act_max=quant.INT8_MAX,
    )


def relu6_params(*, size, input_scale, input_zp) -> dict:
    """RELU6 (int8): TFLM clamps the stored values to the input's 0 and round(6 / scale) + zero
    point; it does not rescale, so the output quantization is not used."""
    in_s, zp = checked_scale("input_scale", input_scale), checked_zp("input_zp", input_zp)
    six = int(quant.round_half_away(float(np.float32(6.0) / np.float32(in_s)))) + zp
    return dict(size=checked_int("size", size, 1), lower=zp, upper=min(max(six, quant.INT8_MIN), quant.INT8_MAX))


def leaky_relu_params(*, size, alpha, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LEAKY_RELU (int8): identity multiplier input/output scale and alpha multiplier
    input scale * alpha / output scale, both in float32; a negative alpha keeps its sign."""
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    a = quant.f32(float(alpha))
    if not math.isfinite(a):
        raise ValueError(f"leaky_relu: alpha must be finite, got {alpha!r}")
    mi, si = quant.quantize_multiplier(quant.f32(in_s / out_s))
    ma, sa = quant.quantize_multiplier(abs(quant.f32(quant.f32(in_s * a) / out_s)))
    check_shift("leaky_relu", max(si, sa))
    return dict(
        size=checked_int("size", size, 1),
        input_zp=checked_zp("input_zp", input_zp),
        output_zp=checked_zp("output_zp", output_zp),
        identity_multiplier=mi,
        identity_shift=si,
        alpha_multiplier=-ma if a < 0 else ma,
        alpha_shift=sa,
    )


def tanh_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """TANH (int8): LOGISTIC's input multiplier; TFLM writes Q0.7 (scale 1/128, zero point 0)
    without checking the output tensor, so the result is bit-exact for any output quantization
    but only means tanh() for that one."""
    checked_scale("output_scale", output_scale)
    checked_zp("output_zp", output_zp)
    try:
        mult, left_shift, radius = quant.logistic_input_params(checked_scale("input_scale", input_scale))
    except ValueError as exc:
        raise ValueError(f"tanh: {exc}".replace("logistic ", "")) from None
    return dict(
        size=checked_int("size", size, 1),
        input_zp=checked_zp("input_zp", input_zp),
        input_range_radius=radius,
        input_multiplier=mult,
        input_left_shift=left_shift,
    )


def _int16_multiplier(real: float) -> tuple[int, int]:
    """TFLM QuantizeMultiplier then DownScaleInt32ToInt16Multiplier."""
    m, s = quant.quantize_multiplier(real)
    return (32767 if m >= quant.INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16), s


def hard_swish_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """HARD_SWISH (int8): TFLM's 16-bit output and reluish multipliers from the input scale / 128,
    in float32."""
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    hires = quant.f32(in_s / 128.0)
    mo, so = _int16_multiplier(quant.f32(hires / out_s))
    if so > 0:
        raise ValueError(f"hard_swish: input scale {in_s} / output scale {out_s} must be at most 128 (TFLM)")
    if so < -15:
        raise ValueError(
            f"hard_swish: input scale {in_s} / output scale {out_s} is below 2^-9 "
            "(the 16-bit output shift would exceed 15)"
        )
    mr, sr = _int16_multiplier(quant.f32(hires / quant.f32(3.0 / 32768.0)))
    if not -15 <= sr <= 30:
        raise ValueError(f"hard_swish: input scale {in_s} is out of the supported range")
    return dict(
        size=checked_int("size", size, 1),
        input_zp=checked_zp("input_zp", input_zp),
        output_zp=checked_zp("output_zp", output_zp),
        output_multiplier=mo,
        output_shift=so,
        reluish_multiplier=mr,
        reluish_shift=sr,
    )


def rsqrt_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RSQRT (int8): multiplier 1 / (sqrt(input scale) * output scale), the product in float32."""
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(1.0 / float(np.sqrt(np.float32(in_s)) * np.float32(out_s)))
    if not -11 <= s <= 30:  # the kernel applies shift - 20, which must stay a right shift <= 31
        raise ValueError(f"rsqrt: 1 / (sqrt(input scale {in_s}) * output scale {out_s}) is out of range")
    return dict(
        size=checked_int("size", size, 1),
        input_zp=checked_zp("input_zp", input_zp),
        output_zp=checked_zp("output_zp", output_zp),
        multiplier=m,
        shift=s,
    )


def requantize_s16_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """QUANTIZE int16 -> int8 (the int16 input of keyword models): TFLM's Requantize with multiplier
    input_scale / output_scale (double)."""
    size = checked_int("size", size, 1)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    return dict(
        size=size,
        input_zp=checked_int("input_zp", input_zp, -32768, 32767),
        output_zp=checked_zp("output_zp", output_zp),
        multiplier=m,
        shift=check_shift("requantize", s),
    )


_INT_ZP_RANGES = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (INT16_MIN, INT16_MAX),
    "int32": (quant.INT32_MIN, quant.INT32_MAX),
}


def near_f32(value: float, target: float, tolerance: float) -> bool:
    """TF_LITE_ENSURE_NEAR on floats: |value - target| <= tolerance, in float32."""
    f = np.float32
    return bool(abs(f(value) - f(target)) <= f(tolerance))


def _round_f32(v: np.float32) -> np.float32:
    """TfLiteRound on a float: halves away from zero (exact in float64 for any float32)."""
    a = math.floor(abs(float(v)) + 0.5)
    return np.float32(math.copysign(a, float(v)))


def lut_int16(input_scale: float, input_zp: int, output_scale: float, output_zp: int, transform) -> np.ndarray:
    """TFLM's LUTPopulate<int16_t>: 512 samples of `transform` over the int16 input range, each
    biased by half the interpolation error at the midpoint, plus the end point; float32 arithmetic
    throughout, as TFLM does it.  `transform` maps a float32 to a float32."""
    f = np.float32
    in_s, out_s = f(input_scale), f(output_scale)
    input_min, input_max = in_s * f(INT16_MIN - input_zp), in_s * f(INT16_MAX - input_zp)
    output_min, output_max = out_s * f(INT16_MIN - output_zp), out_s * f(INT16_MAX - output_zp)
    steps = 512
    step = (input_max - input_min) / f(steps)
    half_step = step / f(2)
    inv = f(65536) / (output_max - output_min)
    lut = np.zeros(steps + 1, np.int16)
    for i in range(steps):
        x = input_min + f(i) * step
        val, mid, nxt = transform(x), transform(x + half_step), transform(input_min + f(i + 1) * step)
        sample = _round_f32(val * inv)
        interpolated = _round_f32((nxt * inv + _round_f32(val * inv)) / f(2))
        bias = _round_f32((interpolated - _round_f32(mid * inv)) / f(2))
        lut[i] = int(min(max(sample - bias, f(INT16_MIN)), f(INT16_MAX)))
    lut[steps] = int(min(max(_round_f32(transform(input_max) * inv), f(INT16_MIN)), f(INT16_MAX)))
    return lut


def _exp_f32(x: np.float32) -> np.float32:
    return np.float32(math.exp(float(x)))  # std::exp on a float: the correctly rounded value


def _one_over_one_plus_x(x: np.float32) -> np.float32:
    return np.float32(1) / (np.float32(1) + x)


_RANGE = np.float32(65535)  # int16 max - min


@lru_cache(maxsize=1)
def _softmax_luts() -> tuple[np.ndarray, np.ndarray]:
    """The tables TFLM builds for every int16 softmax: exp over [-10, 0], 1 / (1 + x) over [0, 1]."""
    f = np.float32
    return (
        lut_int16(f(10) / _RANGE, INT16_MAX, f(2) / _RANGE, 0, _exp_f32),
        lut_int16(f(1) / _RANGE, INT16_MIN, f(2) / _RANGE, 0, _one_over_one_plus_x),
    )


def softmax_s8_s16_params(*, outer, depth, beta, input_scale, input_zp, output_scale, output_zp) -> dict:
    """SOFTMAX int8 -> int16: the int8 kernel's parameters; TFLM requires output zero point -32768
    and output scale 1/65536 (within 0.1%)."""
    if checked_zp16("output_zp", output_zp) != INT16_MIN:
        raise ValueError(f"softmax: an int16 output needs zero point -32768 (TFLM), got {output_zp}")
    if not near_f32(output_scale, 1.0 / 65536, 0.001 / 65536):
        raise ValueError(f"softmax: an int16 output of an int8 input needs scale 1/65536 (TFLM), got {output_scale!r}")
    return softmax_params(
        outer=outer,
        depth=depth,
        beta=beta,
        input_scale=input_scale,
        input_zp=input_zp,
        output_scale=1.0 / 256,
        output_zp=-128,
    )


def softmax_s16_params(*, outer, depth, beta, input_scale, input_zp, output_scale, output_zp) -> dict:
    """SOFTMAX int16 -> int16: zero points 0, output scale 1/32768 (within 0.1%); the difference
    to the row maximum is rescaled by input_scale * beta / (10 / 65535) so that [-65535, 0] is
    [-10, 0], the range of the exp table."""
    outer, depth = checked_int("outer", outer, 1), checked_int("depth", depth, 1)
    in_s = checked_scale("input_scale", input_scale)
    if checked_zp16("input_zp", input_zp) != 0 or checked_zp16("output_zp", output_zp) != 0:
        raise ValueError(f"softmax: int16 zero points must be 0 (TFLM), got {input_zp} and {output_zp}")
    if not near_f32(output_scale, 1.0 / 32768, 0.001 / 32768):
        raise ValueError(f"softmax: an int16 output needs scale 1/32768 (TFLM), got {output_scale!r}")
    b = quant.f32(float(beta))
    if not b > 0:
        raise ValueError(f"softmax: beta must be positive, got {beta!r}")
    mult, shift = quant.quantize_multiplier(in_s * b / (10.0 / 65535.0))
    exp_lut, reciprocal_lut = _softmax_luts()
    return dict(
        outer=outer,
        depth=depth,
        input_multiplier=mult,
        input_left_shift=check_shift("softmax", shift),
        exp_lut=exp_lut.copy(),
        one_over_one_plus_x_lut=reciprocal_lut.copy(),
    )


def requantize_int_params(*, size, input_scale, input_zp, output_scale, output_zp, input_dtype, output_dtype) -> dict:
    """QUANTIZE between integer types (int8, int16 -> int8, int16, int32): TFLM's Requantize with
    multiplier input_scale / output_scale (double), each zero point in its own type's range."""
    size = checked_int("size", size, 1)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    return dict(
        size=size,
        input_zp=checked_int("input_zp", input_zp, *_INT_ZP_RANGES[input_dtype]),
        output_zp=checked_int("output_zp", output_zp, *_INT_ZP_RANGES[output_dtype]),
        multiplier=m,
        shift=check_shift("requantize", s),
    )


def dequantize_s16_params(*, size, scale, zp) -> dict:
    """DEQUANTIZE int16 -> float32: (float)((double)scale * (q - zp)), exact in float32 too."""
    return dict(
        size=checked_int("size", size, 1), zero_point=checked_zp16("zp", zp), scale=checked_scale("scale", scale)
    )


def quantize_f32_s16_params(*, size, output_scale, output_zp) -> dict:
    """QUANTIZE float32 -> int16: round(x / scale) in float32, halves away from zero, plus the zero point."""
    return dict(
        size=checked_int("size", size, 1),
        zero_point=checked_zp16("output_zp", output_zp),
        scale=checked_scale("output_scale", output_scale),
    )


def relu_s16_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RELU on int16: relu_params' multiplier, clamped below at the output zero point."""
    zpo = checked_zp16("output_zp", output_zp)
    return dict(
        relu_params(size=size, input_scale=input_scale, input_zp=0, output_scale=output_scale, output_zp=0),
        input_zp=checked_zp16("input_zp", input_zp),
        output_zp=zpo,
        act_min=zpo,
        act_max=INT16_MAX,
    )


def relu6_s16_params(*, size, input_scale, input_zp) -> dict:
    """RELU6 on int16: the stored values clamped to the input's 0 and round(6 / scale) + zero point;
    TFLM stops when that is past int16."""
    in_s, zp = checked_scale("input_scale", input_scale), checked_zp16("input_zp", input_zp)
    six = int(quant.round_half_away(float(np.float32(6.0) / np.float32(in_s)))) + zp
    if six > INT16_MAX:
        raise ValueError(f"relu6: 6 is {six} in the input's quantization, past int16 (TFLM refuses it)")
    return dict(size=checked_int("size", size, 1), lower=zp, upper=six)


def leaky_relu_s16_params(*, size, alpha, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LEAKY_RELU on int16: leaky_relu_params' multipliers, int16 zero points."""
    return dict(
        leaky_relu_params(
            size=size, alpha=alpha, input_scale=input_scale, input_zp=0, output_scale=output_scale, output_zp=0
        ),
        input_zp=checked_zp16("input_zp", input_zp),
        output_zp=checked_zp16("output_zp", output_zp),
    )
