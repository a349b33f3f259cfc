"""Held-out seeds: the adaptive schedulers against the best tuned fixed q on run seeds the grid never used.

experiments.py tunes every fixed q's lr on seeds 1..5 and reports the schedulers on the same seeds, so a
rule changed after reading that grid is fitted to those seeds.  This runs the best tuned fixed q (its q
and lr_1 = L0·2^k read from the grid's cached results) and the adaptive schedulers at their defaults on
fresh seeds, paired run by run, with the standard error of the paired mean (5 seeds cannot resolve a
1-point gap: a single run's spread is about 2 points).

    python benchmarks/experiments.py --task digits          # the grid first (or its cache)
    python benchmarks/heldout.py --task digits --seeds 6-25 --write research/2026-12-02-heldout-seeds.md

Runs are cached with the grid's (build/experiments/runs, keyed by their options and the sources).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiments as ex  # noqa: E402
from bench_inference import write_section  # noqa: E402
from sweep import make_executor, run_grid  # noqa: E402


def seed_range(text: str) -> list[int]:
    """Run seeds from LO-HI, one seed, or a comma-separated list of either ("6-25", "3", "18,20-22")."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        hi = hi if dash else lo
        if not lo.isdigit() or not hi.isdigit() or int(hi) < int(lo):
            raise SystemExit(f"--seeds {text}: {part!r} is not a seed or a range LO-HI of seeds (e.g. 6-25 or 18,20)")
        seeds += range(int(lo), int(hi) + 1)
    return seeds


