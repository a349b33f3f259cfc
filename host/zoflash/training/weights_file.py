"""The trained weights file (`<log>.weights.npz`): write it, and read it back strictly.

Format (docs/training.md, "Trained weights file"): a NumPy npz without pickles holding, for each
trained tensor, `t<index>` (its values, int8 or int32, model shape), for int8 tensors optionally
`r<index>` (the split-16 residuals, int8, same shape), and `meta`, a 0-d string array with JSON
`{"format": "zoflash-weights", "version": 1, "model_sha256": ..., "tensors": [{"index", "name",
"dtype", "shape"}]}`. Every problem found while reading becomes a DataError naming the file.

Version 2 (written only when training re-quantized tensors, `--headroom`): tensor entries may
carry `"scales"`, the tensor's new quantization scales (float32 values, as many as the model's
scale vector), and meta `"headroom"` holds the bits; export writes those scales into the model.

Any version may also hold `b<index>` (the best values by validation: the device's last good
snapshot, same dtype and shape as `t<index>`), which `zoflash export --select best` writes.
Meta `"best_is_start": true` says no step improved the validation loss (the best values are the
start, re-quantized with the headroom): export then writes the model unchanged.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from zoflash.errors import DataError

FORMAT = "zoflash-weights"
VERSION = 2
VERSIONS = (1, 2)  # 1: no scales
DTYPES: dict[str, np.dtype] = {"int8": np.dtype(np.int8), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64)}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_RETAKE = "write it again from the training log (zoflash writes this file; it is not meant to be edited)"


@dataclass
class TrainedWeights:
    """The contents of a weights file; dicts are keyed by model tensor index, in file order."""

    model_sha256: str
    tensors: dict[int, np.ndarray]
    residuals: dict[int, np.ndarray] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    path: Path | None = None
    scales: dict[int, np.ndarray] = field(default_factory=dict)  # re-quantized tensors: new scales (float32)
    headroom: int = 0
    best: dict[int, np.ndarray] = field(default_factory=dict)  # b<index>: the best values by validation
    best_is_start: bool = False  # no step improved the validation loss: the best values are the start


def atomic_write(path: str | Path, write) -> None:
    """Call write(file) on a temporary file next to `path`, then rename it over `path`.

    Readers never see a half-written file, and on any error `path` is left untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the result is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _check_sha256(value, where: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise DataError(
            f"{where}: model_sha256 must be 64 lowercase hex digits (the model file's SHA-256), got {value!r}"
        )
    return value


def save_weights(
    path: str | Path,
    model_sha256: str,
    tensors: Iterable[tuple[int, str, np.ndarray, np.ndarray | None]],
    scales: dict[int, Iterable[float]] | None = None,
    headroom: int = 0,
    best: dict[int, np.ndarray] | None = None,
    best_is_start: bool = False,
) -> Path:
    """Write a weights file. `tensors`: (model tensor index, name, values, residuals or None).

    Values must be int8 or int32; residuals only go with int8 values and have their shape.
    `scales`: model tensor index -> its new quantization scales (re-quantized tensors, which
    must be in `tensors`); with them the file is version 2 and records `headroom` (bits).
    `best`: model tensor index -> its best values by validation (same dtype and shape);
    `best_is_start`: they are the values training started from (no step improved the validation loss).
    The file is written atomically (temporary file, then rename). Returns the path.
    """
    path = Path(path)
    _check_sha256(model_sha256, str(path))
    arrays: dict[str, np.ndarray] = {}
    entries: list[dict[str, Any]] = []
    for item in tensors:
        index, name, values, residual = item
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise DataError(f"{path}: tensor index must be a non-negative integer, got {index!r}")
        index = int(index)
        if f"t{index}" in arrays:
            raise DataError(f"{path}: tensor {index} is listed twice; give each trained tensor once")
        values = np.asarray(values)
        dtype = next((k for k, v in DTYPES.items() if values.dtype == v), None)
        if dtype is None:
            raise DataError(
                f"{path}: tensor {index} '{name}' has dtype {values.dtype}; trained tensors are "
                "int8 weights or int32 biases"
            )
        arrays[f"t{index}"] = np.ascontiguousarray(values, dtype=DTYPES[dtype])
        if residual is not None:
            residual = np.asarray(residual)
            if dtype != "int8":
                raise DataError(f"{path}: tensor {index} '{name}' is {dtype}; only int8 tensors have residuals")
            if residual.dtype != np.int8 or residual.shape != values.shape:
                raise DataError(
                    f"{path}: the residuals of tensor {index} '{name}' are {residual.dtype}"
                    f"{list(residual.shape)}; they must be int8{list(values.shape)} like the values"
                )
            arrays[f"r{index}"] = np.ascontiguousarray(residual, dtype=np.int8)
        entries.append({"index": index, "name": str(name), "dtype": dtype, "shape": list(values.shape)})
    for index, values in (best or {}).items():
        index, values = int(index), np.asarray(values)
        if (
            f"t{index}" not in arrays
            or values.dtype != arrays[f"t{index}"].dtype
            or values.shape != arrays[f"t{index}"].shape
        ):
            raise DataError(
                f"{path}: the best values of tensor {index} are {values.dtype}{list(values.shape)}; "
                "they must belong to a tensor in the file and have its dtype and shape"
            )
        arrays[f"b{index}"] = np.ascontiguousarray(values)
    scales = {int(k): v for k, v in (scales or {}).items()}
    for e in entries:
        if e["index"] in scales:
            e["scales"] = [float(np.float32(x)) for x in scales.pop(e["index"])]
            if not e["scales"] or not all(math.isfinite(x) and x > 0 for x in e["scales"]):
                raise DataError(f"{path}: the scales of tensor {e['index']} must be finite and > 0")
    if scales:
        raise DataError(
            f"{path}: scales given for tensor(s) {sorted(scales)}, which are not in the file; every "
            "re-quantized tensor must be written with its values"
        )
    meta = {"format": FORMAT, "version": 1, "model_sha256": model_sha256, "tensors": entries}
    if any("scales" in e for e in entries):
        meta.update(version=VERSION, headroom=int(headroom))
    if best and best_is_start:
        meta["best_is_start"] = True
    arrays["meta"] = np.array(json.dumps(meta))
    # mypy cannot tell that the keys ("t3", "meta", ...) never name savez's allow_pickle
    atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
    return path


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_meta(text: str, where: str) -> dict:
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{where}: 'meta' is not valid JSON ({exc}); {_RETAKE}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise DataError(f"{where}: not a zoflash weights file (meta format is {found!r}, expected {FORMAT!r})")
    version = meta.get("version")
    if not _is_int(version) or version not in VERSIONS:
        hint = (
            "it was written by a newer zoflash; upgrade zoflash" if _is_int(version) and version > VERSION else _RETAKE
        )
        raise DataError(
            f"{where}: weights file version {version!r} is not supported (this zoflash reads "
            f"versions {', '.join(map(str, VERSIONS))}); {hint}"
        )
    _check_sha256(meta.get("model_sha256"), where)
    entries = meta.get("tensors")
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{where}: meta lists no tensors ('tensors' must be a non-empty list); {_RETAKE}")
    seen = set()
    for k, e in enumerate(entries):
        ok = (
            isinstance(e, dict)
            and _is_int(e.get("index"))
            and e["index"] >= 0
            and isinstance(e.get("name"), str)
            and e.get("dtype") in DTYPES
            and isinstance(e.get("shape"), list)
            and all(_is_int(d) and d >= 0 for d in e["shape"])
        )
        if not ok:
            raise DataError(
                f"{where}: meta tensor entry {k} is malformed ({json.dumps(e)[:200]}); it needs "
                "an integer 'index', a string 'name', 'dtype' int8 or int32 and a list 'shape'"
            )
        if e["index"] in seen:
            raise DataError(f"{where}: meta lists tensor {e['index']} twice; {_RETAKE}")
        seen.add(e["index"])
        if "scales" in e:
            sc = e["scales"]
            if (
                version < 2
                or not isinstance(sc, list)
                or not sc
                or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in sc
                )
            ):
                raise DataError(
                    f"{where}: meta tensor {e['index']} has malformed 'scales' (a version 2 file's "
                    f"non-empty list of positive numbers); {_RETAKE}"
                )
    hr = meta.get("headroom", 0)
    if not _is_int(hr) or hr < 0:
        raise DataError(f"{where}: meta 'headroom' must be a non-negative integer, got {hr!r}; {_RETAKE}")
    return meta


