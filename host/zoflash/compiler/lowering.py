"""Legality and lowering: every TFLite op becomes a kernel call with its parameters, or a problem.

The op table (`LOWERINGS`) maps a TFLite builtin to a function that checks the op and returns a
`Step` (a kernel call) or an `Alias` (RESHAPE-like ops: the output reuses the input's bytes).
A check that fails raises `Problem`; `lower_graph` collects every problem of the whole graph
before anything is generated, so the user sees them all at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zoflash.compiler import kernels
from zoflash.compiler.ir import Graph, Op, Tensor
from zoflash.errors import UnsupportedModelError


class Problem(Exception):
    """One reason the model cannot be compiled; str() is the user-facing sentence."""


@dataclass
class Step:
    """One kernel call: `kernel` names an entry of kernels.KERNELS."""

    op: Op
    kernel: str
    params: dict
    # C arguments after the params pointer: a tensor index, None for NULL, or a tuple of tensor
    # indices (passed as an array of pointers).
    args: list = field(default_factory=list)
    inputs: tuple[int, ...] = ()  # activation tensors read (for lifetimes)
    outputs: tuple[int, ...] = ()


@dataclass
class Alias:
    """The output tensor is the input tensor's bytes under another shape (no code)."""

    op: Op
    source: int
    target: int


@dataclass
class Program:
    graph: Graph
    steps: list[Step]
    aliases: list[Alias]


ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def _t(graph: Graph, op: Op, pos: int, role: str, optional: bool = False) -> Tensor | None:
    if pos >= len(op.inputs) or op.inputs[pos] < 0:
        if optional:
            return None
        raise Problem(f"{op.where(graph)}: the {role} input is missing")
    return graph.tensors[op.inputs[pos]]


def _out(graph: Graph, op: Op, pos: int = 0) -> Tensor:
    if pos >= len(op.outputs):
        raise Problem(f"{op.where(graph)}: output {pos} is missing")
    return graph.tensors[op.outputs[pos]]


def _activation_tensor(graph: Graph, op: Op, t: Tensor, role: str, dtype: str = "int8") -> Tensor:
    if t.dtype != dtype:
        raise Problem(f"{op.where(graph)}: {role} {t.describe()} must be {dtype}"
                      + (" (int16 activations are not supported; quantize activations to int8)"
                         if t.dtype == "int16" else ""))
    if dtype == "int8":
        if t.quant is None:
            raise Problem(f"{op.where(graph)}: {role} {t.describe()} has no quantization parameters")
        if t.quant.per_channel:
            raise Problem(f"{op.where(graph)}: {role} {t.describe()} is quantized per channel; "
                          "activations must be per tensor")
    return t


def _const(graph: Graph, op: Op, t: Tensor, role: str, dtype: str) -> Tensor:
    if not t.is_constant:
        raise Problem(f"{op.where(graph)}: {role} '{t.name}' must be a constant (it is computed at run time)")
    if t.dtype != dtype:
        raise Problem(f"{op.where(graph)}: {role} {t.describe()} must be {dtype}")
    return t


def _activation(graph: Graph, op: Op) -> str:
    act = op.options.get("fused_activation_function", "NONE")
    if act not in ACTIVATIONS:
        raise Problem(f"{op.where(graph)}: fused activation {act} is not supported "
                      f"(supported: {', '.join(ACTIVATIONS)})")
    return act


def _weights(graph: Graph, op: Op, w: Tensor, axis: int, channels: int) -> tuple[float, ...]:
    _const(graph, op, w, "weights", "int8")
    if w.quant is None:
        raise Problem(f"{op.where(graph)}: weights '{w.name}' are not quantized (hybrid or float model)")
    if any(z != 0 for z in w.quant.zero_points):
        raise Problem(f"{op.where(graph)}: weights '{w.name}' have a non-zero zero point (int8 weights must be symmetric)")
    if w.quant.per_channel and (w.quant.axis != axis or len(w.quant.scales) != channels):
        raise Problem(f"{op.where(graph)}: weights '{w.name}' are quantized per channel along axis "
                      f"{w.quant.axis} with {len(w.quant.scales)} scales; expected axis {axis} with {channels}")
    return w.quant.scales


def _bias(graph: Graph, op: Op, pos: int, channels: int) -> Tensor | None:
    b = _t(graph, op, pos, "bias", optional=True)
    if b is None:
        return None
    _const(graph, op, b, "bias", "int32")
    if b.num_elements != channels:
        raise Problem(f"{op.where(graph)}: bias '{b.name}' has {b.num_elements} values for {channels} channels")
    return b


