"""Experiments: fixed q (tuned and untuned) against the adaptive q schedulers at equal forward-pass
budgets, on one adaptation task (zo-training.md, "What the project must show").

Tasks (--task; TASKS below): digits (tests/fixtures/digits_cnn.tflite, an int8 CNN pretrained on
upright digits, adapted to rotated digits), sensor (motions_cnn.tflite, a 1D CNN on BasicMotions,
adapted to the watch worn rotated), vision (fmnist_mbv2.tflite, MobileNetV2 0.35 on Fashion-MNIST,
adapted to rotated images; vision-block trains its last block as well as the head), or your own
(--model M.tflite --data D.npz [--train last:1]: named after the two files), each with the
host simulation (the generated training C, built and run on the host). Every run has the same
forward-pass budget (prefix + suffix sample-passes, evaluation excluded) and every method is run
on the same seeds (the run seed: minibatch order and perturbation directions), so results are
paired.

Methods:
  * fixed q in QS, each with its own tuned learning rate: a grid of explicit lr_1 = L0 * 2^k
    (lr_scaling sqrt, so the lr used at q is lr_1 * sqrt(q)), L0 = the geometric mean over the
    seeds of the auto-calibrated lr_1 (rho 4). The grid is extended by one factor of 2 while the
    best mean final accuracy sits at an edge (at most EXTEND times per side). The passes of every
    grid run are counted as the search cost;
  * fixed q with one common lr: the auto lr (rho 4) with lr_scaling fixed, i.e. the same lr at
    every q;
  * adazeta, plateau, critical with their defaults (lr auto, rho 4, lr_scaling linear, the lr trial);
  * every run but the lr-decay rows at the default lr decay (tail) and validation-loss guard;
  * an lr sweep over a 16x range (lr_1 = L0 * 2^k, k = -2..2) for fixed q = 1, fixed q = 16 (taken
    from the grid), plateau, critical and adazeta;
  * q = 1 with lr decay (--lr-decay linear: the lr falls linearly to 0 over the budget), at the
    tuned lr of fixed q = 1 (its search counted) and at the auto lr (no search);
  * no adaptation: the step-0 evaluation (the pretrained model).

Usage: python benchmarks/experiments.py [--task digits | --model M --data D [--train T]] [--quick | --medium]
       [--write research/2026-11-29-scheduler-grid-digits-400k.md]
       [--workers 2 | --cluster tcp://HOST:8786] [--reuse]
The runs go through a concurrent.futures executor (sweep.py): local processes, or a Dask cluster.
Every run's result is cached in build/experiments/runs/ by a hash of its options, model, data and
zoflash version, so a re-run skips finished runs; --reuse redoes tables and plots from the last
grid's summary. The plots go next to the --write file (else the cache).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import cpu_name  # noqa: E402
from sweep import make_executor, run_grid  # noqa: E402

from zoflash.spec import training as spec  # noqa: E402
from zoflash.spec.options import TRAIN_DEFAULTS  # noqa: E402

ROLLBACK_END = spec.ROLLBACK_CAUSE_IDS["end"]  # the run ended on its best weights

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CACHE = ROOT / "build" / "experiments"


@dataclass(frozen=True)
class Task:
    model: Path
    data: Path
    train: str  # the --train option: which layers are trained
    what: str  # for the setup paragraph: model, domains, trained set


TASKS = {
    "digits": Task(
        FIXTURES / "digits_cnn.tflite",
        FIXTURES / "digits_shift.npz",
        "last:1",
        "`digits_cnn.tflite` (int8, pretrained on upright digits) adapted to `digits_shift.npz` "
        "(rotated digits) by training its last FULLY_CONNECTED layer and bias",
    ),
    "sensor": Task(
        FIXTURES / "motions_cnn.tflite",
        FIXTURES / "motions_shift.npz",
        "last:1",
        "`motions_cnn.tflite` (int8 1D CNN, pretrained on BasicMotions as recorded) adapted to "
        "`motions_shift.npz` (the watch rotated by 90 degrees about z) by training its last "
        "FULLY_CONNECTED layer and bias",
    ),
    "vision": Task(
        FIXTURES / "fmnist_mbv2.tflite",
        FIXTURES / "fmnist_shift.npz",
        "last:1",
        "`fmnist_mbv2.tflite` (int8 MobileNetV2 0.35, 32x32x1, pretrained on upright Fashion-MNIST) "
        "adapted to `fmnist_shift.npz` (images rotated by 30 degrees) by training its "
        "FULLY_CONNECTED head and bias",
    ),
    "vision-block": Task(
        FIXTURES / "fmnist_mbv2.tflite",
        FIXTURES / "fmnist_shift.npz",
        "last:2",
        "`fmnist_mbv2.tflite` (as for vision) adapted to `fmnist_shift.npz` by training its "
        "last block (the 1x1 CONV_2D to 1280 channels) and the FULLY_CONNECTED head",
    ),
}
ADAPTIVE = ("adazeta", "plateau", "critical")
SWEEP_SCHEDULERS = ("plateau", "critical", "adazeta")
SWEEP_FIXED_Q = (1, 16)
EXTEND = 2  # grid extensions per side at most
ADAPTIVE_EVAL_EVERY = 8  # steps between evaluations for the adaptive schedulers
BEGIN, END = "<!-- experiments:results:begin -->", "<!-- experiments:results:end -->"
DEFAULT_SCALING = TRAIN_DEFAULTS["lr_scaling"]  # the adaptive schedulers' lr at q


@dataclass(frozen=True)
class Config:
    name: str
    seeds: tuple[int, ...]
    budget: int
    qs: tuple[int, ...]
    grid: tuple[int, ...]  # lr factors 2^k of the tuning grid
    sweep: tuple[int, ...]  # lr factors 2^k of the lr sweep (16x: -2..2)
    eval_passes: int  # target training passes between evaluations at fixed q
    headroom: int | str = "auto"  # --headroom of every run (bits or auto: zoflash's default; docs/training.md)
    decay_rows: bool = True  # the q = 1 with lr decay baseline


FULL = Config(
    "full", (1, 2, 3, 4, 5), 400_000, (1, 2, 4, 8, 16, 32, 64), (-3, -2, -1, 0, 1, 2, 3), (-2, -1, 0, 1, 2), 4000
)
QUICK = Config("quick", (1, 2), 100_000, (1, 4, 16, 64), (-1, 0, 1), (-2, 0, 2), 2000)
# 5 seeds at the full budget with the quick grid's q values and a narrower lr grid (extended at its edges)
MEDIUM = Config("medium", (1, 2, 3, 4, 5), 400_000, (1, 4, 16, 64), (-1, 0, 1), (-2, -1, 0, 1, 2), 4000)
# the paper-scale tasks (benchmarks/make_paper_tasks.py): the default's single-run goals against a
# tuned fixed q, no lr sweep and no decay baseline (a ResNet18-class run costs minutes on two cores)
PAPER = Config("paper", (1, 2, 3, 4, 5), 400_000, (1, 4, 16), (-1, 0, 1), (), 4000, decay_rows=False)


# ----------------------------------------------------------------------------------- one run


def run_key(sched: str, q: int, lr: str, seed: int) -> str:
    """lr: 'auto' (default lr_scaling), 'common' (auto, lr_scaling fixed) or 'k<n>' (lr_1 = L0 * 2^n)."""
    return f"{sched}|q{q}|{lr}|s{seed}"


def passes_per_step(q: int, batch: int = 16) -> int:
    return batch + 2 * q * batch


def run_one(spec: dict) -> dict:
    """Build and run one training program; keep what the tables and plots need."""
    from zoflash.training.options import make_options
    from zoflash.workflows.simulate import simulate

    opts = make_options(
        scheduler=spec["sched"],
        q=spec["q"],
        lr=spec["lr"],
        lr_scaling=spec["lr_scaling"],
        lr_decay=spec["lr_decay"],
        lr_trial=spec.get("lr_trial"),
        seed=spec["seed"],
        budget=spec["budget"],
        eval_every=spec["eval_every"],
        train=spec["train"],
        headroom=spec["headroom"],
        val_fraction=spec.get("val_fraction"),
    )
    t0 = time.perf_counter()
    res = simulate(spec["model"], spec["data"], opts, log_path=None, engine="c", plot=False)
    wall = time.perf_counter() - t0
    evals = [r for r in res.records if r["type"] == "eval"]
    steps = [r for r in res.records if r["type"] == "step"]
    events = [r for r in res.records if r["type"] == "event"]
    q_changes: list[list[int]] = []  # [passes before the step, q of the step]
    prev = 0
    for s in steps:
        if not q_changes or q_changes[-1][1] != s["q"]:
            q_changes.append([prev, s["q"]])
        prev = s["prefix_passes"] + s["suffix_passes"]
    lr_set = [e["value"] for e in events if e["kind"] == "lr" and e["code"] == 0]  # the auto calibration
    chosen = [e["value"] for e in events if e["kind"] == "lr" and e["code"] == 2]  # the lr trial's choice
    return dict(
        key=spec["key"],
        seed=spec["seed"],
        eval_passes=[e["prefix_passes"] + e["suffix_passes"] for e in evals],
        eval_acc=[e["accuracy"] for e in evals],
        eval_prefix=[e["prefix_passes"] for e in evals],
        final_acc=evals[-1]["accuracy"],
        prefix=res.done["prefix_passes"],
        suffix=res.done["suffix_passes"],
        steps=res.done["steps"],
        reason=res.done["reason"],
        q_changes=q_changes,
        final_q=steps[-1]["q"],
        # guard rollbacks; a run that ended worse than its best and so ends on it is counted apart
        rollbacks=sum(1 for e in events if e["kind"] == "rollback" and e["code"] != ROLLBACK_END),
        ended_on_best=any(e["kind"] == "rollback" and e["code"] == ROLLBACK_END for e in events),
        lr1=lr_set[0] if lr_set else spec["lr"],
        lr_chosen=chosen[0] if chosen else None,
        final_lr=steps[-1]["lr"],
        trial_passes=max((s["prefix_passes"] + s["suffix_passes"] for s in steps if s["trial"]), default=0),
        headroom_bits=res.headroom["bits"] if res.headroom else 0,
        wall_s=wall,
    )


DECAY = "linear"  # the lr-decay baseline's --lr-decay
DEFAULT_DECAY = TRAIN_DEFAULTS["lr_decay"]  # every other run's (tail: docs/training.md "lr decay")


def make_spec(
    cfg: Config,
    task: Task,
    sched: str,
    q: int,
    lr: str,
    seed: int,
    l0: float | None = None,
    decay: str = DEFAULT_DECAY,
    scaling: str = DEFAULT_SCALING,
    trial: int | None = None,
    val_fraction: float | None = None,
) -> dict:
    """scaling: the adaptive schedulers' lr scaling (the fixed-q grid is in lr_1 units with sqrt);
    trial: their lr trial's steps per candidate (None: zoflash's default); val_fraction: every
    run's --val-fraction (None: zoflash's default)."""
    label = sched if scaling == DEFAULT_SCALING else f"{sched}+{scaling}"
    label = label if trial is None else f"{label}+trial{trial}"
    scaling = "sqrt" if sched == "fixed" else scaling
    if lr == "auto":
        value = None
    elif lr == "common":
        value, scaling = None, "fixed"
    else:
        value = float(np.float32(l0 * 2.0 ** int(lr[1:])))
    if sched == "fixed":
        every = max(1, round(cfg.eval_passes / passes_per_step(q)))
    else:
        every = ADAPTIVE_EVAL_EVERY
    label = label if decay == DEFAULT_DECAY else f"{label}+{decay}"
    label = label if val_fraction is None else f"{label}+val{val_fraction:g}"
    spec = dict(
        key=run_key(label, q, lr, seed),
        sched=sched,
        q=q,
        lr=value,
        lr_scaling=scaling,
        lr_decay=decay,
        lr_trial=trial,
        seed=seed,
        budget=cfg.budget,
        eval_every=every,
        train=task.train,
        model=str(task.model),
        data=str(task.data),
        headroom=cfg.headroom,
    )
    if val_fraction is not None:  # absent otherwise: the default's runs keep their cache entries
        spec["val_fraction"] = val_fraction
    return spec


def run_experiments(cfg: Config, task_name: str, executor, workers: str) -> dict:
    t_start = time.perf_counter()
    task = TASKS[task_name]
    with np.load(task.data) as d:
        n_train, n_test = len(d["y_train"]), len(d["y_test"])
    results: dict = {}

    def run_all(specs: list[dict]) -> None:
        results.update(run_grid(specs, run_one, executor, CACHE / "runs", lambda m: print(m, flush=True)))

    # phase 1: everything with the auto lr (this also measures the calibrated lr_1 per seed)
    specs = [make_spec(cfg, task, s, 1, "auto", seed) for s in ADAPTIVE for seed in cfg.seeds]
    specs += [make_spec(cfg, task, "fixed", q, "common", seed) for q in cfg.qs for seed in cfg.seeds]
    print(f"phase 1: {len(specs)} runs with the auto lr", flush=True)
    run_all(specs)
    lr1 = [results[run_key("plateau", 1, "auto", seed)]["lr1"] for seed in cfg.seeds]
    l0 = float(f"{math.exp(np.mean(np.log(lr1))):.3g}")
    # phase 2: the tuning grid of every fixed q and the lr sweep of the adaptive schedulers
    specs = [
        make_spec(cfg, task, "fixed", q, f"k{k}", seed, l0) for q in cfg.qs for k in cfg.grid for seed in cfg.seeds
    ]
    specs += [
        make_spec(cfg, task, s, 1, f"k{k}", seed, l0) for s in SWEEP_SCHEDULERS for k in cfg.sweep for seed in cfg.seeds
    ]
    specs += [
        make_spec(cfg, task, "fixed", q, f"k{k}", seed, l0)
        for q in SWEEP_FIXED_Q
        if q in cfg.qs
        for k in cfg.sweep
        for seed in cfg.seeds
    ]
    print(f"phase 2: {len(specs)} runs at explicit lr (L0 = {l0:g})", flush=True)
    run_all(specs)
    # phase 3: extend the grid of a q while its best lr sits at an edge
    grids = {q: sorted({k for k in cfg.grid}) for q in cfg.qs}
    for _ in range(EXTEND):
        specs = []
        for q in cfg.qs:
            ks = grids[q]
            best = max(ks, key=lambda k: mean_final(results, "fixed", q, f"k{k}", cfg.seeds))
            if best in (ks[0], ks[-1]):
                new = best - 1 if best == ks[0] else best + 1
                ks.append(new)
                ks.sort()
                specs += [make_spec(cfg, task, "fixed", q, f"k{new}", seed, l0) for seed in cfg.seeds]
        if not specs:
            break
        print(f"phase 3: {len(specs)} runs extending the grid", flush=True)
        run_all(specs)
    # phase 4: q = 1 with lr decay, at the tuned lr of fixed q = 1 and at the auto lr
    if 1 in cfg.qs and cfg.decay_rows:
        k1 = max(grids[1], key=lambda k: mean_final(results, "fixed", 1, f"k{k}", cfg.seeds))
        specs = [
            make_spec(cfg, task, "fixed", 1, lr, seed, l0, decay=DECAY)
            for lr in (f"k{k1}", "auto")
            for seed in cfg.seeds
        ]
        print(f"phase 4: {len(specs)} runs of q = 1 with lr decay", flush=True)
        run_all(specs)
    return dict(
        config=cfg.__dict__,
        l0=l0,
        lr1_per_seed=lr1,
        grids={str(q): ks for q, ks in grids.items()},
        wall_s=time.perf_counter() - t_start,
        workers=workers,
        task=task_name,
        n_train=n_train,
        n_test=n_test,
        date=time.strftime("%Y-%m-%d"),
        machine=f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        results=results,
    )


# ----------------------------------------------------------------------------------- analysis


def mean_final(results: dict, sched: str, q: int, lr: str, seeds) -> float:
    return float(np.mean([results[run_key(sched, q, lr, s)]["final_acc"] for s in seeds]))


def finals(results: dict, sched: str, q: int, lr: str, seeds) -> np.ndarray:
    return np.array([results[run_key(sched, q, lr, s)]["final_acc"] for s in seeds])


# Steadiness (a user runs once): the goals a default scheduler is held to, in accuracy points.
COLLAPSE_SHARE = 0.5  # a run collapsed if it gained less than this share of the tuned fixed q's mean gain
GOAL_MEAN = 1.0  # the mean at most this far below the tuned fixed q's
GOAL_STD_MIN, GOAL_STD_RATIO = 2.5, 1.5  # std over seeds at most max(GOAL_STD_MIN, GOAL_STD_RATIO x the tuned's)
GOAL_SWEEP_RANGE = 3.0  # over the 16x lr sweep: best minus worst mean


def steadiness(acc, ref, floor: float) -> dict:
    """One method's spread over seeds against the tuned fixed q, paired by seed (all in points).

    acc, ref: final accuracies per seed, in the same seed order; floor: the accuracy before any
    training. std: sample std over seeds (ddof 1); worst_gap: the worst seed's paired difference
    min(acc - ref); collapsed: runs whose gain over the floor is below COLLAPSE_SHARE of the
    tuned fixed q's mean gain."""
    acc, ref = np.asarray(acc, dtype=float), np.asarray(ref, dtype=float)
    if acc.shape != ref.shape or acc.size == 0:
        raise ValueError(f"steadiness: {acc.size} runs against {ref.size} reference runs (paired by seed)")
    return dict(
        mean=float(acc.mean()),
        std=float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
        worst_gap=float(np.min(acc - ref)),
        collapsed=int(np.sum(acc - floor < COLLAPSE_SHARE * (ref.mean() - floor))),
    )


