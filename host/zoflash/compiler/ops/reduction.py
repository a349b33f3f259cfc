"""MEAN, REDUCE_MAX and ARG_MAX (int8 input)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import reduction_params
from zoflash.compiler.ops.common import INT8_INT16, output_keeps_input_quantization, same_type
from zoflash.compiler.ops.registry import (
    CONSTANT,
    DATA,
    Arg,
    Kernel,
    OpEntry,
    any_value,
    build,
    input_tensor,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

MEAN = Kernel(
    "mean",
    "zo_mean_s8",
    "zo_mean_params_t",
    reduction_params.mean_params,
    ("int8", "int8"),
    lambda p: (p["outer"] * p["reduce"] * p["inner"], p["outer"] * p["inner"]),
    sources=("zo_kernels_misc.c", "zo_kernels_misc_mve.c"),
)

MEAN_S16 = Kernel(
    "mean_s16",
    "zo_mean_s16",
    "zo_mean_params_t",
    reduction_params.mean_s16_params,
    ("int16", "int16"),
    lambda p: (2 * p["outer"] * p["reduce"] * p["inner"], 2 * p["outer"] * p["inner"]),
    sources=("zo_kernels_int16.c",),
)

MAX_KEEPS_QUANTIZATION = output_keeps_input_quantization("TFLM copies the int8 maximum without requantizing")


def _axes(graph: Graph, op: Op) -> list[int]:
    """The axes as the model lists them."""
    return [int(a) for a in np.asarray(input_tensor(graph, op, 1).data).reshape(-1)]


def _reduced(graph: Graph, op: Op) -> list[int]:
    """The reduced dimensions, negative axes counted from the end, sorted."""
    rank = len(input_tensor(graph, op, 0).shape)
    return sorted(a + rank if a < 0 else a for a in _axes(graph, op))


def axes_in_range(graph: Graph, op: Op) -> str | None:
    """one or more axes, each in [-rank, rank) of the input"""
    x, axes = input_tensor(graph, op, 0), _axes(graph, op)
    if axes and all(-len(x.shape) <= a < len(x.shape) for a in axes):
        return None
    return f"axes {axes} for a {shape(x)} input"


def axes_distinct(graph: Graph, op: Op) -> str | None:
    """the axes must be distinct (a negative axis counts from the end)"""
    reduced = _reduced(graph, op)
    return None if len(set(reduced)) == len(reduced) else f"axes {_axes(graph, op)} name dimensions {reduced}"


def axes_contiguous(graph: Graph, op: Op) -> str | None:
    """the reduced dimensions, ignoring those of size 1, must form one contiguous run (global average
    pooling, time pooling)"""
    x, reduced = input_tensor(graph, op, 0), set(_reduced(graph, op))
    sized = [k for k in range(len(x.shape)) if x.shape[k] != 1]
    pos = [i for i, k in enumerate(sized) if k in reduced]
    if not pos or pos == list(range(pos[0], pos[-1] + 1)):
        return None
    return f"axes {sorted(reduced)} of {shape(x)}"


def mean_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the input without the reduced dimensions (kept as 1 with keep_dims)"""
    x, y, reduced = input_tensor(graph, op, 0), output_tensor(graph, op), set(_reduced(graph, op))
    if option(op, "keep_dims"):
        expected = [1 if k in reduced else d for k, d in enumerate(x.shape)]
    else:
        expected = [d for k, d in enumerate(x.shape) if k not in reduced]
    return (
        None
        if list(y.shape) == expected
        else f"input {shape(x)}, axes {sorted(reduced)}: expected {expected}, the output is {shape(y)}"
    )


def lower_mean(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = MEAN if x.dtype == "int8" else MEAN_S16
    params = build(
        graph,
        op,
        kernel,
        input_shape=x.shape,
        axes=tuple(_reduced(graph, op)),
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
    )
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("MEAN",),
        summary="int8 or int16, one contiguous run of axes (global average pooling, Conv1D time pooling)",
        inputs=(Arg("input", dtypes=INT8_INT16), Arg("axes", CONSTANT, ("int32", "int64"))),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_mean,
        kernels=(MEAN, MEAN_S16),
        options=(any_value("keep_dims", "true, false", default=False),),
        constraints=(same_type, axes_in_range, axes_distinct, axes_contiguous, mean_output_shape),
    )
)


# ==== REDUCE_MAX and ARG_MAX ==================================================================

REDUCE_MAX = Kernel(
    "reduce_max",
    "zo_reduce_max_s8",
    "zo_reduce_max_params_t",
    reduction_params.reduce_max_params,
    ("int8", "int8"),
    lambda p: (int(np.prod(p["dims"])), p["output_size"]),
    sources=("zo_kernels_resize.c",),
)
ARG_MAX = Kernel(
    "arg_max",
    "zo_arg_max_s8",
    "zo_arg_max_params_t",
    reduction_params.arg_max_params,
    ("int8", "int32"),
    lambda p: (p["outer"] * p["axis"] * p["inner"], 4 * p["outer"] * p["inner"]),
    sources=("zo_kernels_resize.c",),
)


def rank_at_most_6(graph: Graph, op: Op) -> str | None:
    """the input must have 1 to 6 dimensions"""
    x = input_tensor(graph, op, 0)
    return None if 1 <= len(x.shape) <= 6 else f"input {shape(x)}"


def lower_reduce_max(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    params = build(graph, op, REDUCE_MAX, input_shape=x.shape, axes=tuple(_reduced(graph, op)))
    return Step(op, REDUCE_MAX.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("REDUCE_MAX",),
        summary="any set of axes, keep_dims (global max pooling)",
        inputs=(Arg("input"), Arg("axes", CONSTANT, ("int32",))),
        outputs=(Arg("output"),),
        lower=lower_reduce_max,
        kernels=(REDUCE_MAX,),
        options=(any_value("keep_dims", "true, false", default=False),),
        constraints=(rank_at_most_6, axes_in_range, axes_distinct, mean_output_shape, MAX_KEEPS_QUANTIZATION),
    )
)


def one_axis(graph: Graph, op: Op) -> str | None:
    """the axis must be one value in [-rank, rank) of the input"""
    x, axes = input_tensor(graph, op, 0), _axes(graph, op)
    if len(axes) == 1 and -len(x.shape) <= axes[0] < len(x.shape):
        return None
    return f"axis {axes} for a {shape(x)} input"


def arg_max_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the input without the axis"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    axis = _reduced(graph, op)[0]
    expected = [d for k, d in enumerate(x.shape) if k != axis]
    return (
        None
        if list(y.shape) == expected
        else f"input {shape(x)}, axis {axis}: expected {expected}, the output is {shape(y)}"
    )


def lower_arg_max(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    params = build(graph, op, ARG_MAX, input_shape=x.shape, axis=_reduced(graph, op)[0])
    return Step(op, ARG_MAX.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("ARG_MAX",),
        summary="one axis; int32 indices (may be a model output)",
        inputs=(Arg("input"), Arg("axis", CONSTANT, ("int32",))),
        outputs=(
            Arg(
                "indices",
                DATA,
                ("int32",),
                hint="TFLM computes int32 indices only: use tf.math.argmax(..., output_type=tf.int32)",
            ),
        ),
        lower=lower_arg_max,
        kernels=(ARG_MAX,),
        constraints=(one_axis, arg_max_output_shape),
    )
)
