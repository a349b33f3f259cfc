"""A training session seen from the host: telemetry bytes in (from the host simulation, the
Python reference or a board's serial port), and out come the JSONL log, the live terminal view,
the trained weights file and the plot. The same code serves `simulate` and `monitor`.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TextIO

import numpy as np

from zoflash.errors import DataError
from zoflash.monitor import telemetry
from zoflash.training import spec

TIME_FIELDS = ("time_s",)


def weights_path_for(log_path: Path) -> Path:
    """run.jsonl -> run.weights.npz (docs/training.md, "Trained weights file")."""
    return log_path.with_name(log_path.stem + ".weights.npz")


def plot_path_for(log_path: Path) -> Path:
    return log_path.with_suffix(".png")


def _json_record(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "data"}


class LiveView:
    """Progress in the terminal: a status line redrawn in place on a TTY (evaluations and
    events on their own lines); on a pipe, one line per evaluation and event plus a status line
    at most every `period` seconds."""

    def __init__(self, out: TextIO | None = None, period: float = 2.0, enabled: bool = True):
        self.out = out or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.period = period
        self.enabled = enabled
        self.last_status = 0.0
        self.last_eval: dict | None = None
        self.first_eval: dict | None = None
        self.losses: list[float] = []
        self._status_shown = False
        self._t_start = time.monotonic()
        self._passes_start: int | None = None

    def _line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty and self._status_shown:
            self.out.write("\r\033[K")
        self.out.write(text + "\n")
        self.out.flush()
        self._status_shown = False

    def message(self, text: str) -> None:
        """A line of the host's own (a command's outcome, a hint)."""
        self._line(text)

    def _status(self, rec: dict) -> None:
        passes = rec["prefix_passes"] + rec["suffix_passes"]
        if self._passes_start is None:
            self._passes_start = passes
        rate = (passes - self._passes_start) / max(time.monotonic() - self._t_start, 1e-9)
        self.losses.append(rec["loss"])
        recent = self.losses[-20:]
        trend = ""
        if len(self.losses) >= 40:
            before = float(np.mean(self.losses[-40:-20]))
            now = float(np.mean(recent))
            trend = " \u2193" if now < before else " \u2191"
        acc = f"  acc {self.last_eval['accuracy'] * 100:5.1f}%" if self.last_eval else ""
        text = (f"step {rec['step']:6d}  q {rec['q']:2d}  {rec['state']:<9}  loss {float(np.mean(recent)):.4f}{trend}"
                f"{acc}  passes {rec['prefix_passes']}+{rec['suffix_passes']}  {rate:,.0f} passes/s"
                + ("  [lr calibration]" if rec.get("calibrating") else ""))
        if not self.enabled:
            return
        now_t = time.monotonic()
        if self.tty:
            self.out.write("\r\033[K" + text[:200])
            self.out.flush()
            self._status_shown = True
        elif now_t - self.last_status >= self.period:
            self._line(text)
            self.last_status = now_t

    def show(self, rec: dict) -> None:
        kind = rec["type"]
        if kind == "step":
            self._status(rec)
        elif kind == "eval":
            self.first_eval = self.first_eval or rec
            self.last_eval = rec
            self._line(f"eval after {rec['step']} steps: accuracy {rec['accuracy'] * 100:.1f}% "
                       f"({rec['correct']}/{rec['count']}), loss {rec['loss']:.4f}, "
                       f"passes {rec['prefix_passes']} prefix + {rec['suffix_passes']} suffix")
        elif kind == "event":
            if rec["kind"] == "scheduler":
                codes = spec.EVENTS
                why = codes[rec["code"]] if rec["code"] < len(codes) else f"event {rec['code']}"
                self._line(f"step {rec['step']}: scheduler {rec['state_from']} -> {rec['state_to']}, "
                           f"q {rec['q_from']} -> {rec['q_to']} ({why.lower().replace('_', ' ')})")
            elif rec["kind"] == "lr":
                self._line(f"step {rec['step']}: learning rate calibrated: lr_1 = {rec['value']:.6g}")
            elif rec["kind"] == "rollback":
                why = ("the test loss ran away" if rec["code"] == spec.ROLLBACK_CAUSE_IDS["loss"]
                       else "saturated logits or no loss differences")
                self._line(f"step {rec['step']}: guard tripped ({why}): "
                           f"rolled back to step {rec['aux']}, lr_1 halved to {rec['value']:.6g}")
            else:
                self._line(f"step {rec['step']}: event {rec['kind']}")
        elif kind == "hello":
            self._line(f"training: scheduler {rec['scheduler']}, batch {rec['batch']}, {rec['trainable_params']} "
                       f"trainable parameters, {rec['n_train']} training / {rec['n_test']} test samples, "
                       f"lr {'auto' if rec['lr_auto'] else format(rec['lr'], 'g')}")
        elif kind == "done":
            self._line(f"done ({rec['reason']}): {rec['steps']} steps, {rec['prefix_passes']} prefix + "
                       f"{rec['suffix_passes']} suffix passes, {rec['time_s']:.1f} s")
        elif kind in ("text", "log"):
            self._line(f"device: {rec['text']}")
        elif kind == "malformed":
            self._line(f"warning: malformed frame ({rec['reason']})")
        elif kind == "status":
            self._line(f"status: {'paused' if rec['paused'] else 'running'} after {rec['step']} steps, q {rec['q']}, "
                       f"{rec['state']}{', calibrating lr' if rec['calibrating'] else ''}, lr {rec['lr']:.6g}, "
                       f"passes {rec['prefix_passes']}+{rec['suffix_passes']} (+{rec['eval_passes']} eval)")
        elif kind == "ack":
            note = {"ok": "", "ignored": " (nothing to do)", "unknown": " (unknown to the firmware)"}
            self._line(f"device: {rec['command']} at step {rec['step']}{note.get(rec['result'], ' ' + rec['result'])}")
        elif kind == "monitor":
            if rec["event"] == "disconnected":
                self._line(f"monitor: connection lost ({rec['reason']}); reconnecting")
            elif rec["event"] == "reconnected":
                self._line(f"monitor: reconnected ({rec['reconnects']} so far)")
            elif rec["event"] == "restart":
                self._line(f"monitor: the device restarted (run segment {rec['segment']})")


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
    """Feed telemetry bytes; records go to the JSONL log and the live view as they arrive."""

    def __init__(self, log_path: str | Path | None = None, view: LiveView | None = None,
                 on_record: Callable[[dict], None] | None = None):
        self.decoder = telemetry.Decoder()
        self.weights = telemetry.WeightsAssembler()
        self.view = view
        self.on_record = on_record
        self.log_path = Path(log_path) if log_path else None
        self._log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("w")
        self.result = SessionResult()

    def feed(self, data: bytes) -> None:
        self._handle(self.decoder.records(self.decoder.feed(data)))

    def _handle(self, records: Iterable[dict]) -> None:
        for rec in records:
            self.result.records.append(rec)
            if rec["type"] == "weights":
                self.weights.add(rec)
                continue
            if rec["type"] == "done":
                self.result.done = rec
            if self._log is not None:
                self._log.write(json.dumps(_json_record(rec), sort_keys=True) + "\n")
                self._log.flush()
            if self.view is not None:
                self.view.show(rec)
            if self.on_record is not None:
                self.on_record(rec)

    def close(self) -> SessionResult:
        self._handle(self.decoder.records(self.decoder.flush()))
        if self._log is not None:
            self._log.close()
        self.result.stats = self.decoder.stats()
        return self.result

    def trained_arrays(self, tensors: list[dict]) -> list[tuple[int, str, np.ndarray, np.ndarray | None]]:
        """The dumped weights as (index, name, values, residual) for save_weights; `tensors` are
        the manifest's training tensors (index, name, dtype, shape)."""
        return assembled_arrays(self.weights, tensors)


