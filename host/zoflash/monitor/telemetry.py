"""Training telemetry, host side: decode the device's byte stream into records.

The wire format and the encoder are protocol.py (docs/training.md, "Telemetry (protocol
version 2)"); ids become the names of the training spec (spec/training.py).

    dec = Decoder()
    for item in dec.records(dec.feed(chunk)): ...      # JSON-ready dicts, text lines included
    tail = dec.records(dec.flush())                      # at the end of the stream
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from zoflash.spec import training as spec
from zoflash.spec.wire import (
    COMMAND_STRUCTS,
    COMMANDS,
    CONTINUAL_DECISIONS,
    HEAD,
    LAYOUTS,
    MAX_PAYLOAD,
    STRUCTS,
    SYNC,
    TYPE_NAMES,
    VERSION,
    Frame,
    crc32,
)

MAX_TEXT_LINE = 4096  # a longer run without a newline is cut into lines of this many bytes

EVENT_KIND_NAMES = {v: k for k, v in spec.EVENT_KINDS.items()}
COMMAND_NAMES = {v: k for k, v in COMMANDS.items()}


class TextLine(NamedTuple):
    text: str


# ------------------------------------------------------------------------------ decode


def _name(names, v: int, unknown: str) -> str:
    """names[v] of a tuple or dict of names; `unknown` + v for an id without one."""
    if isinstance(names, dict):
        return names.get(v, f"{unknown}{v}")
    return names[v] if 0 <= v < len(names) else f"{unknown}{v}"


def state_name(v: int) -> str:
    return _name(spec.STATES, v, "STATE")


# Raw field -> record fields; the others pass through unchanged.
_CONVERT = {
    "time_us": lambda v: {"time_s": v / 1e6},
    "state": lambda v: {"state": state_name(v)},
    "state_from": lambda v: {"state_from": state_name(v)},
    "state_to": lambda v: {"state_to": state_name(v)},
    "flags": lambda v: {name: bool(v & bit) for name, bit in spec.STEP_FLAGS.items()},
    "scheduler": lambda v: {"scheduler": _name(spec.SCHEDULERS, v, "scheduler")},
    "rounding": lambda v: {"rounding": _name(spec.ROUNDINGS, v, "rounding")},
    "loss_kind": lambda v: {"loss_kind": _name(spec.LOSSES, v, "loss_kind")},
    "kind": lambda v: {"kind": _name(EVENT_KIND_NAMES, v, "kind")},
    "decision": lambda v: {"decision": _name(CONTINUAL_DECISIONS, v, "decision")},  # --mode continual
    "reason": lambda v: {"reason": _name(spec.DONE_REASONS, v, "reason")},
    "lr_auto": lambda v: {"lr_auto": bool(v)},
    "model_sha256": lambda v: {"model_sha256_prefix": v.hex()},
    "paused": lambda v: {"paused": bool(v)},
    "calibrating": lambda v: {"calibrating": bool(v)},
    "command": lambda v: {"command": COMMAND_NAMES.get(v, f"command{v}")},
    "result": lambda v: {"result": _name(spec.ACK_RESULTS, v, "result")},
    # --- boundary checksum
    "boundary_flags": lambda v: {name: bool(v & bit) for name, bit in spec.BOUNDARY_FLAGS.items()},
}


def has_accuracy(records) -> bool:
    """Whether a run's evaluations report an accuracy: not with mse (its `accuracy` and `correct`
    are 0); records without a hello (a late attach) are taken to have one."""
    return not any(r.get("type") == "hello" and r.get("loss_kind") == "mse" for r in records)


def _malformed(frame: Frame, reason: str) -> dict:
    return {
        "type": "malformed",
        "frame_type": frame.type,
        "seq": frame.seq,
        "length": len(frame.payload),
        "reason": reason,
    }


def decode(frame: Frame) -> dict:
    """A frame as a JSON-ready record (weights keep `data` as bytes).  Never raises: a payload
    that does not fit its type gives {"type": "malformed", ...}.  Floats are the exact float32
    values as Python floats (struct's "<f" widens exactly, like float(np.float32))."""
    kind = TYPE_NAMES.get(frame.type)
    if frame.type in COMMAND_NAMES:  # a command seen on the wire (a loopback, or a host's own echo)
        name = COMMAND_NAMES[frame.type]
        if name == "restore":  # --- checkpoint and resume: a chunk of an image (offset, total, data)
            head = COMMAND_STRUCTS["restore"]
            if len(frame.payload) < head.size:
                return _malformed(frame, f"restore with a payload of {len(frame.payload)} bytes")
            offset, total = head.unpack_from(frame.payload)
            return {
                "type": "command",
                "command": name,
                "seq": frame.seq,
                "offset": offset,
                "total": total,
                "bytes": len(frame.payload) - 8,
            }
        if frame.payload and name not in ("sample", "push"):  # a sample chunk, a push chunk have one
            return _malformed(frame, f"command with a payload of {len(frame.payload)} bytes")
        return {"type": "command", "command": name, "seq": frame.seq}
    if kind is None:
        return _malformed(frame, "unknown frame type")
    st, payload = STRUCTS[kind], bytes(frame.payload)
    if kind == "log":
        return {"type": "log", "text": payload.decode("utf-8", errors="replace")}
    if len(payload) < st.size or (kind not in ("weights", "checkpoint", "updates") and len(payload) != st.size):
        return _malformed(frame, f"payload of {len(payload)} bytes")
    rec: dict[str, Any] = {"type": kind}
    for (name, _), v in zip(LAYOUTS[kind][1], st.unpack_from(payload)):
        rec.update(_CONVERT[name](v) if name in _CONVERT else {name: v})
    if kind == "boundary":  # --- boundary checksum: None when no expected value was built in
        rec["agree"] = rec["crc32"] == rec["expected_crc32"] if rec["expected"] else None
    if kind == "updates":  # --- update log: the entries stay as they came (hex), zoflash replay reads them
        rec["entries"] = payload[st.size :].hex()
    if kind in ("weights", "checkpoint"):
        rec["data"] = payload[st.size :]
        if rec["offset"] + len(rec["data"]) > rec["total"]:
            return _malformed(frame, f"{kind} chunk past total")
    return rec


class Decoder:
    """Splits a byte stream into Frames and TextLines.  Feeding in any chunking gives the same
    items and counters.  On a bad candidate (version, length, CRC, or cut off at flush) only its
    first byte is given up, so a frame starting inside the bad one is still found."""

    def __init__(self):
        self._buf = bytearray()
        self._line = bytearray()
        self._items: list = []
        self._next_seq: int | None = None
        self.frames = self.crc_errors = self.dropped_bytes = self.seq_gaps = 0
        self.truncated = self.text_bytes = self.malformed = 0

    def stats(self) -> dict:
        return {
            k: getattr(self, k)
            for k in ("frames", "crc_errors", "dropped_bytes", "seq_gaps", "truncated", "text_bytes", "malformed")
        }

    def feed(self, data: bytes) -> list:
        self._buf += data
        self._scan(final=False)
        return self._take()

    def flush(self) -> list:
        """End of stream: a frame still incomplete counts as truncated, a partial line ends."""
        self._scan(final=True)
        self._end_line()
        return self._take()

    def records(self, items: list) -> list[dict]:
        """feed()/flush() items as records; text lines become {"type": "text", "text": ...}."""
        out = []
        for it in items:
            rec = {"type": "text", "text": it.text} if isinstance(it, TextLine) else decode(it)
            self.malformed += rec["type"] == "malformed"
            out.append(rec)
        return out

    def _take(self) -> list:
        items, self._items = self._items, []
        return items

    def _scan(self, final: bool) -> None:
        buf, pos = self._buf, 0
        while pos < len(buf):
            if buf[pos] != SYNC[0]:
                end = buf.find(SYNC[:1], pos)
                end = len(buf) if end < 0 else end
                self._text(buf[pos:end])
                pos = end
                continue
            n = self._candidate(buf, pos)
            if n > 0:
                self._end_line()  # a frame also ends the text line before it
                self._accept(
                    Frame(buf[pos + 3], buf[pos + 4] | buf[pos + 5] << 8, bytes(buf[pos + HEAD : pos + n - 4]))
                )
                pos += n
                continue
            if n == 0:  # incomplete
                if not final:
                    break
                if len(buf) - pos >= len(SYNC):
                    self.truncated += 1
            self._text(buf[pos : pos + 1])  # give up one byte; it is text or garbage like any other
            pos += 1
        del buf[:pos]

    def _candidate(self, buf: bytearray, pos: int) -> int:
        """Length of the valid frame at pos, 0 if more bytes are needed, -1 if there is none."""
        avail = len(buf) - pos
        if (avail >= 2 and buf[pos + 1] != SYNC[1]) or (avail >= 3 and buf[pos + 2] != VERSION):
            return -1  # checked as soon as the byte is here, so garbage never stalls the scan
        if avail < HEAD:
            return 0
        n = HEAD + (buf[pos + 6] | buf[pos + 7] << 8) + 4
        if n - HEAD - 4 > MAX_PAYLOAD:
            return -1
        if avail < n:
            return 0
        if crc32(buf[pos + 2 : pos + n - 4]) != int.from_bytes(buf[pos + n - 4 : pos + n], "little"):
            self.crc_errors += 1
            return -1
        return n

    def _accept(self, frame: Frame) -> None:
        # A hello with seq 0 is a device (re)start, not a gap.
        if self._next_seq is not None and not (frame.type == LAYOUTS["hello"][0] and frame.seq == 0):
            self.seq_gaps += (frame.seq - self._next_seq) & 0xFFFF
        self._next_seq = (frame.seq + 1) & 0xFFFF
        self.frames += 1
        self._items.append(frame)

    def _text(self, data) -> None:
        """Bytes outside frames: lines end at a newline, or after MAX_TEXT_LINE bytes."""
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            end = len(data) if nl < 0 else nl + 1
            end = min(end, pos + MAX_TEXT_LINE - len(self._line))
            self._line += data[pos:end]
            pos = end
            if self._line.endswith(b"\n") or len(self._line) >= MAX_TEXT_LINE:
                self._end_line()

    def _end_line(self) -> None:
        """Emit the pending line if it is printable UTF-8, else count its bytes as dropped."""
        raw = bytes(self._line)
        self._line.clear()
        if not raw:
            return
        body = raw[:-1] if raw.endswith(b"\n") else raw
        body = body[:-1] if body.endswith(b"\r") else body
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(c.isprintable() or c in "\t\r" for c in text):
            self.text_bytes += len(raw)
            self._items.append(TextLine(text))
        else:
            self.dropped_bytes += len(raw)


# ------------------------------------------------------------------------------ weights


class WeightsAssembler:
    """Collects weights records into whole byte strings per (tensor, part).  A chunk whose
    total differs from the earlier ones starts that (tensor, part) afresh (a later dump)."""

    def __init__(self):
        self._parts: dict[tuple[int, int], tuple[int, dict[int, bytes]]] = {}

    def add(self, rec: dict) -> None:
        key = (rec["tensor"], rec["part"])
        if key not in self._parts or self._parts[key][0] != rec["total"]:
            self._parts[key] = (rec["total"], {})
        self._parts[key][1][rec["offset"]] = bytes(rec["data"])

    def keys(self) -> list[tuple[int, int]]:
        return sorted(self._parts)

    def total(self, tensor: int, part: int) -> int:
        """The size in bytes the chunks of (tensor, part) announce."""
        return self._parts[(tensor, part)][0]

    def missing(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """(tensor, part) -> byte ranges [start, end) not received, for the incomplete ones."""
        out = {}
        for key, (total, chunks) in self._parts.items():
            gaps, pos = [], 0
            for off in sorted(chunks):
                if off > pos:
                    gaps.append((pos, off))
                pos = max(pos, off + len(chunks[off]))
            if pos < total:
                gaps.append((pos, total))
            if gaps:
                out[key] = gaps
        return out

    def get(self, tensor: int, part: int, dtype=np.int8) -> np.ndarray:
        """The assembled array (little-endian `dtype`); ValueError while chunks are missing."""
        gaps = self.missing().get((tensor, part))
        if gaps:
            raise ValueError(f"weights of tensor {tensor} part {part}: missing byte ranges {gaps}")
        total, chunks = self._parts[(tensor, part)]
        buf = bytearray(total)
        for off in sorted(chunks):
            buf[off : off + len(chunks[off])] = chunks[off]
        return np.frombuffer(bytes(buf), dtype=np.dtype(dtype).newbyteorder("<")).copy()
