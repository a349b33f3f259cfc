"""Cortex-M55 inference benchmark: executed instructions per inference under QEMU mps3-an547.

For each model (the fixtures kws_dscnn, mbv2_block, digits_cnn, conv1d_ts and the public
person_detect) the mps3-an547 bundle is generated and linked with a small harness (in place of
a firmware's main: the port's start-up, console and SysTick clock) that writes one random input,
runs the model, prints a hash of the outputs (compared here with the tflite-micro interpreter on
the host: the emulated M55 must be bit-exact) and then times repeated inferences. Under
`qemu-system-arm -icount shift=0` QEMU's virtual clock advances 1 ns per executed instruction and
the port's clock follows it, so virtual microseconds x 1000 / repetitions is the number of
executed instructions per inference (every instruction counts one, an MVE instruction on 16 lanes
as much as a scalar add: not cycles).

Two builds of zoflash's C: as generated (the Helium kernels of zo_kernels_mve.c) and with
-DZO_NO_MVE (the portable kernels, what the M55 ran before them). The peer, TFLM with Arm's
CMSIS-NN kernels, is shown from its recorded measurement (issue 10: TFLM 90b983c2 built with its
own Makefile, CMSIS-NN 4ab83cc3), labelled as recorded; `--peer FILE` takes a JSON file
{model: instructions per inference} measured the same way instead.

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

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SECTION = "m55"
COMMAND = "python benchmarks/bench_m55.py --write docs/benchmarks.md"
MODELS = {
    "kws_dscnn": FIXTURES / "kws_dscnn.tflite",
    "mbv2_block": FIXTURES / "mbv2_block.tflite",
    "digits_cnn": FIXTURES / "digits_cnn.tflite",
    "conv1d_ts": FIXTURES / "conv1d_ts.tflite",
    "person_detect": FIXTURES / "public" / "person_detect.tflite",
}
# TFLM + CMSIS-NN and TFLM's reference kernels, instructions per inference, as measured for issue 10.
RECORDED_PEER = {
    "kws_dscnn": (1_358_133, 29_528_000),
    "mbv2_block": (1_869_182, 26_297_000),
    "digits_cnn": (52_513, 446_956),
    "conv1d_ts": (114_942, 914_682),
    "person_detect": (6_508_000, 91_475_000),
}
RECORDED_PROVENANCE = ("recorded in issue 10: TFLM 90b983c2 built with its own Makefile (`TARGET=cortex_m_generic "
                       "TARGET_ARCH=cortex-m55 OPTIMIZED_KERNEL_DIR=cmsis_nn BUILD_TYPE=release`), CMSIS-NN 4ab83cc3, "
                       "arm-none-eabi-gcc 12.2, QEMU 7.2, same -icount method")
# At most this share of CMSIS-NN's executed instructions is MVE code (functions; measured for issue 10).
PEER_MVE_BOUND = 0.45
BUILDS = (("mve", "Helium", ""), ("portable", "portable (-DZO_NO_MVE)", "-DZO_NO_MVE"))
TARGET_US = 5000  # time repeated inferences for at least this much virtual time (5 M instructions)
TIMEOUT_S = 600

HARNESS_C = r"""/* zo_bench_m55.c - instructions per inference on the Cortex-M55 under QEMU -icount shift=0
 * (benchmarks/bench_m55.py): one input from bench_input.h, a hash of the outputs, then repeated
 * inferences timed with the port's clock (1 us = 1000 instructions under -icount shift=0). */
#include <stdint.h>
#include <string.h>

#include "zo_port.h"
#include "bench_input.h"

static void put(const char *s)
{
    zo_port_write((const uint8_t *)s, (uint32_t)strlen(s));
}

static void put_line(const char *name, uint64_t a, uint64_t b)
{
    char text[24];
    uint64_t v[2] = {a, b};
    put(name);
    for (int i = 0; i < 2; ++i) {
        int n = 0;
        do {
            text[sizeof text - 1 - n++] = (char)('0' + (int)(v[i] % 10u));
            v[i] /= 10u;
        } while (v[i] != 0u);
        put(" ");
        zo_port_write((const uint8_t *)text + sizeof text - n, (uint32_t)n);
    }
    put("\n");
}

