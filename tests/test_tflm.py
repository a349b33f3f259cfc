"""The tflite-micro wrapper (zoflash.reference.tflm) on the fixture models, and the fixture index itself."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC, fixture_index, positive_fixtures

POSITIVE = positive_fixtures()


def _load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _random_input(d: dict, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if d["dtype"].kind == "f":
        return rng.uniform(-0.5, 1.5, size=(n,) + d["shape"]).astype(d["dtype"])
    info = np.iinfo(d["dtype"])
    return rng.integers(info.min, info.max + 1, size=(n,) + d["shape"], dtype=d["dtype"])


# --------------------------------------------------------------------------- #
# fixture index (no interpreter needed)
# --------------------------------------------------------------------------- #
def test_index_matches_files():
    idx = fixture_index()
    assert {e["file"] for e in idx} >= {
        "mlp.tflite",
        "digits_cnn.tflite",
        "kws_dscnn.tflite",
        "mbv2_block.tflite",
        "conv1d_ts.tflite",
        "branchy.tflite",
        "fc_per_tensor.tflite",
        "logistic_mul.tflite",
        "float_mlp.tflite",
        "int16_act.tflite",
        "dynamic_batch.tflite",
        "unsupported_op.tflite",
        "float_io.tflite",
    }
    total = 0
    for e in idx:
        raw = _load(e["file"])
        total += len(raw)
        assert raw[4:8] == b"TFL3", e["file"]
        assert len(raw) == e["size_bytes"] and hashlib.sha256(raw).hexdigest() == e["sha256"], (
            f"{e['file']} differs from fixtures.json: rerun tests/fixtures/make_fixtures.py"
        )
        assert e["ops"] == sorted(set(e["op_sequence"]))
        assert e["kind"] in ("positive", "negative", "int16")  # int16: tests/test_kernels_int16.py
        if e["kind"] == "int16":
            assert e["inputs"][0]["dtype"] == "int16"
        elif e["kind"] == "negative":
            assert e["expected_problem"] in ("float", "int16", "dynamic") or e["expected_problem"].startswith(
                "unsupported_op:"
            )
        else:
            assert e["input_dtype"] in ("int8", "float32") and e["input_shape"][0] == 1
        assert len(raw) < 60 * 1024, e["file"]
    assert total < 600 * 1024


def test_index_records_per_tensor_and_per_channel_fc():
    by = {e["file"]: e for e in fixture_index()}
    assert by["fc_per_tensor.tflite"]["fc_weights"] == "per-tensor"
    assert by["mlp.tflite"]["fc_weights"] == "per-channel"


def test_digits_shift_dataset():
    d = np.load(FIXTURES / "digits_shift.npz")
    assert set(d.files) == {"x_train", "y_train", "x_test", "y_test"}
    assert d["x_train"].dtype == np.float32 and d["x_train"].shape[1:] == (8, 8, 1)
    assert d["x_train"].shape[0] == d["y_train"].shape[0] == 1000
    assert d["x_test"].shape[0] == d["y_test"].shape[0] >= 450
    assert d["x_train"].min() >= 0.0 and d["x_train"].max() <= 1.0
    assert set(np.unique(d["y_test"])) == set(range(10))


# --------------------------------------------------------------------------- #
# the wrapper
# --------------------------------------------------------------------------- #
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", POSITIVE)
def test_outputs_shape_dtype_and_determinism(model_file):
    from zoflash.reference.tflm import TflmInterpreter

    it = TflmInterpreter(_load(model_file))
    assert it.num_inputs == 1 and it.num_outputs == 1
    d_in, d_out = it.inputs[0], it.outputs[0]
    assert d_in["dtype"] in (np.int8, np.float32) and d_in["shape"][0] == 1
    x = _random_input(d_in, 6, seed=1)

    (y0,) = it.invoke([x[0]])
    assert y0.shape == d_out["shape"] and y0.dtype == d_out["dtype"]

    yb = it.run_batch(x)
    assert yb.shape == (6,) + d_out["shape"][1:] and yb.dtype == d_out["dtype"]
    assert np.array_equal(yb[0], y0.reshape(d_out["shape"][1:]))
    # same answers without the batch dim, with keep_batch_dim, from a fresh interpreter,
    # and after a reset(): no state leaks between invokes.
    assert np.array_equal(it.run_batch(x.reshape((6,) + d_in["shape"][1:])), yb)
    assert it.run_batch(x, keep_batch_dim=True).shape == (6,) + d_out["shape"]
    assert np.array_equal(TflmInterpreter(_load(model_file)).run_batch(x[::-1])[::-1], yb)
    it.reset()
    assert np.array_equal(it.run_batch(x), yb)
    # outputs are copies, not views into the arena
    assert np.array_equal(yb[0], y0.reshape(d_out["shape"][1:]))


@pytest.mark.tflm
@pytest.mark.parametrize("model_file", POSITIVE)
def test_arena_usage(model_file):
    from zoflash.reference.tflm import TflmInterpreter

    it = TflmInterpreter(_load(model_file))
    u = it.arena_usage()
    assert u["total"] > 0 and u["head"] > 0 and u["tail"] > 0
    assert u["head"] <= u["total"] and u["head"] + u["tail"] == u["total"]
    assert u["total"] <= u["arena_size"]
    assert "TfLiteEvalTensor data" in u["records"]
    # the head holds at least the input and output activations
    d_in, d_out = it.inputs[0], it.outputs[0]
    io_bytes = max(np.prod(d_in["shape"]) * d_in["dtype"].itemsize, np.prod(d_out["shape"]) * d_out["dtype"].itemsize)
    assert u["head"] >= io_bytes
    # fixed at construction: invoking does not change the report
    it.invoke([np.zeros(d_in["shape"], d_in["dtype"])])
    assert it.arena_usage()["head"] == u["head"]


@pytest.mark.tflm
@pytest.mark.parametrize("model_file", ["mlp.tflite", "branchy.tflite"])
def test_minimal_arena(model_file):
    from zoflash.reference.tflm import TflmInterpreter, minimal_arena_size

    raw = _load(model_file)
    n = minimal_arena_size(raw)
    it = TflmInterpreter(raw, arena_size=n)
    assert n >= it.arena_usage()["total"] - 16  # total may shift by alignment only
    d = it.inputs[0]
    it.invoke([np.zeros(d["shape"], d["dtype"])])
    with pytest.raises(RuntimeError, match="arena_size"):
        TflmInterpreter(raw, arena_size=n - 1)


@pytest.mark.zoo
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", ["mnist_lstm.tflite", "keyword_svdf.tflite"])
def test_minimal_arena_survives_kernels_that_crash_in_small_arenas(model_file):
    """TFLM's LSTM and SVDF kernels segfault in Prepare with some too-small arenas: the search
    runs its probes in child processes, so it ends with an arena that works."""
    from zoflash.reference.tflm import TflmInterpreter, minimal_arena_size

    raw = (PUBLIC / model_file).read_bytes()
    n = minimal_arena_size(raw)
    it = TflmInterpreter(raw, arena_size=n)
    d = it.inputs[0]
    it.invoke([np.zeros(d["shape"], d["dtype"])])
    assert n >= it.arena_usage()["total"] - 16


@pytest.mark.tflm
def test_input_checks():
    from zoflash.reference.tflm import TflmInterpreter

    it = TflmInterpreter(_load("mlp.tflite"))
    with pytest.raises(TypeError):
        it.invoke([np.zeros((1, 64), np.float32)])
    with pytest.raises(ValueError):
        it.invoke([np.zeros((64,), np.int8)])
    with pytest.raises(ValueError):
        it.invoke([])
    with pytest.raises(ValueError):
        it.run_batch(np.zeros((3, 63), np.int8))
    with pytest.raises(TypeError, match="quantize_input"):
        it.run_batch(np.zeros((3, 64), np.float32))


@pytest.mark.tflm
def test_preserve_all_tensors_exposes_intermediates():
    from zoflash.reference.tflm import TflmInterpreter

    it = TflmInterpreter(_load("mlp.tflite"), preserve_all_tensors=True)
    x = _random_input(it.inputs[0], 1, seed=3)[0]
    (y,) = it.invoke([x])
    tensors = [it.tensor(i) for i in range(it.num_tensors)]
    assert any(t.shape == x.shape and np.array_equal(t, x) for t in tensors)
    assert any(t.shape == y.shape and np.array_equal(t, y) for t in tensors)
    with pytest.raises(IndexError):
        it.tensor(it.num_tensors)  # the raw runtime would segfault here
    with pytest.raises(RuntimeError):
        it.arena_usage()


@pytest.mark.tflm
def test_float_io_models_run_and_quantize_helpers():
    from zoflash.reference.tflm import TflmInterpreter

    fio = TflmInterpreter(_load("float_io.tflite"))
    assert fio.inputs[0]["dtype"] == np.float32 and fio.outputs[0]["dtype"] == np.float32
    xf = np.random.default_rng(0).random((4, 64), dtype=np.float32)
    yf = fio.run_batch(xf)
    assert yf.dtype == np.float32 and np.allclose(yf.sum(axis=1), 1.0, atol=0.02)

    fo = TflmInterpreter(_load("float_out.tflite"))
    assert fo.inputs[0]["dtype"] == np.int8 and fo.outputs[0]["dtype"] == np.float32
    y = fo.run_batch(fo.quantize_input(xf))
    assert y.dtype == np.float32 and np.allclose(y.sum(axis=1), 1.0, atol=0.02)


@pytest.mark.tflm
def test_digits_cnn_accuracy_source_vs_shifted():
    """The recorded accuracies are reproducible with the wrapper (int8, TFLM)."""
    from zoflash.reference.tflm import TflmInterpreter

    entry = {e["file"]: e for e in fixture_index()}["digits_cnn.tflite"]
    d = np.load(FIXTURES / "digits_shift.npz")
    it = TflmInterpreter(_load("digits_cnn.tflite"))
    y = it.run_batch(it.quantize_input(d["x_test"]))
    acc = float(np.mean(np.argmax(y, axis=-1) == d["y_test"]))
    assert acc == pytest.approx(entry["accuracy"]["tflm_int8_shifted"], abs=1e-3)
    assert acc < 0.6 < entry["accuracy"]["tflm_int8"]


def test_capture_fds_sees_raw_fd_writes():
    from zoflash.reference.tflm import capture_fds

    with capture_fds() as cap:
        os.write(1, b"to-fd-1 ")
        os.write(2, b"to-fd-2")
    assert cap.text == "to-fd-1 to-fd-2"


def test_import_does_not_need_tflite_micro():
    import importlib
    import sys

    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k.startswith("tflite_micro")}
    sys.modules["tflite_micro"] = None  # make any import of it fail
    try:
        import zoflash.reference.tflm as mod

        mod = importlib.reload(mod)
        assert mod.available() is False
        from zoflash.errors import ToolMissingError

        with pytest.raises(ToolMissingError, match="pip install tflite-micro"):
            mod.TflmInterpreter(_load("mlp.tflite"))
    finally:
        del sys.modules["tflite_micro"]
        sys.modules.update(saved)
        importlib.reload(mod)
