"""One input, one output of the same shape: SOFTMAX, LOG_SOFTMAX, LOGISTIC, QUANTIZE (int8 -> int8, and at the
model's edges uint8 -> int8, float32 -> int8, int8 -> uint8), DEQUANTIZE (int8 -> float32, as a
model output), RELU, RELU6, LEAKY_RELU, TANH, HARD_SWISH and RSQRT."""

from __future__ import annotations

import math

from zoflash.compiler import quant
from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import activation_params
from zoflash.compiler.ops.common import INT8_INT16, same_shape, same_type
from zoflash.compiler.ops.registry import (
    DATA,
    Arg,
    Kernel,
    OpEntry,
    Option,
    build,
    input_tensor,
    option,
    output_tensor,
    positive,
    register,
)
from zoflash.compiler.program import Step

SOFTMAX = Kernel(
    "softmax",
    "zo_softmax_s8",
    "zo_softmax_params_t",
    activation_params.softmax_params,
    ("int8", "int8"),
    lambda p: (p["outer"] * p["depth"], p["outer"] * p["depth"]),
    sources=("zo_kernels_misc.c",),
)
LOG_SOFTMAX = Kernel(
    "log_softmax",
    "zo_log_softmax_s8",
    "zo_log_softmax_params_t",
    activation_params.log_softmax_params,
    ("int8", "int8"),
    lambda p: (p["outer"] * p["depth"], p["outer"] * p["depth"]),
    sources=("zo_kernels_misc.c",),
)
LOGISTIC = Kernel(
    "logistic",
    "zo_logistic_s8",
    "zo_logistic_params_t",
    activation_params.logistic_params,
    ("int8", "int8"),
    lambda p: (p["size"], p["size"]),
    sources=("zo_kernels_elementwise.c",),
)
REQUANTIZE = Kernel(
    "requantize",
    "zo_requantize_s8",
    "zo_requantize_params_t",
    activation_params.requantize_params,
    ("int8", "int8"),
    lambda p: (p["size"], p["size"]),
    sources=("zo_kernels_elementwise.c",),
)
REQUANTIZE_U8_S8 = Kernel(
    "requantize_u8_s8",
    "zo_requantize_u8_s8",
    "zo_requantize_params_t",
    activation_params.requantize_u8_params,
    ("uint8", "int8"),
    lambda p: (p["size"], p["size"]),
    sources=("zo_kernels_quantize.c",),
)
REQUANTIZE_S8_U8 = Kernel(
    "requantize_s8_u8",
    "zo_requantize_s8_u8",
    "zo_requantize_params_t",
    activation_params.requantize_u8_params,
    ("int8", "uint8"),
    lambda p: (p["size"], p["size"]),
    sources=("zo_kernels_quantize.c",),
)
QUANTIZE_F32 = Kernel(
    "quantize_f32_s8",
    "zo_quantize_f32_s8",
    "zo_quantize_params_t",
    activation_params.quantize_f32_params,
    ("float32", "int8"),
    lambda p: (4 * p["size"], p["size"]),
    sources=("zo_kernels_quantize.c",),
)
REQUANTIZE_S16_S8 = Kernel(
    "requantize_s16_s8",
    "zo_requantize_s16_s8",
    "zo_requantize_params_t",
    activation_params.requantize_s16_params,
    ("int16", "int8"),
    lambda p: (2 * p["size"], p["size"]),
    sources=("zo_kernels_sequence.c",),
)
DEQUANTIZE = Kernel(
    "dequantize",
    "zo_dequantize_s8",
    "zo_dequantize_params_t",
    activation_params.dequantize_params,
    ("int8", "float32"),
    lambda p: (p["size"], 4 * p["size"]),
    sources=("zo_kernels_elementwise.c",),
)

# ---- int16 activations (16x8 quantization): zo_kernels_int16.c, params in compiler/ops/activation_params.py
_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "float32": 4}
_SHORT = {"int8": "s8", "int16": "s16", "int32": "s32"}


