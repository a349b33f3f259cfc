"""The telemetry wire format (protocol version 2) and its encoder; the decoder is telemetry.py.

Format: docs/training.md, "Telemetry (protocol version 2)"; the firmware encoder is
firmware_templates/runtime/training/zo_telemetry.c with zo_wire.h/.c, rendered from LAYOUTS by
wire_c.py.  `encode`/`Encoder` produce byte-identical frames
(the Python reference trainer uses them, tests/test_telemetry.py checks them against the C).
Imports only the training spec, so that the reference may import it too.

    0xA5 0x5A | version u8 | type u8 | seq u16 | len u16 | payload[len] | crc32 u32
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import numpy as np

from zoflash.spec import training as spec

SYNC = b"\xa5\x5a"
VERSION = 3  # 2: eval frames carry the validation split; 3: the hello carries the headroom bits
HEAD = 8  # sync, version, type, seq, len
MAX_PAYLOAD = 1024
WEIGHTS_CHUNK = 512
COMMANDS = spec.COMMANDS

# Payload layouts in wire order: (frame type, ((field, struct code), ...)).  Field names are the
# C struct fields: zo_wire.h/.c are generated from this table (wire_c.py).
LAYOUTS: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = {
    "hello": (
        1,
        (
            ("seed", "I"),
            ("batch", "H"),
            ("classes", "H"),
            ("n_train", "I"),
            ("n_test", "I"),
            ("trainable_params", "I"),
            ("scheduler", "B"),
            ("rounding", "B"),
            ("density_log2", "B"),
            ("lr_auto", "B"),
            ("lr", "f"),
            ("max_steps", "I"),
            ("budget", "Q"),
            ("q_max", "H"),
            ("n_tensors", "H"),
            ("model_sha256", "8s"),
            ("loss_kind", "B"),
            ("headroom", "B"),
        ),
    ),
    "step": (
        2,
        (
            ("step", "I"),
            ("q", "H"),
            ("state", "B"),
            ("flags", "B"),
            ("lr", "f"),
            ("loss", "f"),
            ("m2", "f"),
            ("v", "f"),
            ("zero_frac", "f"),
            ("sat_frac", "f"),
            ("prefix_passes", "Q"),
            ("suffix_passes", "Q"),
            ("time_us", "Q"),
        ),
    ),
    "eval": (
        3,
        (
            ("step", "I"),
            ("correct", "I"),
            ("count", "I"),
            ("accuracy", "f"),
            ("loss", "f"),
            ("prefix_passes", "Q"),
            ("suffix_passes", "Q"),
            ("eval_passes", "Q"),
            ("time_us", "Q"),
            ("val_correct", "I"),
            ("val_count", "I"),
            ("val_accuracy", "f"),
            ("val_loss", "f"),
        ),
    ),
    "event": (
        4,
        (
            ("step", "I"),
            ("kind", "B"),
            ("code", "B"),
            ("state_from", "B"),
            ("state_to", "B"),
            ("q_from", "H"),
            ("q_to", "H"),
            ("value", "f"),
            ("aux", "I"),
        ),
    ),
    "done": (5, (("steps", "I"), ("reason", "B"), ("prefix_passes", "Q"), ("suffix_passes", "Q"), ("time_us", "Q"))),
    "weights": (6, (("tensor", "I"), ("part", "B"), ("offset", "I"), ("total", "I"))),  # + data
    "log": (7, ()),  # + UTF-8 text
    "status": (
        8,
        (
            ("step", "I"),
            ("q", "H"),
            ("state", "B"),
            ("paused", "B"),
            ("calibrating", "B"),
            ("lr", "f"),
            ("prefix_passes", "Q"),
            ("suffix_passes", "Q"),
            ("eval_passes", "Q"),
            ("time_us", "Q"),
            ("model_sha256", "8s"),
            ("headroom", "B"),
        ),
    ),
    "ack": (9, (("step", "I"), ("command_seq", "H"), ("command", "B"), ("result", "B"))),
    # ---- data sources: --data-source stream (zo_stream.h) ----
    "need": (10, (("cursor", "I"), ("offset", "I"), ("count", "I"), ("total", "I"), ("window", "H"))),
    # ---- end data sources ----
    # --- checkpoint and resume: a chunk of a checkpoint image (+ data)
    "checkpoint": (11, (("step", "I"), ("offset", "I"), ("total", "I"))),
    # --- boundary checksum: the first test sample's boundary activations, once after hello
    "boundary": (12, (("crc32", "I"), ("expected_crc32", "I"), ("bytes", "I"), ("boundary_flags", "B"))),
    # --- update log: the applied updates of `steps` steps from `step` on (+ per step a header byte,
    # a u8 q when it changed, q binary16 coefficients, raw or packed; UPDATE_* below), for `zoflash replay`
    "updates": (13, (("step", "I"), ("steps", "H"), ("eps", "B"))),
    # --- continual adaptation (--mode continual): one decision or serving window (CONTINUAL_DECISIONS)
    "continual": (
        14,
        (
            ("sample", "I"),
            ("decision", "B"),
            ("slot", "B"),
            ("generation", "H"),
            ("episode", "H"),
            ("steps", "I"),
            ("better", "H"),
            ("worse", "H"),
            ("correct", "I"),
            ("count", "I"),
            ("statistic", "f"),
            ("train_passes", "Q"),
            ("serve_passes", "Q"),
        ),
    ),
    # --- trained-tensors checksum: CRC-32 of the trainable tensors' values (TENSORS_CRC_ORDER), sent
    # before done and in answer to the last chunk of a push, a merge or a round; `pushed`: the steps a
    # push applied (0: none); --mode fleet: MERGED_CRC | the updates a merge applied, or ROUND_CRC
    "crc": (15, (("step", "I"), ("crc32", "I"), ("bytes", "I"), ("pushed", "I"))),  # order: below
}
# The bytes the crc frame's CRC-32 covers, in this order: every trainable tensor in training order
# (the plan's; the hello's n_tensors of them), its values only: int8 weights, little-endian int32
# biases (zo_tensors_crc in zo_push.c; tensors_crc below).
# --- continual adaptation: the continual frame's `decision` (ZO_CL_EV_* in zo_continual.h), in id order.
# window: serving accuracy of the deployed weights (correct/count) over the last window of labelled
# samples; suspected: the drift detector alarmed (statistic: its Page-Hinkley statistic, loss units);
# episode: an adaptation episode starts; accepted/rejected: the paired test's verdict on the candidate
# (better/worse: the discordant held-back pairs); rollback: the boot found an interrupted promotion and
# serves the deployed slot; boot: the deployed slot loaded at start (generation).
CONTINUAL_DECISIONS = ("window", "suspected", "episode", "accepted", "rejected", "rollback", "boot")
# Command payloads (host -> device) that begin with fixed fields, a data tail after them: the fields
# in wire order, declared once (the device's readers are generated into zo_wire.h/.c).
COMMAND_LAYOUTS: dict[str, tuple[tuple[str, str], ...]] = {
    "sample": (("index", "I"), ("label", "H"), ("offset", "I"), ("total", "I")),  # + bytes of one sample record
    "restore": (("offset", "I"), ("total", "I")),  # + bytes of a checkpoint image
    # --- push: `steps` update-log entries from `step` on (the updates frame's tail format), with the
    # options the directions follow from (the device refuses a chunk whose options are not its own);
    # `last` 1: the push ends with this chunk, the device answers with a crc frame before its ack
    "push": (
        ("step", "I"),
        ("steps", "H"),
        ("eps", "B"),
        ("rounding", "B"),
        ("density_log2", "B"),
        ("last", "B"),
        ("seed", "I"),
        ("trainable_params", "I"),
    ),
    # --- fleet learning (--mode fleet, docs/guides/fleet.md): `round` trains `steps` local steps from
    # the global weights with the directions of `seed`, then holds; `merge` applies a chunk of the
    # round's merged log: `steps` entries (the updates frame's tail format) of the device whose
    # directions follow `seed`, from `step` on.  Chunk 0 first restores the round's global weights;
    # the `last` chunk makes the result the new global weights and is answered with a crc frame.
    "round": (("round", "I"), ("seed", "I"), ("steps", "I")),
    "merge": (("round", "I"), ("seed", "I"), ("step", "I"), ("steps", "H"), ("chunk", "H"), ("last", "B")),
    # --- end fleet learning
}
MERGED_CRC = 0x80000000  # crc frame `pushed`: the answer to a merge's last chunk (the low bits: steps applied)
ROUND_CRC = 0x40000000  # crc frame `pushed`: the answer to a round command (the weights the round trains from)
PUSH_WINDOW = 512  # bytes of one push command frame, at most: the Cortex-M ports' receive ring (zo_port_rx_window)
# --- update log: the per-step header byte of an updates frame's tail (docs/training.md "Update log")
UPDATE_APPLIED = 0x01  # q binary16 coefficients follow (after the q byte, if any) and were applied
UPDATE_Q = 0x02  # a u8 q follows: this applied step's q differs from the frame's last applied step's
UPDATE_RESTORE = 0x04  # after the update the trainable state went back to the snapshot (a rollback)
UPDATE_SNAPSHOT = 0x08  # then the snapshot was taken (the best state by validation)
UPDATE_TRIAL = 0x10  # a step of the lr trial: trained a candidate from the snapshot, then undone
# --mode continual: after RESTORE (before SNAPSHOT) the trainable state went back to the model's built-in
# weights, residuals zero (a candidate starting from them, or a rollback to them: with SNAPSHOT)
UPDATE_FACTORY = 0x20
# The step's coefficients are bit-packed (pack_coefficients) instead of q raw binary16: set when that
# is shorter (most steps at q >= 8 on real runs; q = 1 and 2 always raw, q = 4 nearly always)
UPDATE_PACKED = 0x40
UPDATE_RICE_K = 1  # the packed exponent offset's Rice parameter: its low bits after the unary part
UPDATES_CHUNK = 256  # tail bytes of one updates frame, at most (the device's buffer)
# --- end update log
COMMAND_STRUCTS = {k: struct.Struct("<" + "".join(c for _, c in lay)) for k, lay in COMMAND_LAYOUTS.items()}
CMD_MAX_PAYLOAD = 1024  # ZO_CMD_MAX_PAYLOAD: the device's command parser takes no longer frame
STRUCTS = {k: struct.Struct("<" + "".join(c for _, c in lay)) for k, (_, lay) in LAYOUTS.items()}
TYPE_NAMES = {tid: name for name, (tid, _) in LAYOUTS.items()}


class Frame(NamedTuple):
    type: int
    seq: int
    payload: bytes

    def to_bytes(self) -> bytes:
        head = struct.pack("<2sBBHH", SYNC, VERSION, self.type, self.seq & 0xFFFF, len(self.payload))
        return head + self.payload + struct.pack("<I", crc32(head[2:] + self.payload))


def crc32(data: bytes | bytearray) -> int:
    """The frame CRC (zlib's CRC-32, as zo_tm_crc32) over version..payload."""
    return zlib.crc32(data)


def _f32(x) -> float:
    """Round to float32 first, as the C struct field would hold it."""
    return float(np.float32(x))


def encode(kind: str, fields: dict, seq: int = 0) -> bytes:
    """One frame.  `fields` holds the C struct fields (raw ids and flags, time_us); weights
    also take `data` (bytes), log takes `text` (str, truncated to MAX_PAYLOAD UTF-8 bytes)."""
    tid, layout = LAYOUTS[kind]
    payload = STRUCTS[kind].pack(*(_f32(fields[n]) if c == "f" else fields[n] for n, c in layout))
    if kind in ("weights", "checkpoint", "updates"):
        payload += bytes(fields["data"])
    elif kind == "log":
        payload += fields["text"].encode("utf-8")[:MAX_PAYLOAD]
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{kind} payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return Frame(tid, seq, payload).to_bytes()


def encode_command(name: str, seq: int, payload: bytes = b"") -> bytes:
    """A host -> device command frame; `seq` comes back in the device's ack."""
    if name not in COMMANDS:
        raise ValueError(f"unknown command '{name}' (known: {', '.join(COMMANDS)})")
    if len(payload) > CMD_MAX_PAYLOAD:
        raise ValueError(f"command payload of {len(payload)} bytes exceeds {CMD_MAX_PAYLOAD}")
    return Frame(COMMANDS[name], seq, bytes(payload)).to_bytes()


class Encoder:
    """A frame stream with its sequence counter, mirroring zo_tm_* (same calls, same bytes)."""

    def __init__(self, seq: int = 0):
        self.seq = seq & 0xFFFF

    def frame(self, kind: str, fields: dict) -> bytes:
        out = encode(kind, fields, self.seq)
        self.seq = (self.seq + 1) & 0xFFFF
        return out

    def weights(self, tensor: int, part: int, data: bytes) -> bytes:
        """Chunks of at most WEIGHTS_CHUNK bytes in offset order; empty data still sends one."""
        data = bytes(data)
        offsets = range(0, max(len(data), 1), WEIGHTS_CHUNK)
        return b"".join(
            self.frame(
                "weights",
                {"tensor": tensor, "part": part, "offset": o, "total": len(data), "data": data[o : o + WEIGHTS_CHUNK]},
            )
            for o in offsets
        )


# --- update log: one entry's coding, the packer (the reference trainer, mirroring zo_tm_updates_*
# in zo_telemetry.c) and the parser (zoflash replay)


def _exponent(h: int) -> int:
    return (h >> 10) & 31


def pack_coefficients(c16) -> bytes:
    """One step's binary16 coefficients, packed losslessly (docs/training.md "Update log").  Bits
    from each byte's least significant bit on, fields least significant bit first: E, the step's
    largest 5-bit exponent field; then per coefficient its sign bit, its 10 mantissa bits and
    d = E - its exponent field as a Rice code (d >> UPDATE_RICE_K one bits, a zero bit, then d's
    UPDATE_RICE_K low bits); zero bits up to a whole byte."""
    k = UPDATE_RICE_K
    base = max(_exponent(h) for h in c16)
    acc, bits = base, 5
    for h in c16:
        d = base - _exponent(h)
        u = d >> k
        code = (h >> 15) | ((h & 0x3FF) << 1) | (((1 << u) - 1) << 11) | ((d & ((1 << k) - 1)) << (12 + u))
        acc |= code << bits
        bits += 12 + u + k
    return acc.to_bytes((bits + 7) // 8, "little")


def encode_entry(flags: int, c16, q: int) -> bytes:
    """One step's entry after a step whose q was `q` (0: the frame's first applied step): the
    header byte (its Q and PACKED bits set here), q when it changed, the coefficients (applied
    steps only), packed when that is shorter than 2q raw bytes."""
    flags &= ~(UPDATE_Q | UPDATE_PACKED)
    c16 = [int(h) for h in c16] if flags & UPDATE_APPLIED else []
    if not c16:
        return bytes([flags])
    body = pack_coefficients(c16)
    if len(body) < 2 * len(c16):
        flags |= UPDATE_PACKED
    else:
        body = struct.pack(f"<{len(c16)}H", *c16)
    return (bytes([flags | UPDATE_Q, len(c16)]) if len(c16) != q else bytes([flags])) + body


class UpdateLog:
    """Buffers the per-step entries of updates frames.  `step` returns the frame to send before
    the entry when the entry does not fit the buffer (b"" otherwise); `mark` ORs RESTORE or
    SNAPSHOT into the last entry; `flush` sends what is buffered (b"" when nothing is)."""

    def __init__(self, encoder: Encoder, eps: int):
        self.encoder, self.eps = encoder, eps
        self.first, self.steps, self.data, self.last = 0, 0, bytearray(), -1
        self.q = 0  # q of the frame's last applied step (0: none yet)

    def step(self, step: int, flags: int, coefficients=()) -> bytes:
        entry = encode_entry(flags, coefficients, self.q)
        jump = self.steps and step != self.first + self.steps  # a frame holds consecutive steps only
        out = b""
        if len(self.data) + len(entry) > UPDATES_CHUNK or jump:
            out = self.flush()
            entry = encode_entry(flags, coefficients, 0)  # every frame states its first q
        if not self.steps:
            self.first = step
        self.last = len(self.data)
        self.data += entry
        if flags & UPDATE_APPLIED:
            self.q = len(coefficients)
        self.steps += 1
        return out

    def mark(self, flag: int) -> bool:
        """Flags the last step held; False (nothing marked) when the log holds none."""
        if not self.steps:
            return False
        self.data[self.last] |= flag
        return True

    def flush(self) -> bytes:
        if not self.steps:
            return b""
        out = self.encoder.frame(
            "updates", {"step": self.first, "steps": self.steps, "eps": self.eps, "data": self.data}
        )
        self.steps, self.data, self.q = 0, bytearray(), 0
        return out


class UpdateEntry(NamedTuple):
    step: int
    flags: int
    coefficients: tuple[int, ...]  # binary16 bits, q of them (empty when not applied)


def unpack_coefficients(data: bytes, pos: int, q: int) -> tuple[tuple[int, ...], int]:
    """The q coefficients packed at data[pos:] (pack_coefficients) and the position after them;
    ValueError when they are cut short, an offset goes below exponent 0 or the padding is not zero."""
    k = UPDATE_RICE_K
    avail = (len(data) - pos) * 8
    if avail < 5:
        raise ValueError("cut short")
    acc = int.from_bytes(data[pos : pos + (5 + q * (12 + 15 + k) + 7) // 8], "little")
    bits = 5
    base = acc & 31
    out = []
    for _ in range(q):
        if bits + 11 > avail:
            raise ValueError("cut short")
        sign, mantissa = (acc >> bits) & 1, (acc >> (bits + 1)) & 0x3FF
        bits += 11
        u = 0
        while bits < avail and (acc >> bits) & 1 and u < 16:
            u, bits = u + 1, bits + 1
        if u > 31 >> k:
            raise ValueError("an exponent offset beyond 31")
        if bits + 1 + k > avail:
            raise ValueError("cut short")
        d = (u << k) | ((acc >> (bits + 1)) & ((1 << k) - 1))
        bits += 1 + k
        if d > base:
            raise ValueError("an exponent below 0")
        out.append((sign << 15) | ((base - d) << 10) | mantissa)
    end = (bits + 7) // 8
    if acc >> bits & ((1 << (end * 8 - bits)) - 1):
        raise ValueError("padding bits not zero")
    return tuple(out), pos + end


def parse_updates(step: int, steps: int, data: bytes) -> list[UpdateEntry]:
    """The entries of one updates frame's tail; ValueError when it does not hold `steps` whole ones."""
    out, pos, q = [], 0, 0
    for k in range(steps):
        if pos >= len(data):
            raise ValueError(f"updates frame of step {step}: {steps} steps announced, {k} present")
        flags = data[pos]
        pos += 1
        if flags & UPDATE_Q:
            if pos >= len(data) or data[pos] == 0:
                raise ValueError(f"updates frame of step {step}: step {step + k} has no valid q")
            q = data[pos]
            pos += 1
        n = q if flags & UPDATE_APPLIED else 0
        if flags & UPDATE_APPLIED and q == 0:
            raise ValueError(f"updates frame of step {step}: step {step + k} is applied but its q is unknown")
        if flags & UPDATE_PACKED and n:
            try:
                c16, pos = unpack_coefficients(data, pos, n)
            except ValueError as e:
                raise ValueError(f"updates frame of step {step}: step {step + k}'s packed coefficients: {e}") from None
        else:
            if pos + 2 * n > len(data):
                raise ValueError(f"updates frame of step {step}: step {step + k} is cut short")
            c16 = struct.unpack_from(f"<{n}H", data, pos)
            pos += 2 * n
        out.append(UpdateEntry(step + k, flags, c16))
    if pos != len(data):
        raise ValueError(f"updates frame of step {step}: {len(data) - pos} bytes after its {steps} steps")
    return out


def tensors_crc(tensors) -> tuple[int, int]:
    """The crc frame's CRC-32 and byte count: `tensors` yields (values, dtype) in training order, each
    tensor's values as its type's little-endian bytes (int8 weights, int32 or int64 biases)."""
    crc, size = 0, 0
    for values, dtype in tensors:
        data = np.asarray(values).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
        crc, size = zlib.crc32(data, crc), size + len(data)
    return crc, size
