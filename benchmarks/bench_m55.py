"""Cortex-M55 inference benchmark: executed instructions per inference under QEMU mps3-an547.

For each model (the fixtures kws_dscnn, mbv2_block, digits_cnn, conv1d_ts and the public
person_detect, on which the peer was measured, then every other fixture and public model) the
mps3-an547 bundle is generated and linked with a small harness (in place of
a firmware's main: the port's start-up, console and SysTick clock) that writes one random input,
runs the model, prints its outputs (compared here with the tflite-micro interpreter on
the host: the emulated M55 must be bit-exact) and then times repeated inferences (zoflash's
emulated-run harness, zoflash.targets.emulated, as `zoflash infer --board mps3-an547` uses). Under
`qemu-system-arm -icount shift=0` QEMU's virtual clock advances 1 ns per executed instruction and
the port's clock follows it, so virtual microseconds x 1000 / repetitions is the number of
executed instructions per inference (every instruction counts one, an MVE instruction on 16 lanes
as much as a scalar add: not cycles).

Two builds of zoflash's C: as generated (the Helium kernels of zo_kernels_<family>_mve.c) and with
-DZO_NO_MVE (the portable kernels, what the M55 ran before them). The peer, TFLM with Arm's
CMSIS-NN kernels, is read from benchmarks/peer_m55.json (TFLM 90b983c2 built with its own
Makefile, CMSIS-NN 4ab83cc3, measured the same way here from fetched sources; the repository
carries no build of fetched code, so this command does not rebuild it); `--peer FILE` takes another
such file. The MVE instructions of
one Helium inference are counted by mve_trace.py for a labelled cycle estimate (each counted twice).

Usage: python benchmarks/bench_m55.py [--write docs/benchmarks.md] [--models kws_dscnn,...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mve_trace  # noqa: E402
from bench_inference import write_section  # noqa: E402
from bench_training import tool_version  # noqa: E402
from model_zoo import public_models  # noqa: E402

from zoflash.errors import ZoflashError  # noqa: E402
from zoflash.workflows.profile import step_macs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SECTION = "m55"
COMMAND = "python benchmarks/bench_m55.py --write docs/benchmarks.md"
# The five models TFLM + CMSIS-NN was measured on first, then every other fixture and public
# model (one zoflash refuses, such as the custom-op audio front end, is skipped with a line).
_FIRST = ("kws_dscnn", "mbv2_block", "digits_cnn", "conv1d_ts", "public/person_detect")
_NEGATIVE = {
    f["file"] for f in json.loads((FIXTURES / "fixtures.json").read_text())["fixtures"] if f["kind"] == "negative"
}
ZOO = public_models()
_ALL = [f"{n}.tflite" for n in _FIRST] + sorted(
    name
    for name in [*(p.name for p in FIXTURES.glob("*.tflite")), *(f"public/{p.name}" for p in ZOO.glob("*.tflite"))]
    if Path(name).name not in _NEGATIVE and name not in {f"{n}.tflite" for n in _FIRST}
)
MODELS = {Path(f).stem: ZOO / f.removeprefix("public/") if f.startswith("public/") else FIXTURES / f for f in _ALL}
# TFLM with its reference kernels, instructions per inference, measured once on a TFLM build (not rebuilt here).
TFLM_REFERENCE = {
    "kws_dscnn": 29_528_000,
    "mbv2_block": 26_297_000,
    "digits_cnn": 446_956,
    "conv1d_ts": 914_682,
    "person_detect": 91_475_000,
}
REFERENCE_PROVENANCE = (
    "TFLM's reference kernels: recorded once (TFLM 90b983c2, its Makefile without OPTIMIZED_KERNEL_DIR, same method)"
)
# TFLM + CMSIS-NN measured the same way (instructions, MVE instructions, code, arena), with provenance.
PEER_FILE = Path(__file__).resolve().parent / "peer_m55.json"
BUILDS = (("mve", "Helium", ""), ("portable", "portable (-DZO_NO_MVE)", "-DZO_NO_MVE"))
TARGET_US = 5000  # time repeated inferences for at least this much virtual time (5 M instructions)
TIMEOUT_S = 600


def available() -> list[str]:
    return [t for t in ("arm-none-eabi-gcc", "qemu-system-arm", "make") if shutil.which(t) is None]


def macs(model) -> int:
    """Multiply-accumulates of the conv, depthwise and FC layers (the kernels' own loops)."""
    return sum(step_macs(step.kernel, step.params) for step in model.program.steps)


def measure(name: str, path: Path, workdir: Path, profile: bool = False, trace: bool = True) -> dict:
    """Both builds of one model: instructions per inference, code bytes, arena, bit-exactness."""
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets import emulated

    model = api.load_model(path)
    compiled = api.compile_model(model)
    x = api.random_inputs(model, 1, seed=0)
    want = TflmInterpreter(model.raw).invoke([x[0]])
    row = dict(model=name, macs=macs(compiled))
    for build, _, cflags in BUILDS:
        bundle = api.generate(path, "mps3-an547", workdir / f"{name}-{build}")
        row.update(arena=bundle.manifest["memory"]["arena_bytes"], ops=bundle.manifest["ops"])
        run = emulated.run_inference(
            bundle, x, extra_cflags=cflags, time_us=TARGET_US, profile=profile, timeout_s=TIMEOUT_S
        )
        instr, us = run.timing["calibration"]
        if abs(us * 1000 - instr) > 1000:
            raise RuntimeError(f"QEMU's clock does not count 1 ns per instruction ({instr} took {us} us)")
        reps, us = run.timing["invoke"]
        _, copy_us = run.timing["copy"]
        row[build] = round((us - copy_us) * 1000 / reps)
        row[f"{build}_steps"] = run.steps
        row[f"{build}_exact"] = all(
            g[0].tobytes() == np.ascontiguousarray(w).tobytes() for g, w in zip(run.outputs, want)
        )
        text = subprocess.run(
            ["arm-none-eabi-size", "-A", str(run.elf)], capture_output=True, text=True, check=False
        ).stdout
        row[f"{build}_text"] = next(
            (int(line.split()[1]) for line in text.splitlines() if line.startswith(".text ")), 0
        )
        if trace and build == "mve":
            xs, _ = emulated.samples(bundle, x)
            traced = mve_trace.count(emulated.build_harness(bundle, xs, "-DZO_INFER_TRACE"))
            row["mve_traced"], row["mve_instructions"] = traced["instructions"], traced["mve"]
    return row


def to_markdown(rows: list[dict], peer: dict, peer_note: str) -> str:
    gcc, qemu = tool_version("arm-none-eabi-gcc"), tool_version("qemu-system-arm")
    commit = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        or "unknown"
    )
    lines = [
        "## Cortex-M55 (QEMU mps3-an547): instructions per inference, zoflash vs TFLM + CMSIS-NN",
        "",
        f"Command: `{COMMAND}` ({time.strftime('%Y-%m-%d')}, zoflash at {commit}; {gcc}, {qemu}).",
        "",
        "Method: each model's `mps3-an547` bundle (board flags `-mcpu=cortex-m55 -mthumb -mfloat-abi=hard",
        "-mfpu=fpv5-d16 -O2`; code, weights in ITCM, arena in DTCM) is linked with a harness that writes one",
        "random input, runs the model and prints its outputs (`bit-exact`: equal to the",
        "tflite-micro interpreter's on the host), then repeats inferences for at least",
        f"{TARGET_US:,} µs of virtual time under `qemu-system-arm -M mps3-an547 -icount shift=0`, where the",
        "port's SysTick clock advances 1 µs per 1000 executed instructions (checked on a calibration loop);",
        "instructions per inference = virtual µs × 1000 / repetitions, minus the copy of the input.",
        "These are **executed instructions, not cycles**: QEMU counts an MVE instruction (16 lanes) as",
        "one, like a scalar add; the M55 executes a 128-bit MVE instruction in two beats.",
        "`Helium` is the bundle as generated (zo_kernels_*_mve.c), `portable` the same bundle with",
        "`-DZO_NO_MVE` (the scalar kernels: the M55 before the Helium kernels). MACs: conv, depthwise and FC.",
        "`code` is the harness ELF's `.text` (kernels, model, port, harness; weights are in `.weights`);",
        "`code / TFLM's` divides it by the `.text` of the peer's harness ELF (TFLM, CMSIS-NN, start-up, libc pieces).",
        "",
        f"TFLM + CMSIS-NN and TFLM's reference kernels: {peer_note}.",
        "",
        "| model | MACs | TFLM + CMSIS-NN | TFLM reference | zoflash portable | zoflash Helium | "
        "Helium / CMSIS-NN | Helium / portable | instr/MAC (Helium) | bit-exact | code (Helium) | code / TFLM's | arena |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        p = peer.get(r["model"], {})
        cmsis, tref = p.get("cmsis"), p.get("reference")
        ratio = f"**{r['mve'] / cmsis:.2f}**" if cmsis else "-"
        exact = "yes" if r["mve_exact"] and r["portable_exact"] else "**NO**"
        code_ratio = f"{r['mve_text'] / p['text']:.2f}" if p.get("text") else "-"
        per_mac = f"{r['mve'] / r['macs']:.2f}" if r["macs"] else "-"
        lines.append(
            f"| {r['model']} | {r['macs'] / 1e6:.3g} M | {f'{cmsis:,}' if cmsis else '-'} | "
            f"{f'{tref:,}' if tref else '-'} | {r['portable']:,} | {r['mve']:,} | {ratio} | "
            f"{r['mve'] / r['portable']:.2f} | {per_mac} | {exact} | "
            f"{r['mve_text']:,} | {code_ratio} | {r['arena']:,} |"
        )
    lines += estimate_table(rows, peer)
    return "\n".join(lines)


def estimate_table(rows: list[dict], peer: dict) -> list[str]:
    """The cycle estimate: every executed MVE instruction counted twice (two beats), labelled."""
    if not any("mve_instructions" in r for r in rows):
        return []
    lines = [
        "",
        "**Estimated cycles (an estimate, not a measurement).** The M55 executes a 128-bit MVE instruction in",
        "two beats, so `est. cycles` = executed instructions + executed MVE instructions, with the MVE",
        "instructions of one inference counted by `benchmarks/mve_trace.py` (QEMU `-singlestep -d exec`, each",
        "executed address classified from the ELF's disassembly: a Q-register operand, or VPT/VPST/VCTP;",
        "`traced` is that run's instruction count, a cross-check of the `-icount` number plus the input",
        "copy). Pipeline overlap of MVE with scalar work, dual beats and memory wait states are not modelled.",
        "The peer's MVE instructions are counted the same way on its ELF.",
        "",
        "| model | traced | MVE instructions | MVE share | est. cycles (Helium) | est. cycles / TFLM + CMSIS-NN |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "mve_instructions" not in r:
            continue
        est = r["mve"] + r["mve_instructions"]
        p = peer.get(r["model"], {})
        ratio = f"**{est / (p['cmsis'] + p['mve']):.2f}**" if p.get("cmsis") and p.get("mve") is not None else "-"
        lines.append(
            f"| {r['model']} | {r['mve_traced']:,} | {r['mve_instructions']:,} | "
            f"{r['mve_instructions'] / r['mve_traced']:.0%} | {est:,} | {ratio} |"
        )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write (or replace) the m55 section of this markdown file")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    ap.add_argument(
        "--peer",
        type=Path,
        help='JSON like benchmarks/peer_m55.json ({"models": {model: '
        '{"instructions", "mve", "text"}}}) measured the same way '
        "(default: that file)",
    )
    ap.add_argument("--profile", action="store_true", help="also print the instructions of each kernel call")
    args = ap.parse_args(argv)
    missing = available()
    if missing:
        print(
            f"bench_m55: needs {', '.join(missing)} (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
            "qemu-system-arm make)",
            file=sys.stderr,
        )
        return 2
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    source = args.peer or PEER_FILE
    recorded = json.loads(source.read_text())
    peer = {
        k: {"cmsis": int(v["instructions"]), "mve": v.get("mve"), "text": v.get("text")}
        for k, v in recorded["models"].items()
    }
    for k, r in TFLM_REFERENCE.items():
        peer.setdefault(k, {})["reference"] = r
    prov = recorded.get("provenance", {})
    note = (
        f"`{source.name}`, measured the same way on a build of TFLM {prov.get('tflm', '?')[-40:][:8]} with "
        f"CMSIS-NN {prov.get('cmsis_nn', '?')[-40:][:8]} made here from fetched sources ({prov.get('build', '')}); "
        "this command does not rebuild it (the repository carries no build of fetched code). "
        f"{REFERENCE_PROVENANCE}"
    )
    print(f"bench_m55: TFLM + CMSIS-NN is not built by this command; its numbers come from {source.name}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-m55-") as tmp:
        for name in names:
            try:
                row = measure(name, MODELS[name], Path(tmp), args.profile)
            except ZoflashError as err:
                print(f"{name}: skipped ({str(err).splitlines()[0]})", flush=True)
                continue
            rows.append(row)
            for op, a, b in zip(row["ops"], row["portable_steps"], row["mve_steps"]):
                print(f"  {op['type']:<22} portable {a:>10,}  Helium {b:>10,}")
            cmsis = peer.get(name, {}).get("cmsis")
            print(
                f"{name}: portable {row['portable']:,}, Helium {row['mve']:,} instructions"
                + (f" ({row['mve'] / cmsis:.2f}x TFLM + CMSIS-NN)" if cmsis else "")
                + ("" if row["mve_exact"] and row["portable_exact"] else "  NOT BIT-EXACT"),
                flush=True,
            )
    body = to_markdown(rows, peer, note)
    if args.write:
        write_section(args.write, SECTION, body)
        print(f"wrote the {SECTION} section of {args.write}")
    else:
        print(body)
    return 0 if all(r["mve_exact"] and r["portable_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
