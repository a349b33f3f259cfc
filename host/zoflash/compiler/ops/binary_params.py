"""The binary element-wise family's params (ADD, SUB, MUL, SQUARED_DIFFERENCE, MINIMUM, MAXIMUM,
PRELU; broadcasting; int8 and int16): what TFLM computes at prepare time (conventions:
compiler/ops/params_common.py)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    INT16_MAX,
    INT16_MIN,
    check_shift,
    checked_dims,
    checked_scale,
    checked_zp,
    checked_zp16,
)


def _broadcast_layout(what: str, shape1, shape2, out_shape) -> dict:
    """Walk order for a broadcasting binary op: the output as (at most) a 4-D box plus each input's
    element strides along it.  Size-1 output dimensions are dropped and neighbouring dimensions with
    the same broadcast pattern merged, so shapes of any rank work if they merge down to 4-D."""
    s1 = checked_dims("input1_shape", shape1)
    s2 = checked_dims("input2_shape", shape2)
    so = checked_dims("output_shape", out_shape)
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
    s1, s2 = checked_scale("input1_scale", input1_scale), checked_scale("input2_scale", input2_scale)
    so = checked_scale("output_scale", output_scale)
    zp1, zp2, zpo = (
        checked_zp("input1_zp", input1_zp),
        checked_zp("input2_zp", input2_zp),
        checked_zp("output_zp", output_zp),
    )
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
    s1, s2 = checked_scale("input1_scale", input1_scale), checked_scale("input2_scale", input2_scale)
    so = checked_scale("output_scale", output_scale)
    zp1, zp2, zpo = (
        checked_zp("input1_zp", input1_zp),
        checked_zp("input2_zp", input2_zp),
        checked_zp("output_zp", output_zp),
    )
    m, s = quant.quantize_multiplier(s1 * s2 / so)
    check_shift("mul", s)
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
    s1, s2 = checked_scale("input1_scale", input1_scale), checked_scale("input2_scale", input2_scale)
    so = checked_scale("output_scale", output_scale)
    zp1, zp2, zpo = (
        checked_zp("input1_zp", input1_zp),
        checked_zp("input2_zp", input2_zp),
        checked_zp("output_zp", output_zp),
    )
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
    s1, s2 = checked_scale("input1_scale", input1_scale), checked_scale("input2_scale", input2_scale)
    so = checked_scale("output_scale", output_scale)
    zp1, zp2, zpo = (
        checked_zp("input1_zp", input1_zp),
        checked_zp("input2_zp", input2_zp),
        checked_zp("output_zp", output_zp),
    )
    left_shift = 7
    twice_max = 2.0 * max(s1, s2)
    m1, sh1 = quant.quantize_multiplier_smaller_than_one_exp(s1 / twice_max)
    m2, sh2 = quant.quantize_multiplier_smaller_than_one_exp(s2 / twice_max)
    mo, sho = quant.quantize_multiplier(twice_max * twice_max / quant.f32((1 << 2 * left_shift) * so))
    check_shift("squared_difference", sho)
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
        checked_scale("input_scale", input_scale),
        checked_scale("alpha_scale", alpha_scale),
        checked_scale("output_scale", output_scale),
    )
    m1, s1 = quant.quantize_multiplier(si / so)
    m2, s2 = quant.quantize_multiplier(si * sa / so)
    check_shift("prelu", max(s1, s2))
    return dict(
        layout,
        input_zp=checked_zp("input_zp", input_zp),
        alpha_zp=checked_zp("alpha_zp", alpha_zp),
        output_zp=checked_zp("output_zp", output_zp),
        identity_multiplier=m1,
        identity_shift=s1,
        alpha_multiplier=m2,
        alpha_shift=s2,
    )


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
    layout = _broadcast_layout(what, input1_shape, input2_shape, output_shape)
    s1, s2 = checked_scale("input1_scale", input1_scale), checked_scale("input2_scale", input2_scale)
    so = checked_scale("output_scale", output_scale)
    zp1, zp2, zpo = (
        checked_zp16("input1_zp", input1_zp),
        checked_zp16("input2_zp", input2_zp),
        checked_zp16("output_zp", output_zp),
    )
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
    """ADD on int16: add_params' arguments."""
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
    p = mul_params(**dict(kw, activation="NONE"))
    p["act_min"], p["act_max"] = quant.activation_range(
        kw["activation"], checked_scale("output_scale", kw["output_scale"]), 0, INT16_MIN, INT16_MAX
    )
    return p
