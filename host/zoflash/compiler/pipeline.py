"""The compile pipeline: IR -> legality/lowering -> buffers -> memory plan -> CompiledModel, with
the verifier's checks between the stages.

`compile_graph` reads like the table of contents of the compiler; each stage lives in its own
module. Nothing here writes C: codegen.py renders a CompiledModel.
"""

from __future__ import annotations

from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.ir import Graph
from zoflash.compiler.lowering import lower_graph
from zoflash.compiler.ops.variables import bind_resource_variables
from zoflash.compiler.passes import fold_shape_arithmetic
from zoflash.compiler.planner import Buffer, align, plan_memory
from zoflash.compiler.program import Program
from zoflash.compiler.verify import verify_graph, verify_plan, verify_program


def _resolve_aliases(program: Program) -> dict:
    root = {t.index: t.index for t in program.graph.tensors}
    for alias in program.aliases:  # in op order, so a source is already resolved
        root[alias.target] = root[alias.source]
    return root


def step_tensors(step, include_output: bool = True) -> list[int]:
    """Tensor indices a kernel call touches (its arguments; the output, or outputs, the last one)."""
    out = []
    for arg in step.args if include_output else step.args[:-1]:
        if isinstance(arg, tuple):
            out.extend(arg)
        elif arg is not None:
            out.append(arg)
    return out


def collect_buffers(program: Program, root: dict) -> list[Buffer]:
    """One buffer per activation storage, alive from its first write to its last read."""
    graph = program.graph
    end = len(program.steps)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in graph.inputs:  # written by the caller before step 0
        first[root[i]] = -1
        last[root[i]] = max(last.get(root[i], -1), -1)
    for s, step in enumerate(program.steps):
        for t in step_tensors(step):
            r = root[t]
            if graph.tensors[r].is_constant or graph.tensors[r].is_variable:  # the state is not planned
                continue
            first.setdefault(r, s)
            last[r] = max(last.get(r, s), s)
    for o in graph.outputs:  # read by the caller after the last step
        last[root[o]] = end
        first.setdefault(root[o], end)
    return [Buffer(name=str(r), size=graph.tensors[r].nbytes, first=first[r], last=last[r]) for r in sorted(first)]


def compile_graph(graph: Graph, strategies: tuple[str, ...] | None = None) -> CompiledModel:
    verify_graph(graph)
    graph, _ = fold_shape_arithmetic(graph)  # compile-time shape computations become constants
    graph = bind_resource_variables(graph)  # resource variables become state, CALL_ONCE initial values
    program = lower_graph(graph)  # raises UnsupportedModelError with every problem
    verify_program(program)
    root = _resolve_aliases(program)
    buffers = collect_buffers(program, root)
    plan = plan_memory(buffers, strategies)
    constants: list[int] = []
    state: dict[int, int] = {}
    for step in program.steps:
        for t in step_tensors(step):
            r = root[t]
            if graph.tensors[r].is_constant and r not in constants:
                constants.append(r)
            elif graph.tensors[r].is_variable and r not in state:
                state[r] = sum(align(graph.tensors[v].nbytes) for v in state)
    model = CompiledModel(
        graph=graph,
        program=program,
        plan=plan,
        root=root,
        arena_offset={int(k): v for k, v in plan.offsets.items()},
        constants=constants,
        state_offset=state,
    )
    verify_plan(model)
    return model


def fold_biases_at_run_time(model: CompiledModel, tensors: set[int]) -> None:
    """Kernel calls that read one of `tensors` (root indices of weights or biases that change at
    run time, as trained ones do) fold their bias at run time: a precomputed one would go stale."""
    for step in model.program.steps:
        reads = {model.root[a] for a in step.args[:-1] if isinstance(a, int)}
        if step.params.get("folded_bias") is not None and reads & tensors:
            step.params["folded_bias"] = None
