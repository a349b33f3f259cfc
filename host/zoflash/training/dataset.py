"""Training data: an .npz with x_train, y_train, x_test, y_test, checked against the model and
the loss and brought to the model input's type and layout, which the firmware embeds.  y holds
class labels (softmax-ce), labels 0/1 (sigmoid-bce) or float targets of the output's shape in
real units (mse); with --target input (mse against the sample's own input) y is not needed.
A validation split is carved from the training data here (carve_validation)."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoflash.compiler.quant import round_half_away_array, samples_and_saturation
from zoflash.errors import DataError
from zoflash.spec import training as spec
from zoflash.training.losses import LOSSES

KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass
class Dataset:
    x_train: np.ndarray  # [N, *input shape] of the model input's type
    y_train: np.ndarray  # uint16 [N]
    x_test: np.ndarray
    y_test: np.ndarray
    source: str
    # mse against y: float32 [N, output elements] (the labels are then 0 and not embedded); None
    # for the label losses and for --target input
    t_train: np.ndarray | None = None
    t_test: np.ndarray | None = None
    labels: bool = True  # y_train/y_test are labels the firmware embeds (not with mse)
    # the validation split carved from the .npz's training data (carve_validation); empty until then
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    t_val: np.ndarray | None = None
    # per array ("x_train", "x_test"): the share of its values that quantizing float data clipped to
    # the input's range (absent for data given in the input's type, which cannot tell);
    # training/checks.py warns about a large one
    saturated: dict[str, float] = field(default_factory=dict)

    SPLITS = ("train", "val", "test")

    @property
    def nbytes(self) -> int:
        total = 0
        for split in self.SPLITS:
            x, y, t = (getattr(self, f"{k}_{split}") for k in "xyt")
            total += sum(a.nbytes for a in (x, y if self.labels else None, t) if a is not None)
        return total

    def describe(self) -> str:
        val = f", {len(self.y_val)} validation" if self.y_val is not None else ""
        return (
            f"{self.source}: {len(self.y_train)} training{val} and {len(self.y_test)} test samples, "
            f"{self.nbytes} bytes embedded"
        )


def validation_indices(y: np.ndarray, fraction: float, seed: int, stratify: bool) -> np.ndarray:
    """The training-data indices that become the validation split (ascending).

    Seeded by the run's seed (NumPy's default_rng), so a build is reproducible.  Stratified when
    y holds labels: each class in ascending order gives round_half_up(fraction * its count) of
    its samples, drawn by one permutation of its indices; without labels one permutation of all.
    Fewer than spec.VAL_MIN_COUNT (but at most half the data) are topped up from the remaining
    samples in a further permutation."""
    n = len(y)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(y == c) for c in np.unique(y)] if stratify else [np.arange(n)]
    chosen = [g[rng.permutation(len(g))[: int(np.floor(fraction * len(g) + 0.5))]] for g in groups]
    val = np.sort(np.concatenate(chosen)).astype(np.int64)
    want = min(spec.VAL_MIN_COUNT, n // 2)
    if len(val) < want:
        rest = np.setdiff1d(np.arange(n), val)
        val = np.sort(np.concatenate([val, rest[rng.permutation(len(rest))[: want - len(val)]]]))
    return val


def carve_validation(data: Dataset, fraction: float, seed: int) -> Dataset:
    """The dataset with validation_indices moved from the training split to the validation split
    (the rest keep their order)."""
    n = len(data.y_train)
    val = validation_indices(data.y_train, fraction, seed, stratify=data.labels)
    if len(val) == 0 or len(val) == n:
        raise DataError(
            f"{data.source}: {n} training sample(s) cannot give both a training and a validation "
            "split; give at least 2 training samples"
        )
    keep = np.setdiff1d(np.arange(n), val)
    out: dict[str, Any] = {}  # x/y/t _train/_val: arrays, t_* None without targets
    for k in "xyt":
        a = getattr(data, f"{k}_train")
        out[f"{k}_train"], out[f"{k}_val"] = (None, None) if a is None else (a[keep], a[val])
    return Dataset(
        x_test=data.x_test,
        y_test=data.y_test,
        t_test=data.t_test,
        source=data.source,
        labels=data.labels,
        saturated=data.saturated,
        **out,
    )


# mse targets: the loss squares (output - target) in float32 and its standard error squares that
# again over a split; 2^24 keeps both finite for any split size a board holds.
MAX_TARGET = float(2**24)


def _targets(y: np.ndarray, name: str, n: int, output_shape: tuple[int, ...]) -> np.ndarray:
    """mse targets: one float per output value, in the output's real units."""
    y = np.asarray(y)
    size = int(np.prod(output_shape))
    if y.dtype.kind not in "fiub":
        raise DataError(f"{name} is {y.dtype}; --loss mse needs numeric targets")
    if y.shape[:1] != (n,) or int(np.prod(y.shape[1:])) != size:
        raise DataError(
            f"{name} has shape {list(y.shape)}; --loss mse needs [{n}, {size}] targets (one per sample "
            f"and output value; the output is {list(output_shape)})"
        )
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise DataError(f"{name} contains NaN or infinity")
    big = np.abs(y.astype(np.float64)) > MAX_TARGET
    if np.any(big):
        raise DataError(
            f"{name} holds a target of {float(y.reshape(-1)[np.argmax(big.reshape(-1))]):g}; --loss mse takes "
            f"targets within +-{MAX_TARGET:.0f}, in the output's real units (larger ones overflow the float32 loss)"
        )
    return y.reshape(n, size).astype(np.float32)


