"""--output: a model with several outputs trains on the chosen one (by index or tensor name), the
layers feeding it; the C and the reference give identical records; an unknown output is refused
with one message listing the model's outputs.  The two-output model (a shared layer, a 4-value
sigmoid head and a 1-value sigmoid head, like RNNoise's gains and voice activity) is made here
with TensorFlow and `zoflash convert`."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import need_module

from zoflash import api
from zoflash.cli import main
from zoflash.training.options import OptionsError, make_options
from zoflash.training.plan import plan_training

pytestmark = [pytest.mark.tf, pytest.mark.cc]


@pytest.fixture(scope="module")
def two_outputs(tmp_path_factory):
    need_module("tensorflow")
    import tensorflow as tf

    d = tmp_path_factory.mktemp("two_outputs")
    tf.keras.utils.set_random_seed(3)
    i = tf.keras.Input((16,))
    h = tf.keras.layers.Dense(12, activation="relu")(i)
    gains = tf.keras.layers.Dense(4, activation="sigmoid")(h)
    vad = tf.keras.layers.Dense(1, activation="sigmoid")(h)
    tf.keras.Model(i, [gains, vad]).save(d / "m.keras")
    rng = np.random.default_rng(0)
    np.save(d / "cal.npy", rng.random((64, 16)).astype(np.float32))
    model = d / "two.tflite"
    assert (
        main(["-q", "convert", "--keras", str(d / "m.keras"), "--calibration", str(d / "cal.npy"), "--out", str(model)])
        == 0
    )
    x = rng.integers(-128, 128, (24, 16)).astype(np.int8)
    np.savez(
        d / "labels.npz", x_train=x[:16], y_train=rng.integers(0, 2, 16), x_test=x[16:], y_test=rng.integers(0, 2, 8)
    )
    t = rng.uniform(0, 1, (24, 4)).astype(np.float32)
    np.savez(d / "targets.npz", x_train=x[:16], y_train=t[:16], x_test=x[16:], y_test=t[16:])
    return d


def _outputs(model) -> list[tuple[str, int]]:
    g = api.load_model(model).graph
    return [(g.tensors[o].name, g.tensors[o].num_elements) for o in g.outputs]


def _by_size(model, elements: int) -> int:
    return next(k for k, (_, n) in enumerate(_outputs(model)) if n == elements)


def test_each_output_trains_only_the_layers_feeding_it(two_outputs):
    model = two_outputs / "two.tflite"
    compiled = api.compile_model(api.load_model(model))
    vad, gains = _by_size(model, 1), _by_size(model, 4)
    p_vad = plan_training(compiled, make_options(output=str(vad), train="all"))
    p_gains = plan_training(compiled, make_options(output=_outputs(model)[gains][0], loss="mse", train="all"))
    assert (p_vad.loss, p_vad.classes, p_gains.loss, p_gains.classes) == ("sigmoid-bce", 1, "mse", 4)
    # --train all: the shared layer and the chosen head, never the other head
    assert len(p_vad.layers) == len(p_gains.layers) == 2
    assert p_vad.layers[0] == p_gains.layers[0] and p_vad.layers[1] != p_gains.layers[1]


def test_an_unknown_output_is_refused_listing_the_outputs(two_outputs, capsys):
    model = two_outputs / "two.tflite"
    compiled = api.compile_model(api.load_model(model))
    for bad in ("2", "gains"):
        with pytest.raises(OptionsError) as info:
            plan_training(compiled, make_options(output=bad))
        text = str(info.value)
        assert f"'{bad}'" in text and all(f"{k} '{name}'" in text for k, (name, _) in enumerate(_outputs(model)))
    args = ["simulate", "--model", str(model), "--data", str(two_outputs / "labels.npz"), "--output", "7"]
    assert main([*args, "--log", str(two_outputs / "bad.jsonl"), "--no-plot"]) != 0
    err = capsys.readouterr().err
    assert "--output" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("head", ["vad", "gains"])
def test_the_c_and_the_reference_train_the_chosen_output_identically(two_outputs, capsys, head):
    model = two_outputs / "two.tflite"
    if head == "vad":  # by index, the default loss (sigmoid-bce on one value)
        extra = ["--output", str(_by_size(model, 1)), "--data", str(two_outputs / "labels.npz")]
    else:  # by name, mse on the four gains
        name = _outputs(model)[_by_size(model, 4)][0]
        extra = ["--output", name, "--loss", "mse", "--train", "all", "--data", str(two_outputs / "targets.npz")]
    common = ["-q", "simulate", "--model", str(model), *extra, "--steps", "4", "--batch", "2", "--no-plot", "--force"]
    logs = {e: two_outputs / f"{head}-{e}.jsonl" for e in ("c", "reference")}
    for engine, log in logs.items():
        assert main([*common, "--engine", engine, "--log", str(log)]) == 0
    capsys.readouterr()
    assert main(["compare", str(logs["c"]), str(logs["reference"])]) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_a_bundle_records_output_only_when_chosen():
    """Output 0 by default: recorded as before the option existed (same bundles and checkpoints)."""
    from zoflash.training.render import recorded_options

    assert "output" not in recorded_options(make_options())
    assert recorded_options(make_options(output="1"))["output"] == "1"
