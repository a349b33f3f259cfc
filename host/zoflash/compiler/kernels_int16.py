"""Parameter builders for the int16-activation kernels (16x8 quantization,
firmware_templates/runtime/inference/zo_kernels_int16.c): what TFLM computes at prepare time for
its int16 paths, with the conventions of compiler/kernels.py (keyword-only, dict keys = the C
struct's fields, ValueError for what TFLM would not run)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from zoflash.compiler import kernels, quant
from zoflash.compiler.kernels import _check_shift, _int, _scale, softmax_params

INT16_MIN, INT16_MAX = -32768, 32767
_ZP_RANGES = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (INT16_MIN, INT16_MAX),
    "int32": (quant.INT32_MIN, quant.INT32_MAX),
}


def _zp16(name: str, v) -> int:
    return _int(name, v, INT16_MIN, INT16_MAX)


def near_f32(value: float, target: float, tolerance: float) -> bool:
    """TF_LITE_ENSURE_NEAR on floats: |value - target| <= tolerance, in float32."""
    f = np.float32
    return bool(abs(f(value) - f(target)) <= f(tolerance))


# ------------------------------------------------------------------------------------ LUTs


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


# ----------------------------------------------------------------------------------- softmax


def softmax_s8_s16_params(*, outer, depth, beta, input_scale, input_zp, output_scale, output_zp) -> dict:
    """SOFTMAX int8 -> int16: the int8 kernel's parameters; TFLM requires output zero point -32768
    and output scale 1/65536 (within 0.1%)."""
    if _zp16("output_zp", output_zp) != INT16_MIN:
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
    outer, depth = _int("outer", outer, 1), _int("depth", depth, 1)
    in_s = _scale("input_scale", input_scale)
    if _zp16("input_zp", input_zp) != 0 or _zp16("output_zp", output_zp) != 0:
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
        input_left_shift=_check_shift("softmax", shift),
        exp_lut=exp_lut.copy(),
        one_over_one_plus_x_lut=reciprocal_lut.copy(),
    )


# ---------------------------------------------------------------------------------- quantize


def requantize_int_params(*, size, input_scale, input_zp, output_scale, output_zp, input_dtype, output_dtype) -> dict:
    """QUANTIZE between integer types (int8, int16 -> int8, int16, int32): TFLM's Requantize with
    multiplier input_scale / output_scale (double), each zero point in its own type's range."""
    size = _int("size", size, 1)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    return dict(
        size=size,
        input_zp=_int("input_zp", input_zp, *_ZP_RANGES[input_dtype]),
        output_zp=_int("output_zp", output_zp, *_ZP_RANGES[output_dtype]),
        multiplier=m,
        shift=_check_shift("requantize", s),
    )


def dequantize_s16_params(*, size, scale, zp) -> dict:
    """DEQUANTIZE int16 -> float32: (float)((double)scale * (q - zp)), exact in float32 too."""
    return dict(size=_int("size", size, 1), zero_point=_zp16("zp", zp), scale=_scale("scale", scale))


def quantize_f32_s16_params(*, size, output_scale, output_zp) -> dict:
    """QUANTIZE float32 -> int16: round(x / scale) in float32, halves away from zero, plus the zero point."""
    return dict(
        size=_int("size", size, 1), zero_point=_zp16("output_zp", output_zp), scale=_scale("output_scale", output_scale)
    )


# ------------------------------------------------------- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED


def _weighted_16x8(what: str, builder, kw: dict) -> dict:
    """The int8 builder's geometry and per-channel multipliers with zero points 0 (TFLM's 16x8 conv
    kernels ignore them; the converter writes 0) and the int16 activation range.  The int64
    MultiplyByQuantizedMultiplier of these kernels takes shifts below 8 only."""
    if kw["input_zp"] != 0 or kw["output_zp"] != 0:
        raise ValueError(f"{what}: int16 zero points must be 0, got {kw['input_zp']} and {kw['output_zp']}")
    p = builder(**dict(kw, activation="NONE"))
    p["act_min"], p["act_max"] = quant.activation_range(
        kw["activation"], _scale("output_scale", kw["output_scale"]), 0, INT16_MIN, INT16_MAX
    )
    if int(np.max(p["shift"])) >= 8:
        raise ValueError(
            f"{what}: the scale ratio needs a left shift of {int(np.max(p['shift']))} (TFLM's int16 "
            "kernels take at most 7)"
        )
    return p


def conv2d_s16_params(**kw) -> dict:
    """16x8 CONV_2D: conv2d_params' arguments (kernels.py)."""
    return _weighted_16x8("conv2d", kernels.conv2d_params, kw)


def depthwise_conv2d_s16_params(**kw) -> dict:
    """16x8 DEPTHWISE_CONV_2D: depthwise_conv2d_params' arguments."""
    return _weighted_16x8("depthwise_conv2d", kernels.depthwise_conv2d_params, kw)


def fully_connected_s16_params(**kw) -> dict:
    """16x8 FULLY_CONNECTED: fully_connected_params' arguments."""
    return _weighted_16x8("fully_connected", kernels.fully_connected_params, kw)


# ------------------------------------------------------------------ pooling, PAD, CONCATENATION


def pool_s16_params(
    *, input_hwc, output_hwc, filter_hw, stride_hw, padding, output_scale, output_zp, activation
) -> dict:
    """AVERAGE_POOL_2D and MAX_POOL_2D on int16: pool_params' geometry, the int16 activation range."""
    p = kernels.pool_params(
        input_hwc=input_hwc,
        output_hwc=output_hwc,
        filter_hw=filter_hw,
        stride_hw=stride_hw,
        padding=padding,
        output_scale=output_scale,
        output_zp=0,
        activation="NONE",
    )
    p["act_min"], p["act_max"] = quant.activation_range(
        activation, _scale("output_scale", output_scale), _zp16("output_zp", output_zp), INT16_MIN, INT16_MAX
    )
    return p


