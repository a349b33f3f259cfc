"""The signal share of ZO steps on the experiment tasks: (mean m2 - mean v) / mean m2 over the
step telemetry (m2: the step's mean squared loss difference, v: its minibatch-noise part; m2 - v
is what the directions measure of the gradient: docs/training.md "Learning rate"), for the first
200 steps and for the rest, at fixed q = 1, lr 10, 100k passes, seed 1.  research/2026-11-29-scheduler-grid-digits-400k.md
compares the digits and vision tasks with it.

    python benchmarks/signal_share.py digits vision
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from experiments import TASKS  # noqa: E402

from zoflash.training.options import make_options  # noqa: E402
from zoflash.workflows.simulate import simulate  # noqa: E402

EARLY = 200


def signal_share(task: str) -> tuple[float, float]:
    t = TASKS[task]
    opts = make_options(scheduler="fixed", q=1, lr=10.0, seed=1, budget=100_000, eval_every=100, train=t.train)
    res = simulate(t.model, t.data, opts, log_path=None, engine="c", plot=False)
    steps = [r for r in res.records if r["type"] == "step" and not r["calibrating"] and not r.get("trial")]
    m2, v = np.array([r["m2"] for r in steps]), np.array([r["v"] for r in steps])

    def share(a, b):
        return float((a.mean() - b.mean()) / a.mean())

    return share(m2[:EARLY], v[:EARLY]), share(m2[EARLY:], v[EARLY:])


if __name__ == "__main__":
    for name in sys.argv[1:] or ["digits", "vision"]:
        early, late = signal_share(name)
        print(f"{name}: signal share {early:.3f} in the first {EARLY} steps, {late:.3f} after")
