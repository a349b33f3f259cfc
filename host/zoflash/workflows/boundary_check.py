"""The boundary checksum: the CRC-32 (zlib's) of the boundary activations of the first test sample,
which every training firmware with a frozen prefix reports once after its hello frame (zo_trainer.c,
the `boundary` telemetry frame). A build can bake in the value the host simulation computes with
zoflash's own C prefix (bit-exact with TFLM's reference kernels): the device then reports both, and
`zoflash monitor` / `run` says whether the NPU (or the board's CPU kernels) and the simulation agree.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from zoflash.errors import BuildError
from zoflash.monitor.telemetry import Decoder
from zoflash.training.compiled import CompiledTraining
from zoflash.workflows.simulate import c_frames
from zoflash.workflows.training import training_bundle


def simulated_crc32(prep: CompiledTraining) -> int:
    """The host simulation's boundary checksum: the training program built for the host, run until
    it sends its boundary frame (then stopped)."""
    if prep.training.plan.split == 0:
        raise BuildError(
            "the boundary checksum needs a frozen prefix; this plan trains the first layer (choose --train)"
        )
    if prep.training.options.data_source == "app":
        raise BuildError(
            "the boundary checksum is computed by the host training program, which --data-source app "
            "does not build: use embedded or stream data for this build"
        )
    with tempfile.TemporaryDirectory(prefix="zoflash-boundary-") as tmp:
        bundle = training_bundle(prep, "host", Path(tmp) / "bundle")
        decoder, frames = Decoder(), c_frames(bundle)
        try:
            for chunk in frames:
                for rec in decoder.records(decoder.feed(chunk)):
                    if rec["type"] == "boundary":
                        return rec["crc32"]
        finally:
            frames.close()
    raise BuildError("the host training program ended without its boundary frame")