def goal_misses(acc, ref, floor: float) -> list[str]:
    """Which of the single-run goals a method misses against the tuned fixed q ([] = all met):
    mean within GOAL_MEAN, std at most max(GOAL_STD_MIN, GOAL_STD_RATIO x the tuned's), no collapsed run."""
    s, r = steadiness(acc, ref, floor), steadiness(ref, ref, floor)
    misses = []
    if s["mean"] < r["mean"] - GOAL_MEAN:
        misses.append(f"mean {s['mean'] - r['mean']:+.1f}")
    if s["std"] > max(GOAL_STD_MIN, GOAL_STD_RATIO * r["std"]):
        misses.append(f"std {s['std']:.1f} > {max(GOAL_STD_MIN, GOAL_STD_RATIO * r['std']):.1f}")
    if s["collapsed"]:
        misses.append(f"{s['collapsed']} collapsed")
    return misses


def curve(run: dict, grid: np.ndarray) -> np.ndarray:
    return np.interp(grid, run["eval_passes"], run["eval_acc"])


def q_curve(run: dict, grid: np.ndarray) -> np.ndarray:
    starts = np.array([c[0] for c in run["q_changes"]])
    qs = np.array([c[1] for c in run["q_changes"]])
    return qs[np.clip(np.searchsorted(starts, grid, side="right") - 1, 0, len(qs) - 1)]