def _requantize_int(x_type: str, y_type: str) -> Kernel:
    name = f"requantize_{_SHORT[x_type]}_{_SHORT[y_type]}"
    return Kernel(
        name,
        f"zo_{name}",
        "zo_requantize_params_t",
        activation_params.requantize_int_params,
        (x_type, y_type),
        lambda p: (_BYTES[x_type] * p["size"], _BYTES[y_type] * p["size"]),
        sources=("zo_kernels_int16.c",),
    )


SOFTMAX_S8_S16 = Kernel(
    "softmax_s8_s16",
    "zo_softmax_s8_s16",
    "zo_softmax_params_t",
    activation_params.softmax_s8_s16_params,
    ("int8", "int16"),
    lambda p: (p["outer"] * p["depth"], 2 * p["outer"] * p["depth"]),
    sources=("zo_kernels_misc.c",),
)
SOFTMAX_S16 = Kernel(
    "softmax_s16",
    "zo_softmax_s16",
    "zo_softmax_s16_params_t",
    activation_params.softmax_s16_params,
    ("int16", "int16"),
    lambda p: (2 * p["outer"] * p["depth"], 2 * p["outer"] * p["depth"]),
    sources=("zo_kernels_int16.c",),
)
# SOFTMAX's kernel by (input, output) type.
_SOFTMAX_KERNELS = {("int8", "int8"): SOFTMAX, ("int8", "int16"): SOFTMAX_S8_S16, ("int16", "int16"): SOFTMAX_S16}
DEQUANTIZE_S16 = Kernel(
    "dequantize_s16",
    "zo_dequantize_s16",
    "zo_dequantize_params_t",
    activation_params.dequantize_s16_params,
    ("int16", "float32"),
    lambda p: (2 * p["size"], 4 * p["size"]),
    sources=("zo_kernels_int16.c",),
)
QUANTIZE_F32_S16 = Kernel(
    "quantize_f32_s16",
    "zo_quantize_f32_s16",
    "zo_quantize_params_t",
    activation_params.quantize_f32_s16_params,
    ("float32", "int16"),
    lambda p: (4 * p["size"], 2 * p["size"]),
    sources=("zo_kernels_int16.c",),
)
# ---- end of int16 activations

# QUANTIZE's kernel by (input, output) type: the pairs of TFLM's QUANTIZE zoflash runs.
_QUANTIZE_KERNELS = {
    ("int8", "int8"): REQUANTIZE,
    ("uint8", "int8"): REQUANTIZE_U8_S8,
    ("int8", "uint8"): REQUANTIZE_S8_U8,
    ("float32", "int8"): QUANTIZE_F32,
    ("int16", "int8"): REQUANTIZE_S16_S8,
    ("float32", "int16"): QUANTIZE_F32_S16,
    **{
        (a, b): _requantize_int(a, b)
        for a, b in (("int8", "int16"), ("int16", "int16"), ("int16", "int32"), ("int8", "int32"))
    },
}

# TFLM's int8 SOFTMAX and LOGISTIC produce probabilities in this quantization.
_PROBABILITY_ZERO_POINT = -128
_PROBABILITY_SCALE = 1.0 / 256.0


def softmax_types(graph: Graph, op: Op) -> str | None:
    """SOFTMAX must be int8 -> int8, int8 -> int16 or int16 -> int16"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if (x.dtype, y.dtype) in _SOFTMAX_KERNELS else f"{x.dtype} -> {y.dtype}"


def softmax_output_quantization(graph: Graph, op: Op) -> str | None:
    """the output must have scale 1/256 and zero point -128 (int8), 1/65536 and -32768 (int8 -> int16), or
    1/32768 and 0 with an input zero point 0 (int16 -> int16), as TFLM requires"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    if y.dtype == "int8":
        if y.quant.zero_point == _PROBABILITY_ZERO_POINT and quant.f32(y.quant.scale) == _PROBABILITY_SCALE:
            return None
    elif x.dtype == "int8":
        if y.quant.zero_point == -32768 and activation_params.near_f32(y.quant.scale, 1 / 65536, 0.001 / 65536):
            return None
    elif x.quant.zero_point == 0 == y.quant.zero_point and activation_params.near_f32(
        y.quant.scale, 1 / 32768, 0.001 / 32768
    ):
        return None
    return f"input {x.describe()}, output {y.describe()}"


