"""Constraints every op must meet (GENERIC), and constraints several op families share.

The legality pass runs STRUCTURE first: when an op lacks a tensor, nothing else about it can
be checked. Then GENERIC and the op's own constraints, all of them, so the user sees every
problem at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ir import Graph, Op, Tensor
from zoflash.compiler.ops.params_common import INT16_MAX
from zoflash.compiler.ops.registry import (
    ACTIVATION,
    CONSTANT,
    OPS,
    REQUIRED,
    Arg,
    input_tensor,
    option,
    output_tensor,
    shape,
)

INT32_MAX = 2**31 - 1
_INT16_HINT = "zoflash runs this op on int8 activations only"


def bound_tensors(graph: Graph, op: Op) -> Iterator[tuple[Arg, Tensor]]:
    """Every tensor of the op (inputs, then outputs) with the declaration it fills."""
    args = OPS.get(op.type).inputs
    for pos, index in enumerate(op.inputs):
        arg = args[pos] if pos < len(args) else args[-1]  # past the declared ones: the variadic one
        if index >= 0:
            yield arg, graph.tensors[index]
    outs = OPS.get(op.type).outputs
    for pos, index in enumerate(op.outputs):
        yield (outs[pos] if pos < len(outs) else outs[-1]), graph.tensors[index]


def activation_issue(t: Tensor, role: str, hint: str = "", dtypes: tuple[str, ...] = ("int8",)) -> str | None:
    """Why `t` cannot be an activation of one of `dtypes` (int8 unless the op lists int16), or None."""
    if t.dtype not in dtypes:
        hint = _INT16_HINT if t.dtype == "int16" else hint
        return f"{role} {t.describe()} is {t.dtype}" + (f" ({hint})" if hint else "")
    if t.quant is None:
        return f"{role} {t.describe()} has no quantization parameters"
    if t.quant.per_channel:
        return f"{role} {t.describe()} is quantized per channel"
    return None


# --------------------------------------------------------------------------------- STRUCTURE


def tensors_exist(graph: Graph, op: Op) -> str | None:
    """every tensor the op names must exist in the model"""
    n = len(graph.tensors)
    bad = [i for i in op.inputs if not -1 <= i < n] + [i for i in op.outputs if not 0 <= i < n]
    return f"tensor indices {bad}; the model has {n} tensors" if bad else None


def has_every_tensor(graph: Graph, op: Op) -> str | None:
    """the op must have each input and output it needs, and no other"""
    entry = OPS.get(op.type)
    issues = []
    for pos, arg in enumerate(entry.inputs):
        if not arg.optional and (pos >= len(op.inputs) or op.inputs[pos] < 0):
            issues.append(f"the {arg.role} input is missing")
    if not (entry.inputs and entry.inputs[-1].variadic) and len(op.inputs) > len(entry.inputs):
        issues.append(f"{len(op.inputs)} inputs, at most {len(entry.inputs)} expected")
    if entry.outputs and entry.outputs[-1].variadic:  # SPLIT and UNPACK: one or more
        if len(op.outputs) < len(entry.outputs):
            issues.append(f"{len(op.outputs)} outputs, at least {len(entry.outputs)} expected")
    elif len(op.outputs) != len(entry.outputs):
        issues.append(f"{len(op.outputs)} outputs, {len(entry.outputs)} expected")
    return "; ".join(issues) or None


STRUCTURE = (tensors_exist, has_every_tensor)


# ----------------------------------------------------------------------------------- GENERIC


def activations_int8(graph: Graph, op: Op) -> str | None:
    """activations must be int8 (or int16 where `zoflash ops` lists it) with per-tensor quantization (one scale
    and zero point)"""
    issues = [
        activation_issue(t, arg.role, arg.hint, arg.dtypes)
        for arg, t in bound_tensors(graph, op)
        if arg.kind == ACTIVATION
    ]
    return "; ".join(i for i in issues if i) or None


def parameters_constant(graph: Graph, op: Op) -> str | None:
    """weights, biases and parameter inputs must be constant tensors of the listed type (see `zoflash ops`)"""
    issues = []
    for arg, t in bound_tensors(graph, op):
        if arg.kind == CONSTANT and not t.is_constant:
            issues.append(f"{arg.role} '{t.name}' is computed at run time")
        elif arg.kind != ACTIVATION and arg.dtypes and t.dtype not in arg.dtypes:
            issues.append(
                f"{arg.role} {t.describe()} is {t.dtype}, not {'/'.join(arg.dtypes)}"
                + (f" ({arg.hint})" if arg.hint else "")
            )
    return "; ".join(issues) or None


def outputs_computed(graph: Graph, op: Op) -> str | None:
    """an op's output must not be a constant tensor"""
    bad = [f"'{graph.tensors[i].name}'" for i in op.outputs if graph.tensors[i].is_constant]
    return f"{', '.join(bad)} has constant data" if bad else None


