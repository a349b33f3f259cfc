"""`zoflash profile`: instructions, MVE instructions, estimated cycles and MAC/cycle per kernel call
of one inference on the emulated Cortex-M55."""

from __future__ import annotations

import json

import click

from zoflash import api
from zoflash.cli.common import check_outputs, say


def _table(header: list[str], rows: list[list[str]], names: int) -> list[str]:
    """Columns of text: the names (columns 1 to `names`) left-aligned, the numbers right-aligned."""
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]

    def row(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if 1 <= k <= names else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths)))

    return [row(header), row(["-" * w for w in widths]), *(row(r) for r in rows)]


def _per_mac(cost) -> str:
    return f"{cost.macs_per_cycle:.2f}" if cost.macs else "-"


def render_text(p, top: int | None) -> str:
    total = p.total.cycles or 1
    ops = sorted(p.ops, key=lambda o: -o.cost.cycles)[:top] if top else p.ops
    rows = [
        [
            str(o.index),
            o.type,
            o.variant if o.variant == o.kernel else f"{o.kernel} > {o.variant}",
            f"{o.cost.instructions:,}",
            f"{o.cost.mve:,}",
            f"{o.cost.cycles:,}",
            f"{o.cost.cycles / total:.1%}",
            f"{o.cost.macs:,}",
            _per_mac(o.cost),
        ]
        for o in ops
    ]
    head = ["#", "op", "kernel > hottest function", "instructions", "MVE", "est. cycles", "share", "MACs", "MAC/cycle"]
    title = f"{p.model} on {p.board}: one inference, {len(p.ops)} kernel calls" + (
        f" (the {len(ops)} costliest, most costly first)" if top else ""
    )
    lines = [title, "", *_table(head, rows, 2), ""]
    types = [
        [
            str(n),
            t,
            f"{c.instructions:,}",
            f"{c.mve:,}",
            f"{c.cycles:,}",
            f"{c.cycles / total:.1%}",
            f"{c.macs:,}",
            _per_mac(c),
        ]
        for t, (n, c) in p.by_type().items()
    ]
    lines += _table(["calls", "op type", *head[3:]], types, 1)
    t, o = p.total, p.overhead
    lines += [
        "",
        f"total: {t.instructions:,} instructions, {t.mve:,} MVE, {t.cycles:,} est. cycles, {t.macs:,} MACs, "
        f"{_per_mac(t)} MAC/cycle",
        f"outside the kernel calls (the model's invoke: arguments, calls, returns): {o.instructions:,} instructions",
        "est. cycles = instructions + MVE instructions (two beats each); no wait states, caches or stalls: "
        "real silicon differs (docs/guides/profile.md)",
    ]
    if p.step is not None:
        lines += ["", *render_step(p.step)]
    return "\n".join(lines)


def render_step(step) -> list[str]:
    total = step.total.cycles or 1
    rows = [
        [
            "-" if name == "other" else str(n),
            name,
            f"{c.instructions:,}",
            f"{c.mve:,}",
            f"{c.cycles:,}",
            f"{c.cycles / total:.1%}",
            f"{c.macs:,}",
            _per_mac(c),
        ]
        for name, (n, c) in step.phases.items()
    ]
    head = ["calls", "phase", "instructions", "MVE", "est. cycles", "share", "MACs", "MAC/cycle"]
    t = step.total
    return [
        f"one training step (batch {step.batch}, q {step.q}, suffix from op {step.split}; calls: passes for "
        "prefix and suffix, function calls for the rest)",
        "",
        *_table(head, rows, 1),
        "",
        f"step total: {t.instructions:,} instructions, {t.mve:,} MVE, {t.cycles:,} est. cycles, {t.macs:,} MACs",
    ]


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="The .tflite model.")
@click.option(
    "--board",
    "board_id",
    default="mps3-an547",
    show_default=True,
    help="An emulated board (the Cortex-M55 under QEMU).",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="Also write the whole profile as JSON to this file."
)
@click.option("--top", type=click.IntRange(min=1), help="Print only the N costliest kernel calls (JSON keeps all).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the random input.")
@click.option(
    "--data",
    "data_path",
    type=click.Path(dir_okay=False),
    help="Training data (.npz, as for build): also profile one training step by phase (the options "
    "of zoflash.toml or the defaults, with a fixed lr).",
)
def profile(
    model_path: str, board_id: str, json_path: str | None, top: int | None, seed: int, data_path: str | None
) -> None:
    """Per kernel call of one inference on the emulated board: executed instructions, MVE instructions,
    estimated cycles, MACs and MAC/cycle; totals by op type and for the model; with --data, one
    training step by phase."""
    check_outputs(json=json_path)
    p = api.profile(model_path, board_id, seed=seed, data_path=data_path)
    say(render_text(p, top))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(p.as_dict(), f, indent=1)
            f.write("\n")
        say(f"wrote {json_path}")
