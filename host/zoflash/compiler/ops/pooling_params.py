"""The pooling family's params (AVERAGE_POOL_2D, MAX_POOL_2D; int8 and int16): what TFLM computes at
prepare time (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    INT16_MAX,
    INT16_MIN,
    checked_dims,
    checked_padding,
    checked_pair,
    checked_scale,
    checked_zp,
    checked_zp16,
    conv_geometry,
)


def pool_params(*, input_hwc, output_hwc, filter_hw, stride_hw, padding, output_scale, output_zp, activation) -> dict:
    """AVERAGE_POOL_2D and MAX_POOL_2D.  TFLM requires input and output to share the scale
    (|difference| <= 1e-6) and zero point; the caller checks that."""
    h, w, c = checked_dims("input_hwc", input_hwc, 3)
    oh, ow, oc = checked_dims("output_hwc", output_hwc, 3)
    if oc != c:
        raise ValueError(f"pool: output has {oc} channels, input has {c}")
    fh, fw = checked_pair("filter_hw", filter_hw)
    stride, pad = checked_pair("stride_hw", stride_hw), checked_padding(padding)
    pad_h, pad_w = conv_geometry("pool", (h, w, c), (oh, ow, oc), (fh, fw), stride, (1, 1), pad)
    out_s, out_zp = checked_scale("output_scale", output_scale), checked_zp("output_zp", output_zp)
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


def pool_s16_params(
    *, input_hwc, output_hwc, filter_hw, stride_hw, padding, output_scale, output_zp, activation
) -> dict:
    """AVERAGE_POOL_2D and MAX_POOL_2D on int16: pool_params' geometry, the int16 activation range."""
    p = pool_params(
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
        activation,
        checked_scale("output_scale", output_scale),
        checked_zp16("output_zp", output_zp),
        INT16_MIN,
        INT16_MAX,
    )
    return p
