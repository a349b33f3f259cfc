"""How well the lr trial can tell its candidates apart: paired against unpaired standard errors.

The trial (docs/training.md "lr trial") scores every candidate rate by the mean validation loss
after its steps, on the same validation samples.  A rule that steps down from the best candidate
when the trial cannot tell it from the next lower rate needs a yardstick; this measures two on
the default runs of a task (the Python reference, stopped after the trial):

- unpaired: the standard error of the best candidate's mean validation loss (the spread of the
  samples themselves, which every candidate shares);
- paired: the standard error of the mean per-sample difference between the best candidate and
  its lower neighbour (what a paired comparison of the two measures).

    python benchmarks/lr_trial_spread.py --task vision-block --seeds 6-11
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiments as ex  # noqa: E402
from heldout import seed_range  # noqa: E402


class _TrialDone(Exception):
    pass


def trial_candidates(task: ex.Task, seed: int, budget: int) -> list[tuple[int, np.ndarray]]:
    """(j, per-sample validation losses) of each candidate of the default plateau run's lr trial."""
    from zoflash.reference.trainer import LR_CHOSEN, LR_TRIAL, ReferenceTrainer
    from zoflash.training.options import make_options
    from zoflash.workflows.training import compile_for_training

    opts = make_options(
        scheduler="plateau", seed=seed, budget=budget, eval_every=ex.ADAPTIVE_EVAL_EVERY, train=task.train
    )
    prep = compile_for_training(task.model, task.data, opts)
    t = prep.training
    trainer = ReferenceTrainer(prep.model, t.plan, t.options, t.data, prep.sha256)
    last: list[np.ndarray] = []
    found: list[tuple[int, np.ndarray]] = []
    loss_fn, event_fn = trainer._loss, trainer._event

    def loss(out, labels, targets):
        v = loss_fn(out, labels, targets)
        last[:] = [np.asarray(v, np.float32).copy()]
        return v

    def event(step, kind, code, *rest):
        if code == LR_TRIAL and kind == 2:
            aux = rest[-1]
            found.append((aux - (1 << 32) if aux >= 1 << 31 else aux, last[0]))
        if code == LR_CHOSEN and kind == 2:
            raise _TrialDone
        return event_fn(step, kind, code, *rest)

    trainer._loss, trainer._event = loss, event
    try:
        for _ in trainer.frames():
            pass
    except _TrialDone:
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ex.add_task_arguments(ap)
    ap.add_argument("--seeds", default="6-11", help="run seeds, LO-HI or a comma list")
    ap.add_argument("--budget", type=int, default=ex.FULL.budget, help="the runs' training passes")
    args = ap.parse_args(argv)
    name, _ = ex.task_of(ap, args)
    task = ex.TASKS[name]
    print(f"{name}, {ex.kpasses(args.budget)} passes: the lr trial's best candidate j and its lower neighbour")
    print("| seed | j: mean validation loss | best - lower | unpaired SE | paired SE | n |")
    print("|---:|---|---:|---:|---:|---:|")
    for seed in seed_range(args.seeds):
        cands = dict(trial_candidates(task, seed, args.budget))
        means = {j: float(v.mean()) for j, v in cands.items()}
        best = min(means, key=lambda j: (means[j], abs(j)))
        row = ", ".join(f"{j}: {means[j]:.3f}" for j in sorted(means))
        vb = cands[best]
        unpaired = float(vb.std() / np.sqrt(len(vb)))
        if best - 1 in cands:
            diff = cands[best - 1] - vb
            gap, paired = f"{float(diff.mean()):.3f}", f"{float(diff.std() / np.sqrt(len(diff))):.3f}"
        else:
            gap = paired = "–"
        print(f"| {seed} | {row} | {gap} | {unpaired:.3f} | {paired} | {len(vb)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