def first_reach(x: np.ndarray, y: np.ndarray, target: float) -> float | None:
    hit = np.nonzero(y >= target)[0]
    return float(x[hit[0]]) if len(hit) else None


@dataclass
class Row:
    label: str
    lr: str
    keys: list[str]  # one run per seed
    search: float = 0.0  # passes of the lr search, one run per grid point
    group: str = ""


def analyse(data: dict) -> dict:
    cfg = Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in data["config"].items()})
    res, seeds, l0 = data["results"], cfg.seeds, data["l0"]
    grids = {int(q): ks for q, ks in data["grids"].items()}
    xs = np.linspace(0, cfg.budget, 401)

    def passes(key: str) -> int:
        return res[key]["prefix"] + res[key]["suffix"]

    tuned: dict[int, int] = {}
    rows: list[Row] = []
    for q in cfg.qs:
        best = max(grids[q], key=lambda k: mean_final(res, "fixed", q, f"k{k}", seeds))
        tuned[q] = best
        search = sum(np.mean([passes(run_key("fixed", q, f"k{k}", s)) for s in seeds]) for k in grids[q])
        rows.append(
            Row(
                f"fixed q={q}, tuned lr",
                f"L0·2^{best} ({l0 * 2.0**best:.3g})",
                [run_key("fixed", q, f"k{best}", s) for s in seeds],
                search,
                "tuned",
            )
        )
    best_q = max(cfg.qs, key=lambda q: mean_final(res, "fixed", q, f"k{tuned[q]}", seeds))
    for q in cfg.qs:
        rows.append(
            Row(
                f"fixed q={q}, common lr",
                "auto, lr_scaling fixed",
                [run_key("fixed", q, "common", s) for s in seeds],
                group="common",
            )
        )
    if 1 in cfg.qs and run_key(f"fixed+{DECAY}", 1, "auto", seeds[0]) in res:
        q1 = next(r for r in rows if r.label == "fixed q=1, tuned lr")
        rows.append(
            Row(
                f"fixed q=1, lr decay ({DECAY}), tuned lr",
                q1.lr,
                [run_key(f"fixed+{DECAY}", 1, f"k{tuned[1]}", s) for s in seeds],
                q1.search,
                "decay",
            )
        )
        rows.append(
            Row(
                f"fixed q=1, lr decay ({DECAY}), auto lr",
                "auto",
                [run_key(f"fixed+{DECAY}", 1, "auto", s) for s in seeds],
                group="decay",
            )
        )
    for s_name in ADAPTIVE:
        rows.append(
            Row(s_name, "auto (rho 4, linear)", [run_key(s_name, 1, "auto", s) for s in seeds], group="adaptive")
        )
    best_row = next(r for r in rows if r.label == f"fixed q={best_q}, tuned lr")
    best_finals = np.array([res[k]["final_acc"] for k in best_row.keys])
    floor = res[rows[0].keys[0]]["eval_acc"][0]
    target = 0.95 * float(best_finals.mean())
    total_search = sum(r.search for r in rows if r.group == "tuned")
    table = []
    curves = {}
    for r in rows:
        runs = [res[k] for k in r.keys]
        f = np.array([x["final_acc"] for x in runs])
        c = np.array([curve(x, xs) for x in runs])
        curves[r.label] = c.mean(axis=0)
        reach = first_reach(xs, c.mean(axis=0), target)
        reach90 = first_reach(xs, c.mean(axis=0), target * 0.90 / 0.95)
        per_seed = [first_reach(np.array(x["eval_passes"], float), np.array(x["eval_acc"]), target) for x in runs]
        diff = f - best_finals
        steady = steadiness(100 * f, 100 * best_finals, 100 * floor)
        table.append(
            dict(
                label=r.label,
                lr=r.lr,
                group=r.group,
                mean=f.mean(),
                std=f.std(ddof=1) if len(f) > 1 else 0.0,
                diff_mean=diff.mean(),
                diff_std=diff.std(ddof=1) if len(f) > 1 else 0.0,
                wins=int(np.sum(diff >= 0)),
                worst_gap=steady["worst_gap"],
                collapsed=steady["collapsed"],
                misses=goal_misses(100 * f, 100 * best_finals, 100 * floor),
                reach=reach,
                reach90=reach90,
                n_reach=sum(p is not None for p in per_seed),
                search=r.search,
                search_all=total_search,
                prefix=np.mean([x["prefix"] for x in runs]),
                suffix=np.mean([x["suffix"] for x in runs]),
                rollbacks=np.mean([x["rollbacks"] for x in runs]),
                final_q=sorted(x["final_q"] for x in runs)[len(runs) // 2],
                q_curves=np.array([q_curve(x, xs) for x in runs]),
                prefix_curve=np.mean([np.interp(xs, x["eval_passes"], x["eval_prefix"]) for x in runs], axis=0),
            )
        )
    grid_table = {q: {k: finals(res, "fixed", q, f"k{k}", seeds) for k in grids[q]} for q in cfg.qs}
    sweep = {}
    for q in SWEEP_FIXED_Q if cfg.sweep else ():
        if q in cfg.qs:
            sweep[f"fixed q={q}"] = {k: finals(res, "fixed", q, f"k{k}", seeds) for k in cfg.sweep}
    for s_name in SWEEP_SCHEDULERS if cfg.sweep else ():
        sweep[s_name] = {k: finals(res, s_name, 1, f"k{k}", seeds) for k in cfg.sweep}
    sweep_collapsed = {
        name: sum(steadiness(100 * by_k[k], 100 * best_finals, 100 * floor)["collapsed"] for k in cfg.sweep)
        for name, by_k in sweep.items()
    }
    sweep_rollbacks = {
        name: {k: np.mean([res[run_key(*_sweep_run(name), f"k{k}", s)]["rollbacks"] for s in seeds]) for k in cfg.sweep}
        for name in sweep
    }
    return dict(
        cfg=cfg,
        task=data["task"],
        l0=l0,
        xs=xs,
        rows=table,
        curves=curves,
        best_q=best_q,
        tuned=tuned,
        floor=floor,
        best_mean=float(best_finals.mean()),
        target=target,
        grid_table=grid_table,
        sweep=sweep,
        sweep_rollbacks=sweep_rollbacks,
        sweep_collapsed=sweep_collapsed,
        total_search=total_search,
        n_runs=len(res),
        run_s=sum(r.get("wall_s", 0.0) for r in res.values()),
        total_passes=sum(passes(k) for k in res),
    )


def _sweep_run(name: str) -> tuple[str, int]:
    if name.startswith("fixed q="):
        return "fixed", int(name.split("=")[1])
    return name, 1


# ----------------------------------------------------------------------------------- output


def kpasses(v: float | None) -> str:
    if v is None:
        return "not reached"
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.0f}k"


