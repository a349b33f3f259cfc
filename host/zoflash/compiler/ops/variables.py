"""Resource variables: CALL_ONCE, VAR_HANDLE, READ_VARIABLE and ASSIGN_VARIABLE (streaming models).

TFLM keeps a variable, named by container and shared_name, in a buffer allocated when the first
ASSIGN_VARIABLE is prepared (its size and zero point from the assigned tensor, filled with that
zero point); CALL_ONCE runs an init subgraph at the first invoke, whose ASSIGN_VARIABLEs give the
initial values; the interpreter's reset fills every variable with its zero point again and does
not run CALL_ONCE a second time.

`bind_resource_variables` (a pass before legality) compiles that into plain state: each variable
becomes a variable tensor of the model's state array (never planned, kept across invokes, filled
by <prefix>_reset), holding `initial`, the init subgraph's constants, written at the first invoke
after <prefix>_init; READ_VARIABLE then aliases the state (or copies it to the arena when an
ASSIGN_VARIABLE could overwrite it while the value is still read), ASSIGN_VARIABLE copies the arena
to the state; VAR_HANDLE and CALL_ONCE need no code. A model the pass cannot bind is left as it is,
and the constraints below say why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from zoflash.compiler.ir import Graph, Op, Tensor
from zoflash.compiler.ops import variables_params
from zoflash.compiler.ops.registry import DATA, OPS, Arg, Kernel, OpEntry, any_value, build, register
from zoflash.compiler.program import Alias, Step

# The positions of the state tensor after binding (legality lets a variable tensor reach only these).
STATE_INPUTS = {"READ_VARIABLE": (0,), "ASSIGN_VARIABLE": (0,)}

COPY_S8 = Kernel(
    "copy_s8",
    "zo_copy_s8",
    "zo_copy_params_t",
    variables_params.copy_params,
    ("int8", "int8"),
    lambda p: (p["size"], p["size"]),
    sources=("zo_kernels_variables.c",),
)


@dataclass
class _Variable:
    name: str
    first: Tensor | None = None  # the first tensor assigned in TFLM's prepare order: its size and zero point
    initial: np.ndarray | None = None  # the init subgraph's value


@dataclass
class _Binding:
    variables: dict[tuple, _Variable] = field(default_factory=dict)  # (container, shared_name) -> variable
    handles: dict[int, tuple] = field(default_factory=dict)  # resource tensor of subgraph 0 -> key
    problems: dict[int, list[str]] = field(default_factory=dict)  # op index -> why it cannot be compiled
    initialised: set[tuple] = field(default_factory=set)  # the variables the init subgraph assigns

    def refuse(self, op: Op, why: str) -> None:
        self.problems.setdefault(op.index, []).append(why)


def _key(op: Op) -> tuple:
    return (op.options.get("container") or "", op.options.get("shared_name") or "")


def _name(key: tuple) -> str:
    return "/".join(k for k in key if k) or "?"


def _init_subgraph(graph: Graph, op: Op, b: _Binding) -> Graph | None:
    """CALL_ONCE's init subgraph when zoflash can fold it, else None (and why, in `b`)."""
    k = op.options.get("init_subgraph_index")
    calls = [o.index for o in graph.ops if o.type == "CALL_ONCE"]
    if calls != [graph.ops[0].index]:
        b.refuse(op, f"CALL_ONCE ops at {calls}; one, the first op, is supported")
        return None
    if not isinstance(k, int) or not 1 <= k <= len(graph.subgraphs):
        b.refuse(op, f"init subgraph {k!r} does not exist (the model has {graph.num_subgraphs} subgraphs)")
        return None
    return graph.subgraphs[k - 1]


def _fold_init(graph: Graph, op: Op, b: _Binding) -> list[tuple[tuple, Tensor]]:
    """The (variable, constant value) assignments of the init subgraph, in order."""
    init = _init_subgraph(graph, op, b)
    if init is None:
        return []
    handles = {o.outputs[0]: _key(o) for o in init.ops if o.type == "VAR_HANDLE" and len(o.outputs) == 1}
    assigned = []
    for o in init.ops:
        if o.type == "VAR_HANDLE":
            continue
        value = _value(init, o) if o.type == "ASSIGN_VARIABLE" else None
        if value is None or o.inputs[0] not in handles:
            b.refuse(op, f"init subgraph op {o.index} {o.type} is not an ASSIGN_VARIABLE of a VAR_HANDLE")
        else:
            b.initialised.add(handles[o.inputs[0]])
            if value.is_constant:
                assigned.append((handles[o.inputs[0]], value))
            else:
                b.refuse(
                    op,
                    f"init subgraph op {o.index} ASSIGN_VARIABLE of '{_name(handles[o.inputs[0]])}' "
                    f"assigns '{value.name}', computed at run time, not a constant",
                )
    return assigned


