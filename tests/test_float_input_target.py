"""--target input on a model with float32 input (`zoflash convert --io float`): the model quantizes
its input itself, and the target is that quantized input in real units, embedded as mse targets;
the C and the reference train identically.  The autoencoder is made here with TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import need_module

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.convert import convert
from zoflash.reference.forward import ReferenceForward
from zoflash.training.options import make_options
from zoflash.training.pipeline import compile_training

pytestmark = [pytest.mark.tf, pytest.mark.cc]


@pytest.fixture(scope="module")
def float_autoencoder(tmp_path_factory):
    need_module("tensorflow")
    import tensorflow as tf

    d = tmp_path_factory.mktemp("float_ae")
    tf.keras.utils.set_random_seed(5)
    i = tf.keras.Input((16,))
    h = tf.keras.layers.Dense(6, activation="relu")(i)
    tf.keras.Model(i, tf.keras.layers.Dense(16)(h)).save(d / "ae.keras")
    rng = np.random.default_rng(1)
    np.save(d / "cal.npy", rng.uniform(-1, 1, (64, 16)).astype(np.float32))
    report = convert("keras", d / "ae.keras", d / "cal.npy", d / "ae_float.tflite", io_type="float", compare=False)
    assert report.supported
    x = rng.uniform(-1.2, 1.2, (40, 16)).astype(np.float32)  # some values past the input's range: clamped
    np.savez(d / "x.npz", x_train=x[:32], x_test=x[32:])
    return d


def test_the_target_is_the_models_quantized_input(float_autoencoder):
    model = float_autoencoder / "ae_float.tflite"
    loaded = api.load_model(model)
    assert loaded.graph.tensors[loaded.graph.inputs[0]].dtype == "float32"
    training = compile_training(
        model, loaded.graph, loaded.raw, float_autoencoder / "x.npz", make_options(target="input")
    )
    data, compiled = training.training.data, training.model
    assert training.training.plan.loss == "mse" and data.t_train is not None
    # the reference runs the model's own QUANTIZE (step 0) on the same samples
    fwd = ReferenceForward(compiled)
    quantize = compiled.program.steps[0]
    assert quantize.op.type == "QUANTIZE"
    q_out = compiled.root[quantize.op.outputs[0]]
    q = compiled.storage(q_out).quant
    for x, t in ((data.x_train, data.t_train), (data.x_val, data.t_val), (data.x_test, data.t_test)):
        ints = fwd.run({loaded.graph.inputs[0]: x}, 0, 1)[q_out].astype(np.int32)
        assert np.array_equal(t, (np.float32(q.scale) * (ints - q.zero_point).astype(np.float32)).astype(np.float32))
    assert np.any(np.abs(data.t_train) < np.abs(data.x_train.reshape(len(data.x_train), -1)))  # clamped values


def test_the_c_and_the_reference_train_identically(float_autoencoder, capsys):
    model, data = float_autoencoder / "ae_float.tflite", float_autoencoder / "x.npz"
    common = ["-q", "simulate", "--model", str(model), "--data", str(data), "--target", "input"]
    common += ["--steps", "6", "--batch", "4", "--train", "all", "--no-plot", "--force"]
    logs = {e: float_autoencoder / f"{e}.jsonl" for e in ("c", "reference")}
    for engine, log in logs.items():
        assert main([*common, "--engine", engine, "--log", str(log)]) == 0
    capsys.readouterr()
    assert main(["compare", str(logs["c"]), str(logs["reference"])]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
