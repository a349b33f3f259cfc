"""The Arm Ethos-U backend of `zoflash build --npu`: Vela compiles the frozen prefix, the firmware
runs its command stream through Arm's Ethos-U core driver.

Vela writes `--output-format raw` (an .npz): the command stream, the encoded weights, the scratch
sizes and where the input and output sit in the scratch. That is all the glue needs, with no
TFLite interpreter on the device (the TFLite form would need TFLM's ethos-u kernel to unpack it).
Every op of the prefix must map to the NPU (the CPU ops of a Vela graph would need TFLM too).

Nothing here runs an NPU: Vela's numbers are its estimates, and the NPU's rounding may differ
from TFLM's reference kernels (which the host simulation runs): check on hardware.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import BoardError, BuildError, ToolMissingError

ACCELERATORS = ("ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u65-512",
                "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048")
DRIVER_ENV = "ZOFLASH_ETHOSU_DRIVER"
VELA_HINT = "pip install ethos-u-vela (or pip install 'zoflash[npu]')"
DRIVER_HINT = (f"get Arm's Ethos-U core driver (ethos-u-core-driver; mirrors: zephyrproject-rtos/hal_ethos_u, "
               f"pytorch-labs/ethos-u-core-driver-mirror) and pass --ethosu-driver PATH or set {DRIVER_ENV}")
DRIVER_FILES = ("include/ethosu_driver.h", "src/ethosu_driver.c")


@dataclass
class VelaOutput:
    cmd: bytes                 # the command stream (a "COP1" payload for ethosu_invoke_v3)
    weights: bytes             # encoded weights and biases: base address `weight_region`
    scratch_bytes: int
    fast_scratch_bytes: int
    regions: dict              # base address index of "weights", "scratch", "fast_scratch"
    input_offset: int          # in the scratch
    input_bytes: int
    output_offset: int
    output_bytes: int
    estimates: dict = field(default_factory=dict)


def check_accelerator(board, accelerator: str) -> None:
    """The board has an NPU of this configuration ([npu] in its board file)."""
    if accelerator not in ACCELERATORS:
        raise BoardError(f"--npu {accelerator}: not an Ethos-U configuration (known: {', '.join(ACCELERATORS)})")
    if not board.npu:
        raise BoardError(f"--npu {accelerator}: board '{board.id}' has no NPU ([npu] in its board file)")
    if accelerator not in board.npu["configs"]:
        raise BoardError(f"--npu {accelerator}: board '{board.id}' has {', '.join(board.npu['configs'])}")


def find_vela() -> str:
    """The vela program: on PATH or beside this Python (a virtual environment's bin)."""
    here = Path(sys.executable).parent / "vela"
    found = shutil.which("vela") or (str(here) if here.is_file() else None)
    if found is None:
        raise ToolMissingError("vela", VELA_HINT)
    return found


def find_driver(path: str | os.PathLike | None) -> Path:
    """The Ethos-U core driver checkout: `path`, else $ZOFLASH_ETHOSU_DRIVER."""
    given = path or os.environ.get(DRIVER_ENV)
    if not given:
        raise ToolMissingError("Arm Ethos-U core driver", DRIVER_HINT)
    root = Path(given).expanduser()
    missing = [f for f in DRIVER_FILES if not (root / f).is_file()]
    if missing:
        raise ToolMissingError(f"Arm Ethos-U core driver at {root} ({', '.join(missing)} missing)", DRIVER_HINT)
    return root


def vela_command(vela: str, model: Path, accelerator: str, out_dir: Path) -> list[str]:
    """Vela's command line: raw output, per-layer performance (the estimates' CSV files)."""
    return [vela, str(model), "--accelerator-config", accelerator, "--output-format", "raw",
            "--verbose-performance", "--output-dir", str(out_dir)]


def run_vela(command: list[str]) -> None:
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise BuildError(f"vela failed (exit {proc.returncode}): {tail}")


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def estimates(out_dir: Path, stem: str) -> dict:
    """Vela's estimates: the network summary and each layer (cycles, MACs, NPU or CPU)."""
    summary_files = sorted(out_dir.glob(f"{stem}_summary_*.csv"))
    if not summary_files:
        raise BuildError(f"vela wrote no summary ({stem}_summary_*.csv in {out_dir})")
    s = _csv(summary_files[0])[0]
    layers = [{"op": r["Original Operator"], "target": r["Target"], "cycles": int(float(r["Op Cycles"])),
               "macs": int(float(r["MAC Count"])), "name": r["Name"]}
              for r in _csv(out_dir / f"{stem}_per-layer.csv")]
    return {
        "accelerator": s["accelerator_configuration"], "system_config": s["system_config"],
        "memory_mode": s["memory_mode"], "clock_hz": int(float(s["core_clock"])),
        "cycles_npu": int(float(s["cycles_npu"])), "cycles_total": int(float(s["cycles_total"])),
        "inference_time_s": float(s["inference_time"]), "macs": int(float(s["nn_macs"])),
        "sram_used_bytes": int(float(s["sram_memory_used"]) * 1024),
        "off_chip_flash_used_bytes": int(float(s["off_chip_flash_memory_used"]) * 1024),
        "npu_ops": sum(r["target"] == "NPU" for r in layers), "cpu_ops": sum(r["target"] != "NPU" for r in layers),
        "layers": layers,
    }


def read_vela(out_dir: Path, stem: str) -> VelaOutput:
    """The raw .npz and the estimates Vela wrote for the model `stem`; a prefix that is not all on the
    NPU is refused (zoflash runs no CPU ops of a Vela graph)."""
    est = estimates(out_dir, stem)
    cpu = [f"{r['op']} ({r['name'][:60]})" for r in est["layers"] if r["target"] != "NPU"]
    if cpu:
        raise BuildError(f"vela keeps {len(cpu)} op(s) of the prefix on the CPU: {'; '.join(cpu[:3])}; cut the "
                         "model before them (zoflash split --at, or train more layers with --train)")
    d = np.load(out_dir / f"{stem}_vela.npz", allow_pickle=True)
    if len(d["input_offset"]) != 1 or len(d["output_offset"]) != 1:
        raise BuildError("the Vela prefix must have one input and one output")

    def nbytes(shape, elem) -> int:
        return int(np.prod(shape)) * int(elem)

    return VelaOutput(
        cmd=bytes(d["cmd_data"].item()), weights=bytes(d["weight_data"].item()),
        scratch_bytes=int(d["scratch_size"]), fast_scratch_bytes=int(d["scratch_fast_size"]),
        regions={"weights": int(d["weight_region"]), "scratch": int(d["scratch_region"]),
                 "fast_scratch": int(d["scratch_fast_region"])},
        input_offset=int(d["input_offset"][0]), input_bytes=nbytes(d["input_shape"][0], d["input_elem_size"][0]),
        output_offset=int(d["output_offset"][0]),
        output_bytes=nbytes(d["output_shape"][0], d["output_elem_size"][0]), estimates=est)