def bind(graph: Graph) -> _Binding:
    """Every variable of subgraph 0, what the init subgraph assigns it, and each op's problems."""
    b = _Binding()
    for op in graph.ops:
        if op.type == "VAR_HANDLE" and len(op.outputs) == 1:
            b.handles[op.outputs[0]] = _key(op)
            b.variables.setdefault(_key(op), _Variable(_name(_key(op))))
    init = [a for op in graph.ops if op.type == "CALL_ONCE" for a in _fold_init(graph, op, b)]
    # TFLM prepares subgraph 0 before the init subgraph: the first ASSIGN_VARIABLE there sizes the buffer.
    for op in graph.ops:
        if op.type == "ASSIGN_VARIABLE" and _value(graph, op) is not None and op.inputs[0] in b.handles:
            var = b.variables[b.handles[op.inputs[0]]]
            var.first = var.first or _value(graph, op)
    for key, value in init:
        if key in b.variables:
            var = b.variables[key]
            var.first = var.first or value
            var.initial = value.data
    assigned = set(b.initialised)  # (an init value that does not fold is CALL_ONCE's problem)
    for op in graph.ops:
        is_read = op.type == "READ_VARIABLE"
        value = _value(graph, op)
        if value is None or graph.tensors[op.inputs[0]].dtype != "resource":
            continue  # not a variable op, or malformed (legality's structure checks say so)
        if op.inputs[0] not in b.handles:
            b.refuse(op, f"its resource '{graph.tensors[op.inputs[0]].name}' is not made by a VAR_HANDLE")
            continue
        key = b.handles[op.inputs[0]]
        var = b.variables[key]
        if is_read and key not in assigned:
            b.refuse(
                op,
                f"variable '{var.name}' is read before anything assigns it (no CALL_ONCE init "
                "value, no earlier ASSIGN_VARIABLE)",
            )
        elif var.first is None:  # assigned only by an init value that does not fold: CALL_ONCE's problem
            continue
        elif value.dtype != "int8" or var.first.dtype != "int8":
            b.refuse(
                op,
                f"variable '{var.name}' is {var.first.dtype}, its value '{value.name}' {value.dtype}; "
                "int8 variables are supported",
            )
        elif value.nbytes != var.first.nbytes:
            b.refuse(
                op,
                f"variable '{var.name}' holds {var.first.nbytes} bytes ({list(var.first.shape)}), "
                f"'{value.name}' {value.nbytes} ({list(value.shape)})",
            )
        if not is_read:
            assigned.add(key)
    for key, value in init:
        var = b.variables.get(key)
        if var is not None and (value.dtype, value.nbytes) != ("int8", var.first.nbytes):
            b.refuse(
                graph.ops[0],
                f"the init value {value.describe()} of variable '{var.name}' is not int8 "
                f"of its {var.first.nbytes} bytes",
            )
    return b


def _value(graph: Graph, op: Op) -> Tensor | None:
    """The value a well-formed READ_VARIABLE reads or ASSIGN_VARIABLE assigns (None for other ops)."""
    if op.type == "READ_VARIABLE" and len(op.inputs) == 1 and op.inputs[0] >= 0 and len(op.outputs) == 1:
        return graph.tensors[op.outputs[0]]
    if op.type == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and min(op.inputs) >= 0 and not op.outputs:
        return graph.tensors[op.inputs[1]]
    return None


def bind_resource_variables(graph: Graph) -> Graph:
    """The graph with each resource variable a variable tensor that READ_VARIABLE and ASSIGN_VARIABLE
    name in place of its resource handle; unchanged when there is none or one cannot be bound."""
    b = bind(graph)
    if not b.handles or b.problems:
        return graph
    tensors = list(graph.tensors)
    state = {}
    for key, var in b.variables.items():
        if var.first is None:  # only handled, never read nor assigned: nothing to keep
            continue
        initial = None if var.initial is None else var.initial.reshape(-1).view(np.int8).reshape(var.first.shape)
        t = Tensor(
            index=len(tensors),
            name=var.name,
            shape=var.first.shape,
            dtype="int8",
            quant=var.first.quant,
            is_variable=True,
            initial=initial,
        )
        tensors.append(t)
        state[key] = t.index
    ops = []
    for op in graph.ops:
        if op.type in STATE_INPUTS and op.inputs and op.inputs[0] in b.handles:
            op = replace(op, inputs=(state[b.handles[op.inputs[0]]],) + op.inputs[1:])
        ops.append(op)
    return replace(graph, tensors=tensors, ops=ops)


# ------------------------------------------------------------------------------ constraints


