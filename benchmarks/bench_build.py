"""Build benchmark: how long the user waits for `zoflash validate` and `zoflash build`.

  * `zoflash validate` of the digits CNN on 100 random inputs, cold (empty object cache) and warm
    (the static runtime's objects reused from the cache);
  * `zoflash build` of person_detect's head training for the emulated M55 (mps3-an547) with 10,
    250, 500 and 1000 training images (0 to 9.4 MB of data), cold and warm; the slope says how
    much each 5 MB of data adds (the data is linked from binary files, not compiled as C text);
  * the same build without the cache (ZOFLASH_CACHE=off): the ratio is what the cache saves;
  * `zoflash build --board stm32n6 --boot flash` of the MobileNetV2 0.35/128 stand-in's head
    training with 10 and 1000 images (0.5 to 49 MB, in the external NOR flash: more than the SRAM
    holds, so development mode reads them there too), the slope per 5 MB of data, and the 1000 images for the emulated
    board (in its DDR).

Besides the wall time (which other work on the machine inflates) the warm builds' CPU time is
reported: user + system of the CLI and everything it runs (make, gcc, as, ld).

Each command runs as a user runs it (a subprocess of the CLI), into a new bundle directory each
time; the best of `--rounds` is kept.
Usage: python benchmarks/bench_build.py [--write docs/benchmarks.md] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inference import cpu_name, write_section  # noqa: E402
from model_zoo import public_models  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ZOFLASH = [sys.executable, "-m", "zoflash.cli"]
PERSON = public_models() / "person_detect.tflite"
SIZES = (10, 250, 500, 1000)
MOBILENET = FIXTURES / "standin_mobilenet_v2_0.35_128.tflite"
MOBILENET_BUILDS = (("stm32n6", "flash", 10), ("stm32n6", "flash", 1000), ("mps3-an547", "dev", 1000))
LAST_CPU = [0.0]  # CPU seconds of the last best() round kept


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the command and all it ran)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    dt, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return dt, cpu


def best(argv: list[str], env: dict, rounds: int, before=None) -> float:
    """The best wall time of `rounds` runs (its CPU time in LAST_CPU)."""
    runs = []
    for _ in range(rounds):
        if before is not None:
            before()
        runs.append(timed(argv, env))
    wall, LAST_CPU[0] = min(runs)
    return wall


def person_data(path: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    x = rng.random((max(n, 1), 96, 96, 1), dtype=np.float32)[:n]
    np.savez(
        path,
        x_train=x,
        y_train=rng.integers(0, 2, n),
        x_test=rng.random((16, 96, 96, 1), dtype=np.float32),
        y_test=rng.integers(0, 2, 16),
    )
    return path


def mobilenet_data(path: Path, n: int) -> Path:
    """n int8 images of 128x128x3 (the model's input type: 49 MB for 1000, not 4x that as float)."""
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(-128, 128, (n, 128, 128, 3), dtype=np.int8),
        y_train=rng.integers(0, 10, n),
        x_test=rng.integers(-128, 128, (16, 128, 128, 3), dtype=np.int8),
        y_test=rng.integers(0, 10, 16),
    )
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="write the markdown report here")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoflash-bench-build-") as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        env = {**os.environ, "ZOFLASH_CACHE": str(cache)}
        off = {**os.environ, "ZOFLASH_CACHE": "off"}

        def clear():
            subprocess.run([*ZOFLASH, "cache", "--clear"], env=env, capture_output=True)

        validate = [*ZOFLASH, "-q", "validate", "--model", str(FIXTURES / "digits_cnn.tflite"), "--random", "100"]
        cold = best(validate, env, args.rounds, before=clear)
        timed(validate, env)
        warm = best(validate, env, args.rounds)
        warm_cpu = LAST_CPU[0]
        rows.append(("`zoflash validate` digits CNN, 100 inputs", cold, warm, best(validate, off, 1), warm_cpu))
        print(f"validate digits: cold {cold:.2f} s, warm {warm:.2f} s", flush=True)
        builds = {}
        for n in SIZES:
            data = person_data(tmp / f"pd{n}.npz", n)
            out = tmp / f"b{n}"
            build = [
                *ZOFLASH,
                "-q",
                "build",
                "--board",
                "mps3-an547",
                "--model",
                str(PERSON),
                "--data",
                str(data),
                "--steps",
                "3",
                "--out",
                str(out),
            ]

            def fresh(out=out):  # a new bundle every time: make must not find the last round's objects
                shutil.rmtree(out, ignore_errors=True)

            cold = best(build, env, args.rounds, before=lambda: (clear(), fresh()))
            warm = best(build, env, args.rounds, before=fresh)
            warm_cpu = LAST_CPU[0]
            nocache = best(build, off, 1, before=fresh)
            mb = n * 96 * 96 / 1e6  # the images as int8 samples
            builds[n] = (mb, warm, warm_cpu)
            rows.append(
                (
                    f"`zoflash build --board mps3-an547` person_detect, {n} training images ({mb:.1f} MB)",
                    cold,
                    warm,
                    nocache,
                    warm_cpu,
                )
            )
            print(
                f"build person_detect {n} images: cold {cold:.2f} s, warm {warm:.2f} s, no cache {nocache:.2f} s",
                flush=True,
            )
        # ---- MobileNetV2 0.35/128
        mobilenet = {}
        for board, boot, n in MOBILENET_BUILDS:
            data = mobilenet_data(tmp / f"mn{n}.npz", n)
            out = tmp / f"mn-{board}-{n}"
            build = [
                *ZOFLASH,
                "-q",
                "build",
                "--board",
                board,
                "--boot",
                boot,
                "--model",
                str(MOBILENET),
                "--data",
                str(data),
                "--steps",
                "3",
                "--out",
                str(out),
            ]

            def fresh(out=out):
                shutil.rmtree(out, ignore_errors=True)

            cold = best(build, env, args.rounds, before=lambda: (clear(), fresh()))
            warm = best(build, env, args.rounds, before=fresh)
            warm_cpu = LAST_CPU[0]
            nocache = best(build, off, 1, before=fresh)
            mb = n * 128 * 128 * 3 / 1e6
            mobilenet[(board, n)] = (mb, warm, warm_cpu)
            flag = " --boot flash" if boot == "flash" else ""
            rows.append(
                (
                    f"`zoflash build --board {board}{flag}` MobileNetV2 0.35/128 stand-in, {n} training images "
                    f"({mb:.1f} MB)",
                    cold,
                    warm,
                    nocache,
                    warm_cpu,
                )
            )
            print(
                f"build mobilenet {board} {boot} {n} images: cold {cold:.2f} s, warm {warm:.2f} s "
                f"(CPU {warm_cpu:.2f} s), no cache {nocache:.2f} s",
                flush=True,
            )

    def per_5mb(a, b) -> str:
        """Wall and CPU seconds added per 5 MB of data between two builds (mb, wall, cpu)."""
        return "{:+.2f} s ({:+.2f} s of CPU)".format(*((b[k] - a[k]) / (b[0] - a[0]) * 5.0 for k in (1, 2)))

    slope = per_5mb(builds[SIZES[0]], builds[SIZES[-1]])
    mn_slope = per_5mb(mobilenet[("stm32n6", 10)], mobilenet[("stm32n6", 1000)])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## Builds: what the user waits for",
        "",
        "Command: `python benchmarks/bench_build.py --write docs/benchmarks.md` (also `make bench`). Machine: "
        f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
        f"1-minute load average {load:.2f} at the end (other work on the machine inflates the times).",
        "",
        "Each command is run as a user runs it (the CLI in a subprocess), best of "
        f"{args.rounds}. Cold: the object cache emptied first; warm: the static runtime's objects "
        "come from the cache (`zoflash cache`); no cache: `ZOFLASH_CACHE=off`.",
        "",
        "| command | cold s | warm s | no cache s | warm CPU s |",
        "|---|---:|---:|---:|---:|",
        *[f"| {name} | {c:.2f} | {w:.2f} | {n:.2f} | {cpu:.2f} |" for name, c, w, n, cpu in rows],
        "",
        f"Data slope (warm): person_detect {SIZES[0]} to {SIZES[-1]} images {slope} per 5 MB of training "
        f"data; MobileNetV2 0.35/128 on stm32n6 (flash boot) 10 to 1000 images {mn_slope} per 5 MB. The "
        "data and the model's large weights are linked from binary files with `.incbin` (zo_incbin.h), not "
        "compiled as C text. The MobileNetV2 stand-in is `tests/fixtures/standin_mobilenet_v2_0.35_128.tflite`; "
        "the STM32N6's SRAM holds at most 21 of its training images, so both boot modes keep the 1000 in the "
        "external NOR flash (read in place).",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.write:
        write_section(args.write, "build", report)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
