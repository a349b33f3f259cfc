"""Training data (zoflash.training.dataset.load_dataset): an .npz with x_train, y_train, x_test, y_test;
float x quantized with the input's scale and zero point (round half away from zero), int8 x
as is, labels checked against the classes; every problem a DataError naming the key."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.compiler.tflite_import import load_tflite
from zoflash.errors import DataError
from zoflash.training.dataset import carve_validation, load_dataset

RNG = np.random.default_rng(7)


def save(tmp_path, name="data.npz", n_train=6, n_test=4, shape=(64,), classes=10, **over):
    """An npz of random int8 samples and labels < classes; `over` replaces arrays (None drops one)."""
    arrays = dict(
        x_train=RNG.integers(-128, 128, size=(n_train, *shape), dtype=np.int8),
        y_train=np.arange(n_train) % classes,
        x_test=RNG.integers(-128, 128, size=(n_test, *shape), dtype=np.int8),
        y_test=np.arange(n_test) % classes,
    )
    arrays.update(over)
    path = tmp_path / name
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def load(path, shape=(1, 64), scale=0.5, zp=3, classes=10):
    return load_dataset(path, shape, scale, zp, classes)


def data_error(path, **kw) -> str:
    with pytest.raises(DataError) as exc:
        load(path, **kw)
    return str(exc.value)


# -------------------------------------------------------------------------------- quantization


def test_float_quantization_by_hand(tmp_path):
    # scale 0.5, zero point 3: q = round_half_away(x / 0.5) + 3, saturated to int8.
    # Halves (x / 0.5 = +-0.5, +-2.5, 120.5, -130.5) go away from zero (half-to-even would not).
    x = np.array(
        [[-1.25, -0.75, -0.25, 0.0, 0.25, 0.75, 1.0, 1.2, 100.0, -100.0, 62.0, 60.25, -65.25, -64.75, 0.74, -0.76]],
        np.float32,
    )
    want = np.array([[0, 1, 2, 3, 4, 5, 5, 5, 127, -128, 127, 124, -128, -127, 4, 1]], np.int8).reshape(1, 1, 16)
    path = save(
        tmp_path,
        x_train=np.repeat(x, 2, axis=0),
        y_train=np.array([1, 2]),
        x_test=x.astype(np.float64),
        y_test=np.array([0]),
    )
    d = load(path, shape=(1, 16))
    assert d.x_train.dtype == np.int8 and d.x_train.shape == (2, 1, 16)
    np.testing.assert_array_equal(d.x_train, np.repeat(want, 2, axis=0))
    np.testing.assert_array_equal(d.x_test, want)


def test_float_quantization_of_the_digits_data():
    """digits_shift.npz in digits_cnn's input units, against the quantization computed here."""
    graph, _ = load_tflite(FIXTURES / "digits_cnn.tflite")
    t_in = graph.tensors[graph.inputs[0]]
    scale, zp = t_in.quant.scale, t_in.quant.zero_point
    d = load_dataset(FIXTURES / "digits_shift.npz", t_in.shape, scale, zp, 10)
    raw = np.load(FIXTURES / "digits_shift.npz")
    for split in ("train", "test"):
        x = raw[f"x_{split}"].astype(np.float64)
        assert (x >= 0).all()
        want = np.clip(np.floor(x / scale + 0.5) + zp, -128, 127).astype(np.int8)  # x >= 0
        got = getattr(d, f"x_{split}")
        assert got.shape == (len(x), 1, 8, 8, 1)
        np.testing.assert_array_equal(got.reshape(len(x), -1), want.reshape(len(x), -1))
        np.testing.assert_array_equal(getattr(d, f"y_{split}"), raw[f"y_{split}"])
    # 0 -> zero point, 1 -> 255 steps above it
    assert d.x_train.min() == -128 and d.x_train.max() == 127
    assert len(d.y_train) == 1000 and len(d.y_test) == 497 and d.y_train.dtype == np.uint16


def test_int8_passes_through(tmp_path):
    x = RNG.integers(-128, 128, size=(5, 64), dtype=np.int8)
    path = save(tmp_path, x_train=x, y_train=np.array([0, 9, 3, 3, 1]))
    for scale, zp in ((0.5, 3), (None, None)):  # int8 data ignores the quantization
        d = load_dataset(path, (1, 64), scale, zp, 10)
        np.testing.assert_array_equal(d.x_train.reshape(5, 64), x)
        assert d.x_train.dtype == np.int8
        np.testing.assert_array_equal(d.y_train, [0, 9, 3, 3, 1])
        assert d.y_train.dtype == np.uint16


def test_float_data_without_input_quantization(tmp_path):
    path = save(tmp_path, x_train=np.zeros((3, 64), np.float32), y_train=np.zeros(3, int))
    with pytest.raises(DataError, match="x_train"):
        load_dataset(path, (1, 64), None, None, 10)


@pytest.mark.parametrize(
    "shape, sample", [((1, 64), (64,)), ((1, 64), (1, 64)), ((1, 8, 8, 1), (8, 8, 1)), ((1, 8, 8, 1), (1, 8, 8, 1))]
)
def test_batch_one_models_with_or_without_the_leading_one(tmp_path, shape, sample):
    x = RNG.integers(-128, 128, size=(4, *sample), dtype=np.int8)
    d = load(save(tmp_path, x_train=x, x_test=x[:2], y_train=np.arange(4), y_test=np.arange(2)), shape=shape)
    assert d.x_train.shape == (4, *shape) and d.x_test.shape == (2, *shape)
    np.testing.assert_array_equal(d.x_train.reshape(4, -1), x.reshape(4, -1))