static void run_once(void)
{
    memcpy(BENCH_INPUT_PTR, bench_input, sizeof bench_input);
    BENCH_INVOKE();
}

#ifdef BENCH_TRACE
/* One inference between two calls of this, for mve_trace.py (which watches its address). */
void zo_bench_mark(void);
__attribute__((noinline)) void zo_bench_mark(void)
{
    __asm volatile("" ::: "memory");
}
#endif

int main(void)
{
    zo_port_init();
    BENCH_INIT();
#ifdef BENCH_TRACE
    zo_bench_mark();
    run_once();
    zo_bench_mark();
    put("end\n");
    zo_port_exit(0);
#endif
    put("zo_bench_m55\n");
    uint32_t n = 1000000u;
    uint64_t t0 = zo_port_time_us();
    __asm volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    put_line("calibration", 2000000u, zo_port_time_us() - t0);
    run_once();
    uint32_t h = 2166136261u;
    for (int32_t o = 0; o < BENCH_NUM_OUTPUTS; ++o) {
        const uint8_t *out = (const uint8_t *)BENCH_OUTPUT(o);
        for (int32_t i = 0; i < BENCH_OUTPUT_BYTES(o); ++i) {
            h = (h ^ out[i]) * 16777619u;
        }
    }
    put_line("hash", h, 0u);
    uint32_t reps = 1u;
    uint64_t us;
    for (;;) {
        t0 = zo_port_time_us();
        for (uint32_t r = 0; r < reps; ++r) {
            run_once();
        }
        us = zo_port_time_us() - t0;
        if (us >= BENCH_TARGET_US || reps >= (1u << 16)) {
            break;
        }
        reps *= 2u;
    }
    put_line("invoke", reps, us);
    /* the input copy alone, to subtract */
    t0 = zo_port_time_us();
    for (uint32_t r = 0; r < reps; ++r) {
        memcpy(BENCH_INPUT_PTR, bench_input, sizeof bench_input);
        __asm volatile("" ::: "memory");
    }
    put_line("copy", reps, zo_port_time_us() - t0);
#ifdef BENCH_PROFILE
    /* each kernel call alone (the model's run_steps), same repetitions */
    for (int32_t s = 0; s < BENCH_NUM_STEPS; ++s) {
        t0 = zo_port_time_us();
        for (uint32_t r = 0; r < reps; ++r) {
            BENCH_RUN_STEPS(s, s + 1);
        }
        put_line("step", (uint64_t)s, (zo_port_time_us() - t0) * 1000u / reps);
    }
#endif
    put("end\n");
    zo_port_exit(0);
}
"""

HARNESS_MK = """# bench_m55.mk - the harness with the bundle's flags and linker script (benchmarks/bench_m55.py):
# make -f Makefile -f bench_m55.mk BENCH=<build> EXTRA_CFLAGS=... build/bench-<build>/zo_bench_m55.elf
BENCH_DIR := build/bench-$(BENCH)
BENCH_SOURCES := $(SOURCES) $(BENCH_PORT_SOURCES) zo_bench_m55.c
BENCH_OBJECTS := $(BENCH_SOURCES:%.c=$(BENCH_DIR)/%.o)

$(BENCH_DIR):
\tmkdir -p $@

$(BENCH_DIR)/%.o: %.c $(HEADERS) bench_input.h | $(BENCH_DIR)
\t$(CC) $(CFLAGS) -c -o $@ $<

