"""The convolution family's params (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV; int8 and 16x8):
what TFLM computes at prepare time (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    MAX_ACCUM_DEPTH,
    TFLM_INT16_FIELD,
    checked_dims,
    checked_int,
    checked_padding,
    checked_padding_values,
    checked_pair,
    checked_scale,
    checked_zp,
    conv_geometry,
    per_channel_multipliers,
    weighted_16x8,
)


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
    h, w, c = checked_dims("input_hwc", input_hwc, 3)
    oh, ow, oc = checked_dims("output_hwc", output_hwc, 3)
    f_oc, kh, kw, fc = checked_dims("filter_ohwi", filter_ohwi, 4)
    if f_oc != oc:
        raise ValueError(f"conv2d: filter has {f_oc} output channels, output has {oc}")
    if c % fc:
        raise ValueError(f"conv2d: input channels {c} are not a multiple of filter channels {fc}")
    groups = c // fc
    if oc % groups:
        raise ValueError(f"conv2d: {oc} output channels cannot be split into {groups} groups")
    if kh * kw * fc > MAX_ACCUM_DEPTH:
        raise ValueError(f"conv2d: accumulation depth {kh * kw * fc} exceeds {MAX_ACCUM_DEPTH}")
    stride, dil, pad = (
        checked_pair("stride_hw", stride_hw, TFLM_INT16_FIELD),
        checked_pair("dilation_hw", dilation_hw, TFLM_INT16_FIELD),
        checked_padding(padding),
    )
    pad_h, pad_w = conv_geometry("conv2d", (h, w, c), (oh, ow, oc), (kh, kw), stride, dil, pad)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    in_zp, out_zp = checked_zp("input_zp", input_zp), checked_zp("output_zp", output_zp)
    mult, shift = per_channel_multipliers(in_s, filter_scales, out_s, oc, "conv2d")
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
    h, w, c = checked_dims("input_hwc", input_hwc, 3)
    oh, ow, oc = checked_dims("output_hwc", output_hwc, 3)
    one, kh, kw, f_oc = checked_dims("filter_1hwo", filter_1hwo, 4)
    dm = checked_int("depth_multiplier", depth_multiplier, 1, TFLM_INT16_FIELD)
    if one != 1:
        raise ValueError(f"depthwise_conv2d: filter shape must be [1, h, w, channels], got {tuple(filter_1hwo)}")
    if f_oc != oc or oc != c * dm:
        raise ValueError(
            f"depthwise_conv2d: filter channels {f_oc}, output channels {oc}, input channels {c} "
            f"and depth multiplier {dm} are inconsistent (need filter = output = input * multiplier)"
        )
    stride, dil, pad = (
        checked_pair("stride_hw", stride_hw, TFLM_INT16_FIELD),
        checked_pair("dilation_hw", dilation_hw, TFLM_INT16_FIELD),
        checked_padding(padding),
    )
    pad_h, pad_w = conv_geometry("depthwise_conv2d", (h, w, c), (oh, ow, oc), (kh, kw), stride, dil, pad)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    in_zp, out_zp = checked_zp("input_zp", input_zp), checked_zp("output_zp", output_zp)
    mult, shift = per_channel_multipliers(in_s, filter_scales, out_s, oc, "depthwise_conv2d")
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
    h, w, c = checked_dims("input_hwc", input_hwc, 3)
    oh, ow, oc = checked_dims("output_hwc", output_hwc, 3)
    f_oc, kh, kw, fc = checked_dims("filter_ohwi", filter_ohwi, 4)
    if f_oc != oc or fc != c:
        raise ValueError(f"transpose_conv: filter {(f_oc, kh, kw, fc)} for {c} input and {oc} output channels")
    if kh * kw * c > MAX_ACCUM_DEPTH:
        raise ValueError(f"transpose_conv: accumulation depth {kh * kw * c} exceeds {MAX_ACCUM_DEPTH}")
    stride, pad = checked_pair("stride_hw", stride_hw, TFLM_INT16_FIELD), checked_padding(padding)
    (ih, iw), pads = quant.compute_padding_hw(stride, (1, 1), (oh, ow), (kh, kw), pad)
    pad_h, pad_w = checked_padding_values("transpose_conv", pads)
    if (ih, iw) != (h, w):
        raise ValueError(
            f"transpose_conv: a {oh}x{ow} output with a {kh}x{kw} window, stride {stride} and "
            f"{pad} padding needs a {ih}x{iw} input, not {h}x{w}"
        )
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    in_zp, out_zp = checked_zp("input_zp", input_zp), checked_zp("output_zp", output_zp)
    mult, shift = per_channel_multipliers(in_s, filter_scales, out_s, oc, "transpose_conv")
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


def conv2d_s16_params(**kw) -> dict:
    """16x8 CONV_2D: conv2d_params' arguments."""
    return weighted_16x8("conv2d", conv2d_params, kw)


def depthwise_conv2d_s16_params(**kw) -> dict:
    """16x8 DEPTHWISE_CONV_2D: depthwise_conv2d_params' arguments."""
    return weighted_16x8("depthwise_conv2d", depthwise_conv2d_params, kw)
