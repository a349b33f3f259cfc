"""FULLY_CONNECTED's params (int8 and 16x8): what TFLM computes at prepare time (conventions:
compiler/ops/params_common.py)."""

from __future__ import annotations

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    MAX_ACCUM_DEPTH,
    checked_dims,
    checked_int,
    checked_scale,
    checked_zp,
    per_channel_multipliers,
    weighted_16x8,
)


def fully_connected_params(
    *, input_elements, weights_shape, input_scale, input_zp, filter_scales, output_scale, output_zp, activation
) -> dict:
    """FULLY_CONNECTED.  The multiplier is input_scale * filter_scale / output_scale in double, per
    channel or per tensor (a single scale is broadcast), as CONV_2D. Older TFLM rounded the
    per-tensor product to float32 first; the TFLM we check against (the tflite-micro wheel) widens
    both scales before multiplying, which changes a few outputs by 1 LSB (MLPerf Tiny's AD model)."""
    n = checked_int("input_elements", input_elements, 1)
    units, depth = checked_dims("weights_shape", weights_shape, 2)
    if n % depth:
        raise ValueError(f"fully_connected: {n} input elements are not a multiple of depth {depth}")
    if depth > MAX_ACCUM_DEPTH:
        raise ValueError(f"fully_connected: accumulation depth {depth} exceeds {MAX_ACCUM_DEPTH}")
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    in_zp, out_zp = checked_zp("input_zp", input_zp), checked_zp("output_zp", output_zp)
    mult, shift = per_channel_multipliers(in_s, filter_scales, out_s, units, "fully_connected")
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


def fully_connected_s16_params(**kw) -> dict:
    """16x8 FULLY_CONNECTED: fully_connected_params' arguments."""
    return weighted_16x8("fully_connected", fully_connected_params, kw)
