"""The legality pass: every problem that prevents compiling a model, found before anything is
generated. Whole-model checks first, then each op's constraints from the registry."""

from __future__ import annotations

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import OPS, SUPPORTED_OPS
from zoflash.compiler.ops.common import GENERIC, STRUCTURE
from zoflash.compiler.ops.registry import Constraint, message
from zoflash.compiler.ops.sequence import STATE_INPUTS as SVDF_STATE
from zoflash.compiler.ops.variables import STATE_INPUTS as VARIABLE_STATE

STATE_INPUTS = {**SVDF_STATE, **VARIABLE_STATE}  # op type -> the positions a variable tensor may take


def graph_problems(graph: Graph) -> list[str]:
    """Whole-model checks: subgraphs, I/O types, dynamic shapes, batch, sparse tensors, state as I/O.
    Which ops may read a variable tensor (state) is each op's own check (`variables_are_state`)."""
    problems = []
    init = {op.options.get("init_subgraph_index") for op in graph.ops if op.type == "CALL_ONCE"}
    if set(range(1, graph.num_subgraphs)) - init:  # CALL_ONCE's init subgraph is its own op's check
        problems.append(
            f"the model has {graph.num_subgraphs} subgraphs (control flow); only one, and "
            "CALL_ONCE's init subgraph, are supported"
        )
    if not graph.ops:
        problems.append("the model has no operators")
    producer = graph.producer()
    for role, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        for i in tensors:
            t = graph.tensors[i]
            # uint8 and float32 I/O exist only at QUANTIZE and DEQUANTIZE, whose constraints check them;
            # int16 I/O (16x8 models, keyword models) reaches its ops' own type checks. ARG_MAX's int32
            # indices and QUANTIZE's int32 requantization may be an output too (their constraints check
            # their types).
            made_by = producer[i].type if role == "output" and i in producer else None
            # CAST may make an output of any type it converts to (its own constraints check them).
            float_out = role == "output" and t.dtype == "float32" and made_by in ("DEQUANTIZE", "CAST")
            float_in = role == "input" and t.dtype == "float32"
            int32_out = t.dtype == "int32" and made_by in ("ARG_MAX", "QUANTIZE")
            if t.dtype == "float32" and not (float_out or float_in):
                problems.append(
                    f"model output {t.describe()} is float32 but no DEQUANTIZE makes it (a float "
                    "model: convert with full-integer quantization)"
                )
            elif t.dtype not in ("int8", "uint8", "float32", "int16") and not int32_out and made_by != "CAST":
                problems.append(f"model {role} {t.describe()} is {t.dtype}, not int8, int16, uint8 or float32")
            if t.shape and t.shape[0] != 1 and role == "input":
                problems.append(f"model input {t.describe()} has batch {t.shape[0]}; export with batch size 1")
            if t.is_constant:
                problems.append(
                    f"model {role} {t.describe()} is a constant tensor; a model's inputs and outputs "
                    "must be computed at run time"
                )
            elif role == "output" and i not in producer and i not in graph.inputs:
                problems.append(f"model output {t.describe()} is not computed by any operator")
    for t in graph.tensors:
        if t.dynamic_dims:  # a dynamic leading batch alone is compiled as batch 1
            problems.append(
                f"tensor {t.describe()} has a dynamic shape {list(t.shape_signature)} (dimension "
                f"{', '.join(map(str, t.dynamic_dims))} besides the batch); export with fixed sizes "
                "(tf.keras.Input(shape, batch_size=1))"
            )
        if t.sparse:
            problems.append(f"tensor {t.describe()} is sparse; sparse weights are not supported")
        if t.is_variable and (t.index in graph.inputs or t.index in graph.outputs):
            problems.append(
                f"tensor {t.describe()} is a variable (state) and a model input or output; "
                "state must stay inside the model"
            )
    for op in graph.ops:
        for pos, i in enumerate((*op.inputs, *op.outputs)):
            if (
                0 <= i < len(graph.tensors)
                and graph.tensors[i].is_variable
                and pos not in STATE_INPUTS.get(op.type, ())
            ):
                where = "an output" if pos >= len(op.inputs) else f"input {pos}"
                problems.append(
                    f"{op.where(graph)}: tensor {graph.tensors[i].describe()} is a variable (state) "
                    f"as {where}; only {', '.join(sorted(STATE_INPUTS))} state inputs are supported"
                )
    return problems


