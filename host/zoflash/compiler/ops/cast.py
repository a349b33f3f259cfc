"""CAST between int8, int16, int32 and float32 (TFLM's cast.cc: a static_cast per element).

In int8 models it converts ARG_MAX's int32 indices (to int8, int16, or float32 for a QUANTIZE);
a CAST may make a model output of any of these types. Float32 to an integer type is refused: out
of range it is undefined behaviour in C and C++, so TFLM's result is not reproducible.
"""

from __future__ import annotations

from zoflash.compiler.ir import DTYPE_SIZES, Graph, Op
from zoflash.compiler.ops import cast_params
from zoflash.compiler.ops.registry import (
    DATA,
    Arg,
    Kernel,
    OpEntry,
    any_value,
    build,
    input_tensor,
    output_tensor,
    register,
)
from zoflash.compiler.program import Step

TYPES = tuple(cast_params.CAST_TYPES)


def _kernel(src: str, dst: str) -> Kernel:
    a, b = DTYPE_SIZES[src], DTYPE_SIZES[dst]
    return Kernel(
        f"cast_{src}_{dst}",
        "zo_cast",
        "zo_cast_params_t",
        cast_params.cast_params,
        (src, dst),
        lambda p: (a * p["size"], b * p["size"]),
        sources=("zo_kernels_cast.c",),
    )


# One kernel entry per pair (the verifier checks each argument's type), one C function.
CASTS = {(s, d): _kernel(s, d) for s in TYPES for d in TYPES if s != "float32" or d == "float32"}


def cast_types(graph: Graph, op: Op) -> str | None:
    """CAST must convert between int8, int16, int32 and float32 (TFLM's CAST reads no uint8), and not
    float32 to an integer type (undefined out of range, in TFLM as in C)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if (x.dtype, y.dtype) in CASTS else f"{x.dtype} -> {y.dtype}"


def same_size(graph: Graph, op: Op) -> str | None:
    """input and output must have the same number of elements (TFLM's MatchingFlatSize)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if x.num_elements == y.num_elements else f"input {list(x.shape)}, output {list(y.shape)}"


def lower_cast(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = CASTS[x.dtype, y.dtype]
    params = build(graph, op, kernel, size=x.num_elements, input_dtype=x.dtype, output_dtype=y.dtype)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("CAST",),
        summary="int8, int16, int32 -> int8, int16, int32, float32 (a C cast: narrowing keeps the low bits) and "
        "float32 -> float32; may make a model output (e.g. of ARG_MAX's indices)",
        # Any type here: cast_types says which pairs, in one message.
        inputs=(Arg("input", DATA, ()),),
        outputs=(Arg("output", DATA, ()),),
        lower=lower_cast,
        kernels=tuple(CASTS.values()),
        options=(
            any_value("in_data_type", "any (the tensors' types decide)", default=None),
            any_value("out_data_type", "any (the tensors' types decide)", default=None),
        ),
        constraints=(cast_types, same_size),
    )
)
