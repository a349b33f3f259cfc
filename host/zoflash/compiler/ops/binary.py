"""ADD, MUL, SUB, SQUARED_DIFFERENCE, MINIMUM, MAXIMUM and PRELU (int8, broadcasting)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import binary_params
from zoflash.compiler.ops.common import INT8_INT16, same_type
from zoflash.compiler.ops.registry import (
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    build,
    input_tensor,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

_MAX_RANK = 4


def _binary_extents(p: dict) -> tuple:
    """Each input is walked with its strides over the output box (stride 0 where it broadcasts)."""
    dims = [p[f"out_d{k}"] for k in range(4)]

    def reach(prefix: str) -> int:
        return 1 + sum((d - 1) * p[f"{prefix}_s{k}"] for k, d in enumerate(dims))

    return reach("in1"), reach("in2"), int(np.prod(dims))


ADD = Kernel(
    "add",
    "zo_add_s8",
    "zo_add_params_t",
    binary_params.add_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_elementwise.c", "zo_kernels_elementwise_mve.c"),
)
MUL = Kernel(
    "mul",
    "zo_mul_s8",
    "zo_mul_params_t",
    binary_params.mul_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_elementwise.c", "zo_kernels_elementwise_mve.c"),
)


def _int16_binary(name: str, struct: str, builder) -> Kernel:
    return Kernel(
        f"{name}_s16",
        f"zo_{name}_s16",
        struct,
        builder,
        ("int16", "int16", "int16"),
        lambda p: tuple(2 * n for n in _binary_extents(p)),
        sources=("zo_kernels_int16.c",),
    )


ADD_S16 = _int16_binary("add", "zo_add_params_t", binary_params.add_s16_params)
SUB_S16 = _int16_binary("sub", "zo_add_params_t", binary_params.sub_s16_params)
MUL_S16 = _int16_binary("mul", "zo_mul_params_t", binary_params.mul_s16_params)
_INT16_KERNELS = {"ADD": ADD_S16, "SUB": SUB_S16, "MUL": MUL_S16}
_INT16_ARGS = (Arg("first input", dtypes=INT8_INT16), Arg("second input", dtypes=INT8_INT16))


def at_most_4d(graph: Graph, op: Op) -> str | None:
    """inputs and output must have at most 4 dimensions"""
    tensors = (input_tensor(graph, op, 0), input_tensor(graph, op, 1), output_tensor(graph, op))
    return "; ".join(t.describe() for t in tensors if len(t.shape) > _MAX_RANK) or None


def broadcasts_to_output(graph: Graph, op: Op) -> str | None:
    """the inputs must broadcast (numpy rules) to the output's shape"""
    a, b, y = input_tensor(graph, op, 0), input_tensor(graph, op, 1), output_tensor(graph, op)
    try:
        expected = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        return f"{shape(a)} and {shape(b)} do not broadcast"
    # leading 1s do not change the layout, so [1, 4] + [4] -> [4] is fine
    rank = max(len(expected), len(y.shape))
    if (1,) * (rank - len(expected)) + expected == (1,) * (rank - len(y.shape)) + tuple(y.shape):
        return None
    return f"{shape(a)} and {shape(b)} broadcast to {list(expected)}; the output is {shape(y)}"


def lower_binary(graph: Graph, op: Op) -> Step:
    a, b, y = input_tensor(graph, op, 0), input_tensor(graph, op, 1), output_tensor(graph, op)
    kernel = _INT16_KERNELS[op.type] if y.dtype == "int16" else ADD if op.type == "ADD" else MUL
    params = build(
        graph,
        op,
        kernel,
        input1_shape=a.shape,
        input2_shape=b.shape,
        output_shape=y.shape,
        input1_scale=a.quant.scale,
        input1_zp=a.quant.zero_point,
        input2_scale=b.quant.scale,
        input2_zp=b.quant.zero_point,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        activation=option(op, "fused_activation_function"),
    )
    return Step(
        op,
        kernel.name,
        params,
        args=[a.index, b.index, y.index],
        inputs=tuple(t.index for t in (a, b) if not t.is_constant),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("ADD", "MUL"),
        summary="broadcasting up to 4-D, different input scales; int8 or int16 (MUL: zero points 0)",
        inputs=_INT16_ARGS,
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_binary,
        kernels=(ADD, MUL, ADD_S16, MUL_S16),
        options=(FUSED_ACTIVATION,),
        constraints=(same_type, at_most_4d, broadcasts_to_output),
    )
)


# ------------------------------------------- SUB, SQUARED_DIFFERENCE, MINIMUM, MAXIMUM, PRELU ----------

