"""--mode continual, the host side: the stream feeder (a board's incoming samples, from a stream
.npz, one per need; the stop command after the last), the live view's state line and the
summary of a run's continual records (docs/guides/continual.md)."""

from __future__ import annotations

import numpy as np

from zoflash.monitor.feed import Feeder
from zoflash.spec import wire as protocol

NO_LABEL = 0xFFFF  # ZO_CL_NO_LABEL: a sample served without feedback
SHIFT_MARK = 0xFFFE  # ZO_CL_SHIFT: no label, and the conditions changed here (an episode starts)


class StreamFeeder(Feeder):
    """Answers the continual firmware's needs with the stream's samples in order; a need past the
    last sample gets the stop command (the device then sends its weights and done)."""

    def __init__(self, records: list[bytes], labels: list[int], source: str = "the stream"):
        super().__init__(records, labels, source)
        self.stop_sent = False

    def answer(self, need: dict) -> bytes:
        if need["cursor"] >= len(self.records):
            if self.stop_sent:
                return b""
            self.stop_sent = True
            frame = protocol.encode_command("stop", self.seq)
            self.seq = (self.seq + 1) & 0xFFFF
            return frame
        return super().answer(need)


def state_line(records: list[dict]) -> str:
    """One line for the live view: the deployed generation, the state, the last decision."""
    cl = [r for r in records if r.get("type") == "continual"]
    if not cl:
        return "continual: waiting for the device"
    last = cl[-1]
    decisions = [r for r in cl if r["decision"] != "window"]
    windows = [r for r in cl if r["decision"] == "window"]
    adapting = bool(decisions) and decisions[-1]["decision"] in ("suspected", "episode")
    acc = f", serving accuracy {windows[-1]['correct'] / max(1, windows[-1]['count']) * 100:.1f}%" if windows else ""
    what = decisions[-1]["decision"] if decisions else "none yet"
    return (
        f"continual: sample {last['sample']}, deployed generation {last['generation']} (slot {last['slot']}), "
        f"{'ADAPTING (episode ' + str(last['episode']) + ', ' + str(last['steps']) + ' steps)' if adapting else 'serving'}"
        f"{acc}, last decision: {what}"
    )


def decision_line(rec: dict) -> str:
    """One continual decision as a line of the live view."""
    what = rec["decision"]
    at = f"continual: sample {rec['sample']}: "
    if what == "suspected":
        return (
            at
            + f"drift suspected ({'output margin' if rec['count'] == 1 else 'loss'} statistic {rec['statistic']:.1f})"
        )
    if what == "episode":
        return at + f"adaptation episode {rec['episode']} starts (deployed generation {rec['generation']})"
    if what in ("accepted", "rejected") and rec["count"]:
        verdict = "promoted" if what == "accepted" else "discarded"
        return at + (
            f"candidate {verdict} after {rec['steps']} steps: right where the deployed weights were wrong "
            f"{rec['better']}, the reverse {rec['worse']}, of {rec['count']} held-back samples"
            + (f"; deployed generation {rec['generation']} (slot {rec['slot']})" if what == "accepted" else "")
        )
    if what == "rejected":
        return at + f"candidate abandoned after {rec['steps']} steps (a new alarm restarts the episode)"
    if what == "rollback":
        if rec["sample"] == 0 and not rec["count"]:
            return at + "a promotion was cut short by a reset: the deployed slot serves"
        return at + (
            f"rollback to the factory weights (right where the deployed were wrong {rec['better']}, the "
            f"reverse {rec['worse']}); deployed generation {rec['generation']} (slot {rec['slot']})"
        )
    if what == "boot":
        return at + f"deployed generation {rec['generation']} (slot {rec['slot']}) loaded"
    return at + what


def summary(records: list[dict]) -> dict:
    """Counts and the serving accuracy over time of a continual run's records."""
    cl = [r for r in records if r.get("type") == "continual"]
    windows = [r for r in cl if r["decision"] == "window"]
    count = {k: sum(1 for r in cl if r["decision"] == k) for k in protocol.CONTINUAL_DECISIONS}
    correct = sum(r["correct"] for r in windows)
    served = sum(r["count"] for r in windows)
    return {
        "samples": cl[-1]["sample"] if cl else 0,
        "decisions": count,
        "accuracy": correct / served if served else float("nan"),
        "window_samples": np.array([r["sample"] for r in windows], dtype=np.int64),
        "window_accuracy": np.array([r["correct"] / max(1, r["count"]) for r in windows]),
        "events": [(r["sample"], r["decision"]) for r in cl if r["decision"] != "window"],
    }
