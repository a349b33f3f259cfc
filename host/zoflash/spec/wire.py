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
# is shorter (75-99% of the steps at q = 2-8 on real runs; q = 1 never)
UPDATE_PACKED = 0x40
UPDATE_RICE_K = 0  # the packed exponent offset's Rice parameter: its low bits after the unary part (none)
UPDATES_CHUNK = 256  # tail bytes of one updates frame, at most (the device's buffer; the entries: one bit stream)
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


# --- update log: an updates frame's tail is one bit stream of entries (docs/training.md "Update
# log"); the builder (the reference trainer, push chunks and fleet sections, mirroring zo_tm_updates_*
# in zo_telemetry.c) and the parser (zoflash replay, the fleet's aggregator)


class Bits(NamedTuple):
    """A bit string: the n low bits of value, the first one least significant."""

    value: int
    n: int

    def then(self, other: Bits) -> Bits:
        return Bits(self.value | other.value << self.n, self.n + other.n)


def _exponent(h: int) -> int:
    return (h >> 10) & 31


def pack_coefficients(c16) -> Bits:
    """One step's binary16 coefficients, packed losslessly: E, the step's largest 5-bit exponent
    field; then per coefficient its sign bit, its 10 mantissa bits and d = E - its exponent field
    as a Rice code (d >> UPDATE_RICE_K one bits, a zero bit, then d's UPDATE_RICE_K low bits)."""
    k = UPDATE_RICE_K
    base = max(_exponent(h) for h in c16)
    out = Bits(base, 5)
    for h in c16:
        d = base - _exponent(h)
        u = d >> k
        out = out.then(
            Bits(
                (h >> 15) | ((h & 0x3FF) << 1) | (((1 << u) - 1) << 11) | ((d & ((1 << k) - 1)) << (12 + u)), 12 + u + k
            )
        )
    return out


def encode_entry(flags: int, c16, q: int) -> Bits:
    """One step's entry after a step whose q was `q` (0: the tail's first applied step): the header
    byte (its Q and PACKED bits set here), q when it changed, the coefficients (applied steps only),
    packed when that is shorter than 16q raw bits."""
    flags &= ~(UPDATE_Q | UPDATE_PACKED)
    c16 = [int(h) for h in c16] if flags & UPDATE_APPLIED else []
    if not c16:
        return Bits(flags, 8)
    body = pack_coefficients(c16)
    if body.n < 16 * len(c16):
        flags |= UPDATE_PACKED
    else:
        body = Bits(int.from_bytes(struct.pack(f"<{len(c16)}H", *c16), "little"), 16 * len(c16))
    head = Bits(flags | UPDATE_Q | len(c16) << 8, 16) if len(c16) != q else Bits(flags, 8)
    return head.then(body)