def _problems(graph: Graph, op: Op) -> str | None:
    return "; ".join(bind(graph).problems.get(op.index, ())) or None


def init_folds(graph: Graph, op: Op) -> str | None:
    """CALL_ONCE must be the model's first op and its init subgraph may only assign constants to
    variables (VAR_HANDLE and ASSIGN_VARIABLE): zoflash compiles it into the initial state"""
    return _problems(graph, op)


def variable_use(graph: Graph, op: Op) -> str | None:
    """a variable must be made by a VAR_HANDLE of the model, int8, assigned (by CALL_ONCE's init
    subgraph or an earlier ASSIGN_VARIABLE) before it is read, and read and assigned whole (its size)"""
    return _problems(graph, op)


def handle_outputs_resource(graph: Graph, op: Op) -> str | None:
    """VAR_HANDLE's output must be a resource tensor that only READ_VARIABLE and ASSIGN_VARIABLE use"""
    out = graph.tensors[op.outputs[0]]
    users = sorted(
        {
            f"op {o.index} {o.type}"
            for o in graph.consumers().get(out.index, [])
            if o.type not in STATE_INPUTS or o.inputs[0] != out.index
        }
    )
    if out.dtype != "resource" or users:
        return f"'{out.name}' is {out.dtype}" + (f", used by {', '.join(users)}" if users else "")
    return None


# ------------------------------------------------------------------------------- lowerings


def _no_code(graph: Graph, op: Op) -> None:
    """VAR_HANDLE and CALL_ONCE: bound at compile time (the variable's place, its initial value)."""
    return None


def _copy(graph: Graph, op: Op, source: int, target: int) -> Step:
    params = build(graph, op, COPY_S8, size=graph.tensors[target].nbytes)
    return Step(op, COPY_S8.name, params, args=[source, target], inputs=(source,), outputs=(target,))


def _alias_is_safe(graph: Graph, op: Op) -> bool:
    """The value may stay in the state, with no copy, when it is not a model output, every reader is a
    kernel call (not an alias carrying the state further) and all of them run before the variable is
    assigned again."""
    value = op.outputs[0]
    readers = graph.consumers().get(value, [])
    position = {o.index: k for k, o in enumerate(graph.ops)}
    assigns = [
        position[o.index]
        for o in graph.ops
        if o.type == "ASSIGN_VARIABLE" and o.inputs[0] == op.inputs[0] and position[o.index] > position[op.index]
    ]
    return (
        value not in graph.outputs
        and all(OPS.get(o.type).kernels for o in readers)
        and all(position[o.index] < min(assigns, default=len(graph.ops)) for o in readers)
    )


def lower_read(graph: Graph, op: Op) -> Step | Alias:
    if _alias_is_safe(graph, op):
        return Alias(op, op.inputs[0], op.outputs[0])
    return _copy(graph, op, op.inputs[0], op.outputs[0])


def lower_assign(graph: Graph, op: Op) -> Step:
    return _copy(graph, op, op.inputs[1], op.inputs[0])


_VARIABLE = Arg("variable", DATA, (), hint="a resource variable, bound at compile time to int8 state")

register(
    OpEntry(
        types=("CALL_ONCE",),
        summary="the first op, running an init subgraph of constant ASSIGN_VARIABLEs: compiled into the "
        "variables' initial values, written at the first invoke (TFLM's reset does not run it again)",
        inputs=(),
        outputs=(),
        lower=_no_code,
        options=(any_value("init_subgraph_index", "a subgraph index"),),
        constraints=(init_folds,),
    )
)

register(
    OpEntry(
        types=("VAR_HANDLE",),
        summary="names a resource variable (container, shared_name): no code, the variable is int8 state "
        "beside the arena, kept across invokes",
        inputs=(),
        outputs=(Arg("resource", DATA, ("resource",)),),
        lower=_no_code,
        options=(any_value("container", "any", default=""), any_value("shared_name", "any", default="")),
        constraints=(handle_outputs_resource,),
    )
)

register(
    OpEntry(
        types=("READ_VARIABLE",),
        summary="int8 variable: the output aliases its state (a copy if an ASSIGN_VARIABLE could overwrite it "
        "while the output is still read)",
        inputs=(_VARIABLE,),
        outputs=(Arg("value", DATA, ("int8",)),),
        lower=lower_read,
        kernels=(COPY_S8,),
        constraints=(variable_use,),
    )
)

register(
    OpEntry(
        types=("ASSIGN_VARIABLE",),
        summary="int8 variable: a copy of the value into its state (the same size)",
        inputs=(_VARIABLE, Arg("value", DATA, ("int8",))),
        outputs=(),
        lower=lower_assign,
        kernels=(COPY_S8,),
        constraints=(variable_use,),
    )
)
