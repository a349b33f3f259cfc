"""Ops that move bytes: the RESHAPE family (no code), PAD / PADV2 and CONCATENATION."""

from __future__ import annotations

import math

import numpy as np

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import data_movement_params
from zoflash.compiler.ops.common import INT8_INT16, INT32_MAX, activation_issue, same_quantization, same_type
from zoflash.compiler.ops.registry import (
    CONSTANT,
    DATA,
    Arg,
    Kernel,
    OpEntry,
    any_value,
    build,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Alias, Step

_PAD_MAX_RANK = 5  # as TFLM
_CONCAT_MAX_INPUTS = 10  # as TFLM
_CONCAT_MAX_RANK = 6  # as TFLM

PAD = Kernel(
    "pad",
    "zo_pad_s8",
    "zo_pad_params_t",
    data_movement_params.pad_params,
    ("int8", "int8"),
    lambda p: (
        math.prod(p[f"in_d{k}"] for k in range(5)),
        math.prod(p[f"in_d{k}"] + p[f"before{k}"] + p[f"after{k}"] for k in range(5)),
    ),
    sources=("zo_kernels_misc.c",),
)
CONCAT = Kernel(
    "concat",
    "zo_concat_s8",
    "zo_concat_params_t",
    data_movement_params.concat_params,
    ("int8", "int8"),
    lambda p: ([p["outer"] * int(c) for c in p["chunk"]], p["outer"] * int(sum(p["chunk"]))),
    sources=("zo_kernels_misc.c",),
)
PAD_S16 = Kernel(
    "pad_s16",
    "zo_pad_s16",
    "zo_pad_params_t",
    data_movement_params.pad_s16_params,
    ("int16", "int16"),
    lambda p: tuple(2 * n for n in PAD.extents(p)),
    sources=("zo_kernels_int16.c",),
)
CONCAT_S16 = Kernel(
    "concat_s16",
    "zo_concat_s16",
    "zo_concat_params_t",
    data_movement_params.concat_params,
    ("int16", "int16"),
    lambda p: ([2 * n for n in CONCAT.extents(p)[0]], 2 * CONCAT.extents(p)[1]),
    sources=("zo_kernels_int16.c",),
)


# ------------------------------------------------------------------------------- RESHAPE family


def same_bytes(graph: Graph, op: Op) -> str | None:
    """the output must have the input's type and element count (the op moves no data)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if x.dtype == y.dtype and x.num_elements == y.num_elements else f"{x.describe()} to {y.describe()}"


def computed_input_int8(graph: Graph, op: Op) -> str | None:
    """an input computed at run time must be an int8 or int16 activation quantized per tensor"""
    x = input_tensor(graph, op, 0)
    return None if x.is_constant else activation_issue(x, "input", dtypes=INT8_INT16)


def lower_reshape(graph: Graph, op: Op) -> Alias:
    return Alias(op, op.inputs[0], op.outputs[0])


register(
    OpEntry(
        types=("RESHAPE", "SQUEEZE", "EXPAND_DIMS"),
        summary="no code: the output aliases the input's bytes",
        inputs=(Arg("input", DATA, ()), Arg("shape or axis", DATA, (), optional=True)),
        outputs=(Arg("output", DATA, ()),),
        lower=lower_reshape,
        constraints=(same_bytes, computed_input_int8),
    )
)


# ------------------------------------------------------------------------------------ PAD, PADV2


def _paddings(graph: Graph, op: Op) -> list[tuple[int, int]]:
    return [(int(b), int(a)) for b, a in np.asarray(input_tensor(graph, op, 1).data).reshape(-1, 2)]


def pad_rank(graph: Graph, op: Op) -> str | None:
    """the input must have at most 5 dimensions (as TFLM)"""
    x = input_tensor(graph, op, 0)
    return x.describe() if len(x.shape) > _PAD_MAX_RANK else None


def paddings_shape(graph: Graph, op: Op) -> str | None:
    """the paddings must be [rank, 2]: one (before, after) pair per input dimension"""
    x, pads = input_tensor(graph, op, 0), input_tensor(graph, op, 1)
    return None if tuple(pads.shape) == (len(x.shape), 2) else f"paddings {shape(pads)} for a {shape(x)} input"


def paddings_in_range(graph: Graph, op: Op) -> str | None:
    """paddings must be >= 0, and every padded size must fit in int32"""
    x = input_tensor(graph, op, 0)
    pads = _paddings(graph, op)
    if all(b >= 0 and a >= 0 and d + b + a <= INT32_MAX for d, (b, a) in zip(x.shape, pads)):
        return None
    return f"paddings {[list(p) for p in pads]} for a {shape(x)} input"


def pad_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the input plus the paddings before and after, in every dimension"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    pads = _paddings(graph, op)
    expected = [d + b + a for d, (b, a) in zip(x.shape, pads)]
    if expected == list(y.shape):
        return None
    return f"input {shape(x)} with paddings {[list(p) for p in pads]} gives {expected}; the output is {shape(y)}"


def pad_value_quantization(graph: Graph, op: Op) -> str | None:
    """the constant value (PADV2) must be one value of the output's type, scale and zero point"""
    v, y = input_tensor(graph, op, 2), output_tensor(graph, op)
    if v is None:
        return None
    issue = activation_issue(v, "constant value", dtypes=(y.dtype,))
    if issue is None and (v.num_elements != 1 or not same_quantization(v, y)):
        issue = f"constant value {v.describe()}, output {y.describe()}"
    return issue


def lower_pad(graph: Graph, op: Op) -> Step:
    x, value, y = input_tensor(graph, op, 0), input_tensor(graph, op, 2), output_tensor(graph, op)
    # TFLM copies bytes: the pad value is the output's zero point unless the model gives one
    pad_value = int(value.data.reshape(-1)[0]) if value is not None else y.quant.zero_point
    kernel = PAD if x.dtype == "int8" else PAD_S16
    params = build(graph, op, kernel, input_shape=x.shape, paddings=_paddings(graph, op), pad_value=pad_value)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("PAD", "PADV2"),
        summary="int8 or int16, up to 5-D, pad value = output zero point or the constant",
        inputs=(
            Arg("input", dtypes=INT8_INT16),
            Arg("paddings", CONSTANT, ("int32", "int64")),
            Arg("constant value", CONSTANT, INT8_INT16, optional=True),
        ),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_pad,
        kernels=(PAD, PAD_S16),
        constraints=(same_type, pad_rank, paddings_shape, paddings_in_range, pad_output_shape, pad_value_quantization),
    )
)


