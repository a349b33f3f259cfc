"""A training session seen from the host: telemetry bytes in (from the host simulation, the
Python reference or a board's serial port), and out come the JSONL log, the live terminal view,
the trained weights file and the plot. The same code serves `simulate` and `monitor`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import DataError
from zoflash.monitor import telemetry
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.outputs import LineLog, Rescue, plot_path_for, weights_path_for
from zoflash.spec import training as spec

TIME_FIELDS = ("time_s",)
__all__ = ["Session", "SessionResult", "plot_path_for", "weights_path_for"]  # the names' old home


def _json_record(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "data"}


@dataclass
class SessionResult:
    records: list[dict] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    weights_path: Path | None = None
    plot_path: Path | None = None
    done: dict | None = None

    def of_type(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["type"] == kind]

    @property
    def evals(self) -> list[dict]:
        return self.of_type("eval")

    @property
    def steps(self) -> list[dict]:
        return self.of_type("step")


class Session:
    """Feed telemetry bytes; records go to the JSONL log and the live view as they arrive.  A log
    that cannot be written moves to `rescue`'s folder (monitor/outputs.py); `on_nowhere` is
    called when no place can take it."""

    def __init__(
        self,
        log_path: str | Path | None = None,
        view: LiveView | None = None,
        on_record: Callable[[dict], None] | None = None,
        rescue: Rescue | None = None,
        on_nowhere: Callable[[], None] | None = None,
    ):
        self.decoder = telemetry.Decoder()
        self.weights = telemetry.WeightsAssembler()
        self.view = view
        self.on_record = on_record
        self.log_path = Path(log_path) if log_path else None
        self.rescue = rescue if rescue is not None else Rescue()
        self._log = LineLog(self.log_path, self.rescue, "log", on_nowhere) if self.log_path is not None else None
        self.result = SessionResult()

    def feed(self, data: bytes) -> None:
        self._handle(self.decoder.records(self.decoder.feed(data)))

    def _handle(self, records: Iterable[dict]) -> None:
        for rec in records:
            self.result.records.append(rec)
            if rec["type"] == "weights":
                self.weights.add(rec)
                continue
            if rec["type"] == "checkpoint":  # bulk chunks, like weights: not logged (the monitor keeps them)
                continue
            if rec["type"] == "done":
                self.result.done = rec
            if self._log is not None:
                self._log.write(json.dumps(_json_record(rec), sort_keys=True) + "\n")
            if self.view is not None:
                self.view.show(rec)
            if self.on_record is not None:
                self.on_record(rec)

    def close(self) -> SessionResult:
        self._handle(self.decoder.records(self.decoder.flush()))
        if self._log is not None:
            self.log_path = self._log.close()  # where the log is (a rescue folder; None: nowhere)
        self.result.stats = self.decoder.stats()
        return self.result

    def trained_arrays(self, tensors: list[dict]) -> list[tuple[int, str, np.ndarray, np.ndarray | None]]:
        """The dumped weights as (index, name, values, residual) for save_weights; `tensors` are
        the manifest's training tensors (index, name, dtype, shape)."""
        return assembled_arrays(self.weights, tensors)

    def best_arrays(self, tensors: list[dict]) -> dict[int, np.ndarray]:
        return assembled_best(self.weights, tensors)


def assembled_arrays(
    weights: telemetry.WeightsAssembler, tensors: list[dict]
) -> list[tuple[int, str, np.ndarray, np.ndarray | None]]:
    """Weights chunks as (index, name, values, residual) for save_weights; `tensors`: (index,
    name, dtype, shape) of each trainable tensor."""
    out = []
    for t in tensors:
        key = (t["index"], 0)
        if key not in weights.keys():
            raise DataError(f"the run did not dump tensor {t['index']} ('{t['name']}')")
        values = _assembled(weights, t, 0, np.dtype(t["dtype"]))
        residual = None
        if (t["index"], 1) in weights.keys():
            residual = _assembled(weights, t, 1, np.dtype(np.int8))
        out.append((t["index"], t["name"], values, residual))
    return out


def _assembled(weights: telemetry.WeightsAssembler, t: dict, part: int, dtype: np.dtype) -> np.ndarray:
    """One part of a tensor's dump as its array; DataError (one line) when chunks are missing or
    the dump does not hold the tensor's shape (a damaged or foreign stream)."""
    try:
        return weights.get(t["index"], part, dtype).reshape(t["shape"])
    except ValueError as exc:
        raise DataError(
            f"the weights the run sent for tensor {t['index']} ('{t['name']}') are incomplete or of another "
            f"size ({exc}); the trained weights cannot be saved from this stream"
        ) from None


def assembled_best(weights: telemetry.WeightsAssembler, tensors: list[dict]) -> dict[int, np.ndarray]:
    """The best values by validation (weights part best-values) per tensor index, for
    save_weights(best=...); empty when the run sent none (a firmware older than protocol 2)."""
    part = spec.WEIGHTS_PARTS.index("best-values")
    return {
        t["index"]: _assembled(weights, t, part, np.dtype(t["dtype"]))
        for t in tensors
        if (t["index"], part) in weights.keys()
    }


# Records that depend on who watched the run, not on the training: device text, the command
# channel's answers and echoes, and the monitor's own notes.
OBSERVER_TYPES = ("text", "status", "ack", "command", "monitor", "need")  # need: how often depends on the link


def comparable(records: list[dict]) -> list[dict]:
    """Records without time fields (and without OBSERVER_TYPES), for comparing two runs."""
    out = []
    for r in records:
        if r["type"] in OBSERVER_TYPES:
            continue
        out.append({k: (v.hex() if isinstance(v, bytes) else v) for k, v in r.items() if k not in TIME_FIELDS})
    return out


def read_log(path: str | Path) -> list[dict]:
    """The records of a JSONL training log; DataError naming the line that is not a record."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"'{path}' line {number} is not JSON ({exc.msg}): not a zoflash training log, or a damaged one"
                ) from None
            if not isinstance(rec, dict) or "type" not in rec:
                raise DataError(f"'{path}' line {number} is not a training record (no 'type')")
            records.append(rec)
    return records
