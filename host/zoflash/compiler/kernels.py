"""Parameter builders for the static C int8 kernels (firmware_templates/runtime/zo_kernels*.c).

Each builder `NAME_params(**kw)` returns a dict whose keys are exactly the fields of the C struct
`zo_NAME_params_t` (see zo_kernels.h).  Values are Python ints, numpy int32 arrays for the
`const int32_t *` fields, and one Python float (DEQUANTIZE's scale, a float32 value).  Builders
compute what TFLite Micro computes at prepare time, so the kernels are bit-exact with TFLM's
reference kernels; anything a kernel cannot reproduce exactly raises ValueError with the reason.
The op registry (compiler/ops/) pairs each builder with its C function and params struct.

Shapes exclude the batch dimension where the argument name says hwc/hw; scales are the float32
values stored in the model (Python floats), zero points are ints.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from zoflash.compiler import quant

# Shifts above this would make the C left shift undefined; they need scale ratios >= 2^30,
# which no sane model has.
_MAX_LEFT_SHIFT = 30
# The int32 dot products are exact (no overflow at all) below this accumulation depth; TFLM
# itself documents 2^16 as the limit of its int32 accumulators.
_MAX_ACCUM_DEPTH = 1 << 16


# ------------------------------------------------------------------------------------ helpers

def _int(name: str, v, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")
    return v


def _dims(name: str, shape, n: int | None = None, allow_zero: bool = False) -> tuple[int, ...]:
    try:
        dims = tuple(_int(f"{name}[{i}]", d, 0 if allow_zero else 1) for i, d in enumerate(shape))
    except TypeError:
        raise ValueError(f"{name} must be a sequence of integers, got {shape!r}") from None
    if n is not None and len(dims) != n:
        raise ValueError(f"{name} must have {n} dimensions, got {dims}")
    return dims


def _zp(name: str, v) -> int:
    return _int(name, v, quant.INT8_MIN, quant.INT8_MAX)


def _scale(name: str, v) -> float:
    try:
        s = quant.f32(float(v))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not (s > 0.0) or math.isinf(s):
        raise ValueError(f"{name} must be a positive finite float32, got {v!r}")
    return s


def _check_shift(what: str, shift: int) -> int:
    if shift > _MAX_LEFT_SHIFT:
        raise ValueError(f"{what}: the scale ratio needs a left shift of {shift} (> {_MAX_LEFT_SHIFT}); "
                         "the quantization parameters are not usable")
    return shift


def _padding(padding) -> str:
    p = str(padding).upper()
    if p not in ("SAME", "VALID"):
        raise ValueError(f"padding must be SAME or VALID, got {padding!r}")
    return p


def _pair(name: str, v) -> tuple[int, int]:
    d = _dims(name, v)
    if len(d) != 2:
        raise ValueError(f"{name} must be a pair of positive integers, got {v!r}")
    return d


def _per_channel_multipliers(input_scale: float, filter_scales: Sequence[float], output_scale: float,
                             channels: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """TFLM PopulateConvolutionQuantizationParams: per channel, in double,
    input_scale * filter_scale / output_scale (a single scale is broadcast)."""
    scales = [_scale(f"filter_scales[{i}]", s) for i, s in enumerate(filter_scales)]
    if len(scales) not in (1, channels):
        raise ValueError(f"{what}: {len(scales)} filter scales for {channels} output channels "
                         "(need 1 or one per channel)")
    mult = np.zeros(channels, dtype=np.int32)
    shift = np.zeros(channels, dtype=np.int32)
    for c in range(channels):
        fs = scales[c] if len(scales) > 1 else scales[0]
        real = input_scale * fs / output_scale  # doubles, left to right, as TFLM
        m, s = quant.quantize_multiplier(real)
        mult[c], shift[c] = m, _check_shift(f"{what} channel {c}", s)
    return mult, shift


def _conv_geometry(what, input_hwc, output_hwc, kernel_hw, stride_hw, dilation_hw, padding):
    (out_h, out_w), (pad_h, pad_w) = quant.compute_padding_hw(stride_hw, dilation_hw, input_hwc[:2],
                                                              kernel_hw, padding)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"{what}: a {kernel_hw[0]}x{kernel_hw[1]} window (dilation {dilation_hw}) "
                         f"does not fit a {input_hwc[0]}x{input_hwc[1]} input with {padding} padding")
    if (out_h, out_w) != tuple(output_hwc[:2]):
        raise ValueError(f"{what}: output is {output_hwc[0]}x{output_hwc[1]} but {padding} padding with "
                         f"stride {tuple(stride_hw)} gives {out_h}x{out_w}")
    return pad_h, pad_w


# ----------------------------------------------------------------------- convolution family

def conv2d_params(*, input_hwc, output_hwc, filter_ohwi, stride_hw, dilation_hw, padding,
                  input_scale, input_zp, filter_scales, output_scale, output_zp, activation) -> dict:
    """CONV_2D (also grouped: filter_c = input_c / groups)."""
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    f_oc, kh, kw, fc = _dims("filter_ohwi", filter_ohwi, 4)
    if f_oc != oc:
        raise ValueError(f"conv2d: filter has {f_oc} output channels, output has {oc}")
    if c % fc:
        raise ValueError(f"conv2d: input channels {c} are not a multiple of filter channels {fc}")
    groups = c // fc
    if oc % groups:
        raise ValueError(f"conv2d: {oc} output channels cannot be split into {groups} groups")
    if kh * kw * fc > _MAX_ACCUM_DEPTH:
        raise ValueError(f"conv2d: accumulation depth {kh * kw * fc} exceeds {_MAX_ACCUM_DEPTH}")
    stride, dil, pad = _pair("stride_hw", stride_hw), _pair("dilation_hw", dilation_hw), _padding(padding)
    pad_h, pad_w = _conv_geometry("conv2d", (h, w, c), (oh, ow, oc), (kh, kw), stride, dil, pad)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, oc, "conv2d")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(input_h=h, input_w=w, input_c=c, output_h=oh, output_w=ow, output_c=oc,
                filter_h=kh, filter_w=kw, filter_c=fc, stride_h=stride[0], stride_w=stride[1],
                dilation_h=dil[0], dilation_w=dil[1], pad_h=pad_h, pad_w=pad_w,
                input_zp=in_zp, output_zp=out_zp, act_min=act_min, act_max=act_max,
                multiplier=mult, shift=shift)


def depthwise_conv2d_params(*, input_hwc, output_hwc, filter_1hwo, stride_hw, dilation_hw, padding,
                            depth_multiplier, input_scale, input_zp, filter_scales, output_scale,
                            output_zp, activation) -> dict:
    """DEPTHWISE_CONV_2D: output channel oc = ic * depth_multiplier + m."""
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    one, kh, kw, f_oc = _dims("filter_1hwo", filter_1hwo, 4)
    dm = _int("depth_multiplier", depth_multiplier, 1)
    if one != 1:
        raise ValueError(f"depthwise_conv2d: filter shape must be [1, h, w, channels], got {tuple(filter_1hwo)}")
    if f_oc != oc or oc != c * dm:
        raise ValueError(f"depthwise_conv2d: filter channels {f_oc}, output channels {oc}, input channels {c} "
                         f"and depth multiplier {dm} are inconsistent (need filter = output = input * multiplier)")
    stride, dil, pad = _pair("stride_hw", stride_hw), _pair("dilation_hw", dilation_hw), _padding(padding)
    pad_h, pad_w = _conv_geometry("depthwise_conv2d", (h, w, c), (oh, ow, oc), (kh, kw), stride, dil, pad)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, oc, "depthwise_conv2d")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(input_h=h, input_w=w, input_c=c, output_h=oh, output_w=ow, output_c=oc,
                filter_h=kh, filter_w=kw, depth_multiplier=dm, stride_h=stride[0], stride_w=stride[1],
                dilation_h=dil[0], dilation_w=dil[1], pad_h=pad_h, pad_w=pad_w,
                input_zp=in_zp, output_zp=out_zp, act_min=act_min, act_max=act_max,
                multiplier=mult, shift=shift)


def fully_connected_params(*, input_elements, weights_shape, input_scale, input_zp, filter_scales,
                           output_scale, output_zp, activation) -> dict:
    """FULLY_CONNECTED.  The multiplier is input_scale * filter_scale / output_scale in double, per
    channel or per tensor (a single scale is broadcast), as CONV_2D. Older TFLM rounded the
    per-tensor product to float32 first; the TFLM we check against (the tflite-micro wheel) widens
    both scales before multiplying, which changes a few outputs by 1 LSB (MLPerf Tiny's AD model)."""
    n = _int("input_elements", input_elements, 1)
    units, depth = _dims("weights_shape", weights_shape, 2)
    if n % depth:
        raise ValueError(f"fully_connected: {n} input elements are not a multiple of depth {depth}")
    if depth > _MAX_ACCUM_DEPTH:
        raise ValueError(f"fully_connected: accumulation depth {depth} exceeds {_MAX_ACCUM_DEPTH}")
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, units, "fully_connected")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(rows=n // depth, depth=depth, units=units, input_zp=in_zp, output_zp=out_zp,
                act_min=act_min, act_max=act_max, multiplier=mult, shift=shift)


