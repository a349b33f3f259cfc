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
from collections.abc import Sequence

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
        raise ValueError(
            f"{what}: the scale ratio needs a left shift of {shift} (> {_MAX_LEFT_SHIFT}); "
            "the quantization parameters are not usable"
        )
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


def _per_channel_multipliers(
    input_scale: float, filter_scales: Sequence[float], output_scale: float, channels: int, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """TFLM PopulateConvolutionQuantizationParams: per channel, in double,
    input_scale * filter_scale / output_scale (a single scale is broadcast)."""
    scales = [_scale(f"filter_scales[{i}]", s) for i, s in enumerate(filter_scales)]
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
        mult[c], shift[c] = m, _check_shift(f"{what} channel {c}", s)
    return mult, shift


def _conv_geometry(what, input_hwc, output_hwc, kernel_hw, stride_hw, dilation_hw, padding):
    (out_h, out_w), (pad_h, pad_w) = quant.compute_padding_hw(stride_hw, dilation_hw, input_hwc[:2], kernel_hw, padding)
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


# ----------------------------------------------------------------------- convolution family


def conv2d_params(
    *,
    input_hwc,
    output_hwc,
    filter_ohwi,
    stride_hw,
    dilation_hw,
    padding,
    input_scale,
    input_zp,
    filter_scales,
    output_scale,
    output_zp,
    activation,
) -> dict:
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
    return dict(
        input_h=h,
        input_w=w,
        input_c=c,
        output_h=oh,
        output_w=ow,
        output_c=oc,
        filter_h=kh,
        filter_w=kw,
        filter_c=fc,
        stride_h=stride[0],
        stride_w=stride[1],
        dilation_h=dil[0],
        dilation_w=dil[1],
        pad_h=pad_h,
        pad_w=pad_w,
        input_zp=in_zp,
        output_zp=out_zp,
        act_min=act_min,
        act_max=act_max,
        multiplier=mult,
        shift=shift,
        folded_bias=None,
    )  # the lowering folds constant weights


def depthwise_conv2d_params(
    *,
    input_hwc,
    output_hwc,
    filter_1hwo,
    stride_hw,
    dilation_hw,
    padding,
    depth_multiplier,
    input_scale,
    input_zp,
    filter_scales,
    output_scale,
    output_zp,
    activation,
) -> dict:
    """DEPTHWISE_CONV_2D: output channel oc = ic * depth_multiplier + m."""
    h, w, c = _dims("input_hwc", input_hwc, 3)
    oh, ow, oc = _dims("output_hwc", output_hwc, 3)
    one, kh, kw, f_oc = _dims("filter_1hwo", filter_1hwo, 4)
    dm = _int("depth_multiplier", depth_multiplier, 1)
    if one != 1:
        raise ValueError(f"depthwise_conv2d: filter shape must be [1, h, w, channels], got {tuple(filter_1hwo)}")
    if f_oc != oc or oc != c * dm:
        raise ValueError(
            f"depthwise_conv2d: filter channels {f_oc}, output channels {oc}, input channels {c} "
            f"and depth multiplier {dm} are inconsistent (need filter = output = input * multiplier)"
        )
    stride, dil, pad = _pair("stride_hw", stride_hw), _pair("dilation_hw", dilation_hw), _padding(padding)
    pad_h, pad_w = _conv_geometry("depthwise_conv2d", (h, w, c), (oh, ow, oc), (kh, kw), stride, dil, pad)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, oc, "depthwise_conv2d")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(
        input_h=h,
        input_w=w,
        input_c=c,
        output_h=oh,
        output_w=ow,
        output_c=oc,
        filter_h=kh,
        filter_w=kw,
        depth_multiplier=dm,
        stride_h=stride[0],
        stride_w=stride[1],
        dilation_h=dil[0],
        dilation_w=dil[1],
        pad_h=pad_h,
        pad_w=pad_w,
        input_zp=in_zp,
        output_zp=out_zp,
        act_min=act_min,
        act_max=act_max,
        multiplier=mult,
        shift=shift,
    )


def fully_connected_params(
    *, input_elements, weights_shape, input_scale, input_zp, filter_scales, output_scale, output_zp, activation
) -> dict:
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
    return dict(
        rows=n // depth,
        depth=depth,
        units=units,
        input_zp=in_zp,
        output_zp=out_zp,
        act_min=act_min,
        act_max=act_max,
        multiplier=mult,
        shift=shift,
        folded_bias=None,
    )