def options_accepted(graph: Graph, op: Op) -> str | None:
    """every option must have a value zoflash supports (`zoflash ops` lists them)"""
    issues = []
    for opt in OPS.get(op.type).options:
        value = op.options.get(opt.name, opt.default)
        if value is REQUIRED:
            issues.append(f"{opt.name} is missing")
        elif not opt.accepts(value):
            issues.append(f"{opt.name} is {value!r} (supported: {opt.accepted})")
    return "; ".join(issues) or None


def sizes_fit_int32(graph: Graph, op: Op) -> str | None:
    """every tensor must be smaller than 2 GiB (the kernels count elements in int32)"""
    big = [t.describe() for _, t in bound_tensors(graph, op) if t.nbytes > INT32_MAX]
    return "; ".join(big) or None


GENERIC = (activations_int8, parameters_constant, outputs_computed, options_accepted, sizes_fit_int32)


# ------------------------------------------------------------------ shared by several families


def image_4d(graph: Graph, op: Op) -> str | None:
    """input and output must be 4-D [1, height, width, channels] (batch 1)"""
    bad = [
        t.describe()
        for t in (input_tensor(graph, op, 0), output_tensor(graph, op))
        if len(t.shape) != 4 or t.shape[0] != 1
    ]
    return "; ".join(bad) or None


def window_output_size(graph: Graph, op: Op) -> str | None:
    """the output height and width must be what the padding, strides and dilations give for the input
    (and the window must fit the input)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        window, dilation = (option(op, "filter_height"), option(op, "filter_width")), (1, 1)
    else:
        w = input_tensor(graph, op, 1)
        window = (w.shape[1], w.shape[2])
        dilation = (option(op, "dilation_h_factor"), option(op, "dilation_w_factor"))
    stride, padding = (option(op, "stride_h"), option(op, "stride_w")), option(op, "padding")
    (out_h, out_w), _ = quant.compute_padding_hw(stride, dilation, x.shape[1:3], window, padding)
    if out_h >= 1 and out_w >= 1 and (out_h, out_w) == tuple(y.shape[1:3]):
        return None
    return (
        f"input {shape(x)}, window {window[0]}x{window[1]}, stride {stride}, dilation {dilation}, "
        f"{padding} padding give {out_h}x{out_w}; the output is {shape(y)}"
    )


def _window(graph: Graph, op: Op):
    """(window, stride, dilation, padding, the size the padding is computed for) of a windowed op."""
    stride, padding = (option(op, "stride_h"), option(op, "stride_w")), option(op, "padding")
    if op.type in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        window, dilation = (option(op, "filter_height"), option(op, "filter_width")), (1, 1)
        return window, stride, dilation, padding, input_tensor(graph, op, 0).shape[1:3]
    if op.type == "TRANSPOSE_CONV":  # TFLM pads as for a convolution of the output with the window
        w = input_tensor(graph, op, 1)
        return (w.shape[1], w.shape[2]), stride, (1, 1), padding, output_tensor(graph, op).shape[1:3]
    w = input_tensor(graph, op, 1)
    dilation = (option(op, "dilation_h_factor"), option(op, "dilation_w_factor"))
    return (w.shape[1], w.shape[2]), stride, dilation, padding, input_tensor(graph, op, 0).shape[1:3]


def padding_fits_int16(graph: Graph, op: Op) -> str | None:
    """the padding TFLM computes must fit its int16 fields (at most 32767), the dilated window int32"""
    window, stride, dilation, padding, size = _window(graph, op)
    if max(*stride, *dilation) > INT16_MAX:  # options_accepted refuses these already
        return None
    effective = [(k - 1) * d + 1 for k, d in zip(window, dilation)]
    if max(effective) > quant.INT32_MAX:
        return f"window {window[0]}x{window[1]} with dilation {dilation} spans {effective[0]}x{effective[1]}"
    (out_h, out_w), pads = quant.compute_padding_hw(stride, dilation, size, window, padding)
    if max(pads) <= INT16_MAX:
        return None
    return (
        f"window {window[0]}x{window[1]}, stride {stride}, dilation {dilation}, {padding} padding give a "
        f"padding of {pads[0]}x{pads[1]}"
    )


def same_shape(graph: Graph, op: Op) -> str | None:
    """the output must have the input's shape"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    return f"input {shape(x)}, output {shape(y)}" if tuple(x.shape) != tuple(y.shape) else None


