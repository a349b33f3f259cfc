"""Fleet learning's messages (docs/guides/fleet.md): what a device uploads after a round, and the
round's merged log every replica applies.  Both are CRC-framed binary, declared once here; the
aggregator and the gateways exchange them through an MQTT broker (topics below).

An upload carries the device's effective updates of the round: the update-log entries (the updates
frame's tail format, wire.parse_updates) that are in its weights at the round's end, every step
after its last rollback, so no rollback or snapshot mark travels.  A merged round carries, per
device that reported, its updates with the coefficients scaled by the merge rate; a replica
applies them in order, each with the directions of its device's seed, starting from the round's
global weights."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from zoflash.spec import wire

UPLOAD_MAGIC = b"ZOFU"
MERGED_MAGIC = b"ZOFM"
VERSION = 1
# upload: magic, version, device id bytes, round, model SHA-256 prefix (8 bytes), the CRC of the
# global weights the round started from, the directions' seed, first step, steps; then the device
# id, the entries, and a CRC-32 of everything before it
UPLOAD_HEAD = struct.Struct("<4sBBI8sIIIH")
# merged round: magic, version, round, model prefix, the global weights' CRC before and after, the
# merge rate (float32), sections; then per section (SECTION_HEAD + entries); then a CRC-32
MERGED_HEAD = struct.Struct("<4sBI8sIIfH")
SECTION_HEAD = struct.Struct("<IIHH")  # seed, first step, steps, entry bytes
CRC = struct.Struct("<I")
ALLOWED_FLAGS = wire.UPDATE_APPLIED | wire.UPDATE_Q | wire.UPDATE_PACKED  # marks an upload may carry
MAX_DEVICE_ID = 64  # bytes of a device id, at most


class FleetMessageError(ValueError):
    """A message that does not decode: damaged, truncated, or of another format."""


def _checked(data: bytes, magic: bytes, what: str) -> bytes:
    if len(data) < 4 + CRC.size or data[:4] != magic:
        raise FleetMessageError(f"not a fleet {what} (magic {data[:4]!r})")
    body, (crc,) = data[: -CRC.size], CRC.unpack(data[-CRC.size :])
    if zlib.crc32(body) != crc:
        raise FleetMessageError(f"a fleet {what} whose CRC does not match (damaged in transit)")
    if body[4] != VERSION:
        raise FleetMessageError(f"a fleet {what} of format {body[4]}; this zoflash reads {VERSION}")
    return body


def _sealed(body: bytes) -> bytes:
    return body + CRC.pack(zlib.crc32(body))


def entries_checked(first: int, steps: int, data: bytes) -> list[wire.UpdateEntry]:
    """The entries of an upload or a section; FleetMessageError when they do not decode or carry a
    mark besides the update itself."""
    try:
        entries = wire.parse_updates(first, steps, data)
    except ValueError as exc:
        raise FleetMessageError(f"entries that do not decode ({exc})") from None
    if any(e.flags & ~ALLOWED_FLAGS for e in entries):
        raise FleetMessageError("entries with rollback or snapshot marks: an upload carries effective updates only")
    return [e._replace(flags=e.flags & wire.UPDATE_APPLIED) for e in entries]  # Q and PACKED: the encoding's


def encode_entries(entries: list[wire.UpdateEntry]) -> bytes:
    """Entries in the updates frame's tail format (the first applied one states its q)."""
    tail = wire.Tail()
    for e in entries:
        tail.add(e.step, tail.entry(e.flags, e.coefficients))
    return tail.data()


