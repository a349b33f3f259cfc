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
from zoflash.targets.npu import declare, prefix_boundary

# Vela's --accelerator-config values
ACCELERATORS = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)
DRIVER_ENV = "ZOFLASH_ETHOSU_DRIVER"
VELA_HINT = "pip install ethos-u-vela (or pip install 'zoflash[npu]')"
DRIVER_HINT = (
    f"get Arm's Ethos-U core driver (ethos-u-core-driver; mirrors: zephyrproject-rtos/hal_ethos_u, "
    f"pytorch-labs/ethos-u-core-driver-mirror) and pass --ethosu-driver PATH or set {DRIVER_ENV}"
)
DRIVER_FILES = ("include/ethosu_driver.h", "src/ethosu_driver.c")


@dataclass
class VelaOutput:
    cmd: bytes  # the command stream (a "COP1" payload for ethosu_invoke_v3)
    weights: bytes  # encoded weights and biases: base address `weight_region`
    scratch_bytes: int
    fast_scratch_bytes: int
    regions: dict  # base address index of "weights", "scratch", "fast_scratch"
    input_offset: int  # in the scratch
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
    root = Path(given).expanduser().absolute()
    if any(c.isspace() for c in str(root)):
        raise ToolMissingError(
            f"Arm Ethos-U core driver at '{root}'",
            "make cannot name sources in a path with spaces: move or link the checkout to a path without them",
        )
    missing = [f for f in DRIVER_FILES if not (root / f).is_file()]
    if missing:
        raise ToolMissingError(f"Arm Ethos-U core driver at {root} ({', '.join(missing)} missing)", DRIVER_HINT)
    return root


def vela_command(vela: str, model: Path, accelerator: str, out_dir: Path) -> list[str]:
    """Vela's command line: raw output, per-layer performance (the estimates' CSV files)."""
    return [
        vela,
        str(model),
        "--accelerator-config",
        accelerator,
        "--output-format",
        "raw",
        "--verbose-performance",
        "--output-dir",
        str(out_dir),
    ]