def pool_params(*, input_hwc, output_hwc, filter_hw, stride_hw, padding, output_scale, output_zp,
                activation) -> dict:
    """AVERAGE_POOL_2D and MAX_POOL_2D.  TFLM requires input and output to share the scale
    (|difference| <= 1e-6) and zero point; the caller checks that."""
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    if oc != c:
        raise ValueError(f"pool: output has {oc} channels, input has {c}")
    fh, fw = _pair("filter_hw", filter_hw)
    stride, pad = _pair("stride_hw", stride_hw), _padding(padding)
    pad_h, pad_w = _conv_geometry("pool", (h, w, c), (oh, ow, oc), (fh, fw), stride, (1, 1), pad)
    out_s, out_zp = _scale("output_scale", output_scale), _zp("output_zp", output_zp)
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(input_h=h, input_w=w, channels=c, output_h=oh, output_w=ow, filter_h=fh, filter_w=fw,
                stride_h=stride[0], stride_w=stride[1], pad_h=pad_h, pad_w=pad_w,
                act_min=act_min, act_max=act_max)


# ---------------------------------------------------------------------------- broadcasting

def _broadcast_layout(what: str, shape1, shape2, out_shape) -> dict:
    """Walk order for a broadcasting binary op: the output as (at most) a 4-D box plus each input's
    element strides along it.  Size-1 output dimensions are dropped and neighbouring dimensions with
    the same broadcast pattern merged, so shapes of any rank work if they merge down to 4-D."""
    s1 = _dims("input1_shape", shape1)
    s2 = _dims("input2_shape", shape2)
    so = _dims("output_shape", out_shape)
    try:
        expect = tuple(np.broadcast_shapes(s1, s2))
    except ValueError:
        raise ValueError(f"{what}: shapes {s1} and {s2} do not broadcast") from None
    def strip(s):  # leading 1s do not change the data layout
        s = tuple(s)
        while s and s[0] == 1:
            s = s[1:]
        return s

    if strip(expect) != strip(so):
        raise ValueError(f"{what}: inputs {s1} and {s2} broadcast to {expect}, but the output is {so}")
    rank = max(len(s1), len(s2), len(so))
    a = (1,) * (rank - len(s1)) + s1
    b = (1,) * (rank - len(s2)) + s2
    o = (1,) * (rank - len(so)) + so
    merged: list[list] = []  # [size, a_broadcast, b_broadcast]
    for k in range(rank):
        if o[k] == 1:
            continue
        pat = (a[k] == 1, b[k] == 1)
        if merged and (merged[-1][1], merged[-1][2]) == pat:
            merged[-1][0] *= o[k]
        else:
            merged.append([o[k], pat[0], pat[1]])
    if len(merged) > 4:
        raise ValueError(f"{what}: the broadcast of {s1} and {s2} needs {len(merged)} loop dimensions "
                         "(at most 4 are supported)")
    broadcast = any(m[1] or m[2] for m in merged)
    merged = [[1, True, True]] * (4 - len(merged)) + merged

    def strides(idx: int) -> list[int]:
        out, step = [0] * 4, 1
        for k in range(3, -1, -1):
            size, bc = merged[k][0], merged[k][idx]
            out[k] = 0 if bc else step
            if not bc:
                step *= size
        return out

    st1, st2 = strides(1), strides(2)
    d = dict(out_d0=merged[0][0], out_d1=merged[1][0], out_d2=merged[2][0], out_d3=merged[3][0])
    for k in range(4):
        d[f"in1_s{k}"] = st1[k]
    for k in range(4):
        d[f"in2_s{k}"] = st2[k]
    d["broadcast"] = int(broadcast)
    return d


