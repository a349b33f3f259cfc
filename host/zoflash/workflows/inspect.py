"""`zoflash inspect`: a readable report of a model: ops, tensors, quantization, memory plan, legality."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zoflash.compiler.pipeline import collect_buffers, compile_graph
from zoflash.errors import UnsupportedModelError
from zoflash.workflows.generate import load_model


@dataclass
class Inspection:
    """inspect's report (the text `zoflash inspect` prints) and whether zoflash compiles the model."""

    text: str  # the readable report
    supported: bool


def inspect(model_path: str | Path) -> Inspection:
    """A readable report: ops, tensors, quantization, the memory plan and the legality report."""
    model = load_model(model_path)
    g = model.graph
    lines = [
        f"model {model.path.name}  sha256 {model.sha256[:16]}...  {len(g.ops)} ops, {len(g.tensors)} tensors",
        "inputs:  " + "; ".join(g.tensors[i].describe() for i in g.inputs),
        "outputs: " + "; ".join(g.tensors[i].describe() for i in g.outputs),
        "",
        "ops:",
    ]
    for op in g.ops:
        ins = ", ".join(
            f"{g.tensors[i].name}{list(g.tensors[i].shape)}"
            for i in op.inputs
            if i >= 0 and not g.tensors[i].is_constant
        )
        outs = ", ".join(f"{g.tensors[i].name}{list(g.tensors[i].shape)}" for i in op.outputs)
        opts = ", ".join(f"{k}={v}" for k, v in sorted(op.options.items()))
        lines.append(f"  {op.index:3d} {op.type:<18} {ins} -> {outs}" + (f"  [{opts}]" if opts else ""))
    lines += ["", "tensors:"]
    for t in g.tensors:
        kind = f"const {t.nbytes} B" if t.is_constant else f"state {t.nbytes} B" if t.is_variable else "activation"
        lines.append(f"  {t.index:3d} {kind:<14} {t.describe()}")
    lines.append("")
    dynamic = sum(t.dynamic_batch for t in g.tensors)
    if dynamic:
        lines.append(
            f"dynamic batch: {dynamic} tensors declare a dynamic leading batch; compiled with batch 1, "
            "as TFLM runs them"
        )
    try:
        compiled = compile_graph(g)
    except UnsupportedModelError as err:
        lines += ["legality: NOT SUPPORTED", *[f"  - {p}" for p in err.problems]]
        return Inspection("\n".join(lines), supported=False)
    folded = len(g.ops) - len(compiled.graph.ops)
    if folded:
        lines.append(
            f"folded at compile time: {folded} ops computing constant shapes "
            f"({', '.join(sorted({op.type for op in g.ops} - {op.type for op in compiled.graph.ops}))})"
        )
    buffers = collect_buffers(compiled.program, compiled.root)
    lines.append(
        f"memory plan ({compiled.plan.strategy}): arena {compiled.arena_size} bytes "
        f"(includes {compiled.io_bytes} bytes of inputs/outputs), constants {compiled.weights_bytes} bytes"
    )
    for b in sorted(buffers, key=lambda b: compiled.plan.offsets[b.name]):
        t = g.tensors[int(b.name)]
        lines.append(
            f"  [{compiled.plan.offsets[b.name]:7d}, {compiled.plan.offsets[b.name] + b.size:7d})  "
            f"steps {b.first:3d}..{b.last:3d}  '{t.name}'"
        )
    if compiled.stateful:
        lines.append(
            f"state: {compiled.state_size} bytes beside the arena, never shared, kept across invokes "
            "until <prefix>_reset()"
        )
        for r, off in sorted(compiled.state_offset.items(), key=lambda item: item[1]):
            t = compiled.graph.tensors[r]  # a resource variable's state is a tensor the compiler added
            initial = ", initial values from CALL_ONCE" if t.initial is not None else ""
            lines.append(f"  [{off:7d}, {off + t.nbytes:7d})  '{t.name}'{initial}")
    lines.append(
        f"legality: supported ({len(compiled.program.steps)} kernel calls, "
        f"{len(compiled.program.aliases)} aliases without code: reshapes, variable reads)"
    )
    return Inspection("\n".join(lines), supported=True)