SUB = Kernel(
    "sub",
    "zo_sub_s8",
    "zo_add_params_t",
    binary_params.sub_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_activation.c",),
)
SQUARED_DIFFERENCE = Kernel(
    "squared_difference",
    "zo_squared_difference_s8",
    "zo_add_params_t",
    binary_params.squared_difference_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_activation.c",),
)
MAXIMUM = Kernel(
    "maximum",
    "zo_maximum_s8",
    "zo_minmax_params_t",
    binary_params.minmax_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_activation.c",),
)
MINIMUM = Kernel(
    "minimum",
    "zo_minimum_s8",
    "zo_minmax_params_t",
    binary_params.minmax_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_activation.c",),
)
PRELU = Kernel(
    "prelu",
    "zo_prelu_s8",
    "zo_prelu_params_t",
    binary_params.prelu_params,
    ("int8", "int8", "int8"),
    _binary_extents,
    sources=("zo_kernels_activation.c",),
)
_MORE_KERNELS = {
    "SUB": SUB,
    "SQUARED_DIFFERENCE": SQUARED_DIFFERENCE,
    "MAXIMUM": MAXIMUM,
    "MINIMUM": MINIMUM,
    "PRELU": PRELU,
}
_INT16_KERNELS.update(
    MAXIMUM=_int16_binary("maximum", "zo_minmax_params_t", binary_params.minmax_params),
    MINIMUM=_int16_binary("minimum", "zo_minmax_params_t", binary_params.minmax_params),
)


def lower_more(graph: Graph, op: Op) -> Step:
    a, b, y = input_tensor(graph, op, 0), input_tensor(graph, op, 1), output_tensor(graph, op)
    kernel = _INT16_KERNELS[op.type] if y.dtype == "int16" else _MORE_KERNELS[op.type]
    shapes = dict(input1_shape=a.shape, input2_shape=b.shape, output_shape=y.shape)
    if op.type == "PRELU":
        params = build(
            graph,
            op,
            kernel,
            input_shape=a.shape,
            alpha_shape=b.shape,
            output_shape=y.shape,
            input_scale=a.quant.scale,
            input_zp=a.quant.zero_point,
            alpha_scale=b.quant.scale,
            alpha_zp=b.quant.zero_point,
            output_scale=y.quant.scale,
            output_zp=y.quant.zero_point,
        )
    elif op.type in ("MAXIMUM", "MINIMUM"):
        params = build(graph, op, kernel, **shapes)
    else:
        q = dict(
            input1_scale=a.quant.scale,
            input1_zp=a.quant.zero_point,
            input2_scale=b.quant.scale,
            input2_zp=b.quant.zero_point,
            output_scale=y.quant.scale,
            output_zp=y.quant.zero_point,
        )
        if op.type == "SUB":
            q["activation"] = option(op, "fused_activation_function")
        params = build(graph, op, kernel, **shapes, **q)
    return Step(
        op,
        kernel.name,
        params,
        args=[a.index, b.index, y.index],
        inputs=tuple(t.index for t in (a, b) if not t.is_constant),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("SUB",),
        summary="broadcasting up to 4-D, different input scales; int8 or int16",
        inputs=_INT16_ARGS,
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_more,
        kernels=(SUB, SUB_S16),
        options=(FUSED_ACTIVATION,),
        constraints=(same_type, at_most_4d, broadcasts_to_output),
    )
)

register(
    OpEntry(
        types=("SQUARED_DIFFERENCE",),
        summary="broadcasting up to 4-D, different input scales",
        inputs=(Arg("first input"), Arg("second input")),
        outputs=(Arg("output"),),
        lower=lower_more,
        kernels=(SQUARED_DIFFERENCE,),
        constraints=(at_most_4d, broadcasts_to_output),
    )
)

register(
    OpEntry(
        types=("MAXIMUM", "MINIMUM"),
        summary="int8 or int16, broadcasting up to 4-D; compares the stored values (as TFLM), so the inputs and "
        "output should share one quantization",
        inputs=_INT16_ARGS,
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_more,
        kernels=(MAXIMUM, MINIMUM, _INT16_KERNELS["MAXIMUM"], _INT16_KERNELS["MINIMUM"]),
        constraints=(same_type, at_most_4d, broadcasts_to_output),
    )
)

register(
    OpEntry(
        types=("PRELU",),
        summary="alpha broadcast against the input (up to 4-D)",
        inputs=(Arg("input"), Arg("alpha")),
        outputs=(Arg("output"),),
        lower=lower_more,
        kernels=(PRELU,),
        constraints=(at_most_4d, broadcasts_to_output),
    )
)
# ------------------------------------------------------------------ end of SUB ... PRELU ----------
