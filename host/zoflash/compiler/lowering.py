"""Lowering: every op of a legal graph becomes a kernel call with its parameters (a `Step`), an
`Alias` (RESHAPE-like ops: the output reuses the input's bytes) or nothing (ops bound at compile
time: VAR_HANDLE, CALL_ONCE).

The op registry (compiler/ops/) says how each op lowers; the legality pass (compiler/legality.py)
runs first, so a lowering only meets ops that satisfy their constraints. A kernel's parameter
builder can still refuse what TFLM cannot run either (a `Problem`); `lower_graph` collects every
problem of the whole graph before anything is generated, so the user sees them all at once.
"""

from __future__ import annotations

from zoflash.compiler.ir import Graph
from zoflash.compiler.legality import model_problems
from zoflash.compiler.ops import OPS, Problem
from zoflash.compiler.program import Alias, Program, Step
from zoflash.errors import UnsupportedModelError


def lower_graph(graph: Graph) -> Program:
    """Check and lower the whole graph; raise UnsupportedModelError listing every problem."""
    problems = model_problems(graph)
    if problems:
        raise UnsupportedModelError(graph.name, problems)
    steps: list[Step] = []
    aliases: list[Alias] = []
    for op in graph.ops:
        try:
            result = OPS.get(op.type).lower(graph, op)
        except Problem as p:
            problems.append(str(p))
            continue
        if result is not None:  # None: no code at run time (VAR_HANDLE, CALL_ONCE)
            (aliases if isinstance(result, Alias) else steps).append(result)
    if problems:
        raise UnsupportedModelError(graph.name, problems)
    return Program(graph=graph, steps=steps, aliases=aliases)
