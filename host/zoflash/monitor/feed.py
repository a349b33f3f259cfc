"""--data-source stream, the host side: answer the device's `need` frames with `sample` command
frames (docs/training.md "Data sources"; the device side is firmware_templates/runtime/training/
zo_stream.c).

Stream sample k is sample k % n of the training split, in the file's order (epoch after epoch),
quantized to the model's input as the embedded data is.  Each need gets exactly one frame: the
next chunk of the sample at the device's cursor, no larger than the device's receive window, so
the host never has more in flight than the device can buffer.  A need repeated after a timeout
(the answer was lost or damaged) is answered again with the same chunk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zoflash.compiler.tflite_import import load_tflite
from zoflash.errors import DataError
from zoflash.spec import wire as protocol
from zoflash.training.options import make_options
from zoflash.training.pipeline import compile_training

_HEAD = protocol.COMMAND_STRUCTS["sample"]  # index, label, offset, total; then the sample bytes
FRAME_OVERHEAD = protocol.HEAD + 4  # header and CRC around a payload


class Feeder:
    """Sample records (bytes) and their labels; `answer(need)` -> the frame to send."""

    def __init__(self, records: list[bytes], labels: list[int], source: str = "the feed"):
        if not records:
            raise DataError(f"{source} has no training samples to feed")
        self.records, self.labels, self.source = records, labels, source
        self.seq = 0
        self.frames_sent = 0

    @classmethod
    def from_dataset(cls, data) -> Feeder:
        """The training split of a training.dataset.Dataset: the input's bytes, then the mse
        targets as little-endian float32 (when the data has them)."""
        n = len(data.y_train)
        x = np.ascontiguousarray(data.x_train).reshape(n, -1)
        t = None if data.t_train is None else np.ascontiguousarray(data.t_train, dtype="<f4").reshape(n, -1)
        records = [x[k].tobytes() + (t[k].tobytes() if t is not None else b"") for k in range(n)]
        labels = [int(v) for v in data.y_train] if data.labels else [0] * n
        return cls(records, labels, data.source)

    def chunk_bytes(self, window: int) -> int:
        """Data bytes per frame: a whole frame fits the device's window and the payload bound."""
        n = min(protocol.MAX_PAYLOAD, window - FRAME_OVERHEAD) - _HEAD.size
        if n < 1:
            raise DataError(f"the device's receive window of {window} bytes cannot hold a sample frame")
        return n

    def answer(self, need: dict) -> bytes:
        k = need["cursor"]
        record = self.records[k % len(self.records)]
        if need["total"] != len(record):
            raise DataError(
                f"the device expects samples of {need['total']} bytes but {self.source} has "
                f"{len(record)}-byte samples (quantized for this model): is it the firmware's model "
                "and data?"
            )
        offset = need["offset"]
        data = record[offset : offset + self.chunk_bytes(need["window"])]
        payload = _HEAD.pack(k & 0xFFFFFFFF, self.labels[k % len(self.labels)], offset, len(record)) + data
        frame = protocol.encode_command("sample", self.seq, payload)
        self.seq = (self.seq + 1) & 0xFFFF
        self.frames_sent += 1
        return frame


def load_feeder(model_path: str | Path, data_path: str | Path, opts=None) -> Feeder:
    """The feeder of a model's training data, quantized as `zoflash build` does (the loss and the
    target from `opts`, default: zoflash.toml or the defaults)."""
    graph, raw = load_tflite(model_path)
    prep = compile_training(model_path, graph, raw, data_path, opts or make_options())
    return Feeder.from_dataset(prep.training.data)
