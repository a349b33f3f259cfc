"""Stateful sequence ops: SVDF (int8, with an int8 or int16 activation state) and
UNIDIRECTIONAL_SEQUENCE_LSTM (int8, int16 cell state).

Their state is a variable tensor the op reads and updates in place: it lives in the model's
state array (never planned, kept across invokes, re-initialised by <prefix>_reset), so the
legality pass lets a variable tensor reach only the inputs listed in STATE_INPUTS.
"""

from __future__ import annotations

from zoflash.compiler import quant
from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import sequence_params
from zoflash.compiler.ops.registry import (
    CONSTANT,
    DATA,
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    any_value,
    at_least,
    build,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

STATE_INPUTS = {"SVDF": (4,), "UNIDIRECTIONAL_SEQUENCE_LSTM": (18, 19)}  # op type -> its state inputs


def _svdf_extents(p):
    t = p["state_bytes"]
    filters, memory = p["num_filters"], p["memory_size"]
    return (
        p["batches"] * p["input_size"],
        filters * p["input_size"],
        t * filters * memory,
        4 * p["num_units"],
        t * p["batches"] * filters * memory,
        p["batches"] * p["num_units"],
    )


SVDF_S8 = Kernel(
    "svdf_s8",
    "zo_svdf_s8",
    "zo_svdf_params_t",
    sequence_params.svdf_params,
    ("int8", "int8", "int8", "int32", "int8", "int8"),
    lambda p: _svdf_extents(dict(p, state_bytes=1)),
    sources=("zo_kernels_sequence.c",),
)
SVDF_S8_S16 = Kernel(
    "svdf_s8_s16",
    "zo_svdf_s8_s16",
    "zo_svdf_params_t",
    sequence_params.svdf_params,
    ("int8", "int8", "int16", "int32", "int16", "int8"),
    lambda p: _svdf_extents(dict(p, state_bytes=2)),
    sources=("zo_kernels_sequence.c",),
)


def _parts(graph: Graph, op: Op):
    return (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, 1),
        input_tensor(graph, op, 2),
        input_tensor(graph, op, 3),
        input_tensor(graph, op, 4),
        output_tensor(graph, op),
    )


def state_is_variable(graph: Graph, op: Op) -> str | None:
    """the activation state (input 4) must be a variable tensor of the model, which no other op reads or
    writes (TFLM keeps it across invokes)"""
    s = input_tensor(graph, op, 4)
    if not s.is_variable:
        return f"'{s.name}' is not a variable tensor"
    users = [o.index for o in graph.ops if s.index in o.inputs + o.outputs and o.index != op.index]
    return f"'{s.name}' is also used by ops {users}" if users else None


