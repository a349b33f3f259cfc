"""The device-farm view: one live table of a fleet's devices (a row each: round, step, q, loss,
accuracy, bytes up and down, state), and the fleet's plot."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass
class DeviceRow:
    """A device as the aggregator sees it (its status messages)."""

    device: str
    round: int = 0  # merged rounds applied
    step: int = 0
    q: int = 0
    loss: float | None = None
    accuracy: float | None = None  # the global weights' test accuracy, as the device last measured it
    up: int = 0  # bytes uploaded, all rounds
    down: int = 0  # bytes of merged rounds received
    state: str = "joined"
    seen: float = 0.0
    missed: int = 0  # rounds closed in a row without its upload


HEADER = f"{'device':<12} {'round':>5} {'step':>6} {'q':>3} {'loss':>7} {'acc':>6} {'up B':>7} {'down B':>7}  state"


def row_line(r: DeviceRow) -> str:
    loss = "-" if r.loss is None else f"{r.loss:.3f}"
    acc = "-" if r.accuracy is None else f"{100 * r.accuracy:.1f}%"
    state = r.state + (f" (missed {r.missed})" if r.missed else "")
    return f"{r.device:<12} {r.round:>5} {r.step:>6} {r.q:>3} {loss:>7} {acc:>6} {r.up:>7} {r.down:>7}  {state}"


class FleetView:
    """The table, redrawn in place on a TTY at most every `period` seconds; on a pipe, printed once
    per round (when the fleet's round changes) and at the end."""

    def __init__(self, out: TextIO | None = None, period: float = 1.0, enabled: bool = True):
        self.out = out or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.period = period
        self.enabled = enabled
        self._drawn = 0  # lines of the last drawing (TTY)
        self._last = 0.0
        self._round: int | None = None

    def _table(self, rows: dict[str, DeviceRow], info: dict) -> list[str]:
        name = f" {info['fleet']}" if info.get("fleet") else ""
        head = f"fleet{name}: round {info.get('round', 0)}/{info.get('rounds', '?')}"
        head += f", {len(rows)} devices, global crc {info.get('crc', 0):#010x}"
        return [head, HEADER] + [row_line(rows[d]) for d in sorted(rows)]

    def update(self, rows: dict[str, DeviceRow], info: dict, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if not force and now - self._last < self.period:
                return
            self._last = now
            lines = self._table(rows, info)
            if self._drawn:
                self.out.write(f"\033[{self._drawn}F\033[J")
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        elif force or info.get("round") != self._round:
            self._round = info.get("round")
            self.out.write("\n".join(self._table(rows, info)) + "\n")
        self.out.flush()

    def message(self, text: str) -> None:
        """A line above the table (an event of the fleet)."""
        if not self.enabled:
            return
        if self.tty and self._drawn:
            self.out.write(f"\033[{self._drawn}F\033[J")
            self._drawn = 0
            self._last = 0.0
        self.out.write(text + "\n")
        self.out.flush()


def plot_fleet(
    accuracy: list[float | None],
    uplink: list[float],
    out: str | Path,
    title: str = "",
    centralised: float | None = None,
) -> Path | None:
    """Global test accuracy before each round (and after the last) and the mean upload per device
    per round; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = [k for k, a in enumerate(accuracy) if a is not None]
    a1.plot(xs, [100 * (accuracy[k] or 0.0) for k in xs], marker="o", label="fleet (global weights)")
    if centralised is not None:
        a1.axhline(100 * centralised, color="gray", linestyle="--", label="centralised ZO, same passes")
    a1.set_xlabel("round")
    a1.set_ylabel("test accuracy (%)")
    a1.legend(loc="lower right")
    a1.grid(alpha=0.3)
    a2.bar(range(len(uplink)), uplink)
    a2.set_xlabel("round")
    a2.set_ylabel("upload (bytes/device)")
    a2.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
