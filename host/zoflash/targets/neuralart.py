"""The ST Neural-ART backend of `zoflash build --npu neural-art` (STM32N6): ST Edge AI Core
(`stedgeai`) compiles the frozen prefix for the NPU, ST's ll_aton runtime runs it.

zoflash writes the memory-pool profile (user_neuralart.json and its .mpool) from the board's
[[npu.pools]], so the NPU only uses memory the CPU's plan keeps free (budget.py counts the pools
in their regions), runs `stedgeai generate` on the prefix, and builds the generated network.c
with the ll_aton sources of the user's ST install (listed from that path; nothing of ST's is
copied into zoflash). The glue (runtime/npu/zo_neuralart.c) runs the epochs and checks the
output buffer against the boundary tensor.

Nothing here was run: stedgeai is proprietary and user-installed (on no package registry), and
no Neural-ART NPU is emulated. The profile and command lines are checked as text; the glue is
compiled against a stand-in of the ll_aton declarations it calls (tests/ll_aton_standin/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zoflash.errors import BoardError, BuildError, ToolMissingError
from zoflash.targets.npu import declare, pool_items, prefix_boundary

STEDGEAI_ENV = ("ZOFLASH_STEDGEAI", "STEDGEAI_CORE_DIR")  # ours, then the variable ST's installer sets
RUNTIME_ENV = "ZOFLASH_ST_RUNTIME"
STEDGEAI_HINT = (
    "install ST Edge AI Core from ST's website (it is on no package registry) and pass --stedgeai "
    "PATH (the program or its install folder) or set ZOFLASH_STEDGEAI or STEDGEAI_CORE_DIR"
)
RUNTIME_HINT = (
    "pass --st-runtime PATH (or set ZOFLASH_ST_RUNTIME): an ST Edge AI Core, STM32CubeN6 or X-CUBE-AI "
    "install with the Neural-ART runtime (a folder ll_aton holding ll_aton_runtime.c)"
)
PREFIX_MODEL = "npu_prefix.tflite"  # the stedgeai input, written beside the profile
PROFILE, MPOOL = "user_neuralart.json", "zoflash.mpool"
OUTPUT, WORKSPACE, NETWORK = "st_ai_output", "st_ai_ws", "network"
# The options targets.md lists: epochs driven by the epoch controller, every buffer's info (the
# glue reads the output's layout and quantization from it), cache maintenance in the generated code.
OPTIONS = "--enable-epoch-controller --all-buffers-info --cache-maintenance"
# ll_aton's configuration (verify against your install): polling, since the port routes no NPU interrupt to
# ll_aton (its vector table serves the console only)
LL_ATON_DEFS = (
    "-DLL_ATON_PLATFORM=LL_ATON_PLAT_STM32N6",
    "-DLL_ATON_OSAL=LL_ATON_OSAL_BARE_METAL",
    "-DLL_ATON_RT_MODE=LL_ATON_RT_POLLING",
    "-DLL_ATON_SW_FALLBACK",
)
# where the runtime sits in ST's installs, relative to the given root
LL_ATON_PLACES = ("Middlewares/ST/AI/Npu/ll_aton", "Middlewares/AI_Runtime/Npu/ll_aton", "Npu/ll_aton", "ll_aton", ".")


@dataclass
class NpuRequest:
    accelerator: str = "neural-art"  # --npu
    stedgeai: str | None = None  # --stedgeai (else $ZOFLASH_STEDGEAI, $STEDGEAI_CORE_DIR, PATH)
    runtime: str | None = None  # --st-runtime (else $ZOFLASH_ST_RUNTIME, then the stedgeai install)


# ---------------------------------------------------------------------------- the board's pools


def check(board, config: str) -> None:
    if not board.npu:
        raise BoardError(f"--npu {config}: board '{board.id}' has no NPU ([npu] in its board file)")
    if board.npu["type"] != "neural-art":
        raise BoardError(
            f"--npu {config}: board '{board.id}' has an {board.npu['type']} NPU, not a Neural-ART "
            f"(--npu {' | '.join(board.npu['configs'])})"
        )
    if not any(p["use"] == "activations" for p in board.npu.get("pools", ())):
        raise BoardError(
            f"--npu {config}: board '{board.id}' gives the NPU no RAM ([[npu.pools]] with use = \"activations\")"
        )


def pools(board) -> list[dict]:
    """The NPU's pools in the board's boot mode (a flash-only pool exists in flash boot only)."""
    mode = board.boot_mode or "dev"
    return [p for p in board.npu.get("pools", ()) if p.get("boot", "any") == "any" or mode == "flash"]


def constants_pool(board) -> str:
    """Where stedgeai puts the weights: the flash pool in flash boot, else the last RAM pool (which
    the debugger loads in development mode)."""
    ps = pools(board)
    flash = [p for p in ps if p["use"] == "constants"]
    return (flash or [p for p in ps if p["use"] == "activations"])[-1]["name"]


def reserved(board) -> list[tuple[str, str, int]]:

    return pool_items(pools(board))


def _kib(n: int) -> dict:
    return {"value": str(n // 1024), "magnitude": "KBYTES"}


def mpool(board) -> dict:
    """The memory-pool file: each pool at its absolute address; the RAM pools writable, the flash
    pool read-only and reached through the NPU cache; the constants in one pool."""
    const = constants_pool(board)
    out = []
    for p in pools(board):
        if p["use"] == "cache":
            continue
        flash = board.region(p["region"]).kind == "flash"
        out.append(
            {
                "fname": p["name"],
                "name": p["name"],
                "fformat": "FORMAT_RAW",
                "prop": {
                    "rights": "ACC_READ" if flash else "ACC_WRITE",
                    "throughput": "MID" if flash else "HIGH",
                    "latency": "HIGH" if flash else "LOW",
                    "cacheable": "CACHEABLE_ON" if flash else "CACHEABLE_OFF",
                    "constantsPreferred": p["name"] == const,
                },
                "offset": _kib(p["origin"]),
                "size": _kib(p["size"]),
                "mode": "USEMODE_ABSOLUTE",
            }
        )
    return {"memory": {"memFilePrefix": "atonbuf", "mempools": out}}


def profile_files(board) -> dict[str, str]:
    """user_neuralart.json (profile "default") and the .mpool it names, as deterministic text."""
    profile = {"Profiles": {"default": {"memory_pool": f"./{MPOOL}", "options": OPTIONS}}}
    return {PROFILE: json.dumps(profile, indent=2) + "\n", MPOOL: json.dumps(mpool(board), indent=2) + "\n"}


# ---------------------------------------------------------------------------- the tools


def find_stedgeai(path: str | os.PathLike | None) -> str:
    """The stedgeai program: `path` (the program or its install folder), the environment, PATH."""
    given = path or next((os.environ[v] for v in STEDGEAI_ENV if os.environ.get(v)), None)
    if given is None:
        found = shutil.which("stedgeai")
        if found is None:
            raise ToolMissingError("ST Edge AI Core (stedgeai)", STEDGEAI_HINT)
        return found
    root = Path(given).expanduser().absolute()
    for c in (root, root / "Utilities" / "linux" / "stedgeai", root / "bin" / "stedgeai", root / "stedgeai"):
        if c.is_file():
            return str(c)
    raise ToolMissingError(f"ST Edge AI Core (stedgeai) at {root}", STEDGEAI_HINT)


def find_runtime(path: str | os.PathLike | None) -> Path:
    """The ll_aton folder of the user's ST install: --st-runtime, $ZOFLASH_ST_RUNTIME, or the
    stedgeai install ($STEDGEAI_CORE_DIR)."""
    given = path or os.environ.get(RUNTIME_ENV) or os.environ.get("STEDGEAI_CORE_DIR")
    if not given:
        raise ToolMissingError("ST's Neural-ART runtime (ll_aton)", RUNTIME_HINT)
    root = Path(given).expanduser().absolute()
    if any(c.isspace() for c in str(root)):
        raise ToolMissingError(
            f"ST's Neural-ART runtime at '{root}'",
            "make cannot name sources in a path with spaces: move or link the install to a path without them",
        )
    for place in LL_ATON_PLACES:
        d = root / place
        if (d / "ll_aton_runtime.c").is_file():
            return d
    raise ToolMissingError(f"ST's Neural-ART runtime at {root} (no ll_aton/ll_aton_runtime.c)", RUNTIME_HINT)


def runtime_sources(ll_aton: Path) -> list[Path]:
    """ll_aton's C files (not the RTOS adaptations: the firmware is bare metal) and the STM32N6
    device files beside it (the NPU cache's driver the cache maintenance calls)."""
    own = [p for p in sorted(ll_aton.glob("ll_aton*.c")) if "osal" not in p.name]
    device = ll_aton.parent / "Devices" / "STM32N6XX"
    return own + (sorted(device.glob("*.c")) if device.is_dir() else [])


def runtime_cflags(ll_aton: Path) -> str:
    device = ll_aton.parent / "Devices" / "STM32N6XX"
    dirs = [ll_aton] + ([device] if device.is_dir() else [])
    return " ".join([f'"-I{d}"' for d in dirs] + list(LL_ATON_DEFS))


def stedgeai_command(stedgeai: str = "stedgeai") -> list[str]:
    return [
        stedgeai,
        "generate",
        "--model",
        PREFIX_MODEL,
        "--target",
        "stm32n6",
        "--st-neural-art",
        f"default@{PROFILE}",
        "--name",
        NETWORK,
        "--output",
        OUTPUT,
        "--workspace",
        WORKSPACE,
    ]


def raw_name(pool: str) -> str:
    return f"{NETWORK}_atonbuf.{pool}.raw"


def hex_rules(board, prefix: str, raws) -> list[dict]:
    """One objcopy rule per pool blob stedgeai wrote: the blob as an image at the pool's address."""
    by_name = {p["name"]: p for p in pools(board)}
    return [
        dict(pool=name, raw=raw_name(name), hex=f"{prefix}_npu_{name}.hex", address=f"0x{by_name[name]['origin']:08X}")
        for name in raws
    ]


def run_stedgeai(command: list[str], cwd: Path) -> None:
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise BuildError(f"stedgeai failed (exit {proc.returncode}): {tail}")


# ---------------------------------------------------------------------------- the build


def request(config: str, tools: dict) -> NpuRequest:
    return NpuRequest(config, tools.get("stedgeai"), tools.get("st_runtime"))


def find_tools(request: NpuRequest) -> None:
    find_stedgeai(request.stedgeai)
    find_runtime(request.runtime)


def dry_run(board, request: NpuRequest, bundle_dir: str) -> list[str]:
    """The commands of the build (the profile files are written into the bundle folder first)."""
    out = Path(bundle_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in profile_files(board).items():
        (out / name).write_text(text)
    stedgeai = find_stedgeai(request.stedgeai) if _given(request.stedgeai, *STEDGEAI_ENV) else "stedgeai"
    try:
        ll_aton = find_runtime(request.runtime)
        sources = [str(p) for p in runtime_sources(ll_aton)]
        cflags = runtime_cflags(ll_aton)
    except ToolMissingError:
        sources, cflags = ["$ST_RUNTIME/ll_aton/ll_aton*.c"], '"-I$ST_RUNTIME/ll_aton" ' + " ".join(LL_ATON_DEFS)
    cc = " ".join([board.toolchain.cc, *board.toolchain.cflags, "-std=c11", "-ffunction-sections", "-fdata-sections"])
    lines = [
        f"# in {bundle_dir} (wrote {PROFILE} and {MPOOL}), after writing the prefix ({PREFIX_MODEL}, the "
        "training plan's cut)",
        " ".join(stedgeai_command(stedgeai)),
    ]
    lines += [f"{cc} {cflags} -c {s}" for s in [f"{OUTPUT}/{NETWORK}.c", *sources]]
    lines += [
        f"{board.toolchain.objcopy} -I binary -O ihex --change-addresses {h['address']} {OUTPUT}/{h['raw']} "
        f"build/{h['hex']}"
        for h in hex_rules(board, "PREFIX", [constants_pool(board)])
    ]
    return lines + [f"make -C {bundle_dir}  # zoflash's sources and the glue, then the link"]


def _given(path, *env) -> bool:
    return bool(path) or any(os.environ.get(v) for v in env)


@dataclass
class NpuSources:
    files: dict
    blobs: dict
    manifest: dict
    make: dict
    run_steps: str


def _memory_mask(board, names) -> int:
    """The port's memory switches (port.toml `memories`) the NPU's regions need, which the start-up
    code then turns on with the plan's own (bit i of __zo_enable_memories): AXISRAM3..6 and the
    cache RAM clocked and out of shut-down, the NOR mapped in flash boot."""
    from zoflash.targets.boards import load_port

    switches = {s for r in board.memory if r.name in names for s in r.enable}
    return sum(1 << i for i, s in enumerate(load_port(board.port).memories) if s in switches)


def npu_sources(prep, board, request: NpuRequest, prefix: str) -> NpuSources:
    """stedgeai on the training plan's prefix and the glue that runs it on the Neural-ART NPU."""
    from zoflash import __version__
    from zoflash.compiler.codegen import c_comment, c_float, template_env
    from zoflash.compiler.runtime import runtime_part
    from zoflash.compiler.tflite_split import split_tflite

    check(board, request.accelerator)
    plan, model = prep.training.plan, prep.model
    boundary, name = prefix_boundary(prep)
    stedgeai = find_stedgeai(request.stedgeai)
    ll_aton = find_runtime(request.runtime)
    with tempfile.TemporaryDirectory(prefix="zoflash-stedgeai-") as tmp:
        work = Path(tmp)
        prefix_model = split_tflite(Path(prep.path).read_bytes(), name).prefix
        (work / PREFIX_MODEL).write_bytes(prefix_model)
        profiles = profile_files(board)
        for fname, text in profiles.items():
            (work / fname).write_text(text)
        run_stedgeai(stedgeai_command(stedgeai), work)
        out = work / OUTPUT
        if not (out / f"{NETWORK}.c").is_file():
            raise BuildError(f"stedgeai wrote no {OUTPUT}/{NETWORK}.c")
        generated = {p.name: p.read_bytes() for p in sorted(out.glob(f"{NETWORK}*.[ch]"))}
        raws = {p.name: p.read_bytes() for p in sorted(out.glob(f"{NETWORK}_atonbuf.*.raw"))}
    known = {raw_name(p["name"]): p["name"] for p in pools(board)}
    stray = sorted(set(raws) - set(known))
    if stray:
        raise BuildError(f"stedgeai wrote blobs for pools the profile does not have: {', '.join(stray)}")
    g = model.graph
    t = g.tensors[boundary.index]
    ctx = dict(
        version=__version__,
        source=c_comment(prep.path.name),
        source_sha256=prep.sha256,
        prefix=prefix,
        split=plan.split,
        boundary_name=c_comment(f"'{name}'"),
        arena_name=f"{prefix}_arena",
        arena_size=model.arena_array_size,
        arena_input=model.arena_offset[model.root[g.inputs[0]]],
        input_bytes=g.tensors[model.root[g.inputs[0]]].nbytes,
        arena_boundary=boundary.offset,
        boundary_bytes=boundary.nbytes,
        boundary_scale=c_float(t.quant.scale),
        boundary_zp=t.quant.zero_point,
    )
    files = {f"{prefix}_npu.c": template_env().get_template("model_neuralart.c.j2").render(**ctx)}
    files.update({n: data.decode() for n, data in runtime_part("npu").items() if n in GLUE})
    # ST's generated files are built like ST's runtime (the vendor's flags, not zoflash's -Werror)
    blobs = {
        **generated,
        **raws,
        **{n: text.encode() for n, text in profiles.items()},
        f"{prefix}_{PREFIX_MODEL}": prefix_model,
    }
    sources = [n for n in generated if n.endswith(".c")] + [str(s) for s in runtime_sources(ll_aton)]
    # ll_aton includes ST's device header and Arm's CMSIS core: --device-headers names their folders
    includes = " ".join(f'"-I{d}"' for d in board.device_includes)
    make = dict(
        npu_cflags=f"{runtime_cflags(ll_aton)} {includes}".strip(),
        npu_memories=_memory_mask(board, [p["region"] for p in pools(board)]),
        npu_sources=" ".join(sources),
        npu_hex=hex_rules(board, prefix, [known[r] for r in raws]),
    )
    manifest = dict(
        type="neural-art",
        accelerator=request.accelerator,
        base=board.npu["base"],
        irq=board.npu["irq"],
        verified_board_facts=board.npu["verified"],
        boundary=name,
        prefix_kernel_calls=plan.split,
        pools=[
            dict(
                name=p["name"],
                region=p["region"],
                origin=p["origin"],
                size=p["size"],
                use=p["use"],
                blob=raw_name(p["name"]) if raw_name(p["name"]) in raws else None,
            )
            for p in pools(board)
        ],
        constants_pool=constants_pool(board),
        commands=[" ".join(stedgeai_command())],
        runtime=str(ll_aton),
        executed=False,
    )
    return NpuSources(files=files, blobs=blobs, manifest=manifest, make=make, run_steps=f"{prefix}_npu_run_steps")


GLUE = ("zo_neuralart.c", "zo_neuralart.h")  # of firmware_templates/runtime/npu/


def describe(manifest: dict) -> list[str]:
    pools_text = ", ".join(f"{p['name']} {p['size'] // 1024} KiB ({p['use']})" for p in manifest["pools"])
    return [
        f"npu     neural-art runs the prefix (kernel calls [0, {manifest['prefix_kernel_calls']}), up to "
        f"'{manifest['boundary']}') with ST's ll_aton from {manifest['runtime']}",
        f"npu     pools {pools_text}; constants in {manifest['constants_pool']}; not executed here (no NPU is "
        "emulated): its rounding may differ from the host simulation's, check on hardware (the boundary "
        "checksum in `zoflash monitor`)",
    ]


BACKEND = declare("neural-art", ("neural-art",), ("neural-art",), __name__)
