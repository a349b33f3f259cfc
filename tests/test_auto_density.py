"""Defaults that never make a model worse: `--density auto` makes the directions sparse for large
layers (spec/options.py auto_density; research/2026-12-05-auto-density-large-fc.md), so the loss of
a large FC layer falls with default options, on the MLPerf Tiny autoencoder and on a generated Keras
MLP; and when no step improves the validation loss, the best weights are the start and export
writes the model unchanged."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC
from fixtures.make_losses import new_machine

from zoflash import api
from zoflash.errors import ZoflashError
from zoflash.spec import training as spec
from zoflash.spec.options import BY_NAME, auto_density
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.simulate import simulate

AUTOENCODER = PUBLIC / "mlperf_ad_autoencoder.tflite"


def test_the_rule_keeps_the_heads_dense_and_thins_large_layers():
    assert BY_NAME["density"].default is None and BY_NAME["density"].auto  # the default is the rule
    # the classifier heads of the demos and benchmarks (sensor, digits, vision): dense as before
    for values in (132, 2570, 12810, spec.AUTO_DENSITY_NONZEROS):
        assert auto_density(values) == 1.0
    assert auto_density(spec.AUTO_DENSITY_NONZEROS + 1) == 0.5
    assert auto_density(25728) == 0.5
    assert auto_density(82560) == 0.125  # the autoencoder's 640x128 layer: at most 16384 nonzeros
    assert auto_density(10**7) == 1 / (1 << spec.DENSITY_LOG2_MAX)
    with pytest.raises(ZoflashError, match="resolved when the training is compiled"):
        _ = make_options().density_log2


def _falls(run):
    """(training loss early, late) and (validation loss first, last) of a run."""
    losses = [r["loss"] for r in run.records if r["type"] == "step"]
    return (np.mean(losses[8:28]), np.mean(losses[-20:])), (run.evals[0]["val_loss"], run.evals[-1]["val_loss"])


@pytest.mark.zoo
@pytest.mark.cc
def test_the_autoencoder_learns_with_the_defaults(tmp_path):
    """200 steps at default options: density 1 let the training loss rise (34.7 -> 47.9 by step 40)
    until the guard rolled back; the rule's 1/8 makes both losses fall, with no rollback."""
    x = new_machine()
    np.savez(tmp_path / "nm.npz", x_train=x[:256], x_test=x[256:])
    run = simulate(AUTOENCODER, tmp_path / "nm.npz", make_options(target="input", steps=200, eval_every=50),
                   tmp_path / "ad.jsonl", plot=False)  # fmt: skip
    assert run.records[0]["density_log2"] == 3  # resolved from the 82,560 trained values
    (early, late), (first, last) = _falls(run)
    assert late < 0.95 * early and last < 0.9 * first, (early, late, first, last)
    assert not any(r.get("kind") == "rollback" for r in run.records)
    assert not run.best_is_start


def _keras_autoencoder(tmp_path, features: int, hidden: int):
    """An INT8 MLP autoencoder Dense(hidden, relu) -> Dense(features) trained on one domain, and
    data from a shifted one (int8 inputs)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf = pytest.importorskip("tensorflow")
    from zoflash.compiler.convert import quiet

    tf.keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    basis = rng.normal(size=(16, features)).astype(np.float32)

    def domain(n, shift):
        return np.tanh(rng.normal(size=(n, 16)).astype(np.float32) @ basis / 4 + shift).astype(np.float32)

    def mlp(batch):
        layers = [tf.keras.layers.Dense(hidden, activation="relu"), tf.keras.layers.Dense(features)]
        return tf.keras.Sequential([tf.keras.Input((features,), batch_size=batch), *layers])

    xa = domain(2000, 0.0)
    trained = mlp(None)
    trained.compile("adam", "mse")
    trained.fit(xa, xa, epochs=8, batch_size=64, verbose=0)
    model = mlp(1)  # exported with a batch of 1 (a dynamic batch adds shape ops)
    model.set_weights(trained.get_weights())
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([x[None]] for x in xa[:200])
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    with quiet():
        (tmp_path / "mlp.tflite").write_bytes(conv.convert())
    q = api.load_model(tmp_path / "mlp.tflite")
    quant = q.graph.tensors[q.graph.inputs[0]].quant
    xb = domain(400, rng.normal(size=features).astype(np.float32) * 0.5)
    x = np.clip(np.round(xb / quant.scale + quant.zero_point), -128, 127).astype(np.int8)
    np.savez(tmp_path / "shift.npz", x_train=x[:300], x_test=x[300:])
    return tmp_path / "mlp.tflite", tmp_path / "shift.npz"


@pytest.mark.tf
@pytest.mark.cc
def test_a_keras_mlp_with_a_large_fc_learns_with_the_defaults(tmp_path):
    """Another large FC layer (320 -> 256, 82,176 trained values): the defaults make the
    reconstruction loss fall; density 1 is what the rule replaces."""
    model, data = _keras_autoencoder(tmp_path, 256, 320)
    run = simulate(model, data, make_options(target="input", steps=200, eval_every=50), tmp_path / "a.jsonl",
                   plot=False)  # fmt: skip
    assert run.records[0]["density_log2"] == 3
    (early, late), (first, last) = _falls(run)
    assert late < 0.95 * early and last < 0.95 * first, (early, late, first, last)


@pytest.mark.cc
def test_when_no_step_improves_export_writes_the_start(tmp_path, capsys):
    """A rate far too large: every evaluation is worse than the start, so the snapshot (the best
    weights) never moves; the run says so and export writes the model byte for byte."""
    from zoflash.cli import main

    model = FIXTURES / "regressor.tflite"
    args = ["simulate", "--model", str(model), "--data", str(FIXTURES / "regress_shift.npz"), "--loss", "mse"]
    args += ["--lr", "100000", "--lr-trial", "0", "--steps", "40", "--eval-every", "20", "--no-plot"]
    assert main([*args, "--log", str(tmp_path / "r.jsonl")]) == 0
    assert "best    no step improved the validation loss: the best weights are the start" in capsys.readouterr().out
    weights = load_weights(tmp_path / "r.weights.npz")
    assert weights.best_is_start and weights.best
    report = api.export(model, tmp_path / "r.weights.npz", tmp_path / "start.tflite")
    assert report.selected == "start" and (tmp_path / "start.tflite").read_bytes() == model.read_bytes()
    assert api.export(model, tmp_path / "r.weights.npz", tmp_path / "last.tflite", select="last").selected == "last"


@pytest.mark.cc
def test_an_improving_run_exports_its_best(tmp_path):
    opts = make_options(loss="mse", steps=60, eval_every=20)
    run = simulate(FIXTURES / "regressor.tflite", FIXTURES / "regress_shift.npz", opts, tmp_path / "r.jsonl",
                   plot=False)  # fmt: skip
    assert not run.best_is_start and not load_weights(run.weights_path).best_is_start
    assert api.export(FIXTURES / "regressor.tflite", run.weights_path, tmp_path / "b.tflite").selected == "best"
