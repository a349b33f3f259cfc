"""Warnings before training (training/checks.py): data and options that train, but probably not as
meant. One line each, naming what fixes it; said through the workflows' progress sink before
anything trains (simulate, run, build with --data) and returned with the result."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.quant import SATURATION_WARNING
from zoflash.compiler.tflite_import import load_tflite
from zoflash.spec import training as spec
from zoflash.training.options import make_options
from zoflash.training.pipeline import compile_training
from zoflash.workflows.monitor import log_line

MLP = Path(__file__).parent / "fixtures" / "mlp.tflite"  # int8 input [1, 64] for [0, 1] (scale 1/255), 10 classes


@pytest.fixture(autouse=True)
def _no_project_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # make_options() would read a ./zoflash.toml


def dataset(tmp_path: Path, n: int = 200, classes: int = 10, x_train=None, x_test=None) -> Path:
    """A dataset in the model input's real units ([0, 1]) with every class, unless told otherwise."""
    rng = np.random.default_rng(0)
    path = tmp_path / f"d{len(list(tmp_path.glob('d*.npz')))}.npz"
    np.savez(
        path,
        x_train=rng.random((n, 64), dtype=np.float32) if x_train is None else x_train,
        y_train=np.arange(n) % classes,
        x_test=rng.random((40, 64), dtype=np.float32) if x_test is None else x_test,
        y_test=np.arange(40) % 10,
    )
    return path


def warnings_for(data: Path, **options) -> list[str]:
    graph, raw = load_tflite(MLP)
    return compile_training(MLP, graph, raw, data, make_options(**{"headroom": 0, **options})).warnings


def test_a_clean_dataset_and_options_give_no_warning(tmp_path):
    data = dataset(tmp_path)
    assert warnings_for(data) == []
    assert warnings_for(data, lr=0.01, lr_trial=8, steps=1000) == []  # the trial fits a quarter of the run
    assert warnings_for(data, scheduler="fixed", lr_trial=None, steps=10) == []  # no trial: nothing to say


def test_one_class(tmp_path):
    (w,) = warnings_for(dataset(tmp_path, classes=1))
    assert "every training sample has label 0" in w and "--data" in w and "two classes" in w


def test_a_validation_split_below_the_promised_count(tmp_path):
    (w,) = warnings_for(dataset(tmp_path, n=10), batch=4)  # 10 samples: the split is topped up to half, 5
    assert f"the validation split has 5 sample(s), fewer than the {spec.VAL_MIN_COUNT}" in w
    assert "--val-fraction" in w and f"at least {2 * spec.VAL_MIN_COUNT} training samples" in w
    assert warnings_for(dataset(tmp_path, n=2 * spec.VAL_MIN_COUNT), batch=4) == []


def test_inputs_that_saturate_the_input_range(tmp_path):
    rng = np.random.default_rng(1)
    pixels = (rng.random((200, 64)) * 255).astype(np.float32)  # 0..255 for a model trained on [0, 1]
    (w,) = warnings_for(dataset(tmp_path, x_train=pixels))
    assert "of x_train's values fall outside the model input's range [0, 1] and saturate" in w
    assert "--data" in w and "real units" in w
    # just below the threshold: a calibrated range clips a few outliers, which is no warning
    x = rng.random((200, 64)).astype(np.float32)
    x.reshape(-1)[: int(x.size * SATURATION_WARNING) - 1] = 2.0
    assert warnings_for(dataset(tmp_path, x_train=x)) == []
    x.reshape(-1)[: int(x.size * SATURATION_WARNING) + 1] = 2.0
    assert len(warnings_for(dataset(tmp_path, x_train=x))) == 1


def test_test_inputs_that_saturate_are_named_too(tmp_path):
    pixels = (np.random.default_rng(2).random((40, 64)) * 255).astype(np.float32)
    (w,) = warnings_for(dataset(tmp_path, x_test=pixels))
    assert "of x_test's values fall outside the model input's range [0, 1] and saturate" in w


def test_lr_zero(tmp_path):
    (w,) = warnings_for(dataset(tmp_path), lr=0)
    assert w.startswith("--lr (lr=) 0: ") and "never change" in w and "--lr > 0 or auto" in w


def test_an_lr_trial_longer_than_the_run(tmp_path):
    data = dataset(tmp_path)
    moves = spec.LR_TRIAL_MAX_MOVES + 2
    (w,) = warnings_for(data, lr_trial=64, steps=500)
    assert w.startswith("--lr-trial (lr_trial=) 64: ") and f"{moves} candidates x 64 steps = {64 * moves} steps" in w
    assert "(--steps 500)" in w and "does not run" in w and "lower --lr-trial or raise --steps" in w
    (w,) = warnings_for(data, lr_trial=64, budget=40_000)  # 320 steps of 16 samples, each 2 or 3 passes
    assert "(--budget 40000 passes)" in w and "raise --budget" in w
    # the trial fits exactly a quarter of the run: it runs, no warning
    assert warnings_for(data, lr_trial=64, steps=64 * moves * spec.LR_TRIAL_SHARE) == []


def test_fewer_samples_than_the_batch(tmp_path):
    (w,) = warnings_for(dataset(tmp_path, n=20), batch=32)  # 8 of the 20 become the validation split
    assert "12 training samples for a batch of 32" in w and "lower --batch to at most 12" in w


def test_the_warnings_go_through_the_progress_sink_before_anything_is_written(tmp_path):
    data = dataset(tmp_path, classes=1)
    lines: list[str] = []
    compiled = api.compile_for(MLP, data, api.TrainOptions(lr=0, headroom=0), say=lines.append)
    assert len(compiled.warnings) == 2 and lines == [f"warning: {w}" for w in compiled.warnings]


def test_simulate_says_and_returns_the_warnings(tmp_path):
    lines: list[str] = []
    opts = api.TrainOptions(lr=0, steps=2, eval_every=1, headroom=0, scheduler="fixed")
    result = api.simulate(MLP, dataset(tmp_path), opts, None, engine="reference", plot=False, say=lines.append)
    assert result.warnings == [w[len("warning: ") :] for w in lines] and "--lr (lr=) 0" in lines[0]


def test_build_prints_the_warnings_before_the_bundle(tmp_path, capsys):
    data = dataset(tmp_path)
    out = tmp_path / "b"
    argv = ["build", "--model", str(MLP), "--data", str(data), "--no-compile", "--out", str(out), "--headroom", "0"]
    assert main([*argv, "--lr", "0"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("warning: --lr (lr=) 0: "), printed
    assert main(argv) == 0
    assert "warning:" not in capsys.readouterr().out


def test_log_line_shows_warnings_to_python_callers(caplog):
    caplog.set_level(logging.INFO, logger="zoflash")
    log_line("warning: something to fix")
    log_line("board   a note")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "something to fix"),
        (logging.INFO, "board   a note"),
    ]