# --------------------------------------------------------------------------------- CONCATENATION


def _concat_axis(graph: Graph, op: Op) -> int:
    axis, rank = option(op, "axis"), len(output_tensor(graph, op).shape)
    return axis + rank if axis < 0 else axis


def concat_limits(graph: Graph, op: Op) -> str | None:
    """at most 10 inputs of at most 6 dimensions (as TFLM)"""
    y = output_tensor(graph, op)
    if len(op.inputs) <= _CONCAT_MAX_INPUTS and len(y.shape) <= _CONCAT_MAX_RANK:
        return None
    return f"{len(op.inputs)} inputs, output {shape(y)}"


def concat_axis_in_range(graph: Graph, op: Op) -> str | None:
    """the axis must be a dimension of the output"""
    y = output_tensor(graph, op)
    return None if 0 <= _concat_axis(graph, op) < len(y.shape) else f"axis {option(op, 'axis')}, output {shape(y)}"


def concat_shapes(graph: Graph, op: Op) -> str | None:
    """every input must have the output's shape outside the axis, and the sizes along the axis must
    add up to the output's"""
    y, axis = output_tensor(graph, op), _concat_axis(graph, op)
    xs = [graph.tensors[i] for i in op.inputs]

    def outside(s):
        return tuple(s[:axis]) + tuple(s[axis + 1 :])

    if (
        all(len(x.shape) == len(y.shape) and outside(x.shape) == outside(y.shape) for x in xs)
        and sum(x.shape[axis] for x in xs) == y.shape[axis]
    ):
        return None
    return f"inputs {[shape(x) for x in xs]} along axis {axis}; the output is {shape(y)}"


def concat_quantization(graph: Graph, op: Op) -> str | None:
    """every input must have the output's scale and zero point (as TFLM requires: it copies bytes)"""
    y = output_tensor(graph, op)
    bad = [x.describe() for x in (graph.tensors[i] for i in op.inputs) if not same_quantization(x, y)]
    return f"{'; '.join(bad)}; output {y.describe()}" if bad else None


def lower_concat(graph: Graph, op: Op) -> Step:
    y = output_tensor(graph, op)
    xs = [graph.tensors[i] for i in op.inputs]
    kernel = CONCAT if y.dtype == "int8" else CONCAT_S16
    params = build(graph, op, kernel, input_shapes=[x.shape for x in xs], axis=_concat_axis(graph, op))
    return Step(
        op,
        kernel.name,
        params,
        args=[tuple(x.index for x in xs), y.index],
        inputs=tuple(x.index for x in xs if not x.is_constant),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("CONCATENATION",),
        summary="int8 or int16, any axis, inputs share the output's quantization (as TFLM requires)",
        inputs=(Arg("inputs", dtypes=INT8_INT16, variadic=True),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_concat,
        kernels=(CONCAT, CONCAT_S16),
        options=(
            any_value("axis", "a dimension of the output (negative counts from the end)", default=0),
            one_of("fused_activation_function", "NONE", default="NONE"),
        ),
        constraints=(same_type, concat_limits, concat_axis_in_range, concat_shapes, concat_quantization),
    )
)
