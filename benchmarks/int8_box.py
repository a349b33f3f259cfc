"""How far the float head lies outside the int8 weight grid the ZO runs train in.

For an experiment task with a FULLY_CONNECTED head: the first-order head (Adam at lr 0.01, the
iteration picked by the validation loss, as benchmarks/first_order.py) expressed in the int8
weights' LSB (RMS, max, the share beyond the +-(127 - eps) bound), its test accuracy once
rounded and clipped to that bound, and the ceiling of Adam projected onto the bound after every
iteration (how many weights end on it). research/2026-11-29-scheduler-grid-digits-400k.md reads the vision task with it.

    python benchmarks/int8_box.py digits sensor vision
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import first_order as fo  # noqa: E402
from experiments import TASKS  # noqa: E402

from zoflash.spec.options import TRAIN_DEFAULTS  # noqa: E402

BOUND = 127 - TRAIN_DEFAULTS["eps"]  # the trainer's clamp: a weight perturbed by +-eps stays int8
LR, ITERATIONS = 1e-2, 3000


def adam(net, feats, box=None):
    """Full-batch Adam; (test accuracy, [weights, bias]) at the iteration with the best validation loss."""
    (xtr, ytr), (xva, yva), (xte, yte) = feats["train"], feats["val"], feats["test"]
    params = [p.copy() for p in net.params]
    m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    best = (np.inf, None, None)
    for it in range(1, ITERATIONS + 1):
        fo.adam_step(params, net.grads(xtr, fo.loss_and_dlogits(net.logits(xtr, params), ytr)[1], params), m, v, it, LR)
        if box is not None:
            np.clip(params[0], -box, box, out=params[0])
        if it % fo.CHECK_EVERY == 0:
            loss = fo.loss_and_dlogits(net.logits(xva, params), yva)[0]
            if loss < best[0]:
                acc = float(np.mean(np.argmax(net.logits(xte, params), axis=1) == yte))
                best = (loss, acc, [p.copy() for p in params])
    return best[1], best[2]


def int8_box(task: str) -> dict:
    from zoflash.training.options import make_options
    from zoflash.workflows.training import compile_for_training

    t = TASKS[task]
    prep = compile_for_training(str(t.model), str(t.data), make_options(train=t.train))
    got = fo._features(prep)
    if isinstance(got, str) or not isinstance(got[1], fo.Head):
        return {"skipped": got if isinstance(got, str) else "not a FULLY_CONNECTED head"}
    feats, net = got
    g = prep.model.graph
    fc = g.ops[prep.training.plan.layers[-1]]
    scales = np.asarray(g.tensors[fc.inputs[1]].quant.scales, np.float64)
    lsb = scales[:, None] if scales.size > 1 else scales[0]
    acc, (w, b) = adam(net, feats)
    w_lsb = w / lsb
    xte, yte = feats["test"]
    clipped = np.clip(np.round(w_lsb), -BOUND, BOUND) * lsb
    acc_clipped = float(np.mean(np.argmax(xte @ clipped.T + b, axis=1) == yte))
    acc_box, (w_box, _) = adam(net, feats, box=BOUND * lsb)
    return dict(
        pretrained_rms=float(np.sqrt(np.mean((net.params[0] / lsb) ** 2))),
        float_acc=acc,
        rms=float(np.sqrt(np.mean(w_lsb**2))),
        max=float(np.abs(w_lsb).max()),
        beyond=float(np.mean(np.abs(w_lsb) > BOUND)),
        clipped_acc=acc_clipped,
        box_acc=acc_box,
        on_bound=float(np.mean(np.abs(w_box / lsb) > BOUND - 0.5)),
    )


if __name__ == "__main__":
    for name in sys.argv[1:] or ["digits", "sensor", "vision"]:
        r = int8_box(name)
        if "skipped" in r:
            print(f"{name}: skipped ({r['skipped']})")
            continue
        print(
            f"{name}: pretrained head RMS {r['pretrained_rms']:.1f} LSB; float head {100 * r['float_acc']:.1f}% "
            f"with RMS {r['rms']:.0f} LSB, max {r['max']:.0f}, {100 * r['beyond']:.1f}% beyond +-{BOUND}; "
            f"rounded and clipped {100 * r['clipped_acc']:.1f}%; Adam inside +-{BOUND} {100 * r['box_acc']:.1f}% "
            f"with {100 * r['on_bound']:.1f}% of the weights on the bound"
        )