def pad_s16_params(*, input_shape, paddings, pad_value) -> dict:
    """PAD / PADV2 on int16: pad_params with an int16 pad value."""
    return dict(
        kernels.pad_params(input_shape=input_shape, paddings=paddings, pad_value=0),
        pad_value=_zp16("pad_value", pad_value),
    )


# ---------------------------------------------------------------------------------- ADD, SUB, MUL


def _add_sub_s16(
    what: str,
    *,
    input1_shape,
    input2_shape,
    output_shape,
    input1_scale,
    input1_zp,
    input2_scale,
    input2_zp,
    output_scale,
    output_zp,
    activation,
) -> dict:
    """TFLM's int16 ADD / SUB prepare: the int8 multipliers with a left shift of 15, in double.  (The
    TFLM source computes SUB's in float32; the tflite-micro wheel, our oracle, matches double: float32
    puts 2 of the 7680 outputs of tests/fixtures/ops/s16_pool_add.tflite off by one.)"""
    layout = kernels._broadcast_layout(what, input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp16("input1_zp", input1_zp), _zp16("input2_zp", input2_zp), _zp16("output_zp", output_zp)
    left_shift = 15
    twice_max = 2.0 * max(s1, s2)
    try:
        m1, sh1 = quant.quantize_multiplier_smaller_than_one_exp(s1 / twice_max)
        m2, sh2 = quant.quantize_multiplier_smaller_than_one_exp(s2 / twice_max)
        mo, sho = quant.quantize_multiplier_smaller_than_one_exp(twice_max / (float(1 << left_shift) * so))
    except ValueError:
        raise ValueError(
            f"{what}: output scale {so} is too small for input scales {s1} and {s2} "
            "(TFLM needs 2 * max(input scales) / (2^15 * output scale) < 1)"
        ) from None
    act_min, act_max = quant.activation_range(activation, so, zpo, INT16_MIN, INT16_MAX)
    return dict(
        layout,
        input1_zp=zp1,
        input2_zp=zp2,
        output_zp=zpo,
        left_shift=left_shift,
        input1_multiplier=m1,
        input1_shift=sh1,
        input2_multiplier=m2,
        input2_shift=sh2,
        output_multiplier=mo,
        output_shift=sho,
        act_min=act_min,
        act_max=act_max,
    )


def add_s16_params(**kw) -> dict:
    """ADD on int16: add_params' arguments (kernels.py)."""
    return _add_sub_s16("add", **kw)


def sub_s16_params(**kw) -> dict:
    """SUB on int16: sub_params' arguments."""
    return _add_sub_s16("sub", **kw)


def mul_s16_params(**kw) -> dict:
    """MUL on int16: mul_params' arguments; TFLM requires zero points 0."""
    if any(kw[k] != 0 for k in ("input1_zp", "input2_zp", "output_zp")):
        raise ValueError(
            f"mul: int16 zero points must be 0 (TFLM), got {kw['input1_zp']}, {kw['input2_zp']} and {kw['output_zp']}"
        )
    p = kernels.mul_params(**dict(kw, activation="NONE"))
    p["act_min"], p["act_max"] = quant.activation_range(
        kw["activation"], _scale("output_scale", kw["output_scale"]), 0, INT16_MIN, INT16_MAX
    )
    return p


# ------------------------------------------------------------------ RELU, RELU6, LEAKY_RELU, MEAN


def relu_s16_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RELU on int16: relu_params' multiplier, clamped below at the output zero point."""
    zpo = _zp16("output_zp", output_zp)
    return dict(
        kernels.relu_params(size=size, input_scale=input_scale, input_zp=0, output_scale=output_scale, output_zp=0),
        input_zp=_zp16("input_zp", input_zp),
        output_zp=zpo,
        act_min=zpo,
        act_max=INT16_MAX,
    )


def relu6_s16_params(*, size, input_scale, input_zp) -> dict:
    """RELU6 on int16: the stored values clamped to the input's 0 and round(6 / scale) + zero point;
    TFLM stops when that is past int16."""
    in_s, zp = _scale("input_scale", input_scale), _zp16("input_zp", input_zp)
    six = int(quant.round_half_away(float(np.float32(6.0) / np.float32(in_s)))) + zp
    if six > INT16_MAX:
        raise ValueError(f"relu6: 6 is {six} in the input's quantization, past int16 (TFLM refuses it)")
    return dict(size=_int("size", size, 1), lower=zp, upper=six)


def leaky_relu_s16_params(*, size, alpha, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LEAKY_RELU on int16: leaky_relu_params' multipliers, int16 zero points."""
    return dict(
        kernels.leaky_relu_params(
            size=size, alpha=alpha, input_scale=input_scale, input_zp=0, output_scale=output_scale, output_zp=0
        ),
        input_zp=_zp16("input_zp", input_zp),
        output_zp=_zp16("output_zp", output_zp),
    )


def mean_s16_params(*, input_shape, axes, input_scale, input_zp, output_scale, output_zp) -> dict:
    """MEAN on int16: mean_params' layout and multiplier folding 1 / count, int16 zero points."""
    return dict(
        kernels.mean_params(
            input_shape=input_shape,
            axes=axes,
            input_scale=input_scale,
            input_zp=0,
            output_scale=output_scale,
            output_zp=0,
        ),
        input_zp=_zp16("input_zp", input_zp),
        output_zp=_zp16("output_zp", output_zp),
    )
