"""plateau (at its defaults, auto lr and lr trial) with each lr scaling at two budgets: how much of
its shortfall at a long budget the scaling's annealing explains (research/2026-12-02-scheduler-grid-unseen-2m.md).

With lr proportional to q (linear, the default) raising q changes neither the drift nor the noise
an update adds per forward pass, to first order; sqrt and fixed lower the rate per pass by sqrt 2
and 2 at every doubling of q.

    python benchmarks/scaling_study.py [--task digits | --model M --data D] [--budgets 400000,2000000]

Runs are cached in build/experiments/runs like the grid's (keyed by their options and the sources).
"""

from __future__ import annotations

import argparse

import experiments as ex
import numpy as np
from heldout import seed_range
from sweep import make_executor, run_grid

SCALINGS = ("linear", "sqrt", "fixed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ex.add_task_arguments(ap)
    ap.add_argument("--budgets", default="400000,2000000", help="training passes per run, comma-separated")
    ap.add_argument("--seeds", default="1-5", help="run seeds, LO-HI or a comma list")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    name, task_args = ex.task_of(ap, args)
    task = ex.TASKS[name]
    seeds = seed_range(args.seeds)
    budgets = [int(b) for b in args.budgets.split(",")]
    specs = {}
    for budget in budgets:
        cfg = ex.with_budget(ex.FULL, budget)
        for scaling in SCALINGS:
            for seed in seeds:
                spec = ex.make_spec(cfg, task, "plateau", 1, "auto", seed)
                spec.update(lr_scaling=scaling, key=f"{budget}|{scaling}|{seed}")
                specs[spec["key"]] = spec
    with make_executor(args.workers, None) as executor:
        res = run_grid(list(specs.values()), ex.run_one, executor, ex.CACHE / "runs", lambda m: print(m, flush=True))
    print(f"\npython benchmarks/scaling_study.py{task_args} --budgets {args.budgets} --seeds {args.seeds}\n")
    print("| budget | lr scaling | plateau final acc (mean ± std) | per seed | rollbacks | q at the end |")
    print("|---:|---|---:|---|---:|---|")
    for budget in budgets:
        for scaling in SCALINGS:
            runs = [res[f"{budget}|{scaling}|{seed}"] for seed in seeds]
            acc = np.array([r["final_acc"] * 100 for r in runs])
            per_seed = ", ".join(f"{a:.1f}" for a in acc)
            print(
                f"| {budget:,} | {scaling} | {acc.mean():.1f} ± {acc.std():.1f} | {per_seed} "
                f"| {np.mean([r['rollbacks'] for r in runs]):.1f} | {', '.join(str(r['final_q']) for r in runs)} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
