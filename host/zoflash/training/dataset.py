"""Training data: an .npz with x_train, y_train, x_test, y_test, checked against the model and
brought to the model input's type and layout, which the firmware embeds."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoflash.compiler.quant import as_samples
from zoflash.errors import DataError

KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass
class Dataset:
    x_train: np.ndarray  # [N, *input shape] of the model input's type
    y_train: np.ndarray  # uint16 [N]
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.x_train, self.y_train, self.x_test, self.y_test))

    def describe(self) -> str:
        return (f"{self.source}: {len(self.y_train)} training and {len(self.y_test)} test samples, "
                f"{self.nbytes} bytes embedded")


def _labels(y: np.ndarray, name: str, n: int, classes: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"{name} has shape {list(y.shape)}; expected [{n}] integer labels (one per sample)")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise DataError(f"{name} holds non-integer values; labels must be class indices")
    elif y.dtype.kind not in "iub":
        raise DataError(f"{name} is {y.dtype}; labels must be integers")
    if n and (y.min() < 0 or y.max() >= classes):
        raise DataError(f"{name} has labels in [{int(y.min())}, {int(y.max())}] but the model has {classes} "
                        f"classes (valid labels 0..{classes - 1})")
    return y.astype(np.uint16)


def load_dataset(path: str | Path, input_shape: tuple[int, ...], scale: float | None, zero_point: int | None,
                 classes: int, dtype: str = "int8") -> Dataset:
    """`dtype`: the model input's type (int8, uint8 or float32), which the samples take: the firmware
    embeds their bytes and the model's first QUANTIZE converts a uint8 or float32 input."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):  # np.load would return a .npy array or try pickle
        with open(path, "rb") as f:
            kind = "a single .npy array" if f.read(6) == b"\x93NUMPY" else "not a zip archive"
        raise DataError(f"'{path}' is {kind}; a dataset is an .npz (numpy.savez) holding {', '.join(KEYS)}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise DataError(f"'{path}' lacks {', '.join(missing)}; a dataset .npz needs {', '.join(KEYS)}")
            arrays = {}
            for k in KEYS:
                try:
                    arrays[k] = npz[k]
                except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # pickled objects, damage
                    raise DataError(f"{k} in '{path}' cannot be read ({exc}); store numeric arrays") from None
    except FileNotFoundError:
        raise DataError(f"dataset '{path}' does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read '{path}' as an .npz dataset: {exc}") from None
    out = {}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise DataError(f"x_{split} in '{path}' contains NaN or infinity")
        xs = as_samples(x, input_shape, scale, zero_point, what=f"x_{split} in '{path}'", dtype=dtype)
        if xs.shape[0] == 0:
            raise DataError(f"x_{split} in '{path}' is empty")
        out[f"x_{split}"] = xs
        out[f"y_{split}"] = _labels(y, f"y_{split} in '{path}'", xs.shape[0], classes)
    if out["x_train"].shape[0] >= 2**32 or out["x_test"].shape[0] >= 2**32:
        raise DataError("datasets are limited to 2^32 - 1 samples per split")
    return Dataset(source=path.name, **out)