def add_params(*, input1_shape, input2_shape, output_shape, input1_scale, input1_zp, input2_scale,
               input2_zp, output_scale, output_zp, activation) -> dict:
    """ADD (int8): TFLM's left shift of 20 and three multipliers smaller than one."""
    layout = _broadcast_layout("add", input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp("input1_zp", input1_zp), _zp("input2_zp", input2_zp), _zp("output_zp", output_zp)
    left_shift = 20
    twice_max = 2.0 * max(s1, s2)
    real1 = s1 / twice_max
    real2 = s2 / twice_max
    real_out = twice_max / (float(1 << left_shift) * so)
    try:
        m1, sh1 = quant.quantize_multiplier_smaller_than_one_exp(real1)
        m2, sh2 = quant.quantize_multiplier_smaller_than_one_exp(real2)
        mo, sho = quant.quantize_multiplier_smaller_than_one_exp(real_out)
    except ValueError:
        raise ValueError(f"add: output scale {so} is too small for input scales {s1} and {s2} "
                         "(TFLM needs 2 * max(input scales) / (2^20 * output scale) < 1)") from None
    act_min, act_max = quant.activation_range(activation, so, zpo)
    return dict(layout, input1_zp=zp1, input2_zp=zp2, output_zp=zpo, left_shift=left_shift,
                input1_multiplier=m1, input1_shift=sh1, input2_multiplier=m2, input2_shift=sh2,
                output_multiplier=mo, output_shift=sho, act_min=act_min, act_max=act_max)


def mul_params(*, input1_shape, input2_shape, output_shape, input1_scale, input1_zp, input2_scale,
               input2_zp, output_scale, output_zp, activation) -> dict:
    """MUL (int8): one multiplier input1_scale * input2_scale / output_scale (double)."""
    layout = _broadcast_layout("mul", input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp("input1_zp", input1_zp), _zp("input2_zp", input2_zp), _zp("output_zp", output_zp)
    m, s = quant.quantize_multiplier(s1 * s2 / so)
    _check_shift("mul", s)
    act_min, act_max = quant.activation_range(activation, so, zpo)
    return dict(layout, input1_zp=zp1, input2_zp=zp2, output_zp=zpo, output_multiplier=m, output_shift=s,
                act_min=act_min, act_max=act_max)


# ----------------------------------------------------------------------------- data movement

def pad_params(*, input_shape, paddings, pad_value) -> dict:
    """PAD / PADV2 with a constant value (up to 5-D, like TFLM)."""
    shape = _dims("input_shape", input_shape)
    if len(shape) > 5:
        raise ValueError(f"pad: {len(shape)}-D input; at most 5 dimensions are supported (as in TFLM)")
    pads = [tuple(p) for p in paddings]
    if len(pads) != len(shape) or any(len(p) != 2 for p in pads):
        raise ValueError(f"pad: need one (before, after) pair per input dimension, got {paddings!r}")
    pads = [(_int("padding", b, 0), _int("padding", a, 0)) for b, a in pads]
    value = _zp("pad_value", pad_value)
    extra = 5 - len(shape)
    shape5 = (1,) * extra + shape
    pads5 = [(0, 0)] * extra + pads
    d = {f"in_d{k}": shape5[k] for k in range(5)}
    d.update({f"before{k}": pads5[k][0] for k in range(5)})
    d.update({f"after{k}": pads5[k][1] for k in range(5)})
    d["pad_value"] = value
    return d


def concat_params(*, input_shapes, axis) -> dict:
    """CONCATENATION.  TFLM (int8) requires every input to have exactly the output's scale and zero
    point (it copies bytes); it also limits inputs to 10 and ranks to 6, which is enforced here."""
    shapes = [_dims(f"input_shapes[{i}]", s, allow_zero=True) for i, s in enumerate(input_shapes)]
    if not shapes:
        raise ValueError("concat: no inputs")
    if len(shapes) > 10:
        raise ValueError(f"concat: {len(shapes)} inputs; TFLM supports at most 10")
    rank = len(shapes[0])
    if rank > 6:
        raise ValueError(f"concat: {rank}-D inputs; TFLM supports at most 6 dimensions")
    ax = _int("axis", axis)
    ax = ax + rank if ax < 0 else ax
    if not 0 <= ax < rank:
        raise ValueError(f"concat: axis {axis} out of range for {rank}-D inputs")
    for i, s in enumerate(shapes):
        if len(s) != rank or any(s[k] != shapes[0][k] for k in range(rank) if k != ax):
            raise ValueError(f"concat: input {i} shape {s} does not match {shapes[0]} outside axis {ax}")
    outer = math.prod(shapes[0][:ax])
    inner = math.prod(shapes[0][ax + 1:])
    chunk = np.array([s[ax] * inner for s in shapes], dtype=np.int32)
    return dict(num_inputs=len(shapes), outer=outer, chunk=chunk)


# --------------------------------------------------------------------------------- reductions

def mean_params(*, input_shape, axes, input_scale, input_zp, output_scale, output_zp) -> dict:
    """MEAN (int8).  TFLM (reduce_common.cc) always takes reference_ops::QuantizedMeanOrSum for int8:
    int32 sum over the reduced elements, minus zp * count, then MultiplyByQuantizedMultiplier with
    the input/output multiplier adjusted for 1/count (shift = min(floor(log2 count), 32,
    31 + shift); multiplier = (multiplier << shift) // count), plus output zp, clamped to int8.
    keep_dims does not change the data.  Supported: the reduced axes (ignoring size-1 dimensions)
    form one contiguous run."""
    shape = _dims("input_shape", input_shape)
    rank = len(shape)
    ax = set()
    for a in axes:
        a = _int("axis", a)
        a2 = a + rank if a < 0 else a
        if not 0 <= a2 < rank:
            raise ValueError(f"mean: axis {a} out of range for a {rank}-D input")
        ax.add(a2)
    if not ax:
        raise ValueError("mean: no reduction axes")
    count = math.prod(shape[a] for a in ax)
    kept = [(shape[k], k in ax) for k in range(rank) if shape[k] != 1]
    red_pos = [i for i, (_, r) in enumerate(kept) if r]
    if red_pos and red_pos != list(range(red_pos[0], red_pos[-1] + 1)):
        raise ValueError(f"mean: reduced axes {sorted(ax)} of shape {shape} are not contiguous "
                         "(only one contiguous run of reduced axes is supported)")
    if red_pos:
        outer = math.prod(d for d, _ in kept[:red_pos[0]])
        inner = math.prod(d for d, _ in kept[red_pos[-1] + 1:])
    else:
        outer, inner = 1, math.prod(shape)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = quant.quantize_multiplier(in_s / out_s)
    adj = min(count.bit_length() - 1, 32, 31 + shift)
    mult = (mult << adj) // count
    shift -= adj
    _check_shift("mean", shift)
    return dict(outer=outer, reduce=count, inner=inner, input_zp=in_zp, output_zp=out_zp,
                multiplier=int(mult), shift=int(shift))


# ------------------------------------------------------------------------------ nonlinearities

_SOFTMAX_OUTPUT_SCALE = 1.0 / 256.0


def softmax_params(*, outer, depth, beta, input_scale, input_zp, output_scale, output_zp) -> dict:
    """SOFTMAX int8 -> int8 over the last dimension.  TFLM requires output zero point -128 and
    output scale exactly 1/256.  It also CHECK-fails at run time if a row's sum of exps reaches
    2^28 (about 512 entries equal to the row maximum), so very deep rows can abort in TFLM."""
    outer = _int("outer", outer, 1)
    depth = _int("depth", depth, 1)
    in_s = _scale("input_scale", input_scale)
    _zp("input_zp", input_zp)
    if _zp("output_zp", output_zp) != -128:
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


def logistic_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LOGISTIC int8 -> int8.  TFLM requires output zero point -128 and then assumes an output
    scale of 1/256 without checking it: the result is bit-exact with TFLM for any output scale,
    but only means sigmoid() when the scale is 1/256."""
    size = _int("size", size, 1)
    in_s = _scale("input_scale", input_scale)
    in_zp = _zp("input_zp", input_zp)
    _scale("output_scale", output_scale)
    if _zp("output_zp", output_zp) != -128:
        raise ValueError(f"logistic: output zero point must be -128 (TFLM), got {output_zp}")
    mult, left_shift, radius = quant.logistic_input_params(in_s)
    return dict(size=size, input_zp=in_zp, input_range_radius=radius, input_multiplier=mult,
                input_left_shift=left_shift)


def requantize_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """QUANTIZE int8 -> int8: multiplier input_scale / output_scale (double)."""
    size = _int("size", size, 1)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    _check_shift("requantize", s)
    return dict(size=size, input_zp=_zp("input_zp", input_zp), output_zp=_zp("output_zp", output_zp),
                multiplier=m, shift=s)


def dequantize_params(*, size, scale, zp) -> dict:
    """DEQUANTIZE int8 -> float32.  TFLM computes (float)((double)scale * (q - zp)); the double
    product is exact, so the kernel's float32 product is the same number.  `scale` is returned
    as the float32 value (a Python float that round-trips through '%.9g')."""
    return dict(size=_int("size", size, 1), zero_point=_zp("zp", zp), scale=_scale("scale", scale))


# ==== reductions, resizing, transposed convolution (zo_kernels_resize.c) ====================

_MAX_RANK = 6  # the C odometer of REDUCE_MAX (TFLM's RuntimeShape holds 6 dimensions too)


def reduce_max_params(*, input_shape, axes) -> dict:
    """REDUCE_MAX int8.  TFLM requires input and output to share scale and zero point (the caller
    checks), so the maximum needs no requantization.  Neighbouring dimensions that are both
    reduced or both kept merge; each input dimension gets its output stride (0 when reduced)."""
    shape = _dims("input_shape", input_shape)
    if not 1 <= len(shape) <= _MAX_RANK:
        raise ValueError(f"reduce_max: rank {len(shape)} (1 to {_MAX_RANK} supported)")
    reduced = set()
    for a in axes:
        a = _int("axis", a, -len(shape), len(shape) - 1)
        reduced.add(a % len(shape))
    if not reduced:
        raise ValueError("reduce_max: no axes")
    merged: list[list] = []  # [size, is reduced]
    for k, d in enumerate(shape):
        if merged and merged[-1][1] == (k in reduced):
            merged[-1][0] *= d
        else:
            merged.append([d, k in reduced])
    strides, step = [0] * len(merged), 1
    for k in range(len(merged) - 1, -1, -1):
        if not merged[k][1]:
            strides[k], step = step, step * merged[k][0]
    return dict(rank=len(merged), output_size=step, dims=np.array([m[0] for m in merged], dtype=np.int32),
                out_stride=np.array(strides, dtype=np.int32))


def arg_max_params(*, input_shape, axis) -> dict:
    """ARG_MAX int8: the input as [outer][axis][inner]."""
    shape = _dims("input_shape", input_shape)
    a = _int("axis", axis, -len(shape), len(shape) - 1) % len(shape)
    return dict(outer=int(np.prod(shape[:a], dtype=np.int64)), axis=shape[a],
                inner=int(np.prod(shape[a + 1:], dtype=np.int64)))


def _resize_geometry(what, input_hwc, output_hwc, align_corners, half_pixel_centers):
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    if oc != c:
        raise ValueError(f"{what}: output has {oc} channels, input has {c}")
    if align_corners and half_pixel_centers:
        raise ValueError(f"{what}: align_corners and half_pixel_centers cannot both be set (TFLM)")
    return h, w, c, oh, ow


def _scale_10(in_size: int, out_size: int, align_corners: bool) -> int:
    """TFLM's 1/1024-unit scale, rounded to nearest."""
    if align_corners and out_size > 1:
        return ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    return ((1 << 10) * in_size + out_size // 2) // out_size


def resize_bilinear_params(*, input_hwc, output_hwc, align_corners, half_pixel_centers) -> dict:
    """RESIZE_BILINEAR int8, TFLM's integer path (ResizeBilinearInteger).  Input and output share
    the quantization: TFLM interpolates the int8 values without requantizing."""
    h, w, c, oh, ow = _resize_geometry("resize_bilinear", input_hwc, output_hwc, align_corners, half_pixel_centers)
    sh, sw = _scale_10(h, oh, align_corners), _scale_10(w, ow, align_corners)
    for size, out, s in ((h, oh, sh), (w, ow, sw)):
        # The last row's (column's) position, and the lower neighbour TFLM reads there.
        last = (out - 1) * s + (s // 2 - (1 << 9) if half_pixel_centers else 0)
        if last >= (1 << 30) or last // (1 << 10) > size - 1:
            raise ValueError(f"resize_bilinear: resizing {size} to {out} makes TFLM read outside the input "
                             "(its 1/1024 scale rounds up too far)")
    return dict(input_h=h, input_w=w, channels=c, output_h=oh, output_w=ow, height_scale_10=sh,
                width_scale_10=sw, half_pixel_centers=int(bool(half_pixel_centers)))


def _nearest_index(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLM GetNearestNeighbor for every output position, in float32 as TFLM computes it."""
    f = np.float32
    if align_corners and out_size > 1:
        scale = f(in_size - 1) / f(out_size - 1)
    else:
        scale = f(in_size) / f(out_size)
    pos = (np.arange(out_size, dtype=np.float32) + f(0.5 if half_pixel_centers else 0.0)) * scale
    if align_corners:  # TfLiteRound: halves away from zero (positions are >= 0)
        index = np.floor(pos + f(0.5))
    else:
        index = np.floor(pos)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    if half_pixel_centers:
        index = np.maximum(index, 0)
    return index.astype(np.int32)


def resize_nearest_params(*, input_hwc, output_hwc, align_corners, half_pixel_centers) -> dict:
    """RESIZE_NEAREST_NEIGHBOR int8: the source row and column tables (TFLM copies int8 values, so
    input and output share the quantization)."""
    h, w, c, oh, ow = _resize_geometry("resize_nearest", input_hwc, output_hwc, align_corners, half_pixel_centers)
    return dict(input_h=h, input_w=w, channels=c, output_h=oh, output_w=ow,
                y_index=_nearest_index(h, oh, align_corners, half_pixel_centers),
                x_index=_nearest_index(w, ow, align_corners, half_pixel_centers))


def transpose_conv_params(*, input_hwc, output_hwc, filter_ohwi, stride_hw, padding, input_scale, input_zp,
                          filter_scales, output_scale, output_zp, activation) -> dict:
    """TRANSPOSE_CONV int8 with per-channel weights.  TFLM computes the padding as for a
    convolution of the *output* size with the filter (dilation 1), and the multipliers as CONV_2D."""
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    f_oc, kh, kw, fc = _dims("filter_ohwi", filter_ohwi, 4)
    if f_oc != oc or fc != c:
        raise ValueError(f"transpose_conv: filter {(f_oc, kh, kw, fc)} for {c} input and {oc} output channels")
    if kh * kw * c > _MAX_ACCUM_DEPTH:
        raise ValueError(f"transpose_conv: accumulation depth {kh * kw * c} exceeds {_MAX_ACCUM_DEPTH}")
    stride, pad = _pair("stride_hw", stride_hw), _padding(padding)
    (ih, iw), (pad_h, pad_w) = quant.compute_padding_hw(stride, (1, 1), (oh, ow), (kh, kw), pad)
    if (ih, iw) != (h, w):
        raise ValueError(f"transpose_conv: a {oh}x{ow} output with a {kh}x{kw} window, stride {stride} and "
                         f"{pad} padding needs a {ih}x{iw} input, not {h}x{w}")
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, oc, "transpose_conv")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(input_h=h, input_w=w, input_c=c, output_h=oh, output_w=ow, output_c=oc, filter_h=kh,
                filter_w=kw, stride_h=stride[0], stride_w=stride[1], pad_h=pad_h, pad_w=pad_w,
                input_zp=in_zp, output_zp=out_zp, act_min=act_min, act_max=act_max, multiplier=mult, shift=shift)
# ==== end of reductions, resizing, transposed convolution ===================================