def _hwc(graph: Graph, op: Op, t: Tensor, role: str) -> tuple[int, int, int]:
    if len(t.shape) != 4 or t.shape[0] != 1:
        raise Problem(f"{op.where(graph)}: {role} {t.describe()} must be 4-D with batch 1")
    return tuple(t.shape[1:])


def _build(graph: Graph, op: Op, kernel: str, **kw) -> dict:
    try:
        return kernels.KERNELS[kernel].build(**kw)
    except ValueError as exc:
        raise Problem(f"{op.where(graph)}: {exc}") from None


def _same_quant(graph: Graph, op: Op, a: Tensor, b: Tensor, tolerance: float = 0.0) -> None:
    """TFLM's checks: pooling allows |scale difference| <= 1e-6, concatenation wants equality."""
    if abs(a.quant.scale - b.quant.scale) > tolerance or a.quant.zero_point != b.quant.zero_point:
        raise Problem(f"{op.where(graph)}: {a.describe()} and {b.describe()} must share scale and zero point")


def lower_conv(graph: Graph, op: Op) -> Step:
    depthwise = op.type == "DEPTHWISE_CONV_2D"
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    w = _t(graph, op, 1, "weights")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    in_hwc, out_hwc = _hwc(graph, op, x, "input"), _hwc(graph, op, y, "output")
    if len(w.shape) != 4:
        raise Problem(f"{op.where(graph)}: weights {w.describe()} must be 4-D")
    oc = out_hwc[2]
    scales = _weights(graph, op, w, 3 if depthwise else 0, oc)
    b = _bias(graph, op, 2, oc)
    o = op.options
    common = dict(input_hwc=in_hwc, output_hwc=out_hwc, stride_hw=(o["stride_h"], o["stride_w"]),
                  dilation_hw=(o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)),
                  padding=o["padding"], input_scale=x.quant.scale, input_zp=x.quant.zero_point,
                  filter_scales=scales, output_scale=y.quant.scale, output_zp=y.quant.zero_point,
                  activation=_activation(graph, op))
    if depthwise:
        params = _build(graph, op, "depthwise_conv2d", filter_1hwo=tuple(w.shape),
                        depth_multiplier=o.get("depth_multiplier", 1), **common)
    else:
        params = _build(graph, op, "conv2d", filter_ohwi=tuple(w.shape), **common)
    return Step(op, "depthwise_conv2d" if depthwise else "conv2d", params,
                args=[x.index, w.index, b.index if b is not None else None, y.index],
                inputs=(x.index,), outputs=(y.index,))


