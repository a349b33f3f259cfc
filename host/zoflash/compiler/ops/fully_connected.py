"""FULLY_CONNECTED."""

from __future__ import annotations

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import fully_connected_params
from zoflash.compiler.ops.common import INT8_INT16, WEIGHTS, folded_bias, weighted_16x8
from zoflash.compiler.ops.registry import (
    CONSTANT,
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    Option,
    any_value,
    build,
    input_tensor,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

FULLY_CONNECTED = Kernel(
    "fully_connected",
    "zo_fully_connected_s8",
    "zo_fully_connected_params_t",
    fully_connected_params.fully_connected_params,
    ("int8", "int8", "int32", "int8"),
    lambda p: (p["rows"] * p["depth"], p["units"] * p["depth"], 4 * p["units"], p["rows"] * p["units"]),
    sources=("zo_kernels_conv.c", "zo_kernels_conv_mve.c"),
)

FULLY_CONNECTED_S16 = Kernel(
    "fully_connected_s16",
    "zo_fully_connected_s16",
    "zo_fully_connected_params_t",
    fully_connected_params.fully_connected_s16_params,
    ("int16", "int8", "int64", "int16"),
    lambda p: (2 * p["rows"] * p["depth"], p["units"] * p["depth"], 8 * p["units"], 2 * p["rows"] * p["units"]),
    sources=("zo_kernels_int16.c", "zo_kernels_int16_mve.c"),
)

# TFLM's prepare rejects a per-tensor bias whose scale is this far (relative to the output scale)
# from input scale x weights scale.
_BIAS_SCALE_TOLERANCE = 0.02


def weights_2d(graph: Graph, op: Op) -> str | None:
    """the weights must be 2-D [units, depth]"""
    w = input_tensor(graph, op, 1)
    return w.describe() if len(w.shape) != 2 else None


def input_rows(graph: Graph, op: Op) -> str | None:
    """the input's element count must be a multiple of the weights' depth (rows x depth)"""
    x, w = input_tensor(graph, op, 0), input_tensor(graph, op, 1)
    return (
        f"input {shape(x)} has {x.num_elements} elements, depth {w.shape[1]}"
        if w.shape[1] < 1 or x.num_elements % w.shape[1]
        else None
    )


def output_rows_by_units(graph: Graph, op: Op) -> str | None:
    """the output must hold rows x units elements, units in its last dimension"""
    x, w, y = input_tensor(graph, op, 0), input_tensor(graph, op, 1), output_tensor(graph, op)
    units, rows = w.shape[0], x.num_elements // w.shape[1]
    if y.shape and y.shape[-1] == units and y.num_elements == rows * units:
        return None
    return f"{rows} rows x {units} units; the output is {shape(y)}"


def bias_scale_matches(graph: Graph, op: Op) -> str | None:
    """a per-tensor bias must have the scale input scale x weights scale (as TFLM requires)"""
    x, w, b, y = (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, 1),
        input_tensor(graph, op, 2),
        output_tensor(graph, op),
    )
    if b is None or w.quant.per_channel or b.quant is None or b.quant.per_channel:
        return None
    expected = x.quant.scale * w.quant.scale
    if abs(expected - b.quant.scale) / y.quant.scale <= _BIAS_SCALE_TOLERANCE:
        return None
    return f"bias scale {b.quant.scale:.6g}, input x weights scale {expected:.6g}"


def lower_fully_connected(graph: Graph, op: Op) -> Step:
    x, w, b, y = (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, 1),
        input_tensor(graph, op, 2),
        output_tensor(graph, op),
    )
    kernel = FULLY_CONNECTED if x.dtype == "int8" else FULLY_CONNECTED_S16
    params = build(
        graph,
        op,
        kernel,
        input_elements=x.num_elements,
        weights_shape=w.shape,
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        filter_scales=w.quant.scales,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        activation=option(op, "fused_activation_function"),
    )
    if kernel is FULLY_CONNECTED:
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
        types=("FULLY_CONNECTED",),
        summary="per-channel and per-tensor weights, any input rank (rows x depth), keep_num_dims; int8, or 16x8 "
        "(int16 activations, int64 bias)",
        inputs=(
            Arg("input", dtypes=INT8_INT16),
            Arg("weights", CONSTANT, ("int8",)),
            Arg("bias", CONSTANT, ("int32", "int64"), optional=True),
        ),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_fully_connected,
        kernels=(FULLY_CONNECTED, FULLY_CONNECTED_S16),
        options=(
            FUSED_ACTIVATION,
            Option("weights_format", "DEFAULT (not the shuffled formats)", lambda v: v == 0, default=0),
            any_value("keep_num_dims", "true, false", default=False),
        ),
        constraints=(weights_2d, *WEIGHTS, weighted_16x8, input_rows, output_rows_by_units, bias_scale_matches),
    )
)
