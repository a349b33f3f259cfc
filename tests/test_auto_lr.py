"""The auto learning rate (docs/training.md "Learning rate"): lr_1 = r * sqrt(p / m2c) with the step
r = min(rho, max(1, w_rms / 32 / sqrt(p))) in LSB of the trained layer (re-quantized with h bits of
headroom: its own LSB, docs/training.md "Learning rate"), checked in float64 against the generated
C's calibration records and the model's own weights, in each of the three regimes of r, without
and with headroom."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.training.options import make_options
from zoflash.workflows.simulate import simulate
from zoflash.workflows.training import compile_for_training

MODEL, DATA = FIXTURES / "digits_cnn.tflite", FIXTURES / "digits_shift.npz"


@pytest.mark.cc
@pytest.mark.parametrize(
    "density, rho, binding, headroom",
    [
        (1.0, 4.0, "floor", 0),
        (1 / 16, 4.0, "weights", 0),
        (1 / 16, 2.0, "rho", 0),
        (1.0, 4.0, "floor", 2),
        (1 / 4, 4.0, "floor", 2),
        (1 / 16, 4.0, "weights", 1),
        (1 / 16, 1.5, "rho", 1),
        (1.0, 4.0, "floor", "auto"),
    ],
)
def test_auto_lr_is_bounded_by_the_weights(tmp_path, density, rho, binding, headroom):
    opts = make_options(density=density, rho=rho, steps=8, eval_every=100, headroom=headroom)
    run = simulate(MODEL, DATA, opts, tmp_path / "run.jsonl", engine="c", plot=False)
    m2c = np.mean([s["m2"] for s in run.steps if s["calibrating"]])
    training = compile_for_training(MODEL, DATA, opts).training
    assert training.options.headroom == (2 if headroom == "auto" else headroom)  # auto: 2 bits here
    weights = [t.values.astype(np.float64) for t in training.plan.tensors if not t.is_bias]
    w_rms = math.sqrt(sum(float((w**2).sum()) for w in weights) / sum(w.size for w in weights))
    by_w = w_rms / 32 / math.sqrt(density)
    r = min(rho, max(1.0, by_w))
    assert {"floor": r == 1.0, "weights": r == by_w, "rho": r == rho}[binding], (r, by_w)
    lr = [e["value"] for e in run.records if e["type"] == "event" and e["kind"] == "lr"]
    assert lr and lr[0] == pytest.approx(r * math.sqrt(density / m2c), rel=1e-5)