class Tail:
    """An updates frame's tail as it is built: the entries of consecutive steps, one bit stream
    (zero bits up to a whole byte at its end); the first applied entry states its q."""

    def __init__(self):
        self.stream, self.first, self.steps, self.last = Bits(0, 0), 0, 0, 0
        self.q = 0  # q of the last applied entry (0: none yet)

    def entry(self, flags: int, c16) -> Bits:
        return encode_entry(flags, c16, self.q)

    def size_with(self, entry: Bits) -> int:
        """Bytes of the tail with `entry` added."""
        return (self.stream.n + entry.n + 7) // 8

    def add(self, step: int, entry: Bits) -> None:
        """Appends `entry` (from self.entry) as step `step`."""
        if not self.steps:
            self.first = step
        self.last, self.stream = self.stream.n, self.stream.then(entry)
        if entry.value & UPDATE_APPLIED:
            self.q = entry.value >> 8 & 0xFF if entry.value & UPDATE_Q else self.q
        self.steps += 1

    def mark(self, flag: int) -> None:
        self.stream = self.stream._replace(value=self.stream.value | flag << self.last)

    def data(self) -> bytes:
        return self.stream.value.to_bytes((self.stream.n + 7) // 8, "little")


class UpdateLog:
    """Buffers the per-step entries of updates frames.  `step` returns the frame to send before
    the entry when the entry does not fit the buffer (b"" otherwise); `mark` ORs RESTORE or
    SNAPSHOT into the last entry; `flush` sends what is buffered (b"" when nothing is)."""

    def __init__(self, encoder: Encoder, eps: int):
        self.encoder, self.eps, self.tail = encoder, eps, Tail()

    def step(self, step: int, flags: int, coefficients=()) -> bytes:
        entry = self.tail.entry(flags, coefficients)
        jump = self.tail.steps and step != self.tail.first + self.tail.steps  # a frame holds consecutive steps only
        out = b""
        if self.tail.size_with(entry) > UPDATES_CHUNK or jump:
            out = self.flush()
            entry = self.tail.entry(flags, coefficients)  # every frame states its first q
        self.tail.add(step, entry)
        return out

    def mark(self, flag: int) -> bool:
        """Flags the last step held; False (nothing marked) when the log holds none."""
        if not self.tail.steps:
            return False
        self.tail.mark(flag)
        return True

    def flush(self) -> bytes:
        t = self.tail
        if not t.steps:
            return b""
        self.tail = Tail()
        return self.encoder.frame("updates", {"step": t.first, "steps": t.steps, "eps": self.eps, "data": t.data()})


class UpdateEntry(NamedTuple):
    step: int
    flags: int
    coefficients: tuple[int, ...]  # binary16 bits, q of them (empty when not applied)


class _Reader:
    """Bits of a tail from bit `pos` on; ValueError("cut short") past its end."""

    def __init__(self, data: bytes):
        self.value, self.avail, self.pos = int.from_bytes(data, "little"), 8 * len(data), 0

    def take(self, n: int) -> int:
        if self.pos + n > self.avail:
            raise ValueError("cut short")
        self.pos += n
        return self.value >> (self.pos - n) & ((1 << n) - 1)


def _unpack_coefficients(r: _Reader, q: int) -> tuple[int, ...]:
    """The q packed coefficients at r (pack_coefficients); ValueError when they are cut short or an
    offset goes beyond 31 or below exponent 0."""
    k = UPDATE_RICE_K
    base = r.take(5)
    out = []
    for _ in range(q):
        sign_mantissa, u = r.take(11), 0
        while r.take(1):
            u += 1
            if u > 31 >> k:
                raise ValueError("an exponent offset beyond 31")
        d = (u << k) | r.take(k)
        if d > base:
            raise ValueError("an exponent below 0")
        out.append((sign_mantissa & 1) << 15 | (base - d) << 10 | sign_mantissa >> 1)
    return tuple(out)


def parse_updates(step: int, steps: int, data: bytes) -> list[UpdateEntry]:
    """The entries of one updates frame's tail; ValueError when it does not hold `steps` whole ones."""
    out, r, q = [], _Reader(data), 0
    for k in range(steps):
        at = f"updates frame of step {step}: step {step + k}"
        if r.avail - r.pos < 8:
            raise ValueError(f"updates frame of step {step}: {steps} steps announced, {k} present")
        try:
            flags = r.take(8)
            if flags & UPDATE_Q:
                q = r.take(8)
                if q == 0:
                    raise ValueError("q 0")
        except ValueError:
            raise ValueError(f"{at} has no valid q") from None
        n = q if flags & UPDATE_APPLIED else 0
        if flags & UPDATE_APPLIED and q == 0:
            raise ValueError(f"{at} is applied but its q is unknown")
        try:
            c16 = _unpack_coefficients(r, n) if flags & UPDATE_PACKED and n else tuple(r.take(16) for _ in range(n))
        except ValueError as e:
            raise ValueError(f"{at} is cut short" if str(e) == "cut short" else f"{at}'s coefficients: {e}") from None
        out.append(UpdateEntry(step + k, flags, c16))
    if r.avail - r.pos >= 8:
        raise ValueError(f"updates frame of step {step}: {(r.avail - r.pos) // 8} bytes after its {steps} steps")
    if r.value >> r.pos:
        raise ValueError(f"updates frame of step {step}: padding bits after its {steps} steps not zero")
    return out


def tensors_crc(tensors) -> tuple[int, int]:
    """The crc frame's CRC-32 and byte count: `tensors` yields (values, dtype) in training order, each
    tensor's values as its type's little-endian bytes (int8 weights, int32 or int64 biases)."""
    crc, size = 0, 0
    for values, dtype in tensors:
        data = np.asarray(values).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
        crc, size = zlib.crc32(data, crc), size + len(data)
    return crc, size
