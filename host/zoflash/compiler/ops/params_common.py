"""What the op families' parameter builders ("params") share: checked arguments, window geometry,
per-channel multipliers, the 16x8 weighted-op wrapper.

A family's params live beside its op entries (compiler/ops/<family>_params.py). Each builder
`NAME_params(**kw)` returns a dict whose keys are exactly the fields of the C struct
`zo_NAME_params_t` (the family's header, included by zo_kernels.h). Values are Python ints, numpy
int32 arrays for the `const int32_t *` fields, and one Python float (DEQUANTIZE's scale, a float32
value). Builders compute what TFLite Micro computes at prepare time, so the C kernels are bit-exact
with TFLM's reference kernels; anything a kernel cannot reproduce exactly raises ValueError with
the reason. The op entries pair each builder with its C function and params struct.

Shapes exclude the batch dimension where the argument name says hwc/hw; scales are the float32
values stored in the model (Python floats), zero points are ints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from zoflash.compiler import quant

# Shifts above this would make the C left shift undefined; they need scale ratios >= 2^30,
# which no sane model has.
MAX_LEFT_SHIFT = 30


# The int32 dot products are exact (no overflow at all) below this accumulation depth; TFLM
# itself documents 2^16 as the limit of its int32 accumulators.
MAX_ACCUM_DEPTH = 1 << 16


def checked_int(name: str, v, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")
    return v


def checked_dims(name: str, shape, n: int | None = None, allow_zero: bool = False) -> tuple[int, ...]:
    try:
        dims = tuple(checked_int(f"{name}[{i}]", d, 0 if allow_zero else 1) for i, d in enumerate(shape))
    except TypeError:
        raise ValueError(f"{name} must be a sequence of integers, got {shape!r}") from None
    if n is not None and len(dims) != n:
        raise ValueError(f"{name} must have {n} dimensions, got {dims}")
    return dims


def checked_zp(name: str, v) -> int:
    return checked_int(name, v, quant.INT8_MIN, quant.INT8_MAX)


def checked_scale(name: str, v) -> float:
    try:
        s = quant.f32(float(v))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not (s > 0.0) or math.isinf(s):
        raise ValueError(f"{name} must be a positive finite float32, got {v!r}")
    return s


def check_shift(what: str, shift: int) -> int:
    if shift > MAX_LEFT_SHIFT:
        raise ValueError(
            f"{what}: the scale ratio needs a left shift of {shift} (> {MAX_LEFT_SHIFT}); "
            "the quantization parameters are not usable"
        )
    return shift


def checked_padding(padding) -> str:
    p = str(padding).upper()
    if p not in ("SAME", "VALID"):
        raise ValueError(f"padding must be SAME or VALID, got {padding!r}")
    return p


def checked_pair(name: str, v, hi: int | None = None) -> tuple[int, int]:
    d = checked_dims(name, v)
    if len(d) != 2:
        raise ValueError(f"{name} must be a pair of positive integers, got {v!r}")
    for i, x in enumerate(d):
        checked_int(f"{name}[{i}]", x, 1, hi)
    return d


# TFLM's ConvParams, DepthwiseParams and PaddingValues (strides, dilations, depth multiplier, padding)
# are int16_t: a larger value wraps in TFLM, so no builder takes one.
TFLM_INT16_FIELD = 32767


def checked_padding_values(what: str, pads) -> tuple[int, int]:
    if max(pads) > TFLM_INT16_FIELD:
        raise ValueError(f"{what}: the padding {pads[0]}x{pads[1]} exceeds {TFLM_INT16_FIELD} (TFLM holds it in int16)")
    return pads


def per_channel_multipliers(
    input_scale: float, filter_scales: Sequence[float], output_scale: float, channels: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """TFLM PopulateConvolutionQuantizationParams: per channel, in double,
    input_scale * filter_scale / output_scale (a single scale is broadcast)."""
    scales = [checked_scale(f"filter_scales[{i}]", s) for i, s in enumerate(filter_scales)]
    if len(scales) not in (1, channels):
        raise ValueError(
            f"{what}: {len(scales)} filter scales for {channels} output channels (need 1 or one per channel)"
        )
    mult = np.zeros(channels, dtype=np.int32)
    shift = np.zeros(channels, dtype=np.int32)
    for c in range(channels):
        fs = scales[c] if len(scales) > 1 else scales[0]
        real = input_scale * fs / output_scale  # doubles, left to right, as TFLM
        m, s = quant.quantize_multiplier(real)
        mult[c], shift[c] = m, check_shift(f"{what} channel {c}", s)
    return mult, shift


def conv_geometry(what, input_hwc, output_hwc, kernel_hw, stride_hw, dilation_hw, padding):
    (out_h, out_w), pads = quant.compute_padding_hw(stride_hw, dilation_hw, input_hwc[:2], kernel_hw, padding)
    pad_h, pad_w = checked_padding_values(what, pads)
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"{what}: a {kernel_hw[0]}x{kernel_hw[1]} window (dilation {dilation_hw}) "
            f"does not fit a {input_hwc[0]}x{input_hwc[1]} input with {padding} padding"
        )
    if (out_h, out_w) != tuple(output_hwc[:2]):
        raise ValueError(
            f"{what}: output is {output_hwc[0]}x{output_hwc[1]} but {padding} padding with "
            f"stride {tuple(stride_hw)} gives {out_h}x{out_w}"
        )
    return pad_h, pad_w


INT16_MIN, INT16_MAX = -32768, 32767


def checked_zp16(name: str, v) -> int:
    return checked_int(name, v, INT16_MIN, INT16_MAX)


def weighted_16x8(what: str, builder, kw: dict) -> dict:
    """The int8 builder's geometry and per-channel multipliers with zero points 0 (TFLM's 16x8 conv
    kernels ignore them; the converter writes 0) and the int16 activation range.  The int64
    MultiplyByQuantizedMultiplier of these kernels takes shifts below 8 only."""
    if kw["input_zp"] != 0 or kw["output_zp"] != 0:
        raise ValueError(f"{what}: int16 zero points must be 0, got {kw['input_zp']} and {kw['output_zp']}")
    p = builder(**dict(kw, activation="NONE"))
    p["act_min"], p["act_max"] = quant.activation_range(
        kw["activation"], checked_scale("output_scale", kw["output_scale"]), 0, INT16_MIN, INT16_MAX
    )
    if int(np.max(p["shift"])) >= 8:
        raise ValueError(
            f"{what}: the scale ratio needs a left shift of {int(np.max(p['shift']))} (TFLM's int16 "
            "kernels take at most 7)"
        )
    return p