def reference_arg(text: str) -> tuple[int, int, float]:
    """--reference Q:K:L0, e.g. 4:-2:3.27 (the grid's best q, its tuned k and L0, as its page states)."""
    try:
        q, k, l0 = text.split(":")
        return int(q), int(k), float(l0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected Q:K:L0 such as 4:-2:3.27, got {text!r}") from None


def grid_reference(task_name: str, cfg: ex.Config) -> tuple[int, int, float]:
    """The best tuned fixed q of the grid's cached results: its q, its k and L0."""
    cache = ex.CACHE / f"results-{task_name}-{cfg.name}.json"
    if not cache.exists():
        raise SystemExit(
            f"{cache} is missing: run `python benchmarks/experiments.py` with the same task and grid "
            "options first, or give the grid's result as --reference Q:K:L0"
        )
    a = ex.analyse(json.loads(cache.read_text()))
    return a["best_q"], a["tuned"][a["best_q"]], a["l0"]


def heldout(
    task_name: str,
    seeds: list[int],
    executor,
    cfg: ex.Config = ex.FULL,
    reference: tuple[int, int, float] | None = None,
    decay: str = ex.DEFAULT_DECAY,
    lr_k: int | None = None,
    schedulers: tuple[str, ...] = ex.ADAPTIVE,
    scaling: str = ex.DEFAULT_SCALING,
    trial: int | None = None,
    val_fraction: float | None = None,
) -> dict:
    task = ex.TASKS[task_name]
    q, k, l0 = reference or grid_reference(task_name, cfg)
    ref = f"fixed q={q}, tuned lr (L0·2^{k})"
    specs = {ref: [ex.make_spec(cfg, task, "fixed", q, f"k{k}", s, l0, val_fraction=val_fraction) for s in seeds]}
    for name in schedulers:
        # lr_k: the schedulers at lr_1 = L0·2^k (a point of the lr sweep) instead of the auto lr
        lr = "auto" if lr_k is None else f"k{lr_k}"
        specs[name] = [
            ex.make_spec(
                cfg, task, name, 1, lr, s, l0, decay=decay, scaling=scaling, trial=trial, val_fraction=val_fraction
            )
            for s in seeds
        ]
    res = run_grid(
        [s for group in specs.values() for s in group],
        ex.run_one,
        executor,
        ex.CACHE / "runs",
        lambda m: print(m, flush=True),
    )
    finals = {name: np.array([res[s["key"]]["final_acc"] * 100 for s in group]) for name, group in specs.items()}
    rollbacks = {name: float(np.mean([res[s["key"]]["rollbacks"] for s in group])) for name, group in specs.items()}
    # runs that ended worse than their best validated weights, and so on them (None: cached before the field)
    ended_on_best = {
        name: sum(res[s["key"]].get("ended_on_best", False) for s in group)
        if all("ended_on_best" in res[s["key"]] for s in group)
        else None
        for name, group in specs.items()
    }
    floor = 100 * res[specs[ref][0]["key"]]["eval_acc"][0]  # the step-0 evaluation: the model before training
    # the lr_1 each adaptive run's lr trial chose (None: no trial ran)
    chosen = {name: [res[s["key"]]["lr_chosen"] for s in group] for name, group in specs.items() if name != ref}
    return dict(
        task=task_name,
        seeds=seeds,
        ref=ref,
        finals=finals,
        rollbacks=rollbacks,
        ended_on_best=ended_on_best,
        floor=floor,
        chosen=chosen,
        grid=cfg.name,
        budget=cfg.budget,
        given=reference is not None,
        decay=decay,
        lr_k=lr_k,
        scaling=scaling,
        trial=trial,
        val_fraction=val_fraction,
    )


def to_markdown(h: dict, command: str) -> str:
    ref = h["finals"][h["ref"]]
    n = len(h["seeds"])
    if h.get("given"):
        grid = ", reference given by --reference"
    else:
        grid = "" if h.get("grid", "full") == "full" else f", reference from the {h['grid']} grid"
    against = "the fixed q given by --reference" if h.get("given") else "the best tuned fixed q of the grid"
    budget = ex.kpasses(h.get("budget", ex.FULL.budget))
    if h.get("decay", ex.DEFAULT_DECAY) != ex.DEFAULT_DECAY:
        grid += f", the schedulers with --lr-decay {h['decay']}"
    if h.get("scaling", ex.DEFAULT_SCALING) != ex.DEFAULT_SCALING:
        grid += f", the schedulers with --lr-scaling {h['scaling']}"
    if h.get("trial") is not None:
        grid += f", the schedulers with --lr-trial {h['trial']}"
    if h.get("val_fraction") is not None:
        grid += f", every run with --val-fraction {h['val_fraction']:g}"
    if h.get("lr_k") is not None:
        grid += f", the schedulers at lr_1 = L0·2^{h['lr_k']} (the lr sweep)"
    seeds = f"seeds {h['seeds'][0]}..{h['seeds'][-1]}"
    lines = [
        f"### {h['task']}: {seeds} ({n} runs per method, {budget} passes{grid})",
        "",
        f"Command: `{command}`",
        "",
        f"Δ: paired difference to {against}, mean ± standard error of the mean "
        "(std / sqrt(n)), and the seeds where the method is at least as good. Steadiness (one run is what "
        "a user gets): std over seeds (sample std); worst seed = the worst paired difference; collapsed = runs "
        f"that gained less than {ex.COLLAPSE_SHARE:g} of the reference's mean gain over the model before training "
        f"({h['floor']:.1f}%). Rollbacks: guard rollbacks per run; ended on best: runs whose last validation "
        "loss was above their best beyond the noise, which end on the best weights.",
        "",
        f"| method | final acc (mean ± std) | Δ vs {'reference' if h.get('given') else 'best tuned'} | seeds "
        "| worst seed | collapsed | rollbacks | ended on best |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for name, acc in h["finals"].items():
        d = acc - ref
        steady = ex.steadiness(acc, ref, h["floor"])
        delta, wins, worst = (
            ("–", "–", "–")
            if name == h["ref"]
            else (
                f"{d.mean():+.1f} ± {d.std() / np.sqrt(n):.1f}",
                f"{int(np.sum(d >= 0))}/{n}",
                f"{steady['worst_gap']:+.1f}",
            )
        )
        on_best = h.get("ended_on_best", {}).get(name)
        ended = "–" if on_best is None else f"{on_best}/{n}"
        lines.append(
            f"| {name} | {steady['mean']:.1f} ± {steady['std']:.1f} | {delta} | {wins} | {worst} "
            f"| {steady['collapsed']}/{n} | {h['rollbacks'][name]:.1f} | {ended} |"
        )
        if name != h["ref"]:
            misses = ex.goal_misses(acc, ref, h["floor"])
            verdicts.append(f"{name} " + ("meets them" if not misses else "misses " + ", ".join(misses)))
    lines += [
        "",
        f"Single-run goals (mean within {ex.GOAL_MEAN:g} point, std at most max({ex.GOAL_STD_MIN:g}, "
        f"{ex.GOAL_STD_RATIO:g}x the reference's), no collapsed run): " + "; ".join(verdicts) + ".",
    ]
    return "\n".join(lines) + "\n"


def trial_summary(h: dict) -> str:
    """The lr_1 the lr trial chose, per method: median and range over the runs that ran one."""
    lines = ["lr trial's chosen lr_1 (linear units: the lr at q is lr_1 x q), median (min-max) over the runs:"]
    for name, values in h.get("chosen", {}).items():
        ran = [v for v in values if v is not None]
        lines.append(
            f"  {name}: "
            + (f"{np.median(ran):.3g} ({min(ran):.3g}-{max(ran):.3g}), {len(ran)} runs" if ran else "no trial")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ex.add_task_arguments(ap)
    ap.add_argument(
        "--seeds", default="6-25", help="run seeds, LO-HI or a comma list (default 6-25: none of the grid's)"
    )
    ap.add_argument("--workers", type=int, default=2, help="local worker processes")
    ap.add_argument("--cluster", metavar="tcp://HOST:8786", help="run on this Dask distributed scheduler instead")
    ap.add_argument("--write", type=Path, help="replace this task's section of this markdown file")
    ap.add_argument("--medium", action="store_true", help="the reference from experiments.py --medium's grid")
    ap.add_argument("--paper", action="store_true", help="the reference from experiments.py --paper's grid")
    ap.add_argument(
        "--schedulers",
        default=",".join(ex.ADAPTIVE),
        help=f"the adaptive schedulers to run, comma-separated (default {','.join(ex.ADAPTIVE)})",
    )
    ap.add_argument(
        "--headroom",
        type=ex.headroom_arg,
        default="auto",
        metavar="H",
        help="the grid's and the runs' --headroom (default auto, zoflash's default)",
    )
    ap.add_argument("--budget", type=int, help="the grid's and the runs' training passes (experiments.py --budget)")
    ap.add_argument(
        "--reference",
        type=reference_arg,
        metavar="Q:K:L0",
        help="the grid's best tuned fixed q, its k and L0 as its page states, instead of reading the "
        "grid's cache (the fixed-q runs do not depend on the schedulers' rules)",
    )
    ap.add_argument(
        "--lr-decay",
        choices=ex.spec.LR_DECAYS,
        default=ex.DEFAULT_DECAY,
        help=f"the adaptive schedulers' --lr-decay (default {ex.DEFAULT_DECAY}, zoflash's; "
        "the reference keeps the default)",
    )
    ap.add_argument(
        "--lr-scaling",
        choices=ex.spec.LR_SCALINGS,
        default=ex.DEFAULT_SCALING,
        help=f"the adaptive schedulers' --lr-scaling (default {ex.DEFAULT_SCALING}, zoflash's)",
    )
    ap.add_argument(
        "--lr-k",
        type=int,
        metavar="K",
        help="run the adaptive schedulers at lr_1 = L0·2^K (a point of the grid's lr sweep, K = -2..2) "
        "instead of the auto lr",
    )
    ap.add_argument(
        "--lr-trial",
        type=int,
        metavar="STEPS",
        help="the adaptive schedulers' lr trial steps per candidate (default: zoflash's)",
    )
    ap.add_argument(
        "--val-fraction",
        type=float,
        metavar="F",
        help="every run's --val-fraction, the reference's too (default: zoflash's)",
    )
    args = ap.parse_args(argv)
    args.task, task_args = ex.task_of(ap, args)
    schedulers = tuple(args.schedulers.split(","))
    if unknown := [s for s in schedulers if s not in ex.ADAPTIVE]:
        ap.error(f"--schedulers: {', '.join(unknown)} is not one of {', '.join(ex.ADAPTIVE)}")
    grid = ex.MEDIUM if args.medium else ex.PAPER if args.paper else ex.FULL
    with make_executor(args.workers, args.cluster) as executor:
        h = heldout(
            args.task,
            seed_range(args.seeds),
            executor,
            ex.with_budget(ex.with_headroom(grid, args.headroom), args.budget),
            args.reference,
            args.lr_decay,
            args.lr_k,
            schedulers,
            args.lr_scaling,
            args.lr_trial,
            args.val_fraction,
        )
    command = (
        f"python benchmarks/heldout.py{task_args} --seeds {args.seeds}"
        + (" --medium" if args.medium else "")
        + (" --paper" if args.paper else "")
        + (f" --schedulers {args.schedulers}" if schedulers != ex.ADAPTIVE else "")
        + (f" --headroom {args.headroom}" if args.headroom != "auto" else "")
        + (f" --budget {args.budget}" if args.budget else "")
        + (f" --reference {':'.join(f'{v:g}' for v in args.reference)}" if args.reference else "")
        + (f" --lr-decay {args.lr_decay}" if args.lr_decay != ex.DEFAULT_DECAY else "")
        + (f" --lr-k {args.lr_k}" if args.lr_k is not None else "")
        + (f" --lr-scaling {args.lr_scaling}" if args.lr_scaling != ex.DEFAULT_SCALING else "")
        + (f" --lr-trial {args.lr_trial}" if args.lr_trial is not None else "")
        + (f" --val-fraction {args.val_fraction:g}" if args.val_fraction is not None else "")
        + (f" --write {args.write}" if args.write else "")
    )
    body = to_markdown(h, command)
    if args.write:
        write_section(
            args.write,
            f"heldout-{args.task}"
            + (f"-{args.budget}" if args.budget else "")
            + (f"-{args.lr_decay}" if args.lr_decay != ex.DEFAULT_DECAY else "")
            + (f"-k{args.lr_k}" if args.lr_k is not None else "")
            + (f"-{args.lr_scaling}" if args.lr_scaling != ex.DEFAULT_SCALING else "")
            + (f"-trial{args.lr_trial}" if args.lr_trial is not None else "")
            + (f"-val{args.val_fraction:g}" if args.val_fraction is not None else ""),
            body,
        )
        print(f"wrote {args.write}")
    print(body)
    print(trial_summary(h))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