def svdf_shapes(graph: Graph, op: Op) -> str | None:
    """input [batches, input_size], weights_feature [filters, input_size], weights_time [filters, memory],
    bias [filters / rank], state [batches, filters x memory] and output [batches, filters / rank], with
    filters a multiple of rank (TFLM's PrepareSvdf)"""
    x, wf, wt, b, s, y = _parts(graph, op)
    rank = option(op, "rank")
    ok = (
        len(x.shape) == 2
        and len(wf.shape) == 2
        and len(wt.shape) == 2
        and len(s.shape) == 2
        and len(y.shape) == 2
        and wf.shape[1] == x.shape[1]
        and wt.shape[0] == wf.shape[0]
        and wf.shape[0] % rank == 0
        and b.num_elements == wf.shape[0] // rank
        and tuple(s.shape) == (x.shape[0], wt.shape[0] * wt.shape[1])
        and tuple(y.shape) == (x.shape[0], wf.shape[0] // rank)
    )
    if ok:
        return None
    return (
        f"input {shape(x)}, weights_feature {shape(wf)}, weights_time {shape(wt)}, bias {shape(b)}, "
        f"state {shape(s)}, output {shape(y)}, rank {rank}"
    )


def state_type_matches_time_weights(graph: Graph, op: Op) -> str | None:
    """the state must have the type of weights_time (int8 and int8, or int16 and int16)"""
    wt, s = input_tensor(graph, op, 2), input_tensor(graph, op, 4)
    return None if wt.dtype == s.dtype else f"weights_time is {wt.dtype}, the state {s.dtype}"


def svdf_quantized(graph: Graph, op: Op) -> str | None:
    """weights_feature, weights_time, bias and state must be quantized per tensor (a float or hybrid SVDF
    is not supported)"""
    bad = [f"'{t.name}'" for t in _parts(graph, op)[1:5] if t.quant is None or t.quant.per_channel]
    return ", ".join(bad) + " not quantized per tensor" if bad else None


def svdf_bias_scale(graph: Graph, op: Op) -> str | None:
    """the bias scale must be state scale x weights_time scale (within 1e-5, as TFLM requires)"""
    _, _, wt, b, s, _ = _parts(graph, op)
    expected = float(quant.f32(s.quant.scale * wt.quant.scale))
    if abs(b.quant.scale - expected) < 1e-5:
        return None
    return f"bias scale {b.quant.scale:.9g}, state x time scales {expected:.9g}"


def lower_svdf(graph: Graph, op: Op) -> Step:
    x, wf, wt, b, s, y = _parts(graph, op)
    kernel = SVDF_S8 if s.dtype == "int8" else SVDF_S8_S16
    params = build(
        graph,
        op,
        kernel,
        batches=x.shape[0],
        input_size=x.shape[1],
        num_filters=wf.shape[0],
        rank=option(op, "rank"),
        memory_size=wt.shape[1],
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        feature_scale=wf.quant.scale,
        state_scale=s.quant.scale,
        state_zp=s.quant.zero_point,
        time_scale=wt.quant.scale,
        output_scale=y.quant.scale,
        output_zp=y.quant.zero_point,
        state_dtype=s.dtype,
    )
    return Step(
        op,
        kernel.name,
        params,
        args=[x.index, wf.index, wt.index, b.index, s.index, y.index],
        inputs=(x.index,),
        outputs=(y.index,),
    )


register(
    OpEntry(
        types=("SVDF",),
        summary="int8 input, weights_feature and output; int8 or int16 weights_time and state (a variable "
        "tensor kept across invokes); any rank. As TFLM's int8 path, the fused activation is not applied",
        inputs=(
            Arg("input"),
            Arg("weights_feature", CONSTANT, ("int8",)),
            Arg("weights_time", CONSTANT, ("int8", "int16")),
            Arg("bias", CONSTANT, ("int32",)),
            Arg("activation_state", DATA, ("int8", "int16")),
        ),
        outputs=(Arg("output"),),
        lower=lower_svdf,
        kernels=(SVDF_S8, SVDF_S8_S16),
        options=(
            at_least("rank", 1),
            FUSED_ACTIVATION,
            any_value("asymmetric_quantize_inputs", "any (hybrid models only)", default=False),
        ),
        constraints=(state_is_variable, svdf_shapes, state_type_matches_time_weights, svdf_quantized, svdf_bias_scale),
    )
)


# ==== UNIDIRECTIONAL_SEQUENCE_LSTM (int8, int16 cell state) ==================================
# TFLM's kernel (unidirectional_sequence_lstm.cc) runs the standard LSTM only: every variant
# below is refused by its own constraint, as TFLM refuses it.

LSTM_INPUT_WEIGHTS, LSTM_RECURRENT_WEIGHTS, LSTM_BIASES = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
LSTM_HIDDEN, LSTM_CELL = 18, 19
_GATES = ("input", "forget", "cell", "output")


def _lstm_extents(p):
    b, t, n_in, n = p["batches"], p["time_steps"], p["input_size"], p["units"]
    return (b * t * n_in, *[n * n_in] * 4, *[n * n] * 4, *[4 * n] * 4, b * n, 2 * b * n, b * t * n)


LSTM_S8_S16 = Kernel(
    "lstm_s8_s16",
    "zo_lstm_s8_s16",
    "zo_lstm_params_t",
    sequence_params.lstm_params,
    ("int8", *["int8"] * 8, *["int32"] * 4, "int8", "int16", "int8"),
    _lstm_extents,
    sources=("zo_kernels_lstm.c",),
)


def _lstm_weights(graph: Graph, op: Op):
    return [input_tensor(graph, op, i) for i in LSTM_INPUT_WEIGHTS + LSTM_RECURRENT_WEIGHTS]


def lstm_has_24_inputs(graph: Graph, op: Op) -> str | None:
    """the LSTM must have TFLM's 24 inputs (the older 20-input form, before layer normalisation, is not
    supported)"""
    return None if len(op.inputs) == 24 else f"{len(op.inputs)} inputs"


def _present(graph: Graph, op: Op, positions) -> str | None:
    names = [f"'{t.name}'" for t in (input_tensor(graph, op, i) for i in positions) if t is not None]
    return ", ".join(names) + " present" if names else None


def lstm_not_cifg(graph: Graph, op: Op) -> str | None:
    """CIFG (coupled input and forget gates: no input gate weights, inputs 1 and 5, or bias, input 12) is
    not supported (TFLM's kernel needs the input gate)"""
    missing = [i for i in (1, 5, 12) if input_tensor(graph, op, i) is None]
    return f"inputs {missing} omitted" if missing else None


def lstm_no_peephole(graph: Graph, op: Op) -> str | None:
    """peephole connections (inputs 9 to 11) are not supported (TFLM's kernel has none)"""
    return _present(graph, op, (9, 10, 11))


def lstm_no_projection(graph: Graph, op: Op) -> str | None:
    """a projection layer (inputs 16 and 17) is not supported (TFLM's kernel has none)"""
    return _present(graph, op, (16, 17))


def lstm_no_layer_norm(graph: Graph, op: Op) -> str | None:
    """layer normalisation (inputs 20 to 23) is not supported (TFLM's kernel has none)"""
    return _present(graph, op, (20, 21, 22, 23))


def lstm_states_are_variables(graph: Graph, op: Op) -> str | None:
    """the hidden and cell states (inputs 18 and 19) must be variable tensors of the model, which no
    other op reads or writes (TFLM keeps them across invokes)"""
    issues = []
    for pos in (LSTM_HIDDEN, LSTM_CELL):
        s = input_tensor(graph, op, pos)
        users = [o.index for o in graph.ops if s.index in o.inputs + o.outputs and o.index != op.index]
        if not s.is_variable:
            issues.append(f"'{s.name}' is not a variable tensor")
        elif users:
            issues.append(f"'{s.name}' is also used by ops {users}")
    if input_tensor(graph, op, LSTM_HIDDEN).index == input_tensor(graph, op, LSTM_CELL).index:
        issues.append("one tensor is both states")
    return "; ".join(issues) or None


def _lstm_sizes(graph: Graph, op: Op) -> tuple[int, int, int, int]:
    """batches, time steps, input size and units, as TFLM's CreateLstmSizeInfo reads them."""
    x, h = input_tensor(graph, op, 0), input_tensor(graph, op, LSTM_HIDDEN)
    time_major = option(op, "time_major")
    return (x.shape[1] if time_major else x.shape[0], x.shape[0] if time_major else x.shape[1], x.shape[2], h.shape[1])


def lstm_shapes(graph: Graph, op: Op) -> str | None:
    """input [batches, time, features] ([time, batches, features] when time-major), hidden state
    [batches, units], input weights [units, features], recurrent weights [units, units], biases [units],
    a cell state of batches x units elements, and the output the input's first two dimensions by units
    (TFLM's CreateLstmSizeInfo and ValidateTensorSize)"""
    x, h, c, y = (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, LSTM_HIDDEN),
        input_tensor(graph, op, LSTM_CELL),
        output_tensor(graph, op),
    )
    if len(x.shape) != 3 or len(h.shape) != 2:  # TFLM reads their dimensions 2 and 1
        return f"input {shape(x)}, hidden state {shape(h)}"
    batches, _, features, units = _lstm_sizes(graph, op)
    bad = [
        f"'{w.name}' {shape(w)}"
        for w, depth in zip(_lstm_weights(graph, op), [features] * 4 + [units] * 4)
        if tuple(w.shape) != (units, depth)
    ]
    bad += [
        f"bias '{b.name}' {shape(b)}"
        for b in (input_tensor(graph, op, i) for i in LSTM_BIASES)
        if tuple(b.shape) != (units,)
    ]
    bad += [f"state '{s.name}' {shape(s)}" for s in (h, c) if s.num_elements != batches * units]
    if tuple(y.shape) != (x.shape[0], x.shape[1], units):
        bad.append(f"output {shape(y)}")
    return f"input {shape(x)}, {units} units: " + ", ".join(bad) if bad else None


