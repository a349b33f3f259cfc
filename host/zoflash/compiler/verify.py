"""Invariants checked between compiler stages (after import, after lowering, after planning).

Legality decides what the user may compile; these checks catch zoflash's own mistakes before
they become C code that reads or writes the wrong bytes. A violation raises InternalError naming
the op, never generated code.
"""

from __future__ import annotations

from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.ir import Graph
from zoflash.compiler.ops import KERNELS
from zoflash.compiler.program import Program
from zoflash.errors import InternalError


def verify_graph(graph: Graph) -> None:
    """After import: tensor indices valid, shapes non-negative, constant data as large as its shape."""
    n = len(graph.tensors)

    def fail(what: str):
        raise InternalError("import", what)

    for k, t in enumerate(graph.tensors):
        if t.index != k:
            fail(f"tensor {k} '{t.name}' says it is tensor {t.index}")
        if any(not isinstance(d, int) or d < 0 for d in t.shape):
            fail(f"tensor {k} '{t.name}' has the shape {list(t.shape)}")
        if t.data is not None and (tuple(t.data.shape) != tuple(t.shape) or t.data.nbytes != t.nbytes):
            fail(
                f"tensor {k} '{t.name}' {t.dtype}{list(t.shape)} ({t.nbytes} bytes) holds "
                f"{t.data.dtype}{list(t.data.shape)} ({t.data.nbytes} bytes)"
            )
    previous = -1
    for k, op in enumerate(graph.ops):
        # An op keeps the model's index (messages name it); a compile-time pass that folds ops away
        # leaves gaps, so the indices only increase, from at least the position.
        if op.index < k or op.index <= previous:
            fail(f"op {k} {op.type} says it is op {op.index} (after op {previous})")
        previous = op.index
        if not all(-1 <= i < n for i in op.inputs) or not all(0 <= i < n for i in op.outputs):
            fail(f"op {k} {op.type} names tensors {list(op.inputs)} -> {list(op.outputs)}; there are {n}")
    if not all(0 <= i < n for i in graph.inputs + graph.outputs):
        fail(f"the graph inputs {list(graph.inputs)} / outputs {list(graph.outputs)} name missing tensors")


def verify_program(program: Program) -> None:
    """After lowering: every kernel call passes existing tensors of the dtypes the kernel expects, and
    the bytes it reads and writes through each argument (from its params) fit in that tensor."""
    graph = program.graph
    n = len(graph.tensors)
    for step in program.steps:

        def fail(what: str, step=step):
            raise InternalError("lowering", f"op {step.op.index} {step.op.type} (kernel {step.kernel}): {what}")

        if step.kernel not in KERNELS:
            fail("no such kernel")
        kernel = KERNELS.get(step.kernel)
        if len(step.args) != len(kernel.arg_dtypes):
            fail(f"{len(step.args)} arguments, the kernel takes {len(kernel.arg_dtypes)}")
        extents = kernel.extents(step.params)
        if len(extents) != len(step.args):
            fail(f"the kernel's extents describe {len(extents)} arguments, the step passes {len(step.args)}")
        for pos, (arg, dtype, extent) in enumerate(zip(step.args, kernel.arg_dtypes, extents)):
            if arg is None:
                continue
            tensors, sizes = (arg, extent) if isinstance(arg, tuple) else ((arg,), (extent,))
            if len(tensors) != len(sizes):
                fail(f"argument {pos} passes {len(tensors)} tensors, the params describe {len(sizes)}")
            for t, size in zip(tensors, sizes):
                if not 0 <= t < n:
                    fail(f"argument {pos} is tensor {t}, which does not exist")
                tensor = graph.tensors[t]
                if tensor.dtype != dtype:
                    fail(f"argument {pos} '{tensor.name}' is {tensor.dtype}, the kernel takes {dtype}")
                if not 0 <= size <= tensor.nbytes:
                    fail(f"argument {pos} touches {size} bytes of '{tensor.name}', which has {tensor.nbytes}")
        for t in step.written:
            if graph.tensors[t].is_constant:
                fail(f"writes the constant tensor '{graph.tensors[t].name}'")
        passed = {t for arg in step.args if arg is not None for t in (arg if isinstance(arg, tuple) else (arg,))}
        if not set(step.inputs) | set(step.outputs) <= passed:
            fail(f"reads {list(step.inputs)} and writes {list(step.outputs)} but passes {sorted(passed)}")
    for alias in program.aliases:
        op = alias.op
        if not (0 <= alias.source < n and 0 <= alias.target < n):
            raise InternalError("lowering", f"op {op.index} {op.type}: alias {alias.source} -> {alias.target}")
        source, target = graph.tensors[alias.source], graph.tensors[alias.target]
        if source.nbytes != target.nbytes:
            raise InternalError(
                "lowering",
                f"op {op.index} {op.type}: '{target.name}' ({target.nbytes} bytes) "
                f"aliases '{source.name}' ({source.nbytes} bytes)",
            )


def verify_plan(model: CompiledModel) -> None:
    """After planning: every activation, input and output placed inside the arena; every alias on
    storage of its own size."""
    graph, arena = model.graph, model.arena_size
    writer = {t: op for op in graph.ops for t in op.outputs}

    def fail(t: int, what: str):
        op = writer.get(t)
        by = f"op {op.index} {op.type}" if op is not None else "the caller"
        raise InternalError("memory planning", f"tensor {t} '{graph.tensors[t].name}' (written by {by}) {what}")

    for t, r in model.root.items():
        if graph.tensors[t].nbytes != graph.tensors[r].nbytes:
            fail(t, f"({graph.tensors[t].nbytes} bytes) is stored in tensor {r} ({graph.tensors[r].nbytes} bytes)")
    used = {
        t
        for step in model.program.steps
        for arg in step.args
        if arg is not None
        for t in (arg if isinstance(arg, tuple) else (arg,))
    }
    for t in sorted(used | set(graph.inputs) | set(graph.outputs)):
        r = model.root[t]
        if graph.tensors[r].is_constant:
            if t in graph.inputs or t in graph.outputs:
                fail(t, "is a model input or output but constant")
            continue
        if graph.tensors[r].is_variable:
            if t in graph.inputs or t in graph.outputs:
                fail(t, "is a model input or output but a variable (state)")
            if r not in model.state_offset:
                fail(t, "is a variable with no place in the state array")
            continue
        if r not in model.arena_offset:
            fail(t, "has no place in the arena")
        offset = model.arena_offset[r]
        if offset < 0 or offset + graph.tensors[r].nbytes > arena:
            fail(t, f"is placed at [{offset}, {offset + graph.tensors[r].nbytes}) in a {arena}-byte arena")