$(BENCH_DIR)/zo_bench_m55.elf: $(BENCH_OBJECTS) link.ld
\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(BENCH_OBJECTS) $(LIBS)
"""

# The port's files an inference bundle leaves out (it is a library): start-up, console, clock.
PORT_FILES = (("ports/cortex-m", "zo_port_cortex_m.c"), ("ports/cortex-m", "zo_port_cortex_m.h"),
              ("ports/mps3-an547", "zo_port_mps3_an547.c"), ("runtime/training", "zo_port.h"))


def available() -> list[str]:
    return [t for t in ("arm-none-eabi-gcc", "qemu-system-arm", "make") if shutil.which(t) is None]


def macs(model) -> int:
    """Multiply-accumulates of the conv, depthwise and FC layers (the kernels' own loops)."""
    total = 0
    for step in model.program.steps:
        p = step.params
        if step.kernel == "conv2d":
            total += p["output_h"] * p["output_w"] * p["output_c"] * p["filter_h"] * p["filter_w"] * p["filter_c"]
        elif step.kernel == "depthwise_conv2d":
            total += p["output_h"] * p["output_w"] * p["output_c"] * p["filter_h"] * p["filter_w"]
        elif step.kernel == "fully_connected":
            total += p["rows"] * p["units"] * p["depth"]
    return total


def _input_header(prefix: str, x: np.ndarray, n_outputs: int, n_steps: int) -> str:
    vals = ", ".join(str(int(v)) for v in np.asarray(x).view(np.uint8).ravel())
    return "\n".join([
        "/* generated by benchmarks/bench_m55.py: the input bytes and the model's entry points */",
        "#include <stdint.h>", f'#include "{prefix}.h"',
        f"#define BENCH_INIT() {prefix}_init()", f"#define BENCH_INVOKE() {prefix}_invoke()",
        f"#define BENCH_INPUT_PTR {prefix}_input(0)", f"#define BENCH_OUTPUT(o) {prefix}_output(o)",
        f"#define BENCH_OUTPUT_BYTES(o) {prefix}_outputs[o].bytes", f"#define BENCH_NUM_OUTPUTS {n_outputs}",
        f"#define BENCH_TARGET_US {TARGET_US}u", f"#define BENCH_RUN_STEPS(a, b) {prefix}_run_steps(a, b)",
        f"#define BENCH_NUM_STEPS {n_steps}",
        f"static const uint8_t bench_input[] = {{{vals}}};", ""])


def fnv(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def measure(name: str, path: Path, workdir: Path, profile: bool = False, trace: bool = True) -> dict:
    """Both builds of one model: instructions per inference, code bytes, arena, bit-exactness."""
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter

    model = api.load_model(path)
    compiled = api.compile_model(model)
    x = api.random_inputs(model, 1, seed=0)[0]
    want = fnv(b"".join(np.ascontiguousarray(o).tobytes() for o in TflmInterpreter(model.raw).invoke([x])))
    bundle = api.generate(path, "mps3-an547", workdir / name)
    root = Path(__file__).resolve().parent.parent / "firmware_templates"
    for sub, fname in PORT_FILES:
        shutil.copy(root / sub / fname, bundle.path / fname)
    (bundle.path / "bench_input.h").write_text(_input_header(bundle.prefix, x, len(bundle.manifest["outputs"]),
                                                                len(bundle.manifest["ops"])))
    (bundle.path / "zo_bench_m55.c").write_text(HARNESS_C)
    (bundle.path / "bench_m55.mk").write_text(HARNESS_MK)
    row = dict(model=name, macs=macs(compiled), arena=bundle.manifest["memory"]["arena_bytes"],
               ops=bundle.manifest["ops"])
    for build, _, cflags in BUILDS:
        elf = _build_harness(bundle.path, build, cflags + (" -DBENCH_PROFILE" if profile else ""))
        run = subprocess.run(["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-semihosting", "-icount",
                              "shift=0", "-kernel", str(elf)], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        vals, steps = {}, []
        for line in run.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit():
                vals[parts[0]] = (int(parts[1]), int(parts[2]))
                if parts[0] == "step":
                    steps.append(int(parts[2]))
        row[f"{build}_steps"] = steps
        if run.returncode != 0 or "end" not in run.stdout.split():
            raise RuntimeError(f"{name} ({build}) failed on QEMU (exit {run.returncode}):\n{run.stdout}{run.stderr}")
        instr, us = vals["calibration"]
        if abs(us * 1000 - instr) > 1000:
            raise RuntimeError(f"QEMU's clock does not count 1 ns per instruction ({instr} took {us} us)")
        reps, us = vals["invoke"]
        _, copy_us = vals["copy"]
        row[build] = round((us - copy_us) * 1000 / reps)
        row[f"{build}_exact"] = vals["hash"][0] == want
        text = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True,
                              text=True, check=False).stdout
        row[f"{build}_text"] = next((int(line.split()[1]) for line in text.splitlines()
                                     if line.startswith(".text ")), 0)
    if trace:
        traced = mve_trace.count(_build_harness(bundle.path, "trace", "-DBENCH_TRACE"))
        row["mve_traced"], row["mve_instructions"] = traced["instructions"], traced["mve"]
    return row


def _build_harness(bundle: Path, build: str, cflags: str) -> Path:
    """The harness ELF of one build (its own object directory) with extra C flags."""
    elf = f"build/bench-{build}/zo_bench_m55.elf"
    proc = subprocess.run(["make", "-s", "-C", str(bundle), "-f", "Makefile", "-f", "bench_m55.mk", f"BENCH={build}",
                           f"EXTRA_CFLAGS={cflags}", "BENCH_PORT_SOURCES=zo_port_cortex_m.c zo_port_mps3_an547.c", elf],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{bundle.name} ({build}): the harness did not build:\n{proc.stdout}{proc.stderr}")
    return bundle / elf


def to_markdown(rows: list[dict], peer: dict, peer_note: str) -> str:
    gcc, qemu = tool_version("arm-none-eabi-gcc"), tool_version("qemu-system-arm")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    lines = [
        "## Cortex-M55 (QEMU mps3-an547): instructions per inference, zoflash vs TFLM + CMSIS-NN",
        "",
        f"Command: `{COMMAND}` ({time.strftime('%Y-%m-%d')}, zoflash at {commit}; {gcc}, {qemu}).",
        "",
        "Method: each model's `mps3-an547` bundle (board flags `-mcpu=cortex-m55 -mthumb -mfloat-abi=hard",
        "-mfpu=fpv5-d16 -O2`; code, weights in ITCM, arena in DTCM) is linked with a harness that writes one",
        "random input, runs the model and prints a hash of its outputs (`bit-exact`: equal to the",
        "tflite-micro interpreter's on the host), then repeats inferences for at least",
        f"{TARGET_US:,} µs of virtual time under `qemu-system-arm -M mps3-an547 -icount shift=0`, where the",
        "port's SysTick clock advances 1 µs per 1000 executed instructions (checked on a calibration loop);",
        "instructions per inference = virtual µs × 1000 / repetitions, minus the copy of the input.",
        "These are **executed instructions, not cycles**: QEMU counts an MVE instruction (16 lanes) as",
        "one, like a scalar add; the M55 executes a 128-bit MVE instruction in two beats.",
        "`Helium` is the bundle as generated (zo_kernels_mve.c), `portable` the same bundle with",
        "`-DZO_NO_MVE` (the scalar kernels: the M55 before the Helium kernels). MACs: conv, depthwise and FC.",
        "`code` is the harness ELF's `.text` (kernels, model, port, harness; weights are in `.weights`).",
        "",
        f"TFLM + CMSIS-NN and TFLM's reference kernels: {peer_note}.",
        "",
        "| model | MACs | TFLM + CMSIS-NN | TFLM reference | zoflash portable | zoflash Helium | "
        "Helium / CMSIS-NN | Helium / portable | instr/MAC (Helium) | bit-exact | code (Helium) | arena |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        p = peer.get(r["model"], {})
        cmsis, tref = p.get("cmsis"), p.get("reference")
        ratio = f"**{r['mve'] / cmsis:.2f}**" if cmsis else "-"
        exact = "yes" if r["mve_exact"] and r["portable_exact"] else "**NO**"
        lines.append(
            f"| {r['model']} | {r['macs'] / 1e6:.3g} M | {f'{cmsis:,}' if cmsis else '-'} | "
            f"{f'{tref:,}' if tref else '-'} | {r['portable']:,} | {r['mve']:,} | {ratio} | "
            f"{r['mve'] / r['portable']:.2f} | {r['mve'] / max(r['macs'], 1):.2f} | {exact} | "
            f"{r['mve_text']:,} | {r['arena']:,} |")
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
        "Where the peer's own MVE count was not measured, its cycles lie between its instructions (no MVE)",
        f"and {1 + PEER_MVE_BOUND:.2f}x them (at most {PEER_MVE_BOUND:.0%} of CMSIS-NN's executed instructions "
        "are in its MVE functions, measured with the peer for issue 10): the ratio is shown as that range.",
        "",
        "| model | traced | MVE instructions | MVE share | est. cycles (Helium) | est. cycles / TFLM + CMSIS-NN |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "mve_instructions" not in r:
            continue
        est = r["mve"] + r["mve_instructions"]
        p = peer.get(r["model"], {})
        if p.get("cmsis") and p.get("mve") is not None:
            ratio = f"**{est / (p['cmsis'] + p['mve']):.2f}**"
        elif p.get("cmsis"):
            ratio = f"{est / (p['cmsis'] * (1 + PEER_MVE_BOUND)):.2f} to **{est / p['cmsis']:.2f}**"
        else:
            ratio = "-"
        lines.append(f"| {r['model']} | {r['mve_traced']:,} | {r['mve_instructions']:,} | "
                     f"{r['mve_instructions'] / r['mve_traced']:.0%} | {est:,} | {ratio} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write (or replace) the m55 section of this markdown file")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    ap.add_argument("--peer", type=Path, help="JSON {model: TFLM + CMSIS-NN instructions per inference} "
                                              "measured the same way (default: the recorded numbers)")
    ap.add_argument("--profile", action="store_true", help="also print the instructions of each kernel call")
    args = ap.parse_args(argv)
    missing = available()
    if missing:
        print(f"bench_m55: needs {', '.join(missing)} (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi "
              "qemu-system-arm make)", file=sys.stderr)
        return 2
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    peer = {k: {"cmsis": c, "reference": r, "mve": None} for k, (c, r) in RECORDED_PEER.items()}
    if args.peer:
        for k, v in json.loads(args.peer.read_text()).items():
            if isinstance(v, dict) and "instructions" in v:
                peer.setdefault(k, {"reference": None})
                peer[k].update(cmsis=int(v["instructions"]), mve=v.get("mve"))
        note = f"TFLM + CMSIS-NN from {args.peer.name} (measured); TFLM reference {RECORDED_PROVENANCE}"
    else:
        note = f"not measured in this run, {RECORDED_PROVENANCE}"
        print(f"bench_m55: TFLM + CMSIS-NN is not built here; showing its numbers {RECORDED_PROVENANCE}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-m55-") as tmp:
        for name in names:
            row = measure(name, MODELS[name], Path(tmp), args.profile)
            rows.append(row)
            for op, a, b in zip(row["ops"], row["portable_steps"], row["mve_steps"]):
                print(f"  {op['type']:<22} portable {a:>10,}  Helium {b:>10,}")
            cmsis = peer.get(name, {}).get("cmsis")
            print(f"{name}: portable {row['portable']:,}, Helium {row['mve']:,} instructions"
                  + (f" ({row['mve'] / cmsis:.2f}x TFLM + CMSIS-NN)" if cmsis else "")
                  + ("" if row["mve_exact"] and row["portable_exact"] else "  NOT BIT-EXACT"), flush=True)
    body = to_markdown(rows, peer, note)
    if args.write:
        write_section(args.write, SECTION, body)
        print(f"wrote the {SECTION} section of {args.write}")
    else:
        print(body)
    return 0 if all(r["mve_exact"] and r["portable_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