def lstm_quantized(graph: Graph, op: Op) -> str | None:
    """the weights must be quantized per tensor and symmetric (zero point 0), the hidden and cell states
    quantized per tensor (TFLM's LSTM has no per-channel weights; a float or hybrid LSTM is not supported)"""
    issues = []
    for w in _lstm_weights(graph, op):
        if w.quant is None or w.quant.per_channel:
            issues.append(f"'{w.name}' not quantized per tensor")
        elif w.quant.zero_point != 0:
            issues.append(f"'{w.name}' has zero point {w.quant.zero_point}")
    for pos in (LSTM_HIDDEN, LSTM_CELL):
        s = input_tensor(graph, op, pos)
        if s.quant is None or s.quant.per_channel:
            issues.append(f"state '{s.name}' not quantized per tensor")
    return "; ".join(issues) or None


def lower_lstm(graph: Graph, op: Op) -> Step:
    x, h, c, y = (
        input_tensor(graph, op, 0),
        input_tensor(graph, op, LSTM_HIDDEN),
        input_tensor(graph, op, LSTM_CELL),
        output_tensor(graph, op),
    )
    weights = _lstm_weights(graph, op)
    biases = [input_tensor(graph, op, i) for i in LSTM_BIASES]
    batches, steps, features, units = _lstm_sizes(graph, op)
    params = build(
        graph,
        op,
        LSTM_S8_S16,
        batches=batches,
        time_steps=steps,
        input_size=features,
        units=units,
        time_major=option(op, "time_major"),
        input_scale=x.quant.scale,
        input_zp=x.quant.zero_point,
        input_weight_scales=[w.quant.scale for w in weights[:4]],
        recurrent_weight_scales=[w.quant.scale for w in weights[4:]],
        hidden_scale=h.quant.scale,
        hidden_zp=h.quant.zero_point,
        cell_scale=c.quant.scale,
        cell_clip=option(op, "cell_clip"),
    )
    return Step(
        op,
        LSTM_S8_S16.name,
        params,
        args=[x.index, *[t.index for t in weights + biases], h.index, c.index, y.index],
        inputs=(x.index,),
        outputs=(y.index,),
    )


