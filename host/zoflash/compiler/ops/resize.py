"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (int8)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import resize_params
from zoflash.compiler.ops.common import INT8_INT16, image_4d, output_keeps_input_quantization, same_type
from zoflash.compiler.ops.registry import (
    CONSTANT,
    Arg,
    Kernel,
    OpEntry,
    build,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

RESIZE_KEEPS_QUANTIZATION = output_keeps_input_quantization("TFLM resizes the int8 values without requantizing")


def _extents(p):
    return (p["input_h"] * p["input_w"] * p["channels"], p["output_h"] * p["output_w"] * p["channels"])


BILINEAR = Kernel(
    "resize_bilinear",
    "zo_resize_bilinear_s8",
    "zo_resize_bilinear_params_t",
    resize_params.resize_bilinear_params,
    ("int8", "int8"),
    _extents,
    sources=("zo_kernels_resize.c",),
)
NEAREST = Kernel(
    "resize_nearest",
    "zo_resize_nearest_s8",
    "zo_resize_nearest_params_t",
    resize_params.resize_nearest_params,
    ("int8", "int8"),
    _extents,
    sources=("zo_kernels_resize.c",),
)

NEAREST_S16 = Kernel(
    "resize_nearest_s16",
    "zo_resize_nearest_s16",
    "zo_resize_nearest_params_t",
    resize_params.resize_nearest_params,
    ("int16", "int16"),
    lambda p: tuple(2 * n for n in _extents(p)),
    sources=("zo_kernels_int16.c",),
)

INPUTS = (Arg("input"), Arg("size", CONSTANT, ("int32",)))
OPTIONS = (
    one_of("align_corners", False, True, default=False),
    one_of("half_pixel_centers", False, True, default=False),
)


def size_matches_output(graph: Graph, op: Op) -> str | None:
    """the size must be 2 positive values [height, width], the output's, with the input's channels"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    size = [int(v) for v in np.asarray(input_tensor(graph, op, 1).data).reshape(-1)]
    if len(size) == 2 and min(size) > 0 and size == list(y.shape[1:3]) and x.shape[3] == y.shape[3]:
        return None
    return f"size {size}, input {shape(x)}, output {shape(y)}"


def not_both_flags(graph: Graph, op: Op) -> str | None:
    """align_corners and half_pixel_centers cannot both be true (TFLM refuses it)"""
    return "both are true" if option(op, "align_corners") and option(op, "half_pixel_centers") else None


def lower_resize(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = BILINEAR if op.type == "RESIZE_BILINEAR" else NEAREST_S16 if x.dtype == "int16" else NEAREST
    params = build(
        graph,
        op,
        kernel,
        input_hwc=x.shape[1:],
        output_hwc=y.shape[1:],
        align_corners=bool(option(op, "align_corners")),
        half_pixel_centers=bool(option(op, "half_pixel_centers")),
    )
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("RESIZE_BILINEAR",),
        summary="any size; align_corners or half_pixel_centers (TFLM's integer path)",
        inputs=INPUTS,
        outputs=(Arg("output"),),
        lower=lower_resize,
        kernels=(BILINEAR,),
        options=OPTIONS,
        constraints=(image_4d, size_matches_output, not_both_flags, RESIZE_KEEPS_QUANTIZATION),
    )
)

register(
    OpEntry(
        types=("RESIZE_NEAREST_NEIGHBOR",),
        summary="int8 or int16, any size; align_corners, half_pixel_centers",
        inputs=(Arg("input", dtypes=INT8_INT16), INPUTS[1]),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_resize,
        kernels=(NEAREST, NEAREST_S16),
        options=OPTIONS,
        constraints=(same_type, image_4d, size_matches_output, not_both_flags, RESIZE_KEEPS_QUANTIZATION),
    )
)