def assembled_arrays(weights: telemetry.WeightsAssembler,
                     tensors: list[dict]) -> list[tuple[int, str, np.ndarray, np.ndarray | None]]:
    """Weights chunks as (index, name, values, residual) for save_weights; `tensors`: (index,
    name, dtype, shape) of each trainable tensor."""
    out = []
    for t in tensors:
        key = (t["index"], 0)
        if key not in weights.keys():
            raise DataError(f"the run did not dump tensor {t['index']} ('{t['name']}')")
        values = weights.get(t["index"], 0, np.dtype(t["dtype"])).reshape(t["shape"])
        residual = None
        if (t["index"], 1) in weights.keys():
            residual = weights.get(t["index"], 1, np.int8).reshape(t["shape"])
        out.append((t["index"], t["name"], values, residual))
    return out


# Records that depend on who watched the run, not on the training: device text, the command
# channel's answers and echoes, and the monitor's own notes.
OBSERVER_TYPES = ("text", "status", "ack", "command", "monitor")


def comparable(records: list[dict]) -> list[dict]:
    """Records without time fields (and without OBSERVER_TYPES), for comparing two runs."""
    out = []
    for r in records:
        if r["type"] in OBSERVER_TYPES:
            continue
        out.append({k: (v.hex() if isinstance(v, bytes) else v) for k, v in r.items() if k not in TIME_FIELDS})
    return out


def read_log(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_run(records: list[dict], out: str | Path, title: str = "") -> Path | None:
    """Loss, test accuracy and q against cumulative forward passes. None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [r for r in records if r["type"] == "step"]
    evals = [r for r in records if r["type"] == "eval"]
    fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True, gridspec_kw={"height_ratios": [3, 3, 1.5]})
    x = [r["prefix_passes"] + r["suffix_passes"] for r in steps]
    loss = np.array([r["loss"] for r in steps])
    axes[0].plot(x, loss, lw=0.6, alpha=0.4, label="step mean loss")
    if len(loss) >= 10:
        k = max(5, len(loss) // 50)
        smooth = np.convolve(loss, np.ones(k) / k, mode="valid")
        axes[0].plot(x[k - 1:], smooth, lw=1.5, label=f"moving mean ({k} steps)")
    ex = [r["prefix_passes"] + r["suffix_passes"] for r in evals]
    axes[0].plot(ex, [r["loss"] for r in evals], "o-", ms=3, label="test loss")
    axes[0].set_ylabel("loss")
    axes[0].legend(fontsize=8)
    axes[1].plot(ex, [100 * r["accuracy"] for r in evals], "o-", ms=3, color="tab:green")
    axes[1].set_ylabel("test accuracy (%)")
    axes[1].grid(alpha=0.3)
    axes[2].step(x, [r["q"] for r in steps], where="post", color="tab:purple")
    axes[2].set_yscale("log", base=2)
    axes[2].set_ylabel("q")
    axes[2].set_xlabel("forward passes (prefix + suffix sample-passes)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