def _variant(role: str) -> Arg:
    return Arg(role, DATA, (), optional=True)  # refused when present, by the constraint naming the variant


register(
    OpEntry(
        types=("UNIDIRECTIONAL_SEQUENCE_LSTM",),
        summary="int8 input, weights, hidden state and output, int16 cell state (both variable tensors kept "
        "across invokes); batch- or time-major, any cell clip. TFLM's standard LSTM only: no CIFG, "
        "peephole, projection or layer normalisation",
        inputs=(
            Arg("input"),
            *[Arg(f"input_to_{g}_weights", CONSTANT, ("int8",), optional=g == "input") for g in _GATES],
            *[Arg(f"recurrent_to_{g}_weights", CONSTANT, ("int8",), optional=g == "input") for g in _GATES],
            *[_variant(f"cell_to_{g}_weights (peephole)") for g in ("input", "forget", "output")],
            *[Arg(f"{g}_gate_bias", CONSTANT, ("int32",), optional=g == "input") for g in _GATES],
            _variant("projection_weights"),
            _variant("projection_bias"),
            Arg("hidden_state", DATA, ("int8",)),
            Arg("cell_state", DATA, ("int16",), hint="TFLM's integer LSTM keeps an int16 cell state"),
            *[_variant(f"{g}_layer_norm_coefficients") for g in _GATES],
        ),
        outputs=(Arg("output"),),
        lower=lower_lstm,
        kernels=(LSTM_S8_S16,),
        options=(
            one_of("fused_activation_function", "TANH"),
            one_of("time_major", False, True, default=False),
            any_value("cell_clip", "any (<= 0: no clip)", default=0.0),
            any_value("proj_clip", "any (no projection)", default=0.0),
            one_of("diagonal_recurrent_tensors", False, default=False),
            any_value("asymmetric_quantize_inputs", "any (hybrid models only)", default=False),
        ),
        constraints=(
            lstm_has_24_inputs,
            lstm_not_cifg,
            lstm_no_peephole,
            lstm_no_projection,
            lstm_no_layer_norm,
            lstm_states_are_variables,
            lstm_shapes,
            lstm_quantized,
        ),
    )
)
# ==== end of UNIDIRECTIONAL_SEQUENCE_LSTM ====================================================