def weights_axis(op: Op) -> int:
    """The output-channel axis of the weights: [out, ...] except DEPTHWISE_CONV_2D's [1, h, w, out]."""
    return 3 if op.type == "DEPTHWISE_CONV_2D" else 0


def weights_quantized(graph: Graph, op: Op) -> str | None:
    """the weights must be int8 quantized (not a float or hybrid model)"""
    w = input_tensor(graph, op, 1)
    return f"weights '{w.name}' have no quantization parameters" if w.quant is None else None


def weights_symmetric(graph: Graph, op: Op) -> str | None:
    """int8 weights must be symmetric (zero point 0)"""
    w = input_tensor(graph, op, 1)
    zps = sorted({z for z in w.quant.zero_points if z != 0})
    return f"weights '{w.name}' have zero points {zps}" if zps else None


def weights_scales_per_output_channel(graph: Graph, op: Op) -> str | None:
    """per-channel weights need one scale per output channel, along the output-channel axis"""
    w = input_tensor(graph, op, 1)
    q, axis = w.quant, weights_axis(op)
    if not q.per_channel or (q.axis == axis and len(q.scales) == w.shape[axis]):
        return None
    return (
        f"weights '{w.name}' {shape(w)} have {len(q.scales)} scales along axis {q.axis}; "
        f"expected {w.shape[axis]} along axis {axis}"
    )


def bias_per_output_channel(graph: Graph, op: Op) -> str | None:
    """the bias must have one value per output channel"""
    w, b = input_tensor(graph, op, 1), input_tensor(graph, op, 2)
    if b is None or b.num_elements == w.shape[weights_axis(op)]:
        return None
    return f"bias '{b.name}' has {b.num_elements} values for {w.shape[weights_axis(op)]} output channels"


WEIGHTS = (weights_quantized, weights_symmetric, weights_scales_per_output_channel, bias_per_output_channel)


def same_quantization(a: Tensor, b: Tensor, tolerance: float = 0.0) -> bool:
    """TFLM's checks: pooling allows |scale difference| <= 1e-6, concatenation wants equality."""
    return abs(a.quant.scale - b.quant.scale) <= tolerance and a.quant.zero_point == b.quant.zero_point


def output_keeps_input_quantization(why: str):
    """A constraint: input 0 and output 0 share scale and zero point exactly; `why` says why the op
    needs it (it goes into the rule the user reads)."""

    def check(graph, op) -> str | None:
        x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if same_quantization(x, y):
            return None
        return (
            f"input scale {x.quant.scale:.9g}, zero point {x.quant.zero_point}; output scale "
            f"{y.quant.scale:.9g}, zero point {y.quant.zero_point}"
        )

    check.__doc__ = f"input and output must share scale and zero point ({why})"
    check.__name__ = "output_keeps_input_quantization"
    return check


# ==== int16 activations (16x8 quantization) ====================================================

INT8_INT16 = ("int8", "int16")  # the activation types of ops with a 16x8 variant


def same_type(graph: Graph, op: Op) -> str | None:
    """every activation must have the same type (all int8 or all int16)"""
    types = {t.dtype for arg, t in bound_tensors(graph, op) if arg.kind == ACTIVATION}
    if len(types) <= 1:
        return None
    return "; ".join(f"{arg.role} {t.describe()}" for arg, t in bound_tensors(graph, op) if arg.kind == ACTIVATION)


def weighted_16x8(graph: Graph, op: Op) -> str | None:
    """input and output must both be int8 (with an int32 bias) or both int16 with zero point 0 (16x8: an
    int64 bias, as the converter writes it)"""
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    b = input_tensor(graph, op, 2)
    if x.dtype != y.dtype:
        return f"input {x.describe()}, output {y.describe()}"
    want = "int32" if x.dtype == "int8" else "int64"
    issues = [f"bias {b.describe()} is {b.dtype}"] if b is not None and b.dtype != want else []
    if x.dtype == "int16":
        issues += [f"{role} {t.describe()}" for role, t in (("input", x), ("output", y)) if t.quant.zero_point != 0]
    return "; ".join(issues) or None


# ==== end of int16 activations =================================================================


def folded_bias(weights: Tensor, bias: Tensor | None, input_zp: int) -> np.ndarray:
    """bias - input_zp * sum(weights row) per output channel (axis 0), wrapping like the kernels'
    int32 arithmetic: the kernels' first step, done at generate time for constant weights."""
    w = np.asarray(weights.data, dtype=np.int64).reshape(weights.shape[0], -1)
    b = np.zeros(w.shape[0], np.int64) if bias is None else np.asarray(bias.data, dtype=np.int64).ravel()
    return ((b - int(input_zp) * w.sum(axis=1)) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
