"""Per-seed traces of single runs: why one run of a scheduler fails where another seed succeeds.

For each seed: the lr calibration and the lr trial (every candidate's j and validation loss, the
chosen lr_1), the q trajectory (each change of q with its step, passes and scheduler event), the
guard rollbacks (step, code: 0 saturation / dead zone, 1 validation loss; the new lr_1), the
validation loss and test accuracy at every evaluation, and the final accuracy.

    python benchmarks/make_rot90_task.py
    python benchmarks/trace_runs.py --model tests/fixtures/digits_cnn.tflite \
        --data build/unseen/digits_rot90.npz --scheduler plateau --seeds 1-5
    python benchmarks/trace_runs.py --task digits --scheduler critical --seeds 1-5 --json build/traces.json

Runs use the C engine on the host, cached like the grid's (build/experiments/runs keyed by
options and sources, with the full records kept under build/experiments/traces).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiments as ex  # noqa: E402
from heldout import seed_range  # noqa: E402
from sweep import make_executor, run_grid  # noqa: E402

from zoflash.spec import training as spec  # noqa: E402


def trace_one(run: dict) -> dict:
    """One run with its compact trace (a module-level function: the executor ships it)."""
    from zoflash.training.options import make_options
    from zoflash.workflows.simulate import simulate

    opts = make_options(
        scheduler=run["sched"],
        q=run["q"],
        lr=run["lr"],
        lr_scaling=run["lr_scaling"],
        lr_decay=run["lr_decay"],
        seed=run["seed"],
        budget=run["budget"],
        eval_every=run["eval_every"],
        train=run["train"],
        headroom=run["headroom"],
        lr_trial=run.get("lr_trial"),
        val_fraction=run.get("val_fraction"),
        **run.get("extra", {}),
    )
    res = simulate(run["model"], run["data"], opts, log_path=None, engine="c", plot=False)
    steps = [r for r in res.records if r["type"] == "step"]
    events = [r for r in res.records if r["type"] == "event"]
    evals = [r for r in res.records if r["type"] == "eval"]
    passes_at = {s["step"]: s["prefix_passes"] + s["suffix_passes"] for s in steps}
    return dict(
        key=run["key"],
        seed=run["seed"],
        final_acc=evals[-1]["accuracy"],
        best_val=min(e["val_loss"] for e in evals),
        trial=[
            (int(e["aux"]) if e["aux"] < 2**31 else int(e["aux"]) - 2**32, e["value"])
            for e in events
            if e["kind"] == "lr" and e["code"] == 1
        ],
        lr_calibrated=next((e["value"] for e in events if e["kind"] == "lr" and e["code"] == 0), None),
        lr_chosen=next((e["value"] for e in events if e["kind"] == "lr" and e["code"] == 2), None),
        q_changes=[
            dict(step=e["step"], passes=passes_at.get(e["step"], 0), q_from=e["q_from"], q_to=e["q_to"], code=e["code"])
            for e in events
            if e["kind"] == "scheduler" and e["q_from"] != e["q_to"]
        ],
        rollbacks=[
            dict(step=e["step"], passes=passes_at.get(e["step"], 0), code=e["code"], lr1=e["value"])
            for e in events
            if e["kind"] == "rollback"
        ],
        evals=[
            (e["prefix_passes"] + e["suffix_passes"], round(float(e["val_loss"]), 4), round(float(e["accuracy"]), 4))
            for e in evals
        ],
        steps=len(steps),
        trial_steps=sum(1 for s in steps if s.get("trial")),
        final_q=steps[-1]["q"],
        final_lr=steps[-1]["lr"],
        reason=res.done["reason"],
    )


def describe(t: dict, every: int = 10) -> str:
    trial = " ".join(f"j={j}:{v:.3f}" for j, v in t["trial"])
    qs = " ".join(
        f"{c['q_from']}->{c['q_to']}@{c['passes'] // 1000}k({spec.EVENTS[c['code']]})" for c in t["q_changes"]
    )
    rb = " ".join(f"c{r['code']}@{r['passes'] // 1000}k(lr1 {r['lr1']:.3g})" for r in t["rollbacks"]) or "none"
    ev = t["evals"]
    picks = ev[:: max(1, len(ev) // every)] + ([ev[-1]] if ev else [])
    curve = " ".join(f"{p // 1000}k:{v:.3f}/{100 * a:.0f}" for p, v, a in picks)
    return (
        f"seed {t['seed']}: final {100 * t['final_acc']:.1f}%  final q {t['final_q']}  lr calibrated "
        f"{t['lr_calibrated']}  chosen {t['lr_chosen']}  final lr {t['final_lr']:.3g}\n"
        f"  trial: {trial or 'none'}\n  q: {qs or 'no change'}\n  rollbacks: {rb}\n"
        f"  val loss / test acc: {curve}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ex.add_task_arguments(ap)
    ap.add_argument("--scheduler", default="plateau", choices=("fixed", *ex.ADAPTIVE))
    ap.add_argument("--q", type=int, default=1, help="q of a fixed-q run")
    ap.add_argument("--k", type=int, help="explicit lr_1 = L0·2^k (with --l0) instead of auto")
    ap.add_argument("--l0", type=float, help="the grid's L0 (with --k)")
    ap.add_argument("--seeds", default="1-5", help="run seeds, LO-HI or a comma list")
    ap.add_argument("--budget", type=int, default=ex.FULL.budget)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the traces here")
    ap.add_argument("--val-fraction", type=float, metavar="F", help="the runs' --val-fraction (default: zoflash's)")
    args = ap.parse_args(argv)
    args.task, _ = ex.task_of(ap, args)
    cfg = ex.with_budget(ex.FULL, args.budget if args.budget != ex.FULL.budget else None)
    task = ex.TASKS[args.task]
    lr = "auto" if args.k is None else f"k{args.k}"
    specs = [
        ex.make_spec(cfg, task, args.scheduler, args.q, lr, s, args.l0, val_fraction=args.val_fraction)
        for s in seed_range(args.seeds)
    ]
    for s in specs:
        s["key"] = "trace|" + s["key"]
    with make_executor(args.workers) as executor:
        res = run_grid(specs, trace_one, executor, ex.CACHE / "traces", lambda m: print(m, flush=True))
    traces = [res[s["key"]] for s in specs]
    for t in traces:
        print(describe(t))
    if args.json:
        args.json.write_text(json.dumps(traces))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
