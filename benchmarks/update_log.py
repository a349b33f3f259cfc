"""The update log's measurements (research/2026-12-05-update-coefficients-binary16.md):

    python benchmarks/update_log.py coefficients   # c_i of real runs: range, binary16 vs bfloat16 error
    python benchmarks/update_log.py float32        # the same runs applying float32 c_i (the rule before)
    python benchmarks/update_log.py seeds          # seed-to-seed spread of the final accuracy (binary16)
    python benchmarks/update_log.py bytes          # bytes per update at q = 1, 2, 4, 8 on the digits example
    python benchmarks/update_log.py packing        # exponent spread per step; packed vs raw bytes, q 1-16

Digits (the example's digits CNN on rotated digits) and sensor (tests/fixtures motions task), the
default options, 400,000 passes, eval every 100 steps.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from zoflash.reference import zo_math as zm
from zoflash.spec import wire
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.replay import replay
from zoflash.workflows.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
F = ROOT / "tests" / "fixtures"
TASKS = {"digits": ("digits_cnn.tflite", "digits_shift.npz"), "sensor": ("motions_cnn.tflite", "motions_shift.npz")}
F32 = np.float32


def _run(task: str, engine: str, log=None, **options):
    model, data = TASKS[task]
    opts = make_options(budget=400_000, eval_every=100, **options)
    return simulate(F / model, F / data, opts, log, engine=engine, plot=False, say=lambda s: None)


def _exact(lr, delta, q) -> np.ndarray:
    return np.array([F32(F32(F32(lr) * F32(d)) / F32(q)) for d in delta], F32)


def _bf16(c: np.ndarray) -> np.ndarray:
    u = c.view(np.uint32).astype(np.uint64)
    return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(F32)


def coefficients() -> None:
    original = zm.coefficients
    for task in TASKS:
        seen: list[np.ndarray] = []

        def record(lr, delta, q, seen=seen):
            seen.append(_exact(lr, delta, q))
            return original(lr, delta, q)

        zm.coefficients = record
        try:
            _run(task, "reference")
        finally:
            zm.coefficients = original
        c = np.concatenate(seen)
        a = np.abs(c[c != 0]).astype(np.float64)
        half = zm.f32_from_f16(zm.f16_from_f32(c)).astype(np.float64)
        nz = c != 0
        rh = np.abs(half[nz] - c[nz]) / np.abs(c[nz])
        rb = np.abs(_bf16(c.copy())[nz].astype(np.float64) - c[nz]) / np.abs(c[nz])
        p1, p50, p99 = np.percentile(a, [1, 50, 99])
        print(
            f"{task}: {c.size} c_i, {int((~nz).sum())} zero; |c| min {a.min():.3g} 1% {p1:.3g} median {p50:.3g} "
            f"99% {p99:.3g} max {a.max():.3g}; below 2^-14 {100 * (a < 2**-14).mean():.2f}%, below 2^-24 "
            f"{int((a < 2**-24).sum())}; binary16 rel. error mean {rh.mean():.2g} max {rh.max():.2g}; "
            f"bfloat16 mean {rb.mean():.2g} max {rb.max():.2g}"
        )


def float32() -> None:
    original = zm.coefficients
    zm.coefficients = lambda lr, delta, q: (original(lr, delta, q)[0], _exact(lr, delta, q))
    try:
        for task in TASKS:
            print(f"{task}: float32 c_i, final test accuracy {_run(task, 'reference').evals[-1]['accuracy']:.4f}")
    finally:
        zm.coefficients = original


def seeds() -> None:
    for task in TASKS:
        acc = [_run(task, "c", seed=seed).evals[-1]["accuracy"] for seed in range(1, 7)]
        print(
            f"{task}: seeds 1-6 {' '.join(f'{a:.4f}' for a in acc)}, mean {np.mean(acc):.4f} sd {np.std(acc, ddof=1):.4f}"
        )


def bytes_per_update() -> None:
    model = F / TASKS["digits"][0]
    with tempfile.TemporaryDirectory() as tmp:
        per_update = {}
        for q in (1, 2, 4, 8):
            run = _run("digits", "c", Path(tmp) / f"q{q}.jsonl", scheduler="fixed", q=q)
            r = replay(model, run.log_path, Path(tmp) / f"q{q}.npz")
            a, b = load_weights(Path(tmp) / f"q{q}.npz"), load_weights(run.weights_path)
            same = all(
                a.tensors[i].tobytes() == b.tensors[i].tobytes() and a.best[i].tobytes() == b.best[i].tobytes()
                for i in b.tensors
            )
            frames = sum(x["type"] == "updates" for x in run.records)
            print(f"q = {q}: {r.steps} steps, {frames} frames, {r.summary()}, replay identical: {same}")
            per_update[q] = r.bytes_per_update
        for q in (2, 4, 8):
            print(f"bytes per extra direction q 1->{q}: {(per_update[q] - per_update[1]) / (q - 1):.3f}")


def _framed_bytes(entries: list[wire.UpdateEntry], packed: bool, rice_k: int = wire.UPDATE_RICE_K) -> int:
    """Wire bytes of the updates frames the device sends for these entries (raw: packing never
    shorter), packed with the Rice parameter rice_k."""
    original, original_k = wire.pack_coefficients, wire.UPDATE_RICE_K
    if not packed:
        wire.pack_coefficients = lambda c16: wire.Bits(0, 16 * len(c16))  # type: ignore[assignment]
    wire.UPDATE_RICE_K = rice_k
    try:
        log = wire.UpdateLog(wire.Encoder(), 0)
        out = sum(len(log.step(e.step, e.flags, e.coefficients)) for e in entries)
        return out + len(log.flush())
    finally:
        wire.pack_coefficients, wire.UPDATE_RICE_K = original, original_k


def packing() -> None:
    """Per task and q (fixed, and the default plateau scheduler with its lr trial): the spread of a
    step's exponent fields below its largest (the packed code's d), and bytes per update raw/packed."""
    with tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            per_q = {}
            for q in (1, 2, 4, 8, 16, None):
                options = {"scheduler": "fixed", "q": q} if q else {}
                run = _run(task, "c", Path(tmp) / f"{task}{q}.jsonl", **options)
                entries = [
                    e
                    for r in run.records
                    if r["type"] == "updates"
                    for e in wire.parse_updates(r["step"], r["steps"], bytes.fromhex(r["entries"]))
                ]
                applied = [e.coefficients for e in entries if e.flags & wire.UPDATE_APPLIED]
                d = np.concatenate([max(c) - np.array(c) for c in ([(h >> 10) & 31 for h in c] for c in applied)])
                spread = np.bincount(d, minlength=8)[:8] / d.size
                sizes = [_framed_bytes(entries, False)] + [_framed_bytes(entries, True, k) for k in (0, 1, 2)]
                per_q[q] = [b / len(applied) for b in sizes]
                print(
                    f"{task} q={q or 'plateau'}: {len(applied)} updates, d = 0..7: "
                    f"{' '.join(f'{100 * f:.1f}%' for f in spread)}, 8+: {100 * (d >= 8).mean():.2f}%; "
                    f"bytes/update raw {per_q[q][0]:.2f}, packed Rice k = 0/1/2: "
                    f"{' '.join(f'{b:.2f}' for b in per_q[q][1:])}"
                )
            for q in (2, 4, 8, 16):
                extra = [(per_q[q][i] - per_q[1][i]) / (q - 1) for i in range(4)]
                print(
                    f"{task}: bytes per extra direction q 1->{q}: raw {extra[0]:.3f}, packed Rice k = 0/1/2: "
                    f"{' '.join(f'{b:.3f}' for b in extra[1:])}"
                )


if __name__ == "__main__":
    commands = {"coefficients": coefficients, "float32": float32, "seeds": seeds, "bytes": bytes_per_update}
    {**commands, "packing": packing}[sys.argv[1]]()
