"""CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV."""

from __future__ import annotations

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import convolution_params
from zoflash.compiler.ops.common import (
    INT8_INT16,
    WEIGHTS,
    folded_bias,
    image_4d,
    padding_fits_int16,
    weighted_16x8,
    weights_quantized,
    weights_scales_per_output_channel,
    weights_symmetric,
    window_output_size,
)
from zoflash.compiler.ops.params_common import INT16_MAX
from zoflash.compiler.ops.registry import (
    CONSTANT,
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    build,
    in_range,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

CONV2D = Kernel(
    "conv2d",
    "zo_conv2d_s8",
    "zo_conv2d_params_t",
    convolution_params.conv2d_params,
    ("int8", "int8", "int32", "int8"),
    lambda p: (
        p["input_h"] * p["input_w"] * p["input_c"],
        p["output_c"] * p["filter_h"] * p["filter_w"] * p["filter_c"],
        4 * p["output_c"],
        p["output_h"] * p["output_w"] * p["output_c"],
    ),
    sources=("zo_kernels_conv.c", "zo_kernels_conv_mve.c"),
)
DEPTHWISE_CONV2D = Kernel(
    "depthwise_conv2d",
    "zo_depthwise_conv2d_s8",
    "zo_depthwise_conv2d_params_t",
    convolution_params.depthwise_conv2d_params,
    ("int8", "int8", "int32", "int8"),
    lambda p: (
        p["input_h"] * p["input_w"] * p["input_c"],
        p["filter_h"] * p["filter_w"] * p["output_c"],
        4 * p["output_c"],
        p["output_h"] * p["output_w"] * p["output_c"],
    ),
    sources=("zo_kernels_conv.c", "zo_kernels_conv_mve.c"),
)

CONV2D_S16 = Kernel(
    "conv2d_s16",
    "zo_conv2d_s16",
    "zo_conv2d_params_t",
    convolution_params.conv2d_s16_params,
    ("int16", "int8", "int64", "int16"),
    lambda p: (
        2 * p["input_h"] * p["input_w"] * p["input_c"],
        p["output_c"] * p["filter_h"] * p["filter_w"] * p["filter_c"],
        8 * p["output_c"],
        2 * p["output_h"] * p["output_w"] * p["output_c"],
    ),
    sources=("zo_kernels_int16.c", "zo_kernels_int16_mve.c"),
)
DEPTHWISE_CONV2D_S16 = Kernel(
    "depthwise_conv2d_s16",
    "zo_depthwise_conv2d_s16",
    "zo_depthwise_conv2d_params_t",
    convolution_params.depthwise_conv2d_s16_params,
    ("int16", "int8", "int64", "int16"),
    lambda p: (
        2 * p["input_h"] * p["input_w"] * p["input_c"],
        p["filter_h"] * p["filter_w"] * p["output_c"],
        8 * p["output_c"],
        2 * p["output_h"] * p["output_w"] * p["output_c"],
    ),
    sources=("zo_kernels_int16.c", "zo_kernels_int16_mve.c"),
)

INPUTS = (
    Arg("input", dtypes=INT8_INT16),
    Arg("weights", CONSTANT, ("int8",)),
    Arg("bias", CONSTANT, ("int32", "int64"), optional=True),
)
# TFLM's ConvParams and DepthwiseParams hold strides, dilations and the depth multiplier in int16_t:
# a larger value wraps there (a dilation of 65536 becomes 0), so zoflash refuses it.
OPTIONS = (
    in_range("stride_h", 1, INT16_MAX),
    in_range("stride_w", 1, INT16_MAX),
    in_range("dilation_h_factor", 1, INT16_MAX, default=1),
    in_range("dilation_w_factor", 1, INT16_MAX, default=1),
    one_of("padding", "SAME", "VALID"),
    FUSED_ACTIVATION,
)


def weights_4d(graph: Graph, op: Op) -> str | None:
    """the weights must be 4-D"""
    w = input_tensor(graph, op, 1)
    return w.describe() if len(w.shape) != 4 else None


def conv_channels(graph: Graph, op: Op) -> str | None:
    """the weights [out, h, w, in / groups] must have the output's channels, and the input's channels
    must split into groups that divide the output channels"""
    c, w, oc = input_tensor(graph, op, 0).shape[3], input_tensor(graph, op, 1), output_tensor(graph, op).shape[3]
    f_oc, fc = w.shape[0], w.shape[3]
    if f_oc == oc and fc > 0 and c % fc == 0 and c // fc > 0 and oc % (c // fc) == 0:
        return None
    return f"input channels {c}, weights {shape(w)}, output channels {oc}"


def depthwise_channels(graph: Graph, op: Op) -> str | None:
    """the weights must be [1, h, w, out] with out = output channels = input channels x depth_multiplier"""
    c, w, oc = input_tensor(graph, op, 0).shape[3], input_tensor(graph, op, 1), output_tensor(graph, op).shape[3]
    dm = option(op, "depth_multiplier")
    if w.shape[0] == 1 and w.shape[3] == oc == c * dm:
        return None
    return f"input channels {c}, depth_multiplier {dm}, weights {shape(w)}, output channels {oc}"


def lower_conv(graph: Graph, op: Op) -> Step:
    x, w, b, y = (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, 1),
        input_tensor(graph, op, 2),
        output_tensor(graph, op),
    )
    common = dict(
        input_hwc=x.shape[1:],
        output_hwc=y.shape[1:],
        stride_hw=(option(op, "stride_h"), option(op, "stride_w")),
        dilation_hw=(option(op, "dilation_h_factor"), option(op, "dilation_w_factor")),
        padding=option(op, "padding"),
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        filter_scales=w.quant.scales,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        activation=option(op, "fused_activation_function"),
    )
    int16 = x.dtype == "int16"
    if op.type == "DEPTHWISE_CONV_2D":
        kernel = DEPTHWISE_CONV2D_S16 if int16 else DEPTHWISE_CONV2D
        params = build(
            graph, op, kernel, filter_1hwo=w.shape, depth_multiplier=option(op, "depth_multiplier"), **common
        )
    else:
        kernel = CONV2D_S16 if int16 else CONV2D
        params = build(graph, op, kernel, filter_ohwi=w.shape, **common)
        if not int16:
            params["folded_bias"] = folded_bias(w, b, x.quant.zero_point)
    return Step(
        op,
        kernel.name,
        params,
        args=[x.index, w.index, b.index if b is not None else None, y.index],
        inputs=(x.index,),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("CONV_2D",),
        summary="stride, SAME/VALID, dilation, grouped; fused NONE/RELU/RELU6/RELU_N1_TO_1; int8, "
        "or 16x8 (int16 activations, int64 bias)",
        inputs=INPUTS,
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_conv,
        kernels=(CONV2D, CONV2D_S16),
        options=OPTIONS,
        constraints=(
            image_4d,
            weights_4d,
            *WEIGHTS,
            weighted_16x8,
            conv_channels,
            window_output_size,
            padding_fits_int16,
        ),
    )
)