def pool_params(*, input_hwc, output_hwc, filter_hw, stride_hw, padding, output_scale, output_zp, activation) -> dict:
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
    return dict(
        input_h=h,
        input_w=w,
        channels=c,
        output_h=oh,
        output_w=ow,
        filter_h=fh,
        filter_w=fw,
        stride_h=stride[0],
        stride_w=stride[1],
        pad_h=pad_h,
        pad_w=pad_w,
        act_min=act_min,
        act_max=act_max,
    )


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
        raise ValueError(
            f"{what}: the broadcast of {s1} and {s2} needs {len(merged)} loop dimensions (at most 4 are supported)"
        )
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


def add_params(
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
        raise ValueError(
            f"add: output scale {so} is too small for input scales {s1} and {s2} "
            "(TFLM needs 2 * max(input scales) / (2^20 * output scale) < 1)"
        ) from None
    act_min, act_max = quant.activation_range(activation, so, zpo)
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


def mul_params(
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
    """MUL (int8): one multiplier input1_scale * input2_scale / output_scale (double)."""
    layout = _broadcast_layout("mul", input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp("input1_zp", input1_zp), _zp("input2_zp", input2_zp), _zp("output_zp", output_zp)
    m, s = quant.quantize_multiplier(s1 * s2 / so)
    _check_shift("mul", s)
    act_min, act_max = quant.activation_range(activation, so, zpo)
    return dict(
        layout,
        input1_zp=zp1,
        input2_zp=zp2,
        output_zp=zpo,
        output_multiplier=m,
        output_shift=s,
        act_min=act_min,
        act_max=act_max,
    )


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
    inner = math.prod(shapes[0][ax + 1 :])
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
        raise ValueError(
            f"mean: reduced axes {sorted(ax)} of shape {shape} are not contiguous "
            "(only one contiguous run of reduced axes is supported)"
        )
    if red_pos:
        outer = math.prod(d for d, _ in kept[: red_pos[0]])
        inner = math.prod(d for d, _ in kept[red_pos[-1] + 1 :])
    else:
        outer, inner = 1, math.prod(shape)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = quant.quantize_multiplier(in_s / out_s)
    adj = min(count.bit_length() - 1, 32, 31 + shift)
    mult = (mult << adj) // count
    shift -= adj
    _check_shift("mean", shift)
    return dict(
        outer=outer, reduce=count, inner=inner, input_zp=in_zp, output_zp=out_zp, multiplier=int(mult), shift=int(shift)
    )


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
    return dict(
        size=size, input_zp=in_zp, input_range_radius=radius, input_multiplier=mult, input_left_shift=left_shift
    )


def requantize_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """QUANTIZE int8 -> int8: multiplier input_scale / output_scale (double)."""
    size = _int("size", size, 1)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    _check_shift("requantize", s)
    return dict(
        size=size, input_zp=_zp("input_zp", input_zp), output_zp=_zp("output_zp", output_zp), multiplier=m, shift=s
    )


def dequantize_params(*, size, scale, zp) -> dict:
    """DEQUANTIZE int8 -> float32.  TFLM computes (float)((double)scale * (q - zp)); the double
    product is exact, so the kernel's float32 product is the same number.  `scale` is returned
    as the float32 value (a Python float that round-trips through '%.9g')."""
    return dict(size=_int("size", size, 1), zero_point=_zp("zp", zp), scale=_scale("scale", scale))


# ---- begin QUANTIZE at the model's edges (uint8 <-> int8, float32 -> int8) ----

_ZP_RANGES = {"int8": (quant.INT8_MIN, quant.INT8_MAX), "uint8": (0, 255)}


def requantize_u8_params(*, size, input_scale, input_zp, output_scale, output_zp, input_dtype, output_dtype) -> dict:
    """QUANTIZE uint8 -> int8 or int8 -> uint8: TFLM's Requantize with multiplier input_scale /
    output_scale (double), each zero point in its own type's range."""
    size = _int("size", size, 1)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    _check_shift("requantize", s)
    return dict(
        size=size,
        input_zp=_int("input_zp", input_zp, *_ZP_RANGES[input_dtype]),
        output_zp=_int("output_zp", output_zp, *_ZP_RANGES[output_dtype]),
        multiplier=m,
        shift=s,
    )


def quantize_f32_params(*, size, output_scale, output_zp) -> dict:
    """QUANTIZE float32 -> int8: TFLM divides by the output scale as a float32 (the double it keeps
    is the float32 scale widened), rounds half away from zero and adds the zero point."""
    return dict(
        size=_int("size", size, 1), zero_point=_zp("output_zp", output_zp), scale=_scale("output_scale", output_scale)
    )


# ---- end QUANTIZE at the model's edges ----

# ==================================================================== data movement (movement ops)
# TRANSPOSE, SLICE and STRIDED_SLICE become one strided copy; PACK is a CONCATENATION of chunks;
# UNPACK, SPLIT and SPLIT_V one split. TFLM copies bytes for all of them (no requantization).

_COPY_RANK = 6  # zo_strided_copy_params_t's dimensions


def _row_strides(shape) -> list[int]:
    """Element strides of a row-major array."""
    return [math.prod(shape[k + 1 :]) for k in range(len(shape))]


def _strided_copy(what: str, out_dims, in_strides, offset: int) -> dict:
    """output[i] = input[offset + sum(i_k * in_strides_k)], right-aligned to 6-D."""
    if len(out_dims) > _COPY_RANK:
        raise ValueError(f"{what}: {len(out_dims)}-D; at most {_COPY_RANK} dimensions")
    if 0 not in out_dims and offset + sum((d - 1) * s for d, s in zip(out_dims, in_strides) if s < 0) < 0:
        raise ValueError(f"{what}: reads before the start of the input")
    pad = _COPY_RANK - len(out_dims)
    dims, strides = [1] * pad + list(out_dims), [0] * pad + list(in_strides)
    return {
        **{f"out_d{k}": int(d) for k, d in enumerate(dims)},
        **{f"in_s{k}": int(s) for k, s in enumerate(strides)},
        "offset": int(offset),
    }


def strided_copy_extents(p: dict) -> tuple[int, int]:
    """Bytes zo_strided_copy_s8 reads (up to its highest index) and writes."""
    dims = [p[f"out_d{k}"] for k in range(_COPY_RANK)]
    if 0 in dims:
        return 0, 0
    top = p["offset"] + sum((d - 1) * p[f"in_s{k}"] for k, d in enumerate(dims) if p[f"in_s{k}"] > 0)
    return top + 1, math.prod(dims)


def transpose_params(*, input_shape, perm) -> dict:
    """TRANSPOSE: output dimension k is input dimension perm[k]."""
    shape = _dims("input_shape", input_shape)
    perm = [_int(f"perm[{k}]", a) for k, a in enumerate(perm)]
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"transpose: perm {perm} is not a permutation of the {len(shape)} input dimensions")
    strides = _row_strides(shape)
    return _strided_copy("transpose", [shape[a] for a in perm], [strides[a] for a in perm], 0)


def slice_params(*, input_shape, begin, size) -> dict:
    """SLICE: size -1 runs to the end of the dimension, as TFLM's GetBeginAndSizeVectors."""
    shape = _dims("input_shape", input_shape)
    if len(begin) != len(shape) or len(size) != len(shape):
        raise ValueError(f"slice: begin {list(begin)} and size {list(size)} for a {len(shape)}-D input")
    begin = [_int(f"begin[{k}]", b) for k, b in enumerate(begin)]
    size = [d - b if int(s) == -1 else _int(f"size[{k}]", s) for k, (d, b, s) in enumerate(zip(shape, begin, size))]
    if not all(b >= 0 and s >= 0 and b + s <= d for d, b, s in zip(shape, begin, size)):
        raise ValueError(f"slice: begin {begin} size {size} do not fit in the input {list(shape)}")
    strides = _row_strides(shape)
    return _strided_copy("slice", size, strides, sum(b * s for b, s in zip(begin, strides)))


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def strided_slice_axes(
    *, input_shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask
) -> list[tuple[int, int, int]]:
    """(start, count, stride) per input axis, as TFLM's StridedSliceStartForAxis and
    StridedSliceEndForAxis compute them (clamp to the axis, then the masks override)."""
    shape = _dims("input_shape", input_shape)
    if not len(begin) == len(end) == len(strides) == len(shape):
        raise ValueError(
            f"strided_slice: begin/end/strides of {len(begin)}/{len(end)}/{len(strides)} values "
            f"for a {len(shape)}-D input"
        )
    axes = []
    for k, d in enumerate(shape):
        b, e, s = _int(f"begin[{k}]", begin[k]), _int(f"end[{k}]", end[k]), _int(f"strides[{k}]", strides[k])
        if s == 0:
            raise ValueError(f"strided_slice: stride {k} is 0")
        lo, hi = (0, d) if s > 0 else (-1, d - 1)
        start = _clamp(b + d if b < 0 else b, lo, hi)
        if begin_mask >> k & 1:
            start = 0 if s > 0 else d - 1
        if shrink_axis_mask >> k & 1:
            if not 0 <= start < d:  # TFLM would then write nothing into a 1-element output
                raise ValueError(f"strided_slice: begin {b} of shrunk axis {k} is outside [0, {d})")
            axes.append((start, 1, 1))
            continue
        stop = _clamp(e + d if e < 0 else e, lo, hi)
        if end_mask >> k & 1:
            stop = d if s > 0 else -1
        count = max(0, -(-(stop - start) // s)) if s > 0 else max(0, -(-(start - stop) // -s))
        axes.append((start, count, s))
    return axes


def strided_slice_params(*, input_shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask) -> dict:
    """STRIDED_SLICE (begin, end and strides constant; ellipsis and new-axis masks unsupported)."""
    axes = strided_slice_axes(
        input_shape=input_shape,
        begin=begin,
        end=end,
        strides=strides,
        begin_mask=begin_mask,
        end_mask=end_mask,
        shrink_axis_mask=shrink_axis_mask,
    )
    row = _row_strides(tuple(input_shape))
    return _strided_copy(
        "strided_slice",
        [c for _, c, _ in axes],
        [s * r for (_, _, s), r in zip(axes, row)],
        sum(start * r for (start, _, _), r in zip(axes, row)),
    )


def pack_params(*, input_shape, count, axis) -> dict:
    """PACK `count` inputs of one shape along a new axis (of the output), as zo_concat_s8 does."""
    shape = _dims("input_shape", input_shape)
    count = _int("count", count, 1)
    ax = _int("axis", axis)
    ax = ax + len(shape) + 1 if ax < 0 else ax
    if not 0 <= ax <= len(shape):
        raise ValueError(f"pack: axis {axis} out of range for a {len(shape) + 1}-D output")
    return dict(
        num_inputs=count, outer=math.prod(shape[:ax]), chunk=np.full(count, math.prod(shape[ax:]), dtype=np.int32)
    )


def split_params(*, input_shape, axis, sizes) -> dict:
    """UNPACK, SPLIT and SPLIT_V: output i takes sizes[i] along the axis, as TFLM's SplitImpl."""
    shape = _dims("input_shape", input_shape)
    ax = _int("axis", axis)
    ax = ax + len(shape) if ax < 0 else ax
    if not 0 <= ax < len(shape):
        raise ValueError(f"split: axis {axis} out of range for a {len(shape)}-D input")
    sizes = [_int(f"sizes[{i}]", s, 0) for i, s in enumerate(sizes)]
    if not sizes or sum(sizes) != shape[ax]:
        raise ValueError(f"split: sizes {sizes} do not add up to the input's {shape[ax]} along axis {ax}")
    inner = math.prod(shape[ax + 1 :])
    return dict(
        num_outputs=len(sizes), outer=math.prod(shape[:ax]), chunk=np.array([s * inner for s in sizes], dtype=np.int32)
    )


def gather_params(*, input_shape, axis, indices) -> dict:
    """GATHER with batch_dims 0: TFLM reads input[outer][index][inner]; it does not check indices at
    run time, so every index must be in [0, axis size)."""
    shape = _dims("input_shape", input_shape)
    ax = _int("axis", axis)
    ax = ax + len(shape) if ax < 0 else ax
    if not 0 <= ax < len(shape):
        raise ValueError(f"gather: axis {axis} out of range for a {len(shape)}-D input")
    idx = np.asarray(indices).reshape(-1)
    if idx.size == 0 or idx.min() < 0 or idx.max() >= shape[ax]:
        raise ValueError(f"gather: indices {idx.tolist()} outside [0, {shape[ax]})")
    return dict(
        outer=math.prod(shape[:ax]),
        axis_size=shape[ax],
        inner=math.prod(shape[ax + 1 :]),
        num_indices=int(idx.size),
        indices=idx.astype(np.int32),
    )


# ==================================================================== end of data movement

# ------------------------------------------- element-wise and activation ops --------------------


def sub_params(
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
    """SUB (int8): ADD's left shift of 20 and three multipliers < 1, but TFLM computes them in
    float32 (then widens to double), where ADD uses double."""
    layout = _broadcast_layout("sub", input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp("input1_zp", input1_zp), _zp("input2_zp", input2_zp), _zp("output_zp", output_zp)
    left_shift = 20
    twice_max = quant.f32(2.0 * max(s1, s2))
    try:
        m1, sh1 = quant.quantize_multiplier_smaller_than_one_exp(quant.f32(s1 / twice_max))
        m2, sh2 = quant.quantize_multiplier_smaller_than_one_exp(quant.f32(s2 / twice_max))
        mo, sho = quant.quantize_multiplier_smaller_than_one_exp(
            quant.f32(twice_max / quant.f32((1 << left_shift) * so))
        )
    except ValueError:
        raise ValueError(
            f"sub: output scale {so} is too small for input scales {s1} and {s2} "
            "(TFLM needs 2 * max(input scales) / (2^20 * output scale) < 1)"
        ) from None
    act_min, act_max = quant.activation_range(activation, so, zpo)
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


def squared_difference_params(
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
) -> dict:
    """SQUARED_DIFFERENCE (int8): left shift 7, input multipliers < 1 as ADD's (double), and an
    output multiplier (2 max scale)^2 / (2^14 output scale) that may exceed one."""
    layout = _broadcast_layout("squared_difference", input1_shape, input2_shape, output_shape)
    s1, s2 = _scale("input1_scale", input1_scale), _scale("input2_scale", input2_scale)
    so = _scale("output_scale", output_scale)
    zp1, zp2, zpo = _zp("input1_zp", input1_zp), _zp("input2_zp", input2_zp), _zp("output_zp", output_zp)
    left_shift = 7
    twice_max = 2.0 * max(s1, s2)
    m1, sh1 = quant.quantize_multiplier_smaller_than_one_exp(s1 / twice_max)
    m2, sh2 = quant.quantize_multiplier_smaller_than_one_exp(s2 / twice_max)
    mo, sho = quant.quantize_multiplier(twice_max * twice_max / quant.f32((1 << 2 * left_shift) * so))
    _check_shift("squared_difference", sho)
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
        act_min=quant.INT8_MIN,
        act_max=quant.INT8_MAX,
    )


def minmax_params(*, input1_shape, input2_shape, output_shape) -> dict:
    """MINIMUM / MAXIMUM (int8): TFLM compares the stored values, whatever the quantization."""
    return _broadcast_layout("minimum/maximum", input1_shape, input2_shape, output_shape)


def prelu_params(
    *, input_shape, alpha_shape, output_shape, input_scale, input_zp, alpha_scale, alpha_zp, output_scale, output_zp
) -> dict:
    """PRELU (int8): identity multiplier input/output scale, alpha multiplier input * alpha /
    output scale (doubles)."""
    layout = _broadcast_layout("prelu", input_shape, alpha_shape, output_shape)
    si, sa, so = (
        _scale("input_scale", input_scale),
        _scale("alpha_scale", alpha_scale),
        _scale("output_scale", output_scale),
    )
    m1, s1 = quant.quantize_multiplier(si / so)
    m2, s2 = quant.quantize_multiplier(si * sa / so)
    _check_shift("prelu", max(s1, s2))
    return dict(
        layout,
        input_zp=_zp("input_zp", input_zp),
        alpha_zp=_zp("alpha_zp", alpha_zp),
        output_zp=_zp("output_zp", output_zp),
        identity_multiplier=m1,
        identity_shift=s1,
        alpha_multiplier=m2,
        alpha_shift=s2,
    )


def relu_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RELU (int8): rescale by input/output scale (float32), clamp below at the output zero point."""
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(quant.f32(in_s / out_s))
    _check_shift("relu", s)
    zpo = _zp("output_zp", output_zp)
    return dict(
        size=_int("size", size, 1),
        input_zp=_zp("input_zp", input_zp),
        output_zp=zpo,
        multiplier=m,
        shift=s,
        act_min=zpo,
        act_max=quant.INT8_MAX,
    )


def relu6_params(*, size, input_scale, input_zp) -> dict:
    """RELU6 (int8): TFLM clamps the stored values to the input's 0 and round(6 / scale) + zero
    point; it does not rescale, so the output quantization is not used."""
    in_s, zp = _scale("input_scale", input_scale), _zp("input_zp", input_zp)
    six = int(quant.round_half_away(float(np.float32(6.0) / np.float32(in_s)))) + zp
    return dict(size=_int("size", size, 1), lower=zp, upper=min(max(six, quant.INT8_MIN), quant.INT8_MAX))


def leaky_relu_params(*, size, alpha, input_scale, input_zp, output_scale, output_zp) -> dict:
    """LEAKY_RELU (int8): identity multiplier input/output scale and alpha multiplier
    input scale * alpha / output scale, both in float32; a negative alpha keeps its sign."""
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    a = quant.f32(float(alpha))
    if not math.isfinite(a):
        raise ValueError(f"leaky_relu: alpha must be finite, got {alpha!r}")
    mi, si = quant.quantize_multiplier(quant.f32(in_s / out_s))
    ma, sa = quant.quantize_multiplier(abs(quant.f32(quant.f32(in_s * a) / out_s)))
    _check_shift("leaky_relu", max(si, sa))
    return dict(
        size=_int("size", size, 1),
        input_zp=_zp("input_zp", input_zp),
        output_zp=_zp("output_zp", output_zp),
        identity_multiplier=mi,
        identity_shift=si,
        alpha_multiplier=-ma if a < 0 else ma,
        alpha_shift=sa,
    )


def tanh_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """TANH (int8): LOGISTIC's input multiplier; TFLM writes Q0.7 (scale 1/128, zero point 0)
    without checking the output tensor, so the result is bit-exact for any output quantization
    but only means tanh() for that one."""
    _scale("output_scale", output_scale)
    _zp("output_zp", output_zp)
    try:
        mult, left_shift, radius = quant.logistic_input_params(_scale("input_scale", input_scale))
    except ValueError as exc:
        raise ValueError(f"tanh: {exc}".replace("logistic ", "")) from None
    return dict(
        size=_int("size", size, 1),
        input_zp=_zp("input_zp", input_zp),
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
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
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
        size=_int("size", size, 1),
        input_zp=_zp("input_zp", input_zp),
        output_zp=_zp("output_zp", output_zp),
        output_multiplier=mo,
        output_shift=so,
        reluish_multiplier=mr,
        reluish_shift=sr,
    )


def rsqrt_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """RSQRT (int8): multiplier 1 / (sqrt(input scale) * output scale), the product in float32."""
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(1.0 / float(np.sqrt(np.float32(in_s)) * np.float32(out_s)))
    if not -11 <= s <= 30:  # the kernel applies shift - 20, which must stay a right shift <= 31
        raise ValueError(f"rsqrt: 1 / (sqrt(input scale {in_s}) * output scale {out_s}) is out of range")
    return dict(
        size=_int("size", size, 1),
        input_zp=_zp("input_zp", input_zp),
        output_zp=_zp("output_zp", output_zp),
        multiplier=m,
        shift=s,
    )


# ---------------------------------------------------- end of element-wise and activation ops ----------

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
    return dict(
        rank=len(merged),
        output_size=step,
        dims=np.array([m[0] for m in merged], dtype=np.int32),
        out_stride=np.array(strides, dtype=np.int32),
    )


def arg_max_params(*, input_shape, axis) -> dict:
    """ARG_MAX int8: the input as [outer][axis][inner]."""
    shape = _dims("input_shape", input_shape)
    a = _int("axis", axis, -len(shape), len(shape) - 1) % len(shape)
    return dict(
        outer=int(np.prod(shape[:a], dtype=np.int64)), axis=shape[a], inner=int(np.prod(shape[a + 1 :], dtype=np.int64))
    )


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
            raise ValueError(
                f"resize_bilinear: resizing {size} to {out} makes TFLM read outside the input "
                "(its 1/1024 scale rounds up too far)"
            )
    return dict(
        input_h=h,
        input_w=w,
        channels=c,
        output_h=oh,
        output_w=ow,
        height_scale_10=sh,
        width_scale_10=sw,
        half_pixel_centers=int(bool(half_pixel_centers)),
    )


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
    return dict(
        input_h=h,
        input_w=w,
        channels=c,
        output_h=oh,
        output_w=ow,
        y_index=_nearest_index(h, oh, align_corners, half_pixel_centers),
        x_index=_nearest_index(w, ow, align_corners, half_pixel_centers),
    )


def transpose_conv_params(
    *,
    input_hwc,
    output_hwc,
    filter_ohwi,
    stride_hw,
    padding,
    input_scale,
    input_zp,
    filter_scales,
    output_scale,
    output_zp,
    activation,
) -> dict:
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
        raise ValueError(
            f"transpose_conv: a {oh}x{ow} output with a {kh}x{kw} window, stride {stride} and "
            f"{pad} padding needs a {ih}x{iw} input, not {h}x{w}"
        )
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    in_zp, out_zp = _zp("input_zp", input_zp), _zp("output_zp", output_zp)
    mult, shift = _per_channel_multipliers(in_s, filter_scales, out_s, oc, "transpose_conv")
    act_min, act_max = quant.activation_range(activation, out_s, out_zp)
    return dict(
        input_h=h,
        input_w=w,
        input_c=c,
        output_h=oh,
        output_w=ow,
        output_c=oc,
        filter_h=kh,
        filter_w=kw,
        stride_h=stride[0],
        stride_w=stride[1],
        pad_h=pad_h,
        pad_w=pad_w,
        input_zp=in_zp,
        output_zp=out_zp,
        act_min=act_min,
        act_max=act_max,
        multiplier=mult,
        shift=shift,
    )


# ==== end of reductions, resizing, transposed convolution ===================================


# ==== sequence ops: SVDF (stateful models) ===================================================


def svdf_params(
    *,
    batches,
    input_size,
    num_filters,
    rank,
    memory_size,
    input_scale,
    input_zp,
    feature_scale,
    state_scale,
    state_zp,
    time_scale,
    output_scale,
    output_zp,
    state_dtype,
) -> dict:
    """SVDF, TFLM's integer path (PrepareSvdf): both effective scales are products and quotients
    of the float32 scales, rounded to float32, then widened to double for QuantizeMultiplier."""
    batches, input_size = _int("batches", batches, 1), _int("input_size", input_size, 1)
    num_filters, rank = _int("num_filters", num_filters, 1), _int("rank", rank, 1)
    memory_size = _int("memory_size", memory_size, 1)
    if num_filters % rank:
        raise ValueError(f"svdf: {num_filters} filters are not a multiple of rank {rank}")
    if max(input_size, memory_size * rank) > _MAX_ACCUM_DEPTH:
        raise ValueError(f"svdf: accumulation depth exceeds {_MAX_ACCUM_DEPTH}")
    if state_dtype not in ("int8", "int16"):
        raise ValueError(f"svdf: the state must be int8 or int16, not {state_dtype}")
    in_s, f_s = _scale("input_scale", input_scale), _scale("feature_scale", feature_scale)
    st_s, t_s = _scale("state_scale", state_scale), _scale("time_scale", time_scale)
    out_s = _scale("output_scale", output_scale)
    lo, hi = (-128, 127) if state_dtype == "int8" else (-32768, 32767)
    st_zp = _int("state_zp", state_zp, lo, hi)
    m1, s1 = quant.quantize_multiplier(quant.f32(quant.f32(in_s * f_s) / st_s))
    m2, s2 = quant.quantize_multiplier(quant.f32(quant.f32(st_s * t_s) / out_s))
    return dict(
        batches=batches,
        input_size=input_size,
        num_filters=num_filters,
        num_units=num_filters // rank,
        rank=rank,
        memory_size=memory_size,
        input_zp=_zp("input_zp", input_zp),
        state_zp=st_zp,
        output_zp=_zp("output_zp", output_zp),
        multiplier_1=m1,
        shift_1=_check_shift("svdf feature", s1),
        multiplier_2=m2,
        shift_2=_check_shift("svdf time", s2),
    )


def requantize_s16_params(*, size, input_scale, input_zp, output_scale, output_zp) -> dict:
    """QUANTIZE int16 -> int8 (the int16 input of keyword models): TFLM's Requantize with multiplier
    input_scale / output_scale (double)."""
    size = _int("size", size, 1)
    in_s, out_s = _scale("input_scale", input_scale), _scale("output_scale", output_scale)
    m, s = quant.quantize_multiplier(in_s / out_s)
    return dict(
        size=size,
        input_zp=_int("input_zp", input_zp, -32768, 32767),
        output_zp=_zp("output_zp", output_zp),
        multiplier=m,
        shift=_check_shift("requantize", s),
    )


# ==== end of sequence ops ====================================================================


# ==== UNIDIRECTIONAL_SEQUENCE_LSTM (int8, int16 cell state) ===========================

_LSTM_GATES = ("input", "forget", "cell", "output")  # the order of every per-gate array
_Q3_12, _Q0_15 = 2.0**-12, 2.0**-15  # TFLM's scales of a gate's pre-activation and of its output


def _checked_log2(x: float) -> int:
    """TFLM's CheckedLog2 in float32 (log(x) * (1 / log 2), rounded half away); TFLM ignores whether
    x is an exact power of two."""
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    return int(quant.round_half_away_f32(x_log2))


def lstm_params(
    *,
    batches,
    time_steps,
    input_size,
    units,
    time_major,
    input_scale,
    input_zp,
    input_weight_scales,
    recurrent_weight_scales,
    hidden_scale,
    hidden_zp,
    cell_scale,
    cell_clip,
) -> dict:
    """UNIDIRECTIONAL_SEQUENCE_LSTM, TFLM's integer path (PrepareGateParametersInteger): each gate's
    two fully connected layers go to int16 Q3.12, input_scale (or hidden_scale) x weight scale / 2^-12
    in double; the gates' outputs are Q0.15; the element-wise products' multipliers are
    (2^-15 x cell_scale or 2^-15) / cell_scale and 2^-30 / hidden_scale, in double. The cell state's
    tanh takes the rounded log2 of cell_scale; the cell clip, when > 0, is cell_clip / cell_scale
    truncated to int16. Weight scales are per gate, in the order input, forget, cell, output."""
    batches, time_steps = _int("batches", batches, 1), _int("time_steps", time_steps, 1)
    input_size, units = _int("input_size", input_size, 1), _int("units", units, 1)
    if max(input_size, units) > _MAX_ACCUM_DEPTH:
        raise ValueError(f"lstm: accumulation depth exceeds {_MAX_ACCUM_DEPTH}")
    in_s, h_s = _scale("input_scale", input_scale), _scale("hidden_scale", hidden_scale)
    c_s = _scale("cell_scale", cell_scale)
    mults = {}
    for what, scales, act_s in (("input", input_weight_scales, in_s), ("recurrent", recurrent_weight_scales, h_s)):
        if len(scales) != 4:
            raise ValueError(f"lstm: {len(scales)} {what} weight scales, one per gate (4) expected")
        ms = [
            quant.quantize_multiplier(act_s * _scale(f"{what}_weight_scales[{g}]", s) / _Q3_12)
            for g, s in enumerate(scales)
        ]
        mults[f"{what}_multiplier"] = np.array([m for m, _ in ms], np.int32)
        mults[f"{what}_shift"] = np.array(
            [_check_shift(f"lstm {what} {_LSTM_GATES[g]} gate", s) for g, (_, s) in enumerate(ms)], np.int32
        )
    forget_m, forget_s = quant.quantize_multiplier(_Q0_15 * c_s / c_s)
    input_m, input_s = quant.quantize_multiplier(_Q0_15 * _Q0_15 / c_s)
    hidden_m, hidden_s = quant.quantize_multiplier(_Q0_15 * _Q0_15 / h_s)
    # Tanh of the cell state: TFLM's int16 tanh reads Q3.12 times 3 (its table spans +-10.7), so a
    # cell scale of 2^power needs the input scaled by 3 x 2^(power + 12).
    shift = 15 + _checked_log2(c_s) - 3
    if not -30 <= shift <= 14:  # beyond, the int32 products of TFLM's tanh overflow or shift out
        raise ValueError(f"lstm: cell scale {c_s:.6g} is outside what the int16 tanh reads")
    tanh_multiplier, tanh_shift = (3 << shift, 0) if shift >= 0 else (3, -shift)
    clip = quant.f32(float(cell_clip))  # a float32 option
    quantized_clip = int(min(max(clip / c_s, -32768.0), 32767.0)) if clip > 0 else 0  # truncated, as C
    return dict(
        batches=batches,
        time_steps=time_steps,
        input_size=input_size,
        units=units,
        time_major=1 if time_major else 0,
        input_zp=_zp("input_zp", input_zp),
        hidden_zp=_zp("hidden_zp", hidden_zp),
        **mults,
        forget_multiplier=forget_m,
        forget_shift=_check_shift("lstm forget x cell", forget_s),
        input_gate_multiplier=input_m,
        input_gate_shift=_check_shift("lstm input x cell gate", input_s),
        hidden_multiplier=hidden_m,
        hidden_shift=_check_shift("lstm output x tanh", hidden_s),
        tanh_multiplier=tanh_multiplier,
        tanh_shift=tanh_shift,
        use_cell_clip=1 if clip > 0 else 0,
        cell_clip=quantized_clip,
    )


# ==== end of UNIDIRECTIONAL_SEQUENCE_LSTM ====================================================

# ==== resource variables: READ_VARIABLE / ASSIGN_VARIABLE ===================================


def copy_params(*, size) -> dict:
    """A variable's bytes copied whole (TFLM's MicroResourceVariables::Read and Assign)."""
    return dict(size=_int("size", size, 1))


# ==== end of resource variables =============================================================


# ==== CAST ==================================================================================

CAST_TYPES = {"int8": 0, "int16": 1, "int32": 2, "float32": 3}  # zo_kernels.h's ZO_CAST_* element types


def cast_params(*, size, input_dtype, output_dtype) -> dict:
    """CAST (TFLM's cast.cc: a C++ static_cast per element); float32 to an integer type is refused
    (undefined out of range in C and C++, so no reproducible reference)."""
    if input_dtype not in CAST_TYPES or output_dtype not in CAST_TYPES:
        raise ValueError(f"cast: {input_dtype} -> {output_dtype}; the types are {', '.join(CAST_TYPES)}")
    if input_dtype == "float32" and output_dtype != "float32":
        raise ValueError(f"cast: float32 -> {output_dtype} is undefined for values out of range")
    return dict(size=_int("size", size, 1), input_type=CAST_TYPES[input_dtype], output_type=CAST_TYPES[output_dtype])


# ==== end of CAST ===========================================================================