def _labels(y: np.ndarray, name: str, n: int, classes: int, binary: bool = False) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"{name} has shape {list(y.shape)}; expected [{n}] integer labels (one per sample)")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise DataError(
                f"{name} holds non-integer values; labels must be class indices "
                "(for real-valued targets use --loss mse)"
            )
    elif y.dtype.kind not in "iub":
        raise DataError(f"{name} is {y.dtype}; labels must be integers")
    if binary and n and (y.min() < 0 or y.max() > 1):
        raise DataError(
            f"{name} has labels in [{int(y.min())}, {int(y.max())}]; --loss sigmoid-bce takes labels 0/1 "
            "(for real-valued targets use --loss mse)"
        )
    if n and (y.min() < 0 or y.max() >= classes):
        raise DataError(
            f"{name} has labels in [{int(y.min())}, {int(y.max())}] but the model has {classes} "
            f"classes (valid labels 0..{classes - 1})"
        )
    return y.astype(np.uint16)


def quantized_input_targets(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """--target input on a float32 input: the model's quantized input (its first QUANTIZE, rounding
    half away from zero and clamping to int8 as TFLite does) in real units, one row per sample.
    Embedded as mse targets, so the C and the reference read the same floats."""
    s = np.float32(scale)
    with np.errstate(over="ignore"):  # overflows to infinity, which saturates
        quotient = x.reshape(len(x), -1).astype(np.float32) / s  # in float32, as the kernel divides
    q = np.clip(round_half_away_array(np.clip(quotient, -1024, 1024)) + zero_point, -128, 127)
    return (s * (q - zero_point).astype(np.float32)).astype(np.float32)


def load_dataset(
    path: str | Path,
    input_shape: tuple[int, ...],
    scale: float | None,
    zero_point: int | None,
    classes: int,
    dtype: str = "int8",
    loss: str = "softmax-ce",
    target: str = "labels",
    output_shape: tuple[int, ...] | None = None,
    input_quant: tuple[float, int] | None = None,
) -> Dataset:
    """`dtype`: the model input's type (int8, uint8 or float32), which the samples take: the firmware
    embeds their bytes and the model's first QUANTIZE converts a uint8 or float32 input.  `loss`
    (resolved, spec.LOSSES) and `target` say what y must hold; `output_shape` is the shape of
    the output the loss reads (mse).  `input_quant`: (scale, zero point) of the int8 tensor a
    float32 input is quantized to, the target of --target input on such a model."""
    from_input = target == "input"
    float_input = dtype == "float32" and input_quant is not None
    if from_input and (dtype != "int8" and not float_input or int(np.prod(input_shape)) != classes):
        raise DataError(
            f"--target input needs an int8 or float32 model input with as many values as the output ({classes}); "
            f"this model's input is {dtype}{list(input_shape)}"
        )
    keys = KEYS if not from_input else ("x_train", "x_test")
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):  # np.load would return a .npy array or try pickle
        with open(path, "rb") as f:
            kind = "a single .npy array" if f.read(6) == b"\x93NUMPY" else "not a zip archive"
        raise DataError(f"'{path}' is {kind}; a dataset is an .npz (numpy.savez) holding {', '.join(keys)}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise DataError(
                    f"'{path}' lacks {', '.join(missing)}; a dataset .npz needs {', '.join(keys)}"
                    + (" (with --target input, y is not needed)" if from_input else "")
                )
            arrays = {}
            for k in keys:
                try:
                    arrays[k] = npz[k]
                except ValueError as exc:  # pickled objects (or a header numpy cannot read)
                    raise DataError(f"{k} in '{path}' cannot be read ({exc}); store numeric arrays") from None
                except Exception as exc:  # a damaged member fails in many ways (CRC, EOF, zlib, method)
                    raise DataError(
                        f"{k} in '{path}' is damaged ({type(exc).__name__}: {exc}); save the dataset again "
                        "(numpy.savez) or copy it whole"
                    ) from None
    except FileNotFoundError:
        raise DataError(f"dataset '{path}' does not exist") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read '{path}' as an .npz dataset: {exc}") from None
    out: dict[str, Any] = {}
    for split in ("train", "test"):
        x = arrays[f"x_{split}"]
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise DataError(f"x_{split} in '{path}' contains NaN or infinity")
        xs, saturated = samples_and_saturation(
            x, input_shape, scale, zero_point, what=f"x_{split} in '{path}'", dtype=dtype
        )
        if x.dtype.kind == "f":  # warned about before training (training/checks.py), with what to do
            out.setdefault("saturated", {})[f"x_{split}"] = saturated
        if xs.shape[0] == 0:
            raise DataError(f"x_{split} in '{path}' is empty")
        out[f"x_{split}"] = xs
        name = f"y_{split} in '{path}'"
        loss_kind = LOSSES.get(loss)
        if not loss_kind.labels:
            out[f"y_{split}"] = np.zeros(xs.shape[0], np.uint16)  # no labels; the targets are t or the input
            if not from_input:
                out[f"t_{split}"] = _targets(arrays[f"y_{split}"], name, xs.shape[0], output_shape or (classes,))
            elif float_input:
                assert input_quant is not None  # float_input
                out[f"t_{split}"] = quantized_input_targets(xs, *input_quant)
        else:
            out[f"y_{split}"] = _labels(
                arrays[f"y_{split}"], name, xs.shape[0], 2 if loss_kind.binary else classes, binary=loss_kind.binary
            )
    if out["x_train"].shape[0] >= 2**32 or out["x_test"].shape[0] >= 2**32:
        raise DataError("datasets are limited to 2^32 - 1 samples per split")
    return Dataset(source=path.name, labels=LOSSES.get(loss).labels, **out)