register(
    OpEntry(
        types=("DEPTHWISE_CONV_2D",),
        summary="depth multiplier, stride, SAME/VALID, dilation; int8, or 16x8 (int16 activations, int64 bias)",
        inputs=INPUTS,
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_conv,
        kernels=(DEPTHWISE_CONV2D, DEPTHWISE_CONV2D_S16),
        options=OPTIONS + (in_range("depth_multiplier", 1, INT16_MAX, default=1),),
        constraints=(
            image_4d,
            weights_4d,
            *WEIGHTS,
            weighted_16x8,
            depthwise_channels,
            window_output_size,
            padding_fits_int16,
        ),
    )
)


# ==== TRANSPOSE_CONV ==========================================================================
# Inputs: 0 the output shape (constant int32), 1 weights [out, h, w, in], 2 input, 3 bias (optional).

TRANSPOSE_CONV = Kernel(
    "transpose_conv",
    "zo_transpose_conv_s8",
    "zo_transpose_conv_params_t",
    convolution_params.transpose_conv_params,
    ("int8", "int8", "int32", "int8"),
    lambda p: (
        p["input_h"] * p["input_w"] * p["input_c"],
        p["output_c"] * p["filter_h"] * p["filter_w"] * p["input_c"],
        4 * p["output_c"],
        p["output_h"] * p["output_w"] * p["output_c"],
    ),
    sources=("zo_kernels_resize.c",),
)


