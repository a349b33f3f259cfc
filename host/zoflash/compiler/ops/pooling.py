"""AVERAGE_POOL_2D and MAX_POOL_2D."""

from __future__ import annotations

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import pooling_params
from zoflash.compiler.ops.common import (
    INT8_INT16,
    image_4d,
    padding_fits_int16,
    same_quantization,
    same_type,
    window_output_size,
)
from zoflash.compiler.ops.registry import (
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    at_least,
    build,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
)
from zoflash.compiler.program import Step


def _pool_extents(p: dict) -> tuple:
    return p["input_h"] * p["input_w"] * p["channels"], p["output_h"] * p["output_w"] * p["channels"]


AVG_POOL = Kernel(
    "avg_pool",
    "zo_avg_pool_s8",
    "zo_pool_params_t",
    pooling_params.pool_params,
    ("int8", "int8"),
    _pool_extents,
    sources=("zo_kernels_pool.c", "zo_kernels_pool_mve.c"),
)
MAX_POOL = Kernel(
    "max_pool",
    "zo_max_pool_s8",
    "zo_pool_params_t",
    pooling_params.pool_params,
    ("int8", "int8"),
    _pool_extents,
    sources=("zo_kernels_pool.c", "zo_kernels_pool_mve.c"),
)
AVG_POOL_S16 = Kernel(
    "avg_pool_s16",
    "zo_avg_pool_s16",
    "zo_pool_params_t",
    pooling_params.pool_s16_params,
    ("int16", "int16"),
    lambda p: tuple(2 * n for n in _pool_extents(p)),
    sources=("zo_kernels_int16.c",),
)
MAX_POOL_S16 = Kernel(
    "max_pool_s16",
    "zo_max_pool_s16",
    "zo_pool_params_t",
    pooling_params.pool_s16_params,
    ("int16", "int16"),
    lambda p: tuple(2 * n for n in _pool_extents(p)),
    sources=("zo_kernels_int16.c",),
)
_KERNELS = {
    ("AVERAGE_POOL_2D", "int8"): AVG_POOL,
    ("MAX_POOL_2D", "int8"): MAX_POOL,
    ("AVERAGE_POOL_2D", "int16"): AVG_POOL_S16,
    ("MAX_POOL_2D", "int16"): MAX_POOL_S16,
}


def same_channels(graph: Graph, op: Op) -> str | None:
    """the output must have the input's channels"""
    c, oc = input_tensor(graph, op, 0).shape[3], output_tensor(graph, op).shape[3]
    return f"input channels {c}, output channels {oc}" if c != oc else None


def pool_quantization(graph: Graph, op: Op) -> str | None:
    """input and output must share scale and zero point (as TFLM requires)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if same_quantization(x, y, tolerance=1e-6) else f"input {x.describe()}, output {y.describe()}"


def lower_pool(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = _KERNELS[op.type, x.dtype]
    params = build(
        graph,
        op,
        kernel,
        input_hwc=x.shape[1:],
        output_hwc=y.shape[1:],
        filter_hw=(option(op, "filter_height"), option(op, "filter_width")),
        stride_hw=(option(op, "stride_h"), option(op, "stride_w")),
        padding=option(op, "padding"),
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        activation=option(op, "fused_activation_function"),
    )
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("AVERAGE_POOL_2D", "MAX_POOL_2D"),
        summary="int8 or int16; input and output share quantization (as TFLM requires)",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_pool,
        kernels=tuple(_KERNELS.values()),
        options=(
            at_least("filter_height", 1),
            at_least("filter_width", 1),
            at_least("stride_h", 1),
            at_least("stride_w", 1),
            one_of("padding", "SAME", "VALID"),
            FUSED_ACTIVATION,
        ),
        constraints=(image_4d, same_type, same_channels, pool_quantization, window_output_size, padding_fits_int16),
    )
)
