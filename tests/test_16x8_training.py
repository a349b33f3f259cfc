"""16x8 models (int16 activations, int8 weights, int64 biases) train: the digits MLP of
tests/fixtures converted 16x8 adapts to the shifted digits with identical records in the C, the
reference and on the emulated Cortex-M55; the update log replays to the same weights; the
exported model (int64 biases written back) runs in TFLM with the accuracy the run reported."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.cli import main
from zoflash.monitor.session import read_log
from zoflash.training.options import make_options
from zoflash.training.pipeline import compile_training
from zoflash.training.plan import plan_training

MODEL = FIXTURES / "int16_act.tflite"
STEPS = 300


@pytest.fixture(scope="module")
def shifted_digits(tmp_path_factory):
    """The shifted digits of the continual fixtures, flattened to the MLP's 64 inputs."""
    d = np.load(FIXTURES / "digits_shift.npz")
    path = tmp_path_factory.mktemp("s16") / "digits.npz"
    np.savez(path, **{k: v.reshape(len(v), 64) if k.startswith("x") else v for k, v in d.items()})
    return path


def test_the_plan_trains_int8_weights_and_int64_biases_on_int16_logits():
    compiled = api.compile_model(api.load_model(MODEL))
    plan = plan_training(compiled, make_options(train="all"))
    assert {str(t.values.dtype) for t in plan.tensors} == {"int8", "int64"}
    assert compiled.storage(plan.logits).dtype == "int16"
    assert plan.layers == [0, 1] and plan_training(compiled, make_options()).layers == [1]


@pytest.mark.cc
def test_a_16x8_model_adapts_with_identical_engines_and_exports(shifted_digits, tmp_path, capsys):
    common = ["-q", "simulate", "--model", str(MODEL), "--data", str(shifted_digits), "--steps", str(STEPS)]
    common += ["--no-plot", "--force"]
    logs = {e: tmp_path / f"{e}.jsonl" for e in ("c", "reference")}
    for engine, log in logs.items():
        assert main([*common, "--engine", engine, "--log", str(log)]) == 0
    capsys.readouterr()
    assert main(["compare", str(logs["c"]), str(logs["reference"])]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    evals = [r for r in read_log(logs["c"]) if r["type"] == "eval"]
    assert evals[-1]["val_loss"] < 0.8 * evals[0]["val_loss"]
    assert evals[-1]["accuracy"] > evals[0]["accuracy"] + 0.03

    # the update log rebuilds the weights, int64 biases included, as the device's CRC says
    replayed = tmp_path / "replayed.npz"
    assert main(["replay", "--model", str(MODEL), "--log", str(logs["c"]), "--out", str(replayed)]) == 0
    assert "weights identical to the device's" in capsys.readouterr().out

    out = tmp_path / "trained.tflite"
    weights = logs["c"].with_suffix(".weights.npz")
    assert main(["-q", "export", "--model", str(MODEL), "--weights", str(weights), "--out", str(out)]) == 0
    before, after = (api.load_model(p).graph for p in (MODEL, out))
    biases = [k for k, t in enumerate(before.tensors) if t.dtype == "int64" and t.data is not None]
    assert any(not np.array_equal(before.tensors[k].data, after.tensors[k].data) for k in biases)

    from zoflash.reference.tflm import run_isolated

    data = compile_training(MODEL, before, MODEL.read_bytes(), shifted_digits, make_options()).training.data
    x = data.x_test.reshape(len(data.x_test), 1, 64)
    assert x.dtype == np.int16
    (logits,) = run_isolated(out.read_bytes(), [x])
    correct = int(np.count_nonzero(np.argmax(logits.reshape(len(x), -1), axis=1) == data.y_test))
    # the export holds the best weights by validation: the eval record of the best validation loss
    best = min(evals, key=lambda r: (r["val_loss"], -r["step"]))
    assert correct == best["correct"], json.dumps(best)


@pytest.mark.cross
@pytest.mark.qemu
def test_the_emulated_m55_trains_a_16x8_model_as_the_host(shifted_digits, tmp_path, capsys):
    logs = {k: tmp_path / f"{k}.jsonl" for k in ("host", "m55")}
    common = ["--model", str(MODEL), "--data", str(shifted_digits), "--steps", "120", "--force"]
    assert main(["-q", "simulate", *common, "--no-plot", "--log", str(logs["host"])]) == 0
    assert main(["-q", "run", "--board", "mps3-an547", *common, "--log", str(logs["m55"])]) == 0
    capsys.readouterr()
    assert main(["compare", str(logs["host"]), str(logs["m55"])]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