def run_vela(command: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
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
    layers = [
        {
            "op": r["Original Operator"],
            "target": r["Target"],
            "cycles": int(float(r["Op Cycles"])),
            "macs": int(float(r["MAC Count"])),
            "name": r["Name"],
        }
        for r in _csv(out_dir / f"{stem}_per-layer.csv")
    ]
    return {
        "accelerator": s["accelerator_configuration"],
        "system_config": s["system_config"],
        "memory_mode": s["memory_mode"],
        "clock_hz": int(float(s["core_clock"])),
        "cycles_npu": int(float(s["cycles_npu"])),
        "cycles_total": int(float(s["cycles_total"])),
        "inference_time_s": float(s["inference_time"]),
        "macs": int(float(s["nn_macs"])),
        "sram_used_bytes": int(float(s["sram_memory_used"]) * 1024),
        "off_chip_flash_used_bytes": int(float(s["off_chip_flash_memory_used"]) * 1024),
        "npu_ops": sum(r["target"] == "NPU" for r in layers),
        "cpu_ops": sum(r["target"] != "NPU" for r in layers),
        "layers": layers,
    }


def read_vela(out_dir: Path, stem: str) -> VelaOutput:
    """The raw .npz and the estimates Vela wrote for the model `stem`; a prefix that is not all on the
    NPU is refused (zoflash runs no CPU ops of a Vela graph)."""
    est = estimates(out_dir, stem)
    cpu = [f"{r['op']} ({r['name'][:60]})" for r in est["layers"] if r["target"] != "NPU"]
    if cpu:
        raise BuildError(
            f"vela keeps {len(cpu)} op(s) of the prefix on the CPU: {'; '.join(cpu[:3])}; cut the "
            "model before them (zoflash split --at, or train more layers with --train)"
        )
    d = np.load(out_dir / f"{stem}_vela.npz", allow_pickle=True)
    if len(d["input_offset"]) != 1 or len(d["output_offset"]) != 1:
        raise BuildError("the Vela prefix must have one input and one output")

    def nbytes(shape, elem) -> int:
        return int(np.prod(shape)) * int(elem)

    return VelaOutput(
        cmd=bytes(d["cmd_data"].item()),
        weights=bytes(d["weight_data"].item()),
        scratch_bytes=int(d["scratch_size"]),
        fast_scratch_bytes=int(d["scratch_fast_size"]),
        regions={
            "weights": int(d["weight_region"]),
            "scratch": int(d["scratch_region"]),
            "fast_scratch": int(d["scratch_fast_region"]),
        },
        input_offset=int(d["input_offset"][0]),
        input_bytes=nbytes(d["input_shape"][0], d["input_elem_size"][0]),
        output_offset=int(d["output_offset"][0]),
        output_bytes=nbytes(d["output_shape"][0], d["output_elem_size"][0]),
        estimates=est,
    )


# ---------------------------------------------------------------------------- the build (--npu)

DRIVER_SOURCES = {
    "ethos-u55": ("ethosu_driver.c", "ethosu_pmu.c", "ethosu_device_u55_u65.c"),
    "ethos-u65": ("ethosu_driver.c", "ethosu_pmu.c", "ethosu_device_u55_u65.c"),
    "ethos-u85": ("ethosu_driver.c", "ethosu_pmu.c", "ethosu_device_u85.c"),
}
GLUE = ("zo_ethosu.c", "zo_ethosu.h", "cmsis_compiler.h")  # of firmware_templates/runtime/npu/
PREFIX_MODEL = "npu_prefix.tflite"  # the Vela input, written in the bundle beside its outputs


@dataclass
class NpuRequest:
    accelerator: str  # --npu
    driver: str | None = None  # --ethosu-driver (else $ZOFLASH_ETHOSU_DRIVER)


@dataclass
class NpuSources:
    files: dict  # bundle file -> text (glue, static C)
    blobs: dict  # bundle file -> bytes (command stream, weights, Vela's files)
    manifest: dict  # manifest.json "npu"
    make: dict  # Makefile variables
    run_steps: str  # the function the trainer runs kernel calls with


def commands(accelerator: str, vela: str = "vela") -> list[list[str]]:
    """What an NPU build runs, in the bundle directory: Vela on the prefix (then make)."""
    return [vela_command(vela, Path(PREFIX_MODEL), accelerator, Path("."))]


def npu_sources(prep, board, request: NpuRequest, prefix: str) -> NpuSources:
    """Vela on the training plan's prefix and the glue that runs it on the board's NPU."""
    import tempfile

    from zoflash import __version__
    from zoflash.compiler.codegen import c_comment, template_env
    from zoflash.compiler.runtime import runtime_part
    from zoflash.compiler.tflite_split import split_tflite

    check_accelerator(board, request.accelerator)
    plan, model = prep.training.plan, prep.model
    boundary, name = prefix_boundary(prep)
    driver = find_driver(request.driver)
    vela = find_vela()
    with tempfile.TemporaryDirectory(prefix="zoflash-vela-") as tmp:
        work = Path(tmp)
        (work / PREFIX_MODEL).write_bytes(split_tflite(Path(prep.path).read_bytes(), name).prefix)
        run_vela(commands(request.accelerator, vela)[0], cwd=work)
        stem = Path(PREFIX_MODEL).stem
        out = read_vela(work, stem)
        vela_files = {f"{prefix}_{p.name}": p.read_bytes() for p in sorted(work.iterdir()) if p.suffix == ".csv"}
        vela_files[f"{prefix}_{PREFIX_MODEL}"] = (work / PREFIX_MODEL).read_bytes()
    g = model.graph
    in_root = model.root[g.inputs[0]]
    if out.output_bytes != boundary.nbytes or out.input_bytes != g.tensors[in_root].nbytes:
        raise BuildError(
            f"vela's prefix has a {out.input_bytes}-byte input and a {out.output_bytes}-byte output; "
            f"the model's input has {g.tensors[in_root].nbytes} and '{name}' {boundary.nbytes} bytes"
        )
    fast = [] if out.fast_scratch_bytes == 0 else [dict(name=f"{prefix}_npu_fast", bytes=out.fast_scratch_bytes)]
    ctx = dict(
        version=__version__,
        source=c_comment(prep.path.name),
        source_sha256=prep.sha256,
        prefix=prefix,
        accelerator=request.accelerator,
        split=plan.split,
        boundary_name=c_comment(f"'{name}'"),
        arena_name=f"{prefix}_arena",
        arena_size=model.arena_array_size,
        cmd_bytes=len(out.cmd),
        weights_bytes=len(out.weights),
        scratch_bytes=out.scratch_bytes,
        fast_arrays=fast,
        fast_scratch=fast[0]["name"] if fast else "NULL",
        fast_scratch_bytes=out.fast_scratch_bytes,
        regions=out.regions,
        base=f"0x{board.npu['base']:08X}u",
        input_offset=out.input_offset,
        input_bytes=out.input_bytes,
        output_offset=out.output_offset,
        output_bytes=out.output_bytes,
        arena_input=model.arena_offset[in_root],
        arena_boundary=boundary.offset,
    )
    files = {f"{prefix}_npu.c": template_env().get_template("model_npu.c.j2").render(**ctx)}
    # the glue and the driver's cmsis_compiler.h stand-in (firmware_templates/runtime/npu/), verbatim
    files.update({n: data.decode() for n, data in runtime_part("npu").items() if n in GLUE})
    arch, macs = request.accelerator.split("-")[1:]
    sources = [str(driver / "src" / f) for f in DRIVER_SOURCES[board.npu["type"]]]
    make = dict(
        npu_cflags=f'"-I{driver / "include"}" -DZO_NPU_IRQ={board.npu["irq"]}u',
        npu_driver_cflags=f'"-I{driver / "src"}" -I. -DETHOSU_ARCH={arch} -DETHOSU_MACS={macs} '
        f"-DETHOS{arch.upper()} -DETHOSU_LOG_ENABLE=0 -DETHOSU_LOG_SEVERITY=0 -DNDEBUG",
        npu_sources=" ".join(sources),
        npu_region=board.npu["regions"][0],
        npu_blob_deps=f"{prefix}_npu_cmd.bin {prefix}_npu_weights.bin",
    )
    blobs = {f"{prefix}_npu_cmd.bin": out.cmd, f"{prefix}_npu_weights.bin": out.weights, **vela_files}
    manifest = dict(
        type=board.npu["type"],
        accelerator=request.accelerator,
        base=board.npu["base"],
        irq=board.npu["irq"],
        verified_board_facts=board.npu["verified"],
        boundary=name,
        prefix_kernel_calls=plan.split,
        command_stream_bytes=len(out.cmd),
        weights_bytes=len(out.weights),
        scratch_bytes=out.scratch_bytes,
        fast_scratch_bytes=out.fast_scratch_bytes,
        commands=[" ".join(c) for c in commands(request.accelerator)],
        estimates=out.estimates,
        executed=False,
    )
    return NpuSources(files=files, blobs=blobs, manifest=manifest, make=make, run_steps=f"{prefix}_npu_run_steps")


def vela_estimates(prep, accelerator: str, vela: str) -> dict:
    """Vela's estimates for the training plan's prefix (what --npu would run), in a scratch folder."""
    import tempfile

    from zoflash.compiler.tflite_split import split_tflite

    _, name = prefix_boundary(prep)
    with tempfile.TemporaryDirectory(prefix="zoflash-vela-") as tmp:
        work = Path(tmp)
        (work / PREFIX_MODEL).write_bytes(split_tflite(Path(prep.path).read_bytes(), name).prefix)
        run_vela(commands(accelerator, vela)[0], cwd=work)
        return {**estimates(work, Path(PREFIX_MODEL).stem), "boundary": name}


def estimate_lines(e: dict) -> list[str]:
    """Vela's estimates as build-report lines: cycles, memory, ops on the NPU and on the CPU."""
    cpu = [r["op"] for r in e["layers"] if r["target"] != "NPU"]
    return [
        f"vela    {e['accelerator']} estimates for the prefix (up to '{_short(e['boundary'])}'): "
        f"{e['cycles_npu']} NPU cycles, "
        f"{e['cycles_total']} in all ({e['inference_time_s'] * 1e3:.3f} ms at {e['clock_hz'] / 1e6:g} MHz), "
        f"{e['macs']} MACs",
        f"vela    SRAM {e['sram_used_bytes']} bytes, off-chip flash {e['off_chip_flash_used_bytes']} bytes "
        f"({e['system_config']}, {e['memory_mode']}); ops: {e['npu_ops']} on the NPU, {e['cpu_ops']} on the CPU"
        + (f" ({', '.join(sorted(set(cpu)))})" if cpu else ""),
    ]


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


# --- the NPU-backend interface (targets/npu.py) ---
check = check_accelerator


def preview(prep, request: NpuRequest) -> list[str]:
    """Vela's estimates, said when the build stops for a missing tool (the driver) before it needs
    it; none without Vela (the missing-tool message names it then)."""
    try:
        vela = find_vela()
    except ToolMissingError:
        return []
    return estimate_lines(vela_estimates(prep, request.accelerator, vela))


def request(config: str, tools: dict) -> NpuRequest:
    return NpuRequest(config, tools.get("ethosu_driver"))


def find_tools(request: NpuRequest) -> None:
    find_driver(request.driver)
    find_vela()


def dry_run(board, request: NpuRequest, bundle_dir: str) -> list[str]:
    return (
        [f"# in {bundle_dir}, after writing the prefix ({PREFIX_MODEL}, the training plan's cut)"]
        + [" ".join(c) for c in commands(request.accelerator)]
        + [f"make -C {bundle_dir}"]
    )


def reserved(board) -> list[tuple[str, str, int]]:
    """Vela's scratch and blobs are linked into the NPU's region like any section: nothing set apart."""
    return []


# --- end the NPU-backend interface ---


def describe(manifest: dict) -> list[str]:
    """The build report's lines for an NPU build."""
    e = manifest["estimates"]
    return [
        f"npu     {manifest['accelerator']} runs the prefix (kernel calls [0, {manifest['prefix_kernel_calls']}), "
        f"up to '{manifest['boundary']}'): {e['npu_ops']} NPU / {e['cpu_ops']} CPU ops, Vela estimates "
        f"{e['cycles_total']} cycles ({e['inference_time_s'] * 1e3:.3f} ms at {e['clock_hz'] / 1e6:g} MHz), "
        f"{e['macs']} MACs",
        f"npu     command stream {manifest['command_stream_bytes']} B, weights {manifest['weights_bytes']} B, "
        f"scratch {manifest['scratch_bytes']} B; not executed here (no NPU is emulated): its rounding may "
        "differ from the host simulation's, check on hardware",
    ]


BACKEND = declare("ethos-u", ("ethos-u55", "ethos-u65", "ethos-u85"), ACCELERATORS, __name__)