@dataclass(frozen=True)
class Upload:
    device: str
    round: int
    model_prefix: bytes  # the first 8 bytes of the model's SHA-256
    base_crc: int  # the global weights the round started from (wire.tensors_crc)
    seed: int  # the directions' seed of the device's round
    first: int  # the step of the first entry
    entries: tuple[wire.UpdateEntry, ...]

    def encode(self) -> bytes:
        name = self.device.encode()
        head = UPLOAD_HEAD.pack(
            UPLOAD_MAGIC,
            VERSION,
            len(name),
            self.round,
            self.model_prefix,
            self.base_crc,
            self.seed,
            self.first,
            len(self.entries),
        )
        return _sealed(head + name + encode_entries(list(self.entries)))

    @classmethod
    def decode(cls, data: bytes) -> Upload:
        body = _checked(bytes(data), UPLOAD_MAGIC, "upload")
        if len(body) < UPLOAD_HEAD.size:
            raise FleetMessageError("a fleet upload shorter than its header")
        _, _, n_name, rnd, model, base, seed, first, steps = UPLOAD_HEAD.unpack_from(body)
        name_end = UPLOAD_HEAD.size + n_name
        if n_name == 0 or n_name > MAX_DEVICE_ID or len(body) < name_end:
            raise FleetMessageError("a fleet upload without a valid device id")
        try:
            device = body[UPLOAD_HEAD.size : name_end].decode()
        except UnicodeDecodeError:
            raise FleetMessageError("a fleet upload whose device id is not UTF-8") from None
        entries = entries_checked(first, steps, body[name_end:])
        return cls(device, rnd, model, base, seed, first, tuple(entries))

    @property
    def updates(self) -> int:
        return sum(1 for e in self.entries if e.flags & wire.UPDATE_APPLIED)


@dataclass(frozen=True)
class Section:
    """One device's updates in a merged round."""

    device: str  # not on the wire: the aggregator's bookkeeping (the seed identifies the directions)
    seed: int
    first: int
    entries: tuple[wire.UpdateEntry, ...]


@dataclass(frozen=True)
class MergedRound:
    round: int
    model_prefix: bytes
    base_crc: int  # the global weights the round started from
    crc: int  # the global weights after it: every replica must end here
    rate: float  # the coefficients were scaled by this
    sections: tuple[Section, ...]

    def encode(self) -> bytes:
        out = bytearray(
            MERGED_HEAD.pack(
                MERGED_MAGIC,
                VERSION,
                self.round,
                self.model_prefix,
                self.base_crc,
                self.crc,
                self.rate,
                len(self.sections),
            )
        )
        for s in self.sections:
            data = encode_entries(list(s.entries))
            out += SECTION_HEAD.pack(s.seed, s.first, len(s.entries), len(data)) + data
        return _sealed(bytes(out))

    @classmethod
    def decode(cls, data: bytes) -> MergedRound:
        body = _checked(bytes(data), MERGED_MAGIC, "merged round")
        if len(body) < MERGED_HEAD.size:
            raise FleetMessageError("a fleet merged round shorter than its header")
        _, _, rnd, model, base, crc, rate, n = MERGED_HEAD.unpack_from(body)
        pos, sections = MERGED_HEAD.size, []
        for k in range(n):
            if pos + SECTION_HEAD.size > len(body):
                raise FleetMessageError(f"a fleet merged round cut short in section {k}")
            seed, first, steps, size = SECTION_HEAD.unpack_from(body, pos)
            pos += SECTION_HEAD.size
            if pos + size > len(body):
                raise FleetMessageError(f"a fleet merged round cut short in section {k}")
            sections.append(Section(f"#{k}", seed, first, tuple(entries_checked(first, steps, body[pos : pos + size]))))
            pos += size
        if pos != len(body):
            raise FleetMessageError("a fleet merged round with bytes after its last section")
        return cls(rnd, model, base, crc, rate, tuple(sections))


def topic(fleet: str, *parts: str) -> str:
    """The MQTT topic of a fleet's messages: zoflash/fleet/<fleet>/<parts...>.  round (retained):
    the round in progress, JSON; merged/<round> (retained): a MergedRound; up/<device>: an Upload;
    status/<device>: the device's row of the farm view, JSON; end (retained): the fleet finished."""
    return "/".join(("zoflash", "fleet", fleet) + parts)
