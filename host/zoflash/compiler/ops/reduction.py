"""MEAN (int8)."""
from __future__ import annotations

import numpy as np

from zoflash.compiler import kernels
from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops.registry import (
    CONSTANT,
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

MEAN = Kernel("mean", "zo_mean_s8", "zo_mean_params_t", kernels.mean_params, ("int8", "int8"),
              lambda p: (p["outer"] * p["reduce"] * p["inner"], p["outer"] * p["inner"]))


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
    return None if list(y.shape) == expected else f"input {shape(x)}, axes {sorted(reduced)}: expected " \
        f"{expected}, the output is {shape(y)}"


def lower_mean(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    params = build(graph, op, MEAN, input_shape=x.shape, axes=tuple(_reduced(graph, op)), input_scale=x.quant.scale,
                   input_zp=x.quant.zero_point, output_scale=y.quant.scale, output_zp=y.quant.zero_point)
    return Step(op, MEAN.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(OpEntry(
    types=("MEAN",), summary="one contiguous run of axes (global average pooling, Conv1D time pooling)",
    inputs=(Arg("input"), Arg("axes", CONSTANT, ("int32", "int64"))), outputs=(Arg("output"),), lower=lower_mean,
    kernels=(MEAN,), options=(any_value("keep_dims", "true, false", default=False),),
    constraints=(axes_in_range, axes_distinct, axes_contiguous, mean_output_shape)))
