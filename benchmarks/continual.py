"""The continual-adaptation stream benchmark: continual zoflash (the continual firmware's C on the
host) against no adaptation and an oracle that starts an episode at every true shift, on seeded
offline streams (benchmarks/continual_streams.py), at least 10 shifts each, of two tasks: digits
(the digits CNN, its samples seen through image conditions) and sensor (the smartwatch CNN of the
sensor task, its windows recorded through placements).

    .venv/bin/python benchmarks/continual.py [--quick] [--tasks digits sensor] [--seeds 11 12 13]
        [--write docs/guides/continual.md]

Measures: detection delay (labelled samples from a shift to the detector's alarm), false triggers
per 10,000 samples (alarms that are not a shift's first), serving accuracy over time (windows of
100 labelled samples), and the shifts where the deployed weights end below no adaptation (over the
last quarter of the shift's segment, by more than 1 point: the two serve the same samples).  No
adaptation is the same firmware with neither the detector nor shift marks: it serves the built-in
weights throughout.  The last line is the summary over all streams of every task.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import continual_streams as streams  # noqa: E402

from zoflash.monitor.continual import summary  # noqa: E402
from zoflash.training.options import TrainOptions  # noqa: E402
from zoflash.workflows.continual import simulate_continual  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "digits_cnn.tflite"
DATA = ROOT / "examples" / "digits_shift.npz"  # the build's data: its validation and test splits are built in
SENSOR_MODEL = ROOT / "tests" / "fixtures" / "motions_cnn.tflite"
SENSOR_DATA = ROOT / "tests" / "fixtures" / "motions_shift.npz"
# task: (model, the build's data, the stream of a seed)
TASKS = {
    "digits": (MODEL, DATA, streams.digits_stream),
    "sensor": (SENSOR_MODEL, SENSOR_DATA, streams.sensor_stream),
}
# The continual options of the benchmark (the zoflash flags): an episode of 60 steps at q = 1, the
# auto lr calibrated at q = 1, training at most 3/4 of an episode's passes.
OPTIONS = dict(mode="continual", data_source="stream", steps=60, duty=0.75, buffer=64, holdout=128, calib_q=1, rho=1.0)
SEEDS = (11, 12, 13)
QUICK_SEEDS = (21,)
WINDOW = 100
TOLERANCE = 0.01  # "below baseline": more than 1 point under it over the last quarter of a segment


def run(
    stream: dict, opts: TrainOptions, oracle: bool, tmp: Path, name: str, log: bool = False, task: str = "digits"
) -> dict:
    """One stream of a task through the continual firmware on the host: the summary of its records
    (with `log`, its JSONL log and weights file are kept in tmp as <name>.jsonl, <name>.weights.npz)."""
    model, data, _ = TASKS[task]
    path = tmp / f"{name}.npz"
    np.savez(path, x=stream["x"], y=stream["y"])
    r = simulate_continual(
        model,
        data,
        path,
        opts,
        log_path=tmp / f"{name}.jsonl" if log else None,
        plot=False,
        say=lambda *_: None,
        oracle=oracle,
    )
    return summary(r.records)


def evaluate(stream: dict, cont: dict, base: dict, orac: dict) -> dict:
    n = len(stream["y"])
    starts = [int(s) for s in stream["shift_starts"]]
    ends = starts[1:] + [n]
    alarms = [s for s, what in cont["events"] if what == "suspected"]
    delays, used = [], set()
    for s, e in zip(starts, ends):
        hit = next((a for a in alarms if s <= a < e), None)
        if hit is not None:
            delays.append(hit - s)
            used.add(hit)
    false = len([a for a in alarms if a not in used])

    def acc(summ, s, e):  # windows wholly in [s, e)
        w = summ["window_samples"]  # labelled samples served at the window's end
        keep = (w - WINDOW >= s) & (w <= e)
        return float(summ["window_accuracy"][keep].mean()) if keep.any() else float("nan")

    tail = [(e - (e - s) // 4, e) for s, e in zip(starts, ends)]  # where a segment ends: its last quarter
    below = sum(1 for s, e in tail if acc(cont, s, e) < acc(base, s, e) - TOLERANCE)
    return dict(
        samples=n,
        shifts=len(starts),
        detected=len(delays),
        delays=delays,
        false=false,
        below=below,
        accuracy=cont["accuracy"],
        none=base["accuracy"],
        oracle=orac["accuracy"],
        segments=[
            (
                str(c),
                acc(base, s, e),
                acc(cont, s, e),
                acc(orac, s, e),
                next((a - s for a in alarms if s <= a < e), None),
                acc(base, *t),
                acc(cont, *t),
            )
            for c, s, e, t in zip(stream["conditions"][1:], starts, ends, tail)
        ],
        decisions=cont["decisions"],
        oracle_decisions=orac["decisions"],
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short streams (the make-test tier)")
    ap.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS), help="default: both")
    ap.add_argument("--seeds", type=int, nargs="+", help="stream seeds of every task (default: 11 12 13; quick: 21)")
    ap.add_argument("--write", type=Path, help="replace the results block of this docs page")
    args = ap.parse_args()
    seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    opts = TrainOptions(**OPTIONS)
    results, lines = [], []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="zoflash-cl-bench-") as tmp:
        for task, seed in [(t, s) for t in args.tasks for s in seeds]:
            stream = TASKS[task][2](seed, args.quick)
            name = f"{task}-s{seed}"
            cont = run(stream, opts, False, Path(tmp), name, task=task)
            base = run(stream, opts, True, Path(tmp), f"{name}-none", task=task)  # no marks, no detector: never adapts
            orac = run(streams.with_marks(stream), opts, True, Path(tmp), f"{name}-oracle", task=task)
            r = evaluate(stream, cont, base, orac)
            results.append(r)
            lines.append(
                f"{task} seed {seed}: {r['samples']} samples, {r['shifts']} shifts, detected {r['detected']}, delays "
                f"{r['delays']}, false triggers {r['false']}, below baseline {r['below']}, accuracy "
                f"{r['accuracy'] * 100:.1f}% (none {r['none'] * 100:.1f}%, oracle {r['oracle'] * 100:.1f}%), "
                f"decisions {r['decisions']}, oracle {r['oracle_decisions']}"
            )
            print(lines[-1], flush=True)
            for cond, b, c, o, delay, b_end, c_end in r["segments"]:
                print(
                    f"    {cond:>16}: none {b * 100:5.1f}%  continual {c * 100:5.1f}%  oracle {o * 100:5.1f}%  "
                    f"alarm after {delay if delay is not None else '-'}; at the end none {b_end * 100:5.1f}% "
                    f"continual {c_end * 100:5.1f}%"
                )
    shifts = sum(r["shifts"] for r in results)
    detected = sum(r["detected"] for r in results)
    delays = [d for r in results for d in r["delays"]]
    samples = sum(r["samples"] for r in results)
    false = sum(r["false"] for r in results)
    w = [r["samples"] for r in results]
    mean = lambda k: float(np.average([r[k] for r in results], weights=w)) * 100  # noqa: E731
    last = (
        f"continual: shifts {shifts}, detected {detected}/{shifts}, median delay "
        f"{int(np.median(delays)) if delays else -1} samples, false triggers {false / samples * 10_000:.2f} per 10k "
        f"samples, below baseline {sum(r['below'] for r in results)}, mean accuracy {mean('accuracy'):.1f}% "
        f"(no adaptation {mean('none'):.1f}%, oracle {mean('oracle'):.1f}%)"
    )
    if args.write:
        write(args.write, args.tasks, seeds, args.quick, lines, last, time.time() - t0)
    print(last)
    return 0


BEGIN, END = "<!-- continual benchmark: begin -->", "<!-- continual benchmark: end -->"


def write(page: Path, tasks, seeds, quick: bool, lines: list[str], last: str, seconds: float) -> None:
    text = page.read_text()
    cmd = "python benchmarks/continual.py" + (" --quick" if quick else "")
    cmd += f" --tasks {' '.join(tasks)}" if sorted(tasks) != sorted(TASKS) else ""
    cmd += f" --seeds {' '.join(map(str, seeds))}"
    block = "\n".join([BEGIN, "", f"`{cmd}` ({seconds:.0f} s):", "", "```", *lines, last, "```", "", END])
    if BEGIN in text:
        text = text.split(BEGIN)[0] + block + text.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