def log_softmax_output_quantization(graph: Graph, op: Op) -> str | None:
    """the output must have scale 16/256 and zero point 127, as TFLM requires"""
    y = output_tensor(graph, op)
    if y.quant.zero_point == 127 and quant.f32(y.quant.scale) == 16.0 / 256.0:
        return None
    return f"output {y.describe()}"


def lower_log_softmax(graph: Graph, op: Op) -> Step:
    x, y, q = _io(graph, op)
    depth = x.shape[-1] if x.shape else 1
    params = build(graph, op, LOG_SOFTMAX, outer=x.num_elements // depth, depth=depth, **q)
    return Step(op, LOG_SOFTMAX.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def logistic_output_zero_point(graph: Graph, op: Op) -> str | None:
    """the output must have zero point -128 (as TFLM requires)"""
    y = output_tensor(graph, op)
    return None if y.quant.zero_point == _PROBABILITY_ZERO_POINT else f"output {y.describe()}"


def model_output_only(graph: Graph, op: Op) -> str | None:
    """DEQUANTIZE is supported only as a model output (float compute inside the graph is not)"""
    y = output_tensor(graph, op)
    if y.index in graph.outputs and not graph.consumers().get(y.index):
        return None
    return f"output '{y.name}' is not a model output, or other ops read it"


def quantize_types(graph: Graph, op: Op) -> str | None:
    """QUANTIZE must be int8 -> int8, int16, int32 or uint8; int16 -> int8, int16 or int32; uint8 -> int8; or
    float32 -> int8 or int16"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return None if (x.dtype, y.dtype) in _QUANTIZE_KERNELS else f"{x.dtype} -> {y.dtype}"


def quantize_per_tensor(graph: Graph, op: Op) -> str | None:
    """QUANTIZE's integer input and output must be quantized per tensor (one scale and zero point)"""
    issues = []
    for role, t in (("input", input_tensor(graph, op, 0)), ("output", output_tensor(graph, op))):
        if t.dtype != "float32" and (t.quant is None or t.quant.per_channel):
            issues.append(f"{role} {t.describe()} " + ("has no quantization" if t.quant is None else "is per channel"))
    return "; ".join(issues) or None


def _io(graph: Graph, op: Op):
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return (
        x,
        y,
        dict(
            input_scale=x.quant.scale,
            input_zp=x.quant.zero_point,
            output_scale=y.quant.scale,
            output_zp=y.quant.zero_point,
        ),
    )


def lower_softmax(graph: Graph, op: Op) -> Step:
    x, y, q = _io(graph, op)
    kernel = _SOFTMAX_KERNELS[x.dtype, y.dtype]
    depth = x.shape[-1] if x.shape else 1
    params = build(graph, op, kernel, outer=x.num_elements // depth, depth=depth, beta=option(op, "beta"), **q)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_elementwise(graph: Graph, op: Op) -> Step:
    x, y, q = _io(graph, op)
    kernel = LOGISTIC if op.type == "LOGISTIC" else REQUANTIZE
    params = build(graph, op, kernel, size=x.num_elements, **q)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_quantize(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = _QUANTIZE_KERNELS[x.dtype, y.dtype]
    if kernel is REQUANTIZE:
        return lower_elementwise(graph, op)
    if kernel in (QUANTIZE_F32, QUANTIZE_F32_S16):  # a float input has no quantization of its own
        params = build(graph, op, kernel, size=x.num_elements, output_scale=y.quant.scale, output_zp=y.quant.zero_point)
    elif kernel is REQUANTIZE_S16_S8:
        params = build(graph, op, kernel, size=x.num_elements, **_io(graph, op)[2])
    else:
        params = build(
            graph, op, kernel, size=x.num_elements, input_dtype=x.dtype, output_dtype=y.dtype, **_io(graph, op)[2]
        )
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_dequantize(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = DEQUANTIZE if x.dtype == "int8" else DEQUANTIZE_S16
    params = build(graph, op, kernel, size=x.num_elements, scale=x.quant.scale, zp=x.quant.zero_point)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("SOFTMAX",),
        summary="int8 -> int8 (scale 1/256, zero point -128), int8 -> int16 (scale 1/65536, zero "
        "point -32768) and int16 -> int16 (scale 1/32768, zero points 0)",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_softmax,
        kernels=tuple(_SOFTMAX_KERNELS.values()),
        options=(positive("beta", default=1.0),),
        constraints=(same_shape, softmax_types, softmax_output_quantization),
    )
)

register(
    OpEntry(
        types=("LOG_SOFTMAX",),
        summary="int8 -> int8 (scale 16/256, zero point 127); as the model's last op it trains "
        "(the loss reads the logits before it: cross-entropy = -log p[label])",
        inputs=(Arg("input", dtypes=("int8",)),),
        outputs=(Arg("output", dtypes=("int8",)),),
        lower=lower_log_softmax,
        kernels=(LOG_SOFTMAX,),
        constraints=(same_shape, log_softmax_output_quantization),
    )
)

register(
    OpEntry(
        types=("LOGISTIC",),
        summary="int8 -> int8",
        inputs=(Arg("input"),),
        outputs=(Arg("output"),),
        lower=lower_elementwise,
        kernels=(LOGISTIC,),
        constraints=(same_shape, logistic_output_zero_point),
    )
)

register(
    OpEntry(
        types=("QUANTIZE",),
        summary="requantization int8/int16 -> int8/int16/int32; uint8 -> int8, float32 -> int8/int16 "
        "and int8 -> uint8 (a model taking or giving uint8 or float data)",
        inputs=(Arg("input", DATA, ("int8", "uint8", "float32", "int16")),),
        outputs=(Arg("output", DATA, ("int8", "uint8", "int16", "int32")),),
        lower=lower_quantize,
        kernels=tuple(_QUANTIZE_KERNELS.values()),
        constraints=(same_shape, quantize_types, quantize_per_tensor),
    )
)

register(
    OpEntry(
        types=("DEQUANTIZE",),
        summary="int8 or int16 -> float32, as a model output",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", DATA, ("float32",)),),
        lower=lower_dequantize,
        kernels=(DEQUANTIZE, DEQUANTIZE_S16),
        constraints=(same_shape, model_output_only),
    )
)


# ------------------------------------------- RELU, RELU6, LEAKY_RELU, TANH, HARD_SWISH, RSQRT ----------


def _unary(name: str, struct: str, builder) -> Kernel:
    return Kernel(
        name,
        f"zo_{name}_s8",
        struct,
        builder,
        ("int8", "int8"),
        lambda p: (p["size"], p["size"]),
        sources=("zo_kernels_activation.c",),
    )


RELU = _unary("relu", "zo_relu_params_t", activation_params.relu_params)
RELU6 = _unary("relu6", "zo_relu6_params_t", activation_params.relu6_params)
LEAKY_RELU = _unary("leaky_relu", "zo_leaky_relu_params_t", activation_params.leaky_relu_params)
TANH = _unary("tanh", "zo_logistic_params_t", activation_params.tanh_params)
HARD_SWISH = _unary("hard_swish", "zo_hard_swish_params_t", activation_params.hard_swish_params)
RSQRT = _unary("rsqrt", "zo_rsqrt_params_t", activation_params.rsqrt_params)
_UNARY = {"RELU": RELU, "LEAKY_RELU": LEAKY_RELU, "TANH": TANH, "HARD_SWISH": HARD_SWISH, "RSQRT": RSQRT}
# int16 (16x8 models): RELU, RELU6 and LEAKY_RELU
_UNARY_S16 = {
    op: Kernel(
        f"{name}_s16",
        f"zo_{name}_s16",
        struct,
        builder,
        ("int16", "int16"),
        lambda p: (2 * p["size"], 2 * p["size"]),
        sources=("zo_kernels_activation.c",),
    )
    for op, name, struct, builder in (
        ("RELU", "relu", "zo_relu_params_t", activation_params.relu_s16_params),
        ("RELU6", "relu6", "zo_relu6_params_t", activation_params.relu6_s16_params),
        ("LEAKY_RELU", "leaky_relu", "zo_leaky_relu_params_t", activation_params.leaky_relu_s16_params),
    )
}


# LEAKY_RELU's alpha: any finite float (the schema's default is 0).
_ALPHA = Option(
    "alpha",
    "a finite number",
    lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    default=0.0,
)


def lower_unary(graph: Graph, op: Op) -> Step:
    x, y, q = _io(graph, op)
    int16 = x.dtype == "int16"
    if op.type == "RELU6":
        kernel = _UNARY_S16["RELU6"] if int16 else RELU6
        params = build(graph, op, kernel, size=x.num_elements, input_scale=x.quant.scale, input_zp=x.quant.zero_point)
    else:
        kernel = _UNARY_S16[op.type] if int16 else _UNARY[op.type]
        extra = dict(alpha=option(op, "alpha")) if op.type == "LEAKY_RELU" else {}
        params = build(graph, op, kernel, size=x.num_elements, **extra, **q)
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


register(
    OpEntry(
        types=("RELU",),
        summary="int8 -> int8 or int16 -> int16, rescaled to the output",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_unary,
        kernels=(RELU, _UNARY_S16["RELU"]),
        constraints=(same_shape, same_type),
    )
)

register(
    OpEntry(
        types=("RELU6",),
        summary="int8 -> int8 or int16 -> int16; clamps the stored values to the input's 0 and 6 without "
        "rescaling, as TFLM does (the output should share the input's quantization)",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_unary,
        kernels=(RELU6, _UNARY_S16["RELU6"]),
        constraints=(same_shape, same_type),
    )
)

register(
    OpEntry(
        types=("LEAKY_RELU",),
        summary="int8 -> int8 or int16 -> int16, any alpha",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_unary,
        kernels=(LEAKY_RELU, _UNARY_S16["LEAKY_RELU"]),
        options=(_ALPHA,),
        constraints=(same_shape, same_type),
    )
)

register(
    OpEntry(
        types=("TANH",),
        summary="int8 -> int8 (TFLM's output is Q0.7: scale 1/128, zero point 0)",
        inputs=(Arg("input"),),
        outputs=(Arg("output"),),
        lower=lower_unary,
        kernels=(TANH,),
        constraints=(same_shape,),
    )
)

register(
    OpEntry(
        types=("HARD_SWISH",),
        summary="int8 -> int8 (input scale / output scale at most 128)",
        inputs=(Arg("input"),),
        outputs=(Arg("output"),),
        lower=lower_unary,
        kernels=(HARD_SWISH,),
        constraints=(same_shape,),
    )
)

register(
    OpEntry(
        types=("RSQRT",),
        summary="int8 -> int8; inputs below the zero point give 127 (TFLM stops with an error)",
        inputs=(Arg("input"),),
        outputs=(Arg("output"),),
        lower=lower_unary,
        kernels=(RSQRT,),
        constraints=(same_shape,),
    )
)
# -------------------------------------------------------------- end of RELU ... RSQRT ----------
