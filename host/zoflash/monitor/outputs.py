"""The files a training session writes, and how none of them is lost (docs/training.md, "Outputs").

- Names: a log `run.jsonl` has its weights `run.weights.npz`, plot `run.png`, raw weights
  `run.raw-weights.npz` (weights a device sent for a model the host does not know) and key dumps
  `run.dump.weights.npz`.  `unused_log_path` picks `run-2.jsonl`, `run-3.jsonl`, ... when any of
  them exists, so a run never overwrites another's outputs silently (`--force` does it openly).
- Full disk: `Rescue` writes a file where it was asked for and, when that fails (OSError: no
  space, no permission), in a rescue folder ($TMPDIR/zoflash-rescue-<time>/, then
  ~/zoflash-rescue-<time>/); `LineLog` is a JSONL/CSV file that moves there mid-run, keeping
  every line in memory meanwhile.  `Rescue.summary()` is the one message saying what went where.
- Raw weights: the weights chunks as the device sent them, for a model not known at the end of
  the run; `zoflash export --weights run.raw-weights.npz --model M.tflite` reads them.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoflash.errors import DataError
from zoflash.monitor import telemetry
from zoflash.training.weights_file import atomic_write

RAW_FORMAT = "zoflash-raw-weights"
RAW_SUFFIX = ".raw-weights.npz"


def weights_path_for(log_path: Path) -> Path:
    """run.jsonl -> run.weights.npz (docs/training.md, "Trained weights file")."""
    return log_path.with_name(log_path.stem + ".weights.npz")


def plot_path_for(log_path: Path) -> Path:
    return log_path.with_suffix(".png")


def raw_weights_path_for(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + RAW_SUFFIX)


def dump_path_for(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + ".dump.weights.npz")


def outputs_of(log_path: str | Path) -> list[Path]:
    """Every file a run logging to `log_path` may write next to it."""
    log = Path(log_path)
    return [log, weights_path_for(log), plot_path_for(log), raw_weights_path_for(log), dump_path_for(log)]


def unused_log_path(log_path: str | Path) -> Path:
    """`log_path` if none of its outputs exist; else the first free `<stem>-2<suffix>`,
    `<stem>-3<suffix>`, ... ."""
    log = Path(log_path)
    if not any(p.exists() for p in outputs_of(log)):
        return log
    n = 2
    while any(p.exists() for p in outputs_of(log.with_name(f"{log.stem}-{n}{log.suffix}"))):
        n += 1
    return log.with_name(f"{log.stem}-{n}{log.suffix}")


def rescue_places() -> list[Path]:
    """Where files go when they cannot be written where asked: the temporary folder, then home."""
    stamp = time.strftime("zoflash-rescue-%Y%m%d-%H%M%S")
    return [Path(tempfile.gettempdir()) / stamp, Path.home() / stamp]


@dataclass
class Kept:
    what: str  # "log", "weights", "plot", ...
    wanted: Path
    where: Path | None  # None: could be written nowhere
    reason: str


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


class Rescue:
    """Writes files, moving them to a rescue folder when their place cannot take them."""

    def __init__(self, places: list[Path] | None = None):
        self.places = list(places) if places is not None else rescue_places()
        self.kept: list[Kept] = []

    def save(self, what: str, path: Path, write: Callable[[Path], Path | None]) -> Path | None:
        """write(path); on OSError, write(rescue folder / path.name).  Returns where it went
        (None: nowhere could take it; `kept` says so)."""
        try:
            return write(path)
        except OSError as exc:
            return self.divert(what, path, write, _why(exc))

    def divert(self, what: str, path: Path, write: Callable[[Path], Path | None], reason: str) -> Path | None:
        for place in self.places:
            try:
                place.mkdir(parents=True, exist_ok=True)
                where = write(place / path.name)
            except OSError:
                continue
            self.kept.append(Kept(what, path, where if where is not None else place / path.name, reason))
            return self.kept[-1].where
        self.kept.append(Kept(what, path, None, reason))
        return None

    @property
    def failed(self) -> bool:
        return bool(self.kept)

    def summary(self) -> str | None:
        """One message: what could not be written where asked, and where it is instead."""
        if not self.kept:
            return None
        parts = []
        for k in self.kept:
            if k.where is not None:
                parts.append(f"{k.what} {k.wanted} -> {k.where}")
            else:
                parts.append(f"{k.what} {k.wanted}: written nowhere (every rescue folder failed too)")
        reasons = sorted({k.reason for k in self.kept})
        return (
            f"could not write where asked ({'; '.join(reasons)}); kept instead: "
            + "; ".join(parts)
            + ". Free some space and move them back"
        )


class LineLog:
    """A text file written line by line (flushed each time).  When a write fails the file moves
    to a rescue folder: every line so far is written there and the next ones follow; while no
    place can take it the lines stay in memory, and close() tries once more."""

    def __init__(self, path: Path, rescue: Rescue, what: str = "log", on_nowhere: Callable[[], None] | None = None):
        self.wanted = Path(path)
        self.path: Path | None = self.wanted  # where the lines go (None: only in memory)
        self.rescue, self.what = rescue, what
        self.on_nowhere = on_nowhere  # called once when no place can take the file (the monitor pauses the device)
        self.lines: list[str] = []
        self._file = None
        self._reason = ""
        try:
            self.wanted.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.wanted.open("w")
        except OSError as exc:
            self._move(_why(exc))

    def write(self, line: str) -> None:
        self.lines.append(line)
        if self._file is None:
            return
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            self._move(_why(exc))

    def _rewrite(self, path: Path) -> Path:
        f = path.open("w")
        try:
            f.write("".join(self.lines))
            f.flush()
        except OSError:
            f.close()
            raise
        self._file = f
        return path

    def _drop_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # what it did not take is in self.lines
            self._file = None

    def _move(self, reason: str) -> None:
        self._drop_file()
        self._reason = reason
        self.rescue.kept = [k for k in self.rescue.kept if k.wanted != self.wanted]  # this move's outcome replaces it
        was_somewhere = self.path is not None
        self.path = self.rescue.divert(self.what, self.wanted, self._rewrite, reason)
        if self.path is None and was_somewhere and self.on_nowhere is not None:
            self.on_nowhere()

    def close(self) -> Path | None:
        """Close the file; lines only in memory get one more try at the rescue folders."""
        if self._file is not None:
            try:
                self._file.close()
                self._file = None
                return self.path
            except OSError as exc:
                self._file = None
                self._move(_why(exc))
        elif self.path is None:
            self._move(self._reason)
        self._drop_file()
        return self.path


# ------------------------------------------------------------------------------- raw weights


def save_raw_weights(
    path: str | Path, weights: telemetry.WeightsAssembler, model_prefix: str | None, headroom: int
) -> Path:
    """The weights chunks as the device sent them: one uint8 array per (tensor, part) and a JSON
    `meta` (format, the model's SHA-256 prefix, headroom, each part's size and missing ranges)."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    parts = []
    missing = weights.missing()
    for index, part in weights.keys():
        total = weights.total(index, part)
        gaps = missing.get((index, part), [])
        arrays[f"t{index}_p{part}"] = (
            np.zeros(total, np.uint8) if gaps else weights.get(index, part, np.uint8)
        )  # an incomplete part is recorded as missing, its bytes as zeros
        parts.append({"tensor": index, "part": part, "bytes": total, "missing": [list(g) for g in gaps]})
    meta = {"format": RAW_FORMAT, "model_sha256_prefix": model_prefix, "headroom": headroom, "parts": parts}
    arrays["meta"] = np.array(json.dumps(meta))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
    return path


def is_raw_weights(path: str | Path) -> bool:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return "meta" in npz.files and json.loads(str(npz["meta"][()])).get("format") == RAW_FORMAT
    except (OSError, ValueError, EOFError, AttributeError):
        return False


def load_raw_weights(path: str | Path) -> tuple[telemetry.WeightsAssembler, str | None, int]:
    """(the chunks as an assembler, the model's SHA-256 prefix, headroom bits) of a raw weights file."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta = json.loads(str(npz["meta"][()]))
            if meta.get("format") != RAW_FORMAT:
                raise DataError(f"'{path}' is not a raw weights file")
            weights = telemetry.WeightsAssembler()
            for p in meta["parts"]:
                if p["missing"]:
                    continue  # incomplete: left out, so a weights file made from it says which
                data = npz[f"t{p['tensor']}_p{p['part']}"].tobytes()
                weights.add({"tensor": p["tensor"], "part": p["part"], "total": p["bytes"], "offset": 0, "data": data})
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise DataError(f"cannot read '{path}' as raw weights: {exc}") from None
    return weights, meta.get("model_sha256_prefix"), int(meta.get("headroom") or 0)