def _failures(graph: Graph, op: Op, constraints: tuple[Constraint, ...]) -> list[str]:
    problems = []
    for check in constraints:
        try:
            detail = check(graph, op)
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:
            # A constraint may rely on what an earlier one checks (a rank, a quantization): once
            # one failed, a later one that cannot evaluate says nothing new.
            if not problems:
                problems.append(f"{op.where(graph)}: malformed operator ({type(exc).__name__}: {exc})")
            continue
        if detail is not None:
            problems.append(f"{op.where(graph)}: {message(check)}" + (f" ({detail})" if detail else ""))
    return problems


def op_problems(graph: Graph, op: Op) -> list[str]:
    """Every constraint this op fails: the generic ones every op meets, then its own."""
    if op.type not in OPS:
        return [f"{op.where(graph)}: operator {op.type} is not supported (supported: {', '.join(SUPPORTED_OPS)})"]
    entry = OPS.get(op.type)
    return _failures(graph, op, STRUCTURE) or _failures(graph, op, GENERIC + entry.constraints)


# Where known custom ops come from, by the start of their custom code.
_VENDORS = (
    ("Signal", "the TFLM Signal library, an audio front end to run before the model"),
    ("ethos-u", "Arm's Vela compiler for the Ethos-U NPU: compile the .tflite given to Vela instead"),
    ("TFLite_Detection_PostProcess", "TFLite's object-detection post-processing"),
    ("Flex", "TensorFlow Select, the converter's fallback to TensorFlow ops"),
)


def custom_op_problem(graph: Graph) -> str | None:
    """One line for every CUSTOM op of the model, naming each with its position and, for known ones,
    where it comes from: a model that needs them cannot run, so their consequences are noise."""
    custom = [op for op in graph.ops if op.type.startswith("CUSTOM:")]
    if not custom:
        return None
    sources = []
    for op in custom:
        code = op.type.removeprefix("CUSTOM:")
        source = next((where for prefix, where in _VENDORS if code.startswith(prefix)), None)
        if source not in sources:
            sources.append(source)
    one = len(custom) == 1
    names = ", ".join(f"op {op.index} {op.type}" for op in custom)
    kind = ("vendor custom op" if None not in sources else "custom op") + ("" if one else "s")
    known = "; ".join(s for s in sources if s)
    return (
        f"{names} {'is a' if one else 'are'} {kind}"
        + (f" ({known})" if known else "")
        + f"; zoflash does not run {'it' if one else 'them'}"
    )


# The ops that run on uint8 weights in a TF1 (legacy) quantized model.
_WEIGHTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


def legacy_uint8_problem(graph: Graph) -> str | None:
    """One line for a TF1 uint8-quantized model (uint8 weights): every op of it would fail its type
    checks, and the fix is one for all of them."""
    uint8_ops = [
        op
        for op in graph.ops
        if op.type in _WEIGHTED_OPS
        and any(0 <= i < len(graph.tensors) and graph.tensors[i].dtype == "uint8" for i in op.inputs)
    ]
    if not uint8_ops:
        return None
    return (
        f"a TF1 uint8-quantized model ({len(uint8_ops)} layer(s) with uint8 weights, the first "
        f"op {uint8_ops[0].index} {uint8_ops[0].type}): zoflash runs int8 models; reconvert its float original to "
        "int8 with zoflash convert --saved-model DIR (or --keras FILE, --tflite FLOAT.tflite) "
        "--calibration SAMPLES.npz --out MODEL.tflite"
    )


def model_problems(graph: Graph) -> list[str]:
    """Every problem of the whole model, each naming the op (index, type, tensors) it is about; a model
    with CUSTOM ops gets the one line that names them, a TF1 uint8-quantized model the one line that
    says how to reconvert it."""
    custom = custom_op_problem(graph)
    if custom:
        return [custom]
    legacy = legacy_uint8_problem(graph)
    if legacy:
        return [legacy]
    return graph_problems(graph) + [p for op in graph.ops for p in op_problems(graph, op)]