def test_labels_as_a_column_and_in_other_integer_types(tmp_path):
    d = load(
        save(
            tmp_path, y_train=np.array([[0], [1], [2], [3], [4], [9]], np.uint8), y_test=np.array([1.0, 2.0, 3.0, 4.0])
        )
    )
    np.testing.assert_array_equal(d.y_train, [0, 1, 2, 3, 4, 9])
    np.testing.assert_array_equal(d.y_test, [1, 2, 3, 4])


def test_size_and_description(tmp_path):
    d = load(save(tmp_path, n_train=6, n_test=4))
    assert d.nbytes == 6 * 64 + 6 * 2 + 4 * 64 + 4 * 2
    assert "6 training and 4 test samples" in d.describe() and "data.npz" in d.describe()
    carved = carve_validation(d, 0.1, seed=1)  # 0.1 of one sample per class rounds to 0: topped up to 3
    assert carved.nbytes == d.nbytes and "3 training, 3 validation and 4 test samples" in carved.describe()


# -------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("key", ["x_train", "y_train", "x_test", "y_test"])
def test_missing_key(tmp_path, key):
    text = data_error(save(tmp_path, **{key: None}))
    assert key in text and "lacks" in text


@pytest.mark.parametrize(
    "key, value",
    [
        ("x_train", np.zeros((6, 63), np.int8)),
        ("x_test", np.zeros((4, 8, 8), np.int8)),
        ("x_train", np.zeros((6, 2, 64), np.int8)),
        ("x_test", np.zeros((4, 64, 1), np.float32)),
    ],
)
def test_wrong_sample_shape(tmp_path, key, value):
    text = data_error(save(tmp_path, **{key: value}))
    assert key in text and "[N, 1, 64]" in text and str(list(value.shape)) in text


@pytest.mark.parametrize(
    "key, y, text",
    [
        ("y_train", np.array([0, 1, 2, 3, 4, 10]), "10 classes"),
        ("y_test", np.array([0, 1, 2, 12]), "labels in [0, 12]"),
        ("y_train", np.array([0, 1, -1, 3, 4, 5]), "labels in [-1, 5]"),
        ("y_test", np.array([0.0, 1.5, 2.0, 3.0]), "non-integer"),
        ("y_train", np.array([0, 1, np.nan, 3, 4, 5]), "non-integer"),
        ("y_test", np.array([0, 1, np.inf, 3]), "non-integer"),
        ("y_train", np.array([0, 1, 2]), "expected [6]"),
        ("y_test", np.eye(4, 10), "expected [4]"),  # one-hot is not accepted
        ("y_train", np.array(list("012345")), "integers"),
    ],
)
def test_bad_labels(tmp_path, key, y, text):
    msg = data_error(save(tmp_path, **{key: y}))
    assert key in msg and text in msg


def test_labels_at_the_last_class_are_fine(tmp_path):
    d = load(save(tmp_path, y_train=np.array([9, 9, 9, 0, 0, 0])), classes=10)
    assert d.y_train.max() == 9
    msg = data_error(save(tmp_path, "b.npz", y_train=np.array([9, 9, 9, 0, 0, 0])), classes=9)
    assert "y_train" in msg and "9 classes" in msg


@pytest.mark.parametrize("key, bad", [("x_train", np.nan), ("x_test", np.inf), ("x_test", -np.inf)])
def test_non_finite_x(tmp_path, key, bad):
    x = np.zeros((6 if key == "x_train" else 4, 64), np.float32)
    x[1, 5] = bad
    msg = data_error(save(tmp_path, **{key: x}))
    assert key in msg and "NaN or infinity" in msg


@pytest.mark.parametrize("split", ["train", "test"])
def test_empty_split(tmp_path, split):
    msg = data_error(save(tmp_path, **{f"x_{split}": np.zeros((0, 64), np.int8), f"y_{split}": np.zeros(0, int)}))
    assert f"x_{split}" in msg and "empty" in msg


def test_x_of_another_integer_type(tmp_path):
    msg = data_error(save(tmp_path, x_train=np.zeros((6, 64), np.uint8)))
    assert "x_train" in msg and "uint8" in msg and "int8" in msg


def test_missing_file(tmp_path):
    assert "does not exist" in data_error(tmp_path / "nope.npz")


def test_not_a_zip(tmp_path):
    path = tmp_path / "data.npz"
    path.write_text("x_train,y_train\n1,2\n")
    msg = data_error(path)
    assert "data.npz" in msg and "zip" in msg
    assert "pickle" not in msg  # a text file holds no pickled data: say what it is not


def test_a_single_npy_array_is_not_a_dataset(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros((4, 64), np.int8))
    msg = data_error(path)
    assert "x.npy" in msg and ".npy array" in msg and "npz" in msg


def test_a_pickle_file_is_not_loaded(tmp_path):
    path = tmp_path / "data.pkl"
    path.write_bytes(pickle.dumps({"x_train": np.zeros((4, 64), np.int8)}))
    assert "data.pkl" in data_error(path)


@pytest.mark.parametrize("key", ["x_train", "y_test"])
def test_pickled_object_array_is_refused_and_named(tmp_path, key):
    obj = np.empty(6 if key == "x_train" else 4, dtype=object)
    obj[:] = [np.zeros(64, np.int8)] * len(obj)
    msg = data_error(save(tmp_path, **{key: obj}))
    assert key in msg


def test_truncated_zip(tmp_path):
    good = save(tmp_path)
    bad = tmp_path / "cut.npz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert "cut.npz" in data_error(bad)
