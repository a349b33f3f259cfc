"""`zoflash convert`: a float Keras model, SavedModel or float .tflite becomes a full-INT8 .tflite
with batch size 1 (TensorFlow, the `tf` tier), checked by zoflash's own importer and compiler and
by the tflite-micro interpreter."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.convert import convert, fixed_batch, load_calibration
from zoflash.compiler.tflite_import import parse_tflite
from zoflash.errors import DataError, ToolMissingError


def _signatures(raw: bytes) -> list:
    g = parse_tflite(raw)
    return [t.shape_signature for t in g.tensors if t.shape_signature is not None]


@pytest.mark.zoo
def test_fixed_batch_sets_only_the_leading_dynamic_dimension():
    raw = (PUBLIC / "hello_world.tflite").read_bytes()
    assert any(s[0] == -1 for s in _signatures(raw))
    fixed = fixed_batch(raw)
    assert len(fixed) == len(raw)
    assert all(s[0] == 1 for s in _signatures(fixed) if len(s))
    assert api.compile_model(api.LoadedModel(FIXTURES / "x.tflite", parse_tflite(fixed), fixed)).arena_size > 0


def test_calibration_files(tmp_path):
    x = np.random.default_rng(0).random((5, 4, 4, 1)).astype(np.float32)
    np.save(tmp_path / "a.npy", x)
    np.savez(tmp_path / "b.npz", x_train=x, y_train=np.zeros(5))
    np.savez(tmp_path / "c.npz", y=np.zeros(5), z=np.ones(5))
    assert np.array_equal(load_calibration(tmp_path / "a.npy"), x)
    assert np.array_equal(load_calibration(tmp_path / "b.npz"), x)
    with pytest.raises(DataError, match="needs one of x, x_train"):
        load_calibration(tmp_path / "c.npz")
    with pytest.raises(DataError, match="does not exist"):
        load_calibration(tmp_path / "missing.npy")


def test_without_tensorflow_one_line_says_how_to_install(tmp_path, monkeypatch, capsys):
    np.save(tmp_path / "cal.npy", np.zeros((2, 3), np.float32))
    (tmp_path / "m.keras").write_bytes(b"not a model")
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow -> ImportError
    with pytest.raises(ToolMissingError, match=r"zoflash\[convert\]"):
        convert("keras", tmp_path / "m.keras", tmp_path / "cal.npy", tmp_path / "o.tflite")
    assert (
        main(
            [
                "convert",
                "--keras",
                str(tmp_path / "m.keras"),
                "--calibration",
                str(tmp_path / "cal.npy"),
                "--out",
                str(tmp_path / "o.tflite"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err and "zoflash[convert]" in err


def test_cli_needs_exactly_one_source(tmp_path, capsys):
    assert main(["convert", "--calibration", "c.npy", "--out", str(tmp_path / "o.tflite")]) == 2
    assert "exactly one of --keras, --saved-model or --tflite" in capsys.readouterr().err


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory):
    tf = _tf()
    d = tmp_path_factory.mktemp("keras")
    tf.keras.utils.set_random_seed(3)
    i = tf.keras.Input((8, 8, 1))
    x = tf.keras.layers.Conv2D(6, 3, activation="relu")(i)
    x = tf.keras.layers.MaxPooling2D()(x)
    x = tf.keras.layers.Flatten()(x)
    o = tf.keras.layers.Dense(4, activation="softmax")(x)
    model = tf.keras.Model(i, o)
    model.save(d / "m.keras")
    rng = np.random.default_rng(0)
    np.save(d / "cal.npy", rng.random((80, 8, 8, 1)).astype(np.float32))
    (d / "float.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return d


def _tf():
    from conftest import need_module

    need_module("tensorflow")
    import tensorflow as tf

    return tf


@pytest.mark.tf
@pytest.mark.cc
@pytest.mark.tflm
def test_keras_model_converts_to_a_supported_bit_exact_int8_model(keras_model, capsys):
    out = keras_model / "int8.tflite"
    assert (
        main(
            [
                "convert",
                "--keras",
                str(keras_model / "m.keras"),
                "--calibration",
                str(keras_model / "cal.npy"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "zoflash: supported" in text and "top-1 agreement" in text and "CONV_2D x1" in text
    raw = out.read_bytes()
    g = parse_tflite(raw)
    assert [g.tensors[i].dtype for i in g.inputs + g.outputs] == ["int8", "int8"]
    assert all(s[0] == 1 for s in _signatures(raw) if len(s))  # no dynamic batch written
    x = api.random_inputs(api.load_model(out), 50, seed=2)
    assert api.validate(out, x).ok


@pytest.mark.tf
def test_float_tflite_and_uint8_and_float_io_convert_to_supported_models(keras_model):
    report = convert("tflite", keras_model / "float.tflite", keras_model / "cal.npy", keras_model / "t.tflite")
    assert report.agreement is not None and report.agreement.samples == 80
    assert report.agreement.max_abs_error < 0.05 * max(report.agreement.output_range, 1e-3) + 0.01
    assert all(s[0] == 1 for s in _signatures((keras_model / "t.tflite").read_bytes()) if len(s))
    for io_type, dtype in (("uint8", "uint8"), ("float", "float32")):
        out = keras_model / f"{io_type}.tflite"
        u = convert("keras", keras_model / "m.keras", keras_model / "cal.npy", out, io_type=io_type, compare=False)
        assert u.supported and not u.problems and u.agreement is None
        g = parse_tflite(out.read_bytes())
        assert [g.tensors[i].dtype for i in g.inputs + g.outputs] == [dtype, dtype]
        x = api.random_inputs(api.load_model(out), 30, seed=4)
        assert x.dtype == np.dtype(dtype) and api.validate(out, x).ok


@pytest.mark.tf
def test_calibration_of_the_wrong_shape_names_the_expected_one(keras_model, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((4, 7, 7, 1), np.float32))
    with pytest.raises(DataError, match=r"give \[N, 8, 8, 1\]"):
        convert("keras", keras_model / "m.keras", tmp_path / "bad.npy", tmp_path / "o.tflite")