def lower_fully_connected(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    w = _t(graph, op, 1, "weights")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    if op.options.get("weights_format", 0) != 0:
        raise Problem(f"{op.where(graph)}: shuffled weights formats are not supported")
    if len(w.shape) != 2:
        raise Problem(f"{op.where(graph)}: weights {w.describe()} must be 2-D [units, depth]")
    units, depth = w.shape
    if x.num_elements % depth:
        raise Problem(f"{op.where(graph)}: input has {x.num_elements} elements, not a multiple of depth {depth}")
    scales = _weights(graph, op, w, 0, units)
    b = _bias(graph, op, 2, units)
    if b is not None and len(scales) == 1 and b.quant is not None and not b.quant.per_channel:
        # TFLM's prepare rejects a per-tensor bias whose scale is far from input x weights scale
        if abs(x.quant.scale * scales[0] - b.quant.scale) / y.quant.scale > 0.02:
            raise Problem(f"{op.where(graph)}: bias scale {b.quant.scale:.6g} does not match input x weights "
                          f"scale {x.quant.scale * scales[0]:.6g}")
    params = _build(graph, op, "fully_connected", input_elements=x.num_elements, weights_shape=(units, depth),
                    input_scale=x.quant.scale, input_zp=x.quant.zero_point, filter_scales=scales,
                    output_scale=y.quant.scale, output_zp=y.quant.zero_point, activation=_activation(graph, op))
    return Step(op, "fully_connected", params, args=[x.index, w.index, b.index if b is not None else None, y.index],
                inputs=(x.index,), outputs=(y.index,))


def lower_pool(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    _same_quant(graph, op, x, y, tolerance=1e-6)
    o = op.options
    kernel = "avg_pool" if op.type == "AVERAGE_POOL_2D" else "max_pool"
    params = _build(graph, op, kernel, input_hwc=_hwc(graph, op, x, "input"), output_hwc=_hwc(graph, op, y, "output"),
                    filter_hw=(o["filter_height"], o["filter_width"]), stride_hw=(o["stride_h"], o["stride_w"]),
                    padding=o["padding"], output_scale=y.quant.scale, output_zp=y.quant.zero_point,
                    activation=_activation(graph, op))
    return Step(op, kernel, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_binary(graph: Graph, op: Op) -> Step:
    a = _activation_tensor(graph, op, _t(graph, op, 0, "first"), "first input")
    b = _activation_tensor(graph, op, _t(graph, op, 1, "second"), "second input")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    for t in (a, b, y):
        if len(t.shape) > 4:
            raise Problem(f"{op.where(graph)}: {t.describe()} has more than 4 dimensions")
    kernel = "add" if op.type == "ADD" else "mul"
    params = _build(graph, op, kernel, input1_shape=a.shape, input2_shape=b.shape, output_shape=y.shape,
                    input1_scale=a.quant.scale, input1_zp=a.quant.zero_point, input2_scale=b.quant.scale,
                    input2_zp=b.quant.zero_point, output_scale=y.quant.scale, output_zp=y.quant.zero_point,
                    activation=_activation(graph, op))
    return Step(op, kernel, params, args=[a.index, b.index, y.index],
                inputs=tuple(t.index for t in (a, b) if not t.is_constant), outputs=(y.index,))


def lower_pad(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    pads = _t(graph, op, 1, "paddings")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    if not pads.is_constant or pads.dtype not in ("int32", "int64"):
        raise Problem(f"{op.where(graph)}: paddings '{pads.name}' must be a constant int32 tensor")
    pad_value = y.quant.zero_point  # TFLM copies bytes: no input/output quantization check
    value = _t(graph, op, 2, "constant value", optional=True)
    if value is not None:
        _const(graph, op, value, "constant value", "int8")
        if value.quant is None or value.quant.per_channel:
            raise Problem(f"{op.where(graph)}: constant value '{value.name}' has no per-tensor quantization")
        _same_quant(graph, op, value, y)
        pad_value = int(value.data.reshape(-1)[0])
    paddings = tuple((int(p[0]), int(p[1])) for p in np.asarray(pads.data).reshape(-1, 2))
    params = _build(graph, op, "pad", input_shape=x.shape, paddings=paddings, pad_value=pad_value)
    return Step(op, "pad", params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_concat(graph: Graph, op: Op) -> Step:
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    xs = [_activation_tensor(graph, op, graph.tensors[i], f"input {k}") for k, i in enumerate(op.inputs)]
    for x in xs:
        _same_quant(graph, op, x, y)
    if _activation(graph, op) != "NONE":
        raise Problem(f"{op.where(graph)}: a fused activation on CONCATENATION is not supported")
    axis = op.options.get("axis", 0)
    axis = axis + len(y.shape) if axis < 0 else axis
    params = _build(graph, op, "concat", input_shapes=[x.shape for x in xs], axis=axis)
    return Step(op, "concat", params, args=[tuple(x.index for x in xs), y.index],
                inputs=tuple(x.index for x in xs if not x.is_constant), outputs=(y.index,))


def lower_mean(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    axes_t = _t(graph, op, 1, "axes")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    if not axes_t.is_constant:
        raise Problem(f"{op.where(graph)}: the reduction axes must be constant")
    axes = tuple(sorted({int(a) % len(x.shape) for a in np.asarray(axes_t.data).reshape(-1)}))
    params = _build(graph, op, "mean", input_shape=x.shape, axes=axes, input_scale=x.quant.scale,
                    input_zp=x.quant.zero_point, output_scale=y.quant.scale, output_zp=y.quant.zero_point)
    return Step(op, "mean", params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_softmax(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    depth = x.shape[-1] if x.shape else 1
    params = _build(graph, op, "softmax", outer=x.num_elements // depth, depth=depth,
                    beta=op.options.get("beta", 1.0), input_scale=x.quant.scale, input_zp=x.quant.zero_point,
                    output_scale=y.quant.scale, output_zp=y.quant.zero_point)
    return Step(op, "softmax", params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_elementwise(graph: Graph, op: Op) -> Step:
    """LOGISTIC and QUANTIZE (int8 -> int8): one input, one output of the same size."""
    x = _t(graph, op, 0, "input")
    if op.type == "QUANTIZE" and x.dtype == "float32":
        raise Problem(f"{op.where(graph)}: QUANTIZE from float32 means the model takes float input; "
                      "re-export it with inference_input_type=tf.int8")
    x = _activation_tensor(graph, op, x, "input")
    y = _activation_tensor(graph, op, _out(graph, op), "output")
    kernel = "logistic" if op.type == "LOGISTIC" else "requantize"
    params = _build(graph, op, kernel, size=x.num_elements, input_scale=x.quant.scale, input_zp=x.quant.zero_point,
                    output_scale=y.quant.scale, output_zp=y.quant.zero_point)
    return Step(op, kernel, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_dequantize(graph: Graph, op: Op) -> Step:
    x = _activation_tensor(graph, op, _t(graph, op, 0, "input"), "input")
    y = _out(graph, op)
    if y.dtype != "float32":
        raise Problem(f"{op.where(graph)}: DEQUANTIZE to {y.dtype} is not supported (only int8 -> float32)")
    if y.index not in graph.outputs or graph.consumers().get(y.index):
        raise Problem(f"{op.where(graph)}: DEQUANTIZE is supported only as a model output "
                      "(float compute inside the graph is not)")
    params = _build(graph, op, "dequantize", size=x.num_elements, scale=x.quant.scale, zp=x.quant.zero_point)
    return Step(op, "dequantize", params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


def lower_reshape(graph: Graph, op: Op) -> Alias:
    x = _t(graph, op, 0, "input")
    y = _out(graph, op)
    if x.dtype != y.dtype or x.num_elements != y.num_elements:
        raise Problem(f"{op.where(graph)}: reshapes {x.describe()} to {y.describe()}, which changes the data")
    if not x.is_constant:
        _activation_tensor(graph, op, x, "input")
    return Alias(op, x.index, y.index)


LOWERINGS = {
    "CONV_2D": lower_conv, "DEPTHWISE_CONV_2D": lower_conv, "FULLY_CONNECTED": lower_fully_connected,
    "AVERAGE_POOL_2D": lower_pool, "MAX_POOL_2D": lower_pool, "ADD": lower_binary, "MUL": lower_binary,
    "RESHAPE": lower_reshape, "SQUEEZE": lower_reshape, "EXPAND_DIMS": lower_reshape,
    "PAD": lower_pad, "PADV2": lower_pad, "CONCATENATION": lower_concat, "MEAN": lower_mean,
    "SOFTMAX": lower_softmax, "LOGISTIC": lower_elementwise, "QUANTIZE": lower_elementwise,
    "DEQUANTIZE": lower_dequantize,
}
SUPPORTED_OPS = tuple(sorted(LOWERINGS))


def graph_problems(graph: Graph) -> list[str]:
    """Whole-model checks: subgraphs, I/O types, dynamic shapes, batch, sparse/variable tensors."""
    problems = []
    if graph.num_subgraphs > 1:
        problems.append(f"the model has {graph.num_subgraphs} subgraphs (control flow); only one is supported")
    if not graph.ops:
        problems.append("the model has no operators")
    producer = graph.producer()
    for role, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        for i in tensors:
            t = graph.tensors[i]
            float_out = role == "output" and t.dtype == "float32" and producer.get(i) is not None \
                and producer[i].type == "DEQUANTIZE"
            if t.dtype != "int8" and not float_out:
                hint = (" (int16 activations, 16x8 quantization, are not supported: convert with int8 activations)"
                        if t.dtype == "int16" else
                        " (a float model, or float I/O: convert with full-integer quantization and "
                        "inference_input_type = inference_output_type = tf.int8)")
                problems.append(f"model {role} {t.describe()} is {t.dtype}, not int8{hint}")
            if t.shape and t.shape[0] != 1 and role == "input":
                problems.append(f"model input {t.describe()} has batch {t.shape[0]}; export with batch size 1")
    for t in graph.tensors:
        if t.shape_signature is not None and any(d < 0 for d in t.shape_signature):
            problems.append(f"tensor {t.describe()} has a dynamic shape {list(t.shape_signature)}; "
                            "export with a fixed shape and batch size 1 (tf.keras.Input(shape, batch_size=1))")
        if t.sparse:
            problems.append(f"tensor {t.describe()} is sparse; sparse weights are not supported")
        if t.is_variable:
            problems.append(f"tensor {t.describe()} is a variable (stateful model); not supported")
    return problems


def lower_graph(graph: Graph) -> Program:
    """Check and lower the whole graph; raise UnsupportedModelError listing every problem."""
    problems = graph_problems(graph)
    steps, aliases = [], []
    for op in graph.ops:
        rule = LOWERINGS.get(op.type)
        if rule is None:
            problems.append(f"{op.where(graph)}: operator {op.type} is not supported "
                            f"(supported: {', '.join(SUPPORTED_OPS)})")
            continue
        try:
            result = rule(graph, op)
        except Problem as p:
            problems.append(str(p))
            continue
        except (KeyError, IndexError, TypeError) as exc:  # malformed options or shapes
            problems.append(f"{op.where(graph)}: malformed operator ({type(exc).__name__}: {exc})")
            continue
        (aliases if isinstance(result, Alias) else steps).append(result)
    if problems:
        raise UnsupportedModelError(graph.name, problems)
    return Program(graph=graph, steps=steps, aliases=aliases)
