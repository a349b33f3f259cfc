"""CAST's params (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

from zoflash.compiler.ops.params_common import checked_int

CAST_TYPES = {"int8": 0, "int16": 1, "int32": 2, "float32": 3}  # zo_kernels.h's ZO_CAST_* element types


def cast_params(*, size, input_dtype, output_dtype) -> dict:
    """CAST (TFLM's cast.cc: a C++ static_cast per element); float32 to an integer type is refused
    (undefined out of range in C and C++, so no reproducible reference)."""
    if input_dtype not in CAST_TYPES or output_dtype not in CAST_TYPES:
        raise ValueError(f"cast: {input_dtype} -> {output_dtype}; the types are {', '.join(CAST_TYPES)}")
    if input_dtype == "float32" and output_dtype != "float32":
        raise ValueError(f"cast: float32 -> {output_dtype} is undefined for values out of range")
    return dict(
        size=checked_int("size", size, 1), input_type=CAST_TYPES[input_dtype], output_type=CAST_TYPES[output_dtype]
    )