def load_weights(path: str | Path) -> TrainedWeights:
    """Read and validate a weights file (no pickles). Raises DataError saying what is wrong."""
    path = Path(path)
    where = str(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError:
        raise DataError(f"weights file '{path}' does not exist") from None
    except OSError as exc:
        raise DataError(f"cannot read weights file '{path}': {exc.strerror or exc}") from None
    if magic != b"PK\x03\x04":  # np.load would otherwise try .npy, then pickle
        kind = "a single .npy array" if magic == b"\x93NUM" else f"not a zip archive (it starts with {magic!r})"
        raise DataError(f"{where}: is {kind}; a weights file is a .npz archive; {_RETAKE}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{where}: not a readable .npz archive ({exc}); {_RETAKE}") from None
    with archive:
        members = set(archive.files)

        def member(name: str) -> np.ndarray:
            try:
                return archive[name]
            except ValueError as exc:
                if "allow_pickle" in str(exc):
                    raise DataError(
                        f"{where}: '{name}' holds pickled Python objects, which zoflash never "
                        f"loads (they can run code); {_RETAKE}"
                    ) from None
                raise DataError(f"{where}: '{name}' cannot be read ({exc}); {_RETAKE}") from None
            except Exception as exc:  # damaged zip members fail in many ways (CRC, EOF, zlib)
                raise DataError(f"{where}: '{name}' is damaged ({type(exc).__name__}: {exc}); {_RETAKE}") from None

        if "meta" not in members:
            raise DataError(f"{where}: has no 'meta' entry, so it is not a zoflash weights file; {_RETAKE}")
        meta_arr = member("meta")
        if meta_arr.shape != () or meta_arr.dtype.kind not in "US":
            raise DataError(
                f"{where}: 'meta' must be a 0-d string array, found {meta_arr.dtype}{list(meta_arr.shape)}; {_RETAKE}"
            )
        meta_text = meta_arr.item()  # str for a "U" array, bytes for an "S" one
        meta = _parse_meta(str(meta_text if meta_arr.dtype.kind == "U" else meta_text.decode()), where)
        expected = {"meta"}
        weights = TrainedWeights(
            model_sha256=meta["model_sha256"],
            tensors={},
            path=path,
            headroom=meta.get("headroom", 0),
            best_is_start=meta.get("best_is_start") is True,
        )
        for e in meta["tensors"]:
            index, dtype, shape = e["index"], e["dtype"], tuple(e["shape"])
            desc = f"{dtype}{list(shape)}"
            key, rkey, bkey = f"t{index}", f"r{index}", f"b{index}"
            expected |= {key, rkey, bkey}
            if key not in members:
                raise DataError(
                    f"{where}: meta lists tensor {index} '{e['name']}' but the file has no '{key}' array; {_RETAKE}"
                )
            values = member(key)
            if values.dtype != DTYPES[dtype] or values.shape != shape:
                raise DataError(
                    f"{where}: '{key}' is {values.dtype}{list(values.shape)} but meta says {desc}; {_RETAKE}"
                )
            weights.tensors[index] = values
            weights.names[index] = e["name"]
            if "scales" in e:
                weights.scales[index] = np.asarray(e["scales"], dtype=np.float32)
            if rkey in members:
                residual = member(rkey)
                if dtype != "int8" or residual.dtype != np.int8 or residual.shape != shape:
                    raise DataError(
                        f"{where}: '{rkey}' is {residual.dtype}{list(residual.shape)}; residuals "
                        f"belong to int8 tensors and must be int8{list(shape)}; {_RETAKE}"
                    )
                weights.residuals[index] = residual
            if bkey in members:
                best = member(bkey)
                if best.dtype != DTYPES[dtype] or best.shape != shape:
                    raise DataError(
                        f"{where}: '{bkey}' is {best.dtype}{list(best.shape)} but meta says {desc}; {_RETAKE}"
                    )
                weights.best[index] = best
        extra = sorted(members - expected)
        if extra:
            raise DataError(
                f"{where}: unexpected entries {extra} (meta lists tensors "
                f"{[e['index'] for e in meta['tensors']]}); {_RETAKE}"
            )
    return weights
