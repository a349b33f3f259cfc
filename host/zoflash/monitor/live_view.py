"""The live view: training progress in the terminal, from the decoded records."""

from __future__ import annotations

import sys
import time
from typing import TextIO

import numpy as np

from zoflash.monitor.continual import decision_line, state_line
from zoflash.monitor.telemetry import has_accuracy
from zoflash.spec import training as spec


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
        self.accuracy = True  # the run's loss has an accuracy (not mse: its hello says)
        self.continual: list[dict] = []  # --mode continual: the last decision and the last serving window

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
        acc = f"  acc {self.last_eval['accuracy'] * 100:5.1f}%" if self.last_eval and self.accuracy else ""
        text = (
            f"step {rec['step']:6d}  q {rec['q']:2d}  {rec['state']:<9}  loss {float(np.mean(recent)):.4f}{trend}"
            f"{acc}  passes {rec['prefix_passes']}+{rec['suffix_passes']}  {rate:,.0f} passes/s"
            + ("  [lr calibration]" if rec.get("calibrating") else "")
            + ("  [lr trial]" if rec.get("trial") else "")
        )
        self._in_place(text)

    def _in_place(self, text: str) -> None:
        """The status line: redrawn in place on a TTY, at most every `period` seconds on a pipe."""
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
            acc = f"accuracy {rec['accuracy'] * 100:.1f}% ({rec['correct']}/{rec['count']}), " if self.accuracy else ""
            val = ""
            if "val_loss" in rec:  # protocol 2: the validation split the guards use
                val_acc = f"accuracy {rec['val_accuracy'] * 100:.1f}%, " if self.accuracy else ""
                val = f"; validation {val_acc}loss {rec['val_loss']:.4f}"
            self._line(
                f"eval after {rec['step']} steps: test {acc}loss {rec['loss']:.4f}{val}, "
                f"passes {rec['prefix_passes']} prefix + {rec['suffix_passes']} suffix"
            )
        elif kind == "event":
            if rec["kind"] == "scheduler":
                codes = spec.EVENTS
                why = codes[rec["code"]] if rec["code"] < len(codes) else f"event {rec['code']}"
                self._line(
                    f"step {rec['step']}: scheduler {rec['state_from']} -> {rec['state_to']}, "
                    f"q {rec['q_from']} -> {rec['q_to']} ({why.lower().replace('_', ' ')})"
                )
            elif rec["kind"] == "lr" and rec["code"] == spec.LR_EVENT_CODE_IDS["trial"]:  # lr trial
                j = rec["aux"] - (1 << 32) if rec["aux"] >= 1 << 31 else rec["aux"]
                self._line(f"step {rec['step']}: lr trial: lr_1 x 2^{j}: validation loss {rec['value']:.4f}")
            elif rec["kind"] == "lr" and rec["code"] == spec.LR_EVENT_CODE_IDS["chosen"]:
                self._line(f"step {rec['step']}: lr trial chose lr_1 = {rec['value']:.6g} ({rec['aux']} trial steps)")
            elif rec["kind"] == "lr":
                self._line(f"step {rec['step']}: learning rate calibrated: lr_1 = {rec['value']:.6g}")
            elif rec["kind"] == "rollback" and rec["code"] == spec.ROLLBACK_CAUSE_IDS["end"]:
                self._line(
                    f"step {rec['step']}: the run ended with a validation loss above its best: "
                    f"it ends on the best weights, of step {rec['aux']}"
                )
            elif rec["kind"] == "rollback":
                why = (
                    "the validation loss ran away"
                    if rec["code"] == spec.ROLLBACK_CAUSE_IDS["loss"]
                    else "saturated logits or no loss differences"
                )
                self._line(
                    f"step {rec['step']}: guard tripped ({why}): "
                    f"rolled back to step {rec['aux']}, lr_1 lowered to {rec['value']:.6g}"
                )
            else:
                self._line(f"step {rec['step']}: event {rec['kind']}")
        elif kind == "continual":  # --mode continual: decisions on their own line, the state in place
            self.continual = [r for r in self.continual if r["decision"] != rec["decision"]][-1:] + [rec]
            if rec["decision"] != "window":
                self._line(decision_line(rec))
            self._in_place(state_line(self.continual))
        elif kind == "hello":
            self.accuracy = has_accuracy([rec])
            self._line(
                f"training: loss {rec['loss_kind']}, scheduler {rec['scheduler']}, batch {rec['batch']}, "
                f"{rec['trainable_params']} "
                f"trainable parameters, {rec['n_train']} training / {rec['n_test']} test samples, "
                f"lr {'auto' if rec['lr_auto'] else format(rec['lr'], 'g')}"
                + (f", headroom {rec['headroom']} bit(s)" if rec.get("headroom") else "")
            )
        elif kind == "done":
            self._line(
                f"done ({rec['reason']}): {rec['steps']} steps, {rec['prefix_passes']} prefix + "
                f"{rec['suffix_passes']} suffix passes, {rec['time_s']:.1f} s"
            )
        elif kind in ("text", "log"):
            self._line(f"device: {rec['text']}")
        elif kind == "boundary":  # --- boundary checksum
            self._line(boundary_line(rec))
        elif kind == "malformed":
            self._line(f"warning: malformed frame ({rec['reason']})")
        elif kind == "status":
            self._line(
                f"status: {'paused' if rec['paused'] else 'running'} after {rec['step']} steps, q {rec['q']}, "
                f"{rec['state']}{', calibrating lr' if rec['calibrating'] else ''}, lr {rec['lr']:.6g}, "
                f"passes {rec['prefix_passes']}+{rec['suffix_passes']} (+{rec['eval_passes']} eval)"
            )
        elif kind == "ack":
            if rec["command"] == "restore" and rec["result"] != "refused":
                return  # one per checkpoint chunk: the monitor reports the resume once
            note = {"ok": "", "ignored": " (nothing to do)", "unknown": " (unknown to the firmware)"}
            self._line(f"device: {rec['command']} at step {rec['step']}{note.get(rec['result'], ' ' + rec['result'])}")
        elif kind == "monitor":
            if rec["event"] == "disconnected":
                self._line(f"monitor: connection lost ({rec['reason']}); reconnecting")
            elif rec["event"] == "reconnected":
                self._line(f"monitor: reconnected ({rec['reconnects']} so far)")
            elif rec["event"] == "restart":
                self._line(f"monitor: the device restarted (run segment {rec['segment']})")


# --- boundary checksum
def boundary_line(rec: dict) -> str:
    """The verdict on a boundary frame: the device's prefix against the host simulation's (built in)."""
    where = "the NPU's" if rec["npu"] else "the device's"
    head = f"boundary check: {where} prefix on the first test sample gives CRC-32 0x{rec['crc32']:08X} ({rec['bytes']} bytes)"
    if rec["agree"] is None:
        return head + "; no simulation value built in (zoflash build --check-boundary)"
    if rec["agree"]:
        return head + ": agrees with the host simulation"
    return (
        head + f": DISAGREES with the host simulation (0x{rec['expected_crc32']:08X}): the prefix's activations "
        "differ from zoflash's C (bit-exact with TFLM); the suffix trains on these features"
    )
