"""Checkpoints, host side (docs/training.md, "Checkpoint and resume"): the device's checkpoint
chunks (telemetry frame type 11) assembled into an image, checked (header, CRC), kept in a file
(atomically, the latest complete valid one), and cut into restore payloads (command 22).

The image is opaque to the host except for its header (zo_trainer.h, ZO_CKPT_*):

    "ZOCK" | u16 version | u16 state bytes | model_sha256[8] | options_sha256[8] | u32 step |
    u32 body bytes | u32 CRC-32 of the body | body
"""

from __future__ import annotations

import json
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoflash.errors import DataError
from zoflash.spec import wire
from zoflash.training.weights_file import atomic_write

HEADER = struct.Struct("<4sHH8s8sIII")
MAGIC = b"ZOCK"
VERSION = 1  # ZO_CKPT_VERSION
FILE_FORMAT = "zoflash-checkpoint"
# Image bytes per restore command (after offset and total).  The device takes up to
# CMD_MAX_PAYLOAD - 8, but a frame must also fit the receive ring of the Cortex-M ports (512 bytes,
# ZO_CM_RX_BUFFER): 448 makes frames of 468 bytes.  One frame is in flight at a time (each waits
# for its ack).
RESTORE_CHUNK = 448


class CheckpointError(DataError):
    """A checkpoint that is damaged, or belongs to another model, build or format."""


@dataclass(frozen=True)
class Checkpoint:
    image: bytes
    step: int
    model_prefix: str  # 16 hex digits: the first 8 bytes of the model's SHA-256
    options_prefix: str  # 16 hex digits: the build's options and data (manifest training.options_sha256)

    @classmethod
    def from_image(cls, image: bytes, where: str = "the checkpoint") -> Checkpoint:
        """Check the header and the body's CRC; CheckpointError says what is wrong."""
        image = bytes(image)
        if len(image) < HEADER.size:
            raise CheckpointError(f"{where} is {len(image)} bytes, shorter than its header ({HEADER.size})")
        magic, version, _, model, options, step, body, crc = HEADER.unpack_from(image)
        if magic != MAGIC:
            raise CheckpointError(f"{where} is not a zoflash checkpoint (magic {magic!r})")
        if version != VERSION:
            raise CheckpointError(f"{where} has checkpoint format {version}; this zoflash reads {VERSION}")
        if body != len(image) - HEADER.size:
            raise CheckpointError(
                f"{where} is cut short or padded: its header announces {body} body bytes, "
                f"it has {len(image) - HEADER.size}"
            )
        if zlib.crc32(image[HEADER.size :]) != crc:
            raise CheckpointError(f"{where} is damaged (its CRC does not match)")
        return cls(image, step, model.hex(), options.hex())

    def restore_payloads(self) -> list[bytes]:
        """The restore command payloads, in order: u32 offset, u32 total, up to RESTORE_CHUNK bytes."""
        total = len(self.image)
        return [
            wire.COMMAND_STRUCTS["restore"].pack(o, total) + self.image[o : o + RESTORE_CHUNK]
            for o in range(0, total, RESTORE_CHUNK)
        ]

    def check_for(self, model_prefix: str | None, options_sha256: str | None = None) -> None:
        """CheckpointError if it was taken by a run of another model (or, given the bundle's
        training.options_sha256, another build)."""
        if model_prefix is not None and model_prefix != self.model_prefix:
            raise CheckpointError(
                f"the checkpoint was taken by a run of another model (SHA-256 "
                f"{self.model_prefix}...), but the device trains {model_prefix}...: resume only "
                "the run it came from"
            )
        if options_sha256 is not None and not options_sha256.startswith(self.options_prefix):
            raise CheckpointError(
                "the checkpoint was taken by a build with other training options or data "
                f"(options hash {self.options_prefix}, this build's {options_sha256[:16]}): "
                "rebuild with the same options and data to resume it"
            )


class CheckpointAssembler:
    """Checkpoint chunk records into images: a chunk at offset 0 starts a new one; an image is
    complete when its chunks cover it in order.  add() returns the complete, valid Checkpoint,
    or raises CheckpointError for a complete one that fails its checks."""

    def __init__(self):
        self._step: int | None = None
        self._parts: list[bytes] = []
        self._total = self._have = 0

    def add(self, rec: dict) -> Checkpoint | None:
        if rec["offset"] == 0:
            self._step, self._parts, self._total, self._have = rec["step"], [], rec["total"], 0
        if self._step != rec["step"] or rec["offset"] != self._have or rec["total"] != self._total:
            self._step = None  # a chunk was lost: wait for the next checkpoint
            return None
        self._parts.append(bytes(rec["data"]))
        self._have += len(rec["data"])
        if self._have < self._total:
            return None
        self._step = None
        return Checkpoint.from_image(b"".join(self._parts), f"the checkpoint of step {rec['step']}")


def save_checkpoint(path: str | Path, ckpt: Checkpoint) -> Path:
    """An .npz holding `image` (uint8) and `meta` (JSON), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": FILE_FORMAT,
        "version": VERSION,
        "step": ckpt.step,
        "model_sha256_prefix": ckpt.model_prefix,
        "options_sha256_prefix": ckpt.options_prefix,
    }
    arrays = {"image": np.frombuffer(ckpt.image, np.uint8), "meta": np.array(json.dumps(meta))}
    # mypy cannot tell that the keys ("image", "meta") never name savez's allow_pickle
    atomic_write(path, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]
    return path


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check a checkpoint file; CheckpointError (or DataError) naming the file."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            if set(npz.files) != {"image", "meta"}:
                raise CheckpointError(f"'{path}' is not a zoflash checkpoint file (it holds {sorted(npz.files)})")
            image, meta = npz["image"], npz["meta"]
    except FileNotFoundError:
        raise DataError(f"checkpoint '{path}' does not exist") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"cannot read '{path}' as a checkpoint: {exc}") from None
    try:
        info = json.loads(str(meta[()]))
    except ValueError:
        info = None
    if not isinstance(info, dict) or info.get("format") != FILE_FORMAT or image.dtype != np.uint8 or image.ndim != 1:
        raise CheckpointError(f"'{path}' is not a zoflash checkpoint file")
    return Checkpoint.from_image(image.tobytes(), f"'{path}'")
