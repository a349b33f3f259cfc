"""Inference benchmark: zoflash's generated C against the tflite-micro interpreter, same run.

For every positive fixture model:
  * time per inference, both called from Python in the same way (one `invoke()` call per
    inference on data already in place; rounds interleaved, best round kept), and the ratio;
  * time per inference of the generated C in its own native loop (no Python), for reference;
  * arena bytes: ours (activations + inputs + outputs) vs TFLM's non-persistent arena ("head"),
    and TFLM's total (head + persistent tail).

Usage: python benchmarks/bench_inference.py [--write docs/benchmarks.md] [--rounds 5]
Machines are noisy: read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_zoo import public_models  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
COMPUTE_HEAVY = {"kws_dscnn.tflite", "mbv2_block.tflite"}


def _per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def bench_model(model_file: str, workdir: Path, rounds: int) -> dict:
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets.host_runner import HostModel

    path = (
        public_models() / model_file.removeprefix("public/")
        if model_file.startswith("public/")
        else FIXTURES / model_file
    )
    result = api.build(path, "host", workdir / Path(model_file).stem)
    ours = HostModel(result.bundle)
    model = api.load_model(path)
    x = api.random_inputs(model, 1, seed=0)
    ours.run(x)  # leaves the input in place
    tflm = TflmInterpreter(model.raw)
    tflm.invoke([x[0]])
    interp = tflm._it  # the raw runtime object: no wrapper overhead in the timed loop
    # calibrate the number of calls to ~0.2 s per round for the slower one
    probe = max(_per_call(ours.invoke, 20), _per_call(interp.invoke, 20))
    calls = max(20, int(0.2 / max(probe, 1e-7)))
    t_ours, t_tflm = [], []
    for _ in range(rounds):
        t_ours.append(_per_call(ours.invoke, calls))
        t_tflm.append(_per_call(interp.invoke, calls))
    exe = result.bundle.path / "build" / f"{result.bundle.prefix}_run"
    native_calls = max(100, int(0.3 / max(min(t_ours), 1e-7)))
    native = (
        min(
            float(
                subprocess.run(
                    [str(exe), "--bench", str(native_calls)], capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(rounds)
        )
        * 1e-9
    )
    arena = tflm.arena_usage()
    return dict(
        model=model_file,
        ours_us=min(t_ours) * 1e6,
        tflm_us=min(t_tflm) * 1e6,
        speedup=min(t_tflm) / min(t_ours),
        native_us=native * 1e6,
        arena=result.bundle.manifest["memory"]["arena_bytes"],
        tflm_head=arena["head"],
        tflm_total=arena["total"],
        weights=result.bundle.manifest["memory"]["weights_bytes"],
        code=result.code_bytes,
    )


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_section(path: Path, name: str, body: str) -> None:
    """Replace the section `name` of the markdown file `path` (between its begin/end markers),
    keeping every other section; a missing section is appended, a missing file created."""
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{body.strip()}\n{end}\n"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        text = head + block + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def to_markdown(rows: list[dict], command: str, skipped: list[tuple[str, str, int]] = ()) -> str:
    lines = [
        "## Inference: generated C vs the tflite-micro interpreter (host)",
        "",
        f"Command: `{command}` (also `make bench`). Machine: {cpu_name()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.",
        "",
        "Method: both engines are called from Python the same way, one `invoke()` per inference on",
        "input data already in place (ctypes call into the generated C library; the tflite-micro",
        "interpreter's `invoke()`), in interleaved rounds; the best round of each is kept. `native` is the",
        "generated C timed in its own C loop (`build/<model>_run --bench N`), without Python. Arena:",
        "ours holds all activations, inputs and outputs; TFLM `head` is its non-persistent arena",
        "(activations, inputs, outputs, scratch), `total` adds its persistent structures. Code: the",
        "machine code (`.text`) of the objects the library is linked from (model, kernels, ZO-step maths;",
        "host compiler, the board's flags).",
        "",
        "| model | zoflash µs | TFLM µs | speed-up | zoflash native µs | arena B | TFLM head B | TFLM total B | weights B | code B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        star = " *" if r["model"] in COMPUTE_HEAVY else ""
        lines.append(
            f"| {r['model']}{star} | {r['ours_us']:.1f} | {r['tflm_us']:.1f} | {r['speedup']:.2f}x | "
            f"{r['native_us']:.1f} | {r['arena']} | {r['tflm_head']} | {r['tflm_total']} | "
            f"{r['weights']} | {r['code']} |"
        )
    lines += ["", "`*` compute-heavy fixtures (target: at least 2x TFLM).", ""]
    if skipped:
        lines += ["Not benchmarked (zoflash does not compile them yet):", ""]
        lines += [f"- {m}: {first}" + (f" (and {n - 1} more problems)" if n > 1 else "") for m, first, n in skipped]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    from zoflash.errors import UnsupportedModelError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write the markdown report here")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", nargs="*", help="fixture file names (default: all positive fixtures)")
    args = ap.parse_args(argv)
    index = json.loads((FIXTURES / "fixtures.json").read_text())["fixtures"]
    public = json.loads((public_models() / "manifest.json").read_text())["models"]
    models = args.models or (
        [f["file"] for f in index if f["kind"] == "positive"] + [f"public/{m['file']}" for m in public]
    )
    rows, skipped = [], []
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-") as tmp:
        for m in models:
            try:
                row = bench_model(m, Path(tmp), args.rounds)
            except UnsupportedModelError as err:  # a line, not a crash: the benchmark covers what compiles
                first = err.problems[0] if err.problems else str(err)
                skipped.append((m, first, len(err.problems)))
                print(
                    f"{m:<24} skipped: not supported ({first}"
                    + (f"; {len(err.problems) - 1} more problems" if len(err.problems) > 1 else "")
                    + ")"
                )
                continue
            rows.append(row)
            print(
                f"{m:<24} zoflash {row['ours_us']:9.1f} us  tflm {row['tflm_us']:9.1f} us  "
                f"speed-up {row['speedup']:5.2f}x  native {row['native_us']:9.1f} us  "
                f"arena {row['arena']} vs tflm head {row['tflm_head']}",
                flush=True,
            )
    command = "python benchmarks/bench_inference.py --write docs/benchmarks.md"
    report = to_markdown(rows, command, skipped)
    if args.write:
        write_section(args.write, "inference", report)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