def tconv_4d(graph: Graph, op: Op) -> str | None:
    """input and output must be 4-D [1, height, width, channels] (batch 1), the weights 4-D"""
    x, w, y = input_tensor(graph, op, 2), input_tensor(graph, op, 1), output_tensor(graph, op)
    bad = [t.describe() for t in (x, y) if len(t.shape) != 4 or t.shape[0] != 1]
    return "; ".join(bad + ([w.describe()] if len(w.shape) != 4 else [])) or None


def output_shape_matches(graph: Graph, op: Op) -> str | None:
    """the output shape input must hold the output's shape"""
    values = [int(v) for v in np.asarray(input_tensor(graph, op, 0).data).reshape(-1)]
    y = output_tensor(graph, op)
    return None if values == list(y.shape) else f"output shape {values}, the output is {shape(y)}"


def tconv_channels(graph: Graph, op: Op) -> str | None:
    """the weights [out, h, w, in] must have the output's and the input's channels"""
    x, w, y = input_tensor(graph, op, 2), input_tensor(graph, op, 1), output_tensor(graph, op)
    if w.shape[0] == y.shape[3] and w.shape[3] == x.shape[3]:
        return None
    return f"input channels {x.shape[3]}, weights {shape(w)}, output channels {y.shape[3]}"


def tconv_bias(graph: Graph, op: Op) -> str | None:
    """the bias must have one value per output channel"""
    w, b = input_tensor(graph, op, 1), input_tensor(graph, op, 3)
    if b is None or b.num_elements == w.shape[0]:
        return None
    return f"bias '{b.name}' has {b.num_elements} values for {w.shape[0]} output channels"


def tconv_input_size(graph: Graph, op: Op) -> str | None:
    """the input height and width must be what a convolution of the output with the window, strides
    and padding gives"""
    x, w, y = input_tensor(graph, op, 2), input_tensor(graph, op, 1), output_tensor(graph, op)
    stride, padding = (option(op, "stride_h"), option(op, "stride_w")), option(op, "padding")
    (h, wd), _ = quant.compute_padding_hw(stride, (1, 1), y.shape[1:3], w.shape[1:3], padding)
    if (h, wd) == tuple(x.shape[1:3]):
        return None
    return (
        f"output {shape(y)}, window {w.shape[1]}x{w.shape[2]}, stride {stride}, {padding} padding give "
        f"{h}x{wd}; the input is {shape(x)}"
    )


def lower_transpose_conv(graph: Graph, op: Op) -> Step:
    w, x, b, y = (
        input_tensor(graph, op, 1),
        input_tensor(graph, op, 2),
        input_tensor(graph, op, 3),
        output_tensor(graph, op),
    )
    params = build(
        graph,
        op,
        TRANSPOSE_CONV,
        input_hwc=x.shape[1:],
        output_hwc=y.shape[1:],
        filter_ohwi=w.shape,
        stride_hw=(option(op, "stride_h"), option(op, "stride_w")),
        padding=option(op, "padding"),
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        filter_scales=w.quant.scales,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        activation=option(op, "fused_activation_function"),
    )
    return Step(
        op,
        TRANSPOSE_CONV.name,
        params,
        args=[x.index, w.index, b.index if b is not None else None, y.index],
        inputs=(x.index,),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("TRANSPOSE_CONV",),
        summary="stride, SAME/VALID, per-channel weights, optional bias; fused activation",
        inputs=(
            Arg("output_shape", CONSTANT, ("int32",)),
            Arg("weights", CONSTANT, ("int8",)),
            Arg("input"),
            Arg("bias", CONSTANT, ("int32",), optional=True),
        ),
        outputs=(Arg("output"),),
        lower=lower_transpose_conv,
        kernels=(TRANSPOSE_CONV,),
        options=(
            in_range("stride_h", 1, INT16_MAX),
            in_range("stride_w", 1, INT16_MAX),
            one_of("padding", "SAME", "VALID"),
            FUSED_ACTIVATION,
        ),
        constraints=(
            tconv_4d,
            output_shape_matches,
            weights_quantized,
            weights_symmetric,
            weights_scales_per_output_channel,
            tconv_bias,
            tconv_input_size,
            padding_fits_int16,
        ),
    )
)