def pct(v: float) -> str:
    return f"{100 * v:.1f}"


def plot_accuracy(a: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg, xs = a["cfg"], a["xs"] / 1e3
    fig, axes = plt.subplots(2, 2, figsize=(13, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    cmap = plt.get_cmap("viridis")
    colors = {q: cmap(i / max(1, len(cfg.qs) - 1)) for i, q in enumerate(cfg.qs)}
    styles = {"adazeta": ("tab:orange", "-."), "plateau": ("tab:red", "-"), "critical": ("black", "--")}
    rows = {r["label"]: r for r in a["rows"]}
    for col, group, title in (
        (0, "tuned", "fixed q, each with its tuned lr"),
        (1, "common", "fixed q, one common lr (auto lr_1, lr_scaling fixed)"),
    ):
        ax = axes[0, col]
        for q in cfg.qs:
            label = f"fixed q={q}, {'tuned' if group == 'tuned' else 'common'} lr"
            lw = 2.2 if (group == "tuned" and q == a["best_q"]) else 1.0
            ax.plot(xs, a["curves"][label], color=colors[q], lw=lw, label=f"q={q}")
        for name, (color, ls) in styles.items():
            ax.plot(xs, a["curves"][name], color=color, ls=ls, lw=2.0, label=name)
        ax.axhline(a["floor"], color="gray", ls=":", lw=1, label="no adaptation")
        ax.axhline(a["target"], color="gray", ls="--", lw=0.8, label=f"95% of best tuned (q={a['best_q']})")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(f"test accuracy (mean of {len(cfg.seeds)} seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="lower right")
    lo = min(a["floor"], min(float(c.min()) for c in a["curves"].values())) - 0.02
    for ax in axes[0]:
        ax.set_ylim(lo, 1.0)
    ax = axes[1, 0]
    for name, (color, ls) in styles.items():
        qc = rows[name]["q_curves"]
        for one in qc:
            ax.step(xs, one, where="post", color=color, lw=0.5, alpha=0.35)
        ax.step(xs, np.exp(np.mean(np.log(qc), axis=0)), where="post", color=color, ls=ls, lw=1.8, label=name)
    ax.set_yscale("log", base=2)
    ax.set_yticks([1, 2, 4, 8, 16, 32, 64])
    ax.set_yticklabels(["1", "2", "4", "8", "16", "32", "64"])
    ax.set_ylabel("q (geo. mean; thin: seeds)")
    ax = axes[1, 1]  # the prefix share of the passes (the suffix is the rest)
    for q in cfg.qs:
        ax.plot(xs, rows[f"fixed q={q}, tuned lr"]["prefix_curve"] / 1e3, color=colors[q], lw=1.0, label=f"q={q}")
    for name, (color, ls) in styles.items():
        ax.plot(xs, rows[name]["prefix_curve"] / 1e3, color=color, ls=ls, lw=1.8, label=name)
    ax.set_ylabel("prefix passes (thousands)")
    for ax in axes[1]:
        ax.set_xlabel("cumulative training forward passes, prefix + suffix (thousands)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(
        f"task {a['task']} ({TASKS[a['task']].model.name}, --train {TASKS[a['task']].train}): "
        f"ZO training, budget {cfg.budget:,} "
        f"passes, seeds {', '.join(map(str, cfg.seeds))}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_sweep(a: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = a["cfg"]
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("viridis")
    for i, q in enumerate(cfg.qs):  # the whole tuning grid, faint
        ks = sorted(a["grid_table"][q])
        ax.plot(
            ks,
            [a["grid_table"][q][k].mean() for k in ks],
            color=cmap(i / max(1, len(cfg.qs) - 1)),
            lw=0.8,
            alpha=0.35,
            marker=".",
            label=f"fixed q={q} (grid)",
        )
    styles = {
        "fixed q=1": ("tab:blue", "o"),
        "fixed q=16": ("tab:green", "s"),
        "plateau": ("tab:red", "^"),
        "critical": ("black", "v"),
        "adazeta": ("tab:orange", "D"),
    }
    for name, by_k in a["sweep"].items():
        ks = sorted(by_k)
        m = np.array([by_k[k].mean() for k in ks])
        s = np.array([by_k[k].std(ddof=1) if len(by_k[k]) > 1 else 0 for k in ks])
        color, marker = styles[name]
        ax.errorbar(ks, m, yerr=s, color=color, marker=marker, lw=2, capsize=3, label=name)
    ax.axhline(a["floor"], color="gray", ls=":", lw=1, label="no adaptation")
    if cfg.sweep:
        ax.axvspan(min(cfg.sweep), max(cfg.sweep), color="gray", alpha=0.08)
    ax.set_xlabel(f"log2(lr_1 / L0), L0 = {a['l0']:g} (the auto lr); at q: fixed lr_1·sqrt(q), adaptive lr_1·q")
    ax.set_ylabel(f"final test accuracy at {cfg.budget:,} passes (mean ± std)")
    ax.set_title("lr sweep (shaded: the 16x range)" if cfg.sweep else "lr grid of every fixed q", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def headroom_note(cfg: Config, data: dict) -> str:
    """The setup paragraph's words on the runs' headroom (the bits the runs report)."""
    bits = sorted({r.get("headroom_bits", 0) for r in data["results"].values()})
    how = "--headroom auto, zoflash's default" if cfg.headroom == "auto" else f"--headroom {cfg.headroom}"
    if bits == [0]:
        return f"; headroom 0 ({how})"
    return (
        f"; headroom {', '.join(map(str, bits))} bit(s) ({how}): the trained layers re-quantized at build time "
        f"with scales x {', '.join(str(2**b) for b in bits)}, so the floor and every run start from that model"
    )


def to_markdown(a: dict, data: dict, command: str, acc_png: str, sweep_png: str) -> str:
    from zoflash.spec.training import LR_TRIAL_STEPS

    cfg = a["cfg"]
    n = len(cfg.seeds)
    lines = [
        (
            f"Command: `{command}`. Date: {data['date']}. Machine: {data['machine']}; workers: {data['workers']}, "
            f"{a['n_runs']} runs, {data['wall_s'] / 60:.1f} min wall time ({a['run_s'] / 60:.1f} min of run time summed "
            "over the runs; a run found in the cache of an earlier invocation costs no wall time)."
        ),
        "",
        (
            f"Setup: {TASKS[data['task']].what} ({data['n_train']} train / {data['n_test']} test samples; "
            f"defaults: b = 16, eps = 1 LSB, split-16 rounding, dense Rademacher directions, guards on"
            + headroom_note(cfg, data)
            + "). "
            f"Every run stops at the first step reaching {cfg.budget:,} training forward passes (prefix + suffix "
            f"sample-passes; evaluation passes are not counted). Seeds {', '.join(map(str, cfg.seeds))} (the run "
            f"seed) for every method, so every comparison is paired. Accuracy is on the {data['n_test']} test samples; "
            f"curves are linear interpolations between evaluations (every ~{cfg.eval_passes} passes at fixed q, "
            f"every {ADAPTIVE_EVAL_EVERY} steps for the adaptive schedulers), averaged over seeds."
        ),
        "",
        (
            f"Learning rates: the auto lr calibrates lr_1 = r·sqrt(p/m2) over 8 steps at q = 8 (2176 passes, "
            f"inside the budget), r = min(rho, max(1, w_rms / 32 / sqrt(p))) LSB with rho = 4 (docs/training.md, "
            f'"Learning rate"); per seed lr_1 = '
            f"{', '.join(f'{v:.3g}' for v in data['lr1_per_seed'])}, geometric mean L0 = {a['l0']:g}. "
            f"Explicit rates are lr_1 = L0·2^k, with lr_scaling sqrt for fixed q (the lr used at q is lr_1·sqrt(q)) "
            f"and the default linear for the adaptive schedulers (lr_1·q), so k = 0 is the auto rule. Tuned fixed q: grid k = {min(cfg.grid)}..{max(cfg.grid)} "
            f"({2 ** (max(cfg.grid) - min(cfg.grid))}x), extended by one step while the best mean final "
            f"accuracy sat at an edge (at most {EXTEND} per side), the best mean final accuracy picked per q. "
            f"Common lr: the auto lr_1 with lr_scaling fixed, the same lr at every q. adazeta, plateau, "
            f"critical: defaults (lr auto, rho 4, linear scaling, and the lr trial: candidates lr_1·2^j of "
            f"{LR_TRIAL_STEPS} steps at q = 1 from the same weights, picked by the validation loss; training at the "
            f"best rate / 2^{spec.LR_TRIAL_BACKOFF}, times sqrt({spec.LR_TRIAL_HORIZON} × a candidate's passes / the budget) "
            f"when that is below 1; its passes count; at an explicit lr the trial starts from it). The fixed-q rows run without a trial "
            f"(its default for fixed). Every run but the lr-decay rows has the default lr decay, `{DEFAULT_DECAY}` "
            f"(constant, then linear to 0 over the last 1/{spec.LR_DECAY_TAIL_DIV} of the budget), and the default "
            f"validation-loss guard (best × {TRAIN_DEFAULTS['guard_loss']:g} + "
            f"{TRAIN_DEFAULTS['guard_loss_z']:g} standard errors of the validation mean). The first-order row: `benchmarks/first_order.py`, full-batch Adam on the "
            f"dequantized frozen features, lr and iteration picked by the validation split. q = 1 with lr decay: `--lr-decay {DECAY}` (the lr "
            f"falls linearly to 0 over the budget) at the tuned lr of fixed q = 1 (its search counted) and at the "
            f"auto lr."
        ),
        "",
        (
            f"Floor (no adaptation, the step-0 evaluation): **{pct(a['floor'])}%**. Best tuned fixed q: "
            f'**q = {a["best_q"]}**; target for "passes to 95%" = 0.95 × its mean final accuracy = '
            f"{pct(a['target'])}%."
        ),
        "",
        "### Headline",
        "",
        (
            f"Final accuracy: mean ± std over {n} seeds (%). Δ: paired difference to the best tuned fixed q "
            f"(q = {a['best_q']}), mean ± std, and the number of seeds where the method is at least as good. "
            "Passes to 95%: first point where the seed-mean curve reaches the target (seeds: how many "
            "individual runs reach it); to 90%: the same for 90% of the best tuned fixed q. lr search: passes of the lr grid of that q at one seed per grid "
            "point (the least a search costs; here each point was run on every seed); search + to 95%: the "
            "search-inclusive cost. Prefix / suffix: mean training passes of the run, split. Rollbacks: "
            "guard rollbacks per run (mean). q end: median final q. Steadiness (one run is what a user "
            "gets): worst seed = the worst paired difference to the best tuned fixed q over the seeds; "
            f"collapsed = runs that gained less than {COLLAPSE_SHARE:g} of its mean gain over no adaptation."
        ),
        "",
        (
            "| method | lr | final acc | Δ vs best tuned | worst seed | collapsed | passes to 95% | seeds | to 90% | lr search "
            "| search + to 95% | prefix / suffix | rollbacks | q end |"
        ),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (
            f"| no adaptation | – | {pct(a['floor'])} | {100 * (a['floor'] - a['best_mean']):+.1f} "
            "| – | – | – | – | – | – | – | – | – | – |"
        ),
    ]
    fo = data.get("first_order") or {}
    if "accuracy" in fo:  # benchmarks/first_order.py: one deterministic run, no seeds
        lines.append(
            f"| first order (float backprop, same trainable set: the ceiling) | Adam {fo['lr']:g}, "
            f"{fo['iteration']} iterations (by validation) | {pct(fo['accuracy'])} | "
            f"{100 * (fo['accuracy'] - a['best_mean']):+.1f} | – | – | – | – | – | – | – | – | – | – |"
        )
    elif fo:
        lines.append(
            f"| first order (float) | – | not measured: {fo['skipped']} | – | – | – | – | – | – | – | – | – | – | – |"
        )
    for r in a["rows"]:
        reach = kpasses(r["reach"])
        if r["group"] == "tuned" or r["search"]:
            search, incl = kpasses(r["search"]), (kpasses(r["search"] + r["reach"]) if r["reach"] is not None else "–")
        else:
            search, incl = "–", reach if r["group"] in ("adaptive", "decay") else "–"
        bold = "**" if r["label"] == f"fixed q={a['best_q']}, tuned lr" or r["group"] == "adaptive" else ""
        lines.append(
            f"| {bold}{r['label']}{bold} | {r['lr']} | {pct(r['mean'])} ± {pct(r['std'])} | "
            f"{100 * r['diff_mean']:+.1f} ± {pct(r['diff_std'])} ({r['wins']}/{n}) | {r['worst_gap']:+.1f} | "
            f"{r['collapsed']}/{n} | {reach} | {r['n_reach']}/{n} | {kpasses(r['reach90'])} | "
            f"{search} | {incl} | {kpasses(r['prefix'])} / {kpasses(r['suffix'])} | {r['rollbacks']:.1f} | "
            f"{r['final_q']} |"
        )
    lines += ["", goals_paragraph(a, n)]
    lines += [
        "",
        (
            f"Searching q as well as the lr (every q's grid, one seed per point) costs "
            f"{kpasses(a['total_search'])} passes, {a['total_search'] / cfg.budget:.0f} budgets; the search "
            f"as run here (every point on {n} seeds) cost {kpasses(a['total_search'] * n)}. The adaptive "
            "schedulers' costs include their lr calibration and no search."
        ),
        "",
        f"![accuracy vs passes]({acc_png})",
        "",
        (
            "Top: test accuracy against cumulative training passes (mean over seeds); left the tuned fixed q "
            f"(bold: the best, q = {a['best_q']}), right the fixed q at one common lr; the adaptive schedulers "
            "are on both. Bottom left: their q (geometric mean over seeds, thin lines: each seed; the first 8 "
            "steps are the lr calibration at q = 8). Bottom right: the prefix passes within the total (the "
            "suffix passes are the rest; b prefix and 2qb suffix passes per step)."
        ),
        "",
        "### Fixed q: lr grid (final accuracy %, mean ± std; * = the tuned lr)",
        "",
    ]
    all_k = sorted({k for q in cfg.qs for k in a["grid_table"][q]})
    lines.append("| q | " + " | ".join(f"k={k}" for k in all_k) + " |")
    lines.append("|---:|" + "---:|" * len(all_k))
    for q in cfg.qs:
        cells = []
        for k in all_k:
            v = a["grid_table"][q].get(k)
            if v is None:
                cells.append("")
            else:
                star = "*" if k == a["tuned"][q] else ""
                cells.append(f"{pct(v.mean())} ± {pct(v.std(ddof=1) if len(v) > 1 else 0)}{star}")
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    lines += ["", f"lr_1 = L0·2^k, L0 = {a['l0']:g}; the lr used at q is lr_1·sqrt(q)."]
    if not cfg.sweep:
        return "\n".join(
            lines + ["", f"![lr grid]({sweep_png})", "", "Final accuracy against the lr (every fixed q's tuning grid)."]
        )
    lines += [
        "",
        f"### lr sweep over 16x (k = {min(cfg.sweep)}..{max(cfg.sweep)})",
        "",
        (
            "Final accuracy (%), mean ± std, with the mean number of guard rollbacks per run in brackets; "
            "range = best minus worst mean over the sweep (goal: at most "
            f"{GOAL_SWEEP_RANGE:g}); collapsed = runs of the sweep that gained less than {COLLAPSE_SHARE:g} of the best "
            "tuned fixed q's mean gain (goal: none)."
        ),
        "",
        "| method | " + " | ".join(f"k={k}" for k in cfg.sweep) + " | range | collapsed |",
        "|---|" + "---:|" * (len(cfg.sweep) + 2),
    ]
    for name, by_k in a["sweep"].items():
        means = [by_k[k].mean() for k in cfg.sweep]
        cells = [
            f"{pct(by_k[k].mean())} ± {pct(by_k[k].std(ddof=1) if len(by_k[k]) > 1 else 0)} "
            f"({a['sweep_rollbacks'][name][k]:.1f})"
            for k in cfg.sweep
        ]
        runs = len(cfg.sweep) * len(cfg.seeds)
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {100 * (max(means) - min(means)):.1f} | {a['sweep_collapsed'][name]}/{runs} |"
        )
    lines += [
        "",
        f"![lr sweep]({sweep_png})",
        "",
        "Final accuracy against the lr (bold: the sweep; faint: every fixed q's tuning grid).",
    ]
    return "\n".join(lines)


def goals_paragraph(a: dict, n: int) -> str:
    """The single-run goals, per adaptive scheduler: met, or what misses."""
    verdicts = []
    for r in a["rows"]:
        if r["group"] == "adaptive":
            verdicts.append(
                f"{r['label']} " + ("meets them" if not r["misses"] else "misses " + ", ".join(r["misses"]))
            )
    return (
        f"Single-run goals against the best tuned fixed q ({n} paired seeds): mean within {GOAL_MEAN:g} point, "
        f"std at most max({GOAL_STD_MIN:g}, {GOAL_STD_RATIO:g}x its std), no collapsed run: "
        + "; ".join(verdicts)
        + "."
    )


def write_doc(path: Path, body: str) -> None:
    """Replace the generated block of `path`, keeping the text around it (the reading)."""
    block = f"{BEGIN}\n{body.strip()}\n{END}"
    if path.exists() and BEGIN in (text := path.read_text()) and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        # a new research record (research/README.md): the four headings, the results under Result
        text = (
            "# Experiments: fixed q against adaptive q\n\n## Question\n\n## Command\n\n"
            + f"    python benchmarks/experiments.py --write {path}\n\n## Result\n\n"
            + block
            + "\n\n## Decision\n"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def headroom_arg(text: str) -> int | str:
    return "auto" if text == "auto" else int(text)


def with_headroom(cfg: Config, headroom: int | str) -> Config:
    """The grid at an explicit --headroom gets its own cache name (-hH); auto is the default's."""
    return cfg if headroom == "auto" else replace(cfg, name=f"{cfg.name}-h{headroom}", headroom=headroom)


def with_budget(cfg: Config, budget: int | None) -> Config:
    """The grid at another --budget gets its own cache name (-B); evaluations as many as at its own."""
    if not budget:
        return cfg
    return replace(
        cfg, name=f"{cfg.name}-{budget}", budget=budget, eval_passes=max(1, cfg.eval_passes * budget // cfg.budget)
    )


def add_task_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--task", choices=sorted(TASKS), default="digits")
    ap.add_argument("--model", type=Path, help="your own task: this int8 model (with --data) instead of --task")
    ap.add_argument("--data", type=Path, help="your own task's data (.npz with x_train, y_train, x_test, y_test)")
    ap.add_argument("--train", default="last:1", help="your own task's trained layers (zoflash --train)")


def task_of(ap: argparse.ArgumentParser, args) -> tuple[str, str]:
    """The task's name (of the cache and the docs) and its command-line words.  Your own task
    (--model, --data, --train) is registered in TASKS under the names of its two files."""
    if (args.model is None) != (args.data is None):
        ap.error("--model and --data go together (your own task)")
    if args.model is None:
        return args.task, f" --task {args.task}" if args.task != "digits" else ""
    for path in (args.model, args.data):
        if not path.is_file():
            ap.error(f"{path}: no such file")
    train = "" if args.train == "last:1" else f" --train {args.train}"
    name = f"{args.model.stem}-{args.data.stem}" + train.replace(" --train ", "-").replace(":", "")
    TASKS[name] = Task(
        args.model.resolve(),
        args.data.resolve(),
        args.train,
        f"`{args.model.name}` adapted to `{args.data.name}` by training `--train {args.train}`",
    )
    return name, f" --model {args.model} --data {args.data}{train}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds, 4 values of q, 100k passes")
    ap.add_argument(
        "--medium",
        action="store_true",
        help="5 seeds, 400k passes, 4 values of q, lr grid k = -1..1 (extended at its edges)",
    )
    ap.add_argument(
        "--paper",
        action="store_true",
        help="5 seeds, 400k passes, q = 1, 4, 16, lr grid k = -1..1 (extended), no lr sweep or decay rows "
        "(the paper-scale tasks of make_paper_tasks.py)",
    )
    ap.add_argument("--write", type=Path, help="write the results into this markdown file (and its PNGs next to it)")
    add_task_arguments(ap)
    ap.add_argument("--workers", type=int, default=2, help="local worker processes")
    ap.add_argument("--cluster", metavar="tcp://HOST:8786", help="run on this Dask distributed scheduler instead")
    ap.add_argument("--reuse", action="store_true", help="tables and plots from the cached results")
    ap.add_argument(
        "--budget",
        type=int,
        help="training passes per run instead of the grid's (evaluations as many as at its own budget)",
    )
    ap.add_argument(
        "--headroom",
        type=headroom_arg,
        default="auto",
        metavar="H",
        help="re-quantize the trained layers with H bits of headroom in every run (zoflash --headroom; "
        "default auto, zoflash's default)",
    )
    args = ap.parse_args(argv)
    args.task, task_args = task_of(ap, args)
    cfg = QUICK if args.quick else MEDIUM if args.medium else PAPER if args.paper else FULL
    cfg = with_headroom(cfg, args.headroom)
    cfg = with_budget(cfg, args.budget)
    CACHE.mkdir(parents=True, exist_ok=True)
    cache = CACHE / f"results-{args.task}-{cfg.name}.json"
    if args.reuse:
        data = json.loads(cache.read_text())
    else:
        with make_executor(args.workers, args.cluster) as executor:
            data = run_experiments(cfg, args.task, executor, args.cluster or f"{args.workers} local")
    if "first_order" not in data:  # the float ceiling on the same trainable set (deterministic, once)
        from first_order import first_order_ceiling

        task = TASKS[args.task]
        data["first_order"] = first_order_ceiling(str(task.model), str(task.data), task.train, cfg.headroom)
    cache.write_text(json.dumps(data))
    a = analyse(data)
    out_dir = args.write.parent if args.write else CACHE
    stem = args.write.stem if args.write else "experiments"
    acc_png, sweep_png = out_dir / f"{stem}_accuracy.png", out_dir / f"{stem}_lr_sweep.png"
    plot_accuracy(a, acc_png)
    plot_sweep(a, sweep_png)
    command = (
        "python benchmarks/experiments.py"
        + task_args
        + (" --quick" if args.quick else "")
        + (" --medium" if args.medium else "")
        + (" --paper" if args.paper else "")
        + (f" --budget {args.budget}" if args.budget else "")
        + (f" --headroom {args.headroom}" if args.headroom != "auto" else "")
        + (f" --write {args.write}" if args.write else "")
    )
    body = to_markdown(a, data, command, acc_png.name, sweep_png.name)
    if args.write:
        write_doc(args.write, body)
        print(f"wrote {args.write}, {acc_png}, {sweep_png}")
    else:
        print(body)
        print(f"\nplots: {acc_png}, {sweep_png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
