"""`zoflash replay`: the trained tensors rebuilt, bit for bit, from the base model and a run's log
alone.  The log's updates frames (docs/training.md "Update log") hold, per step, the binary16
coefficients the device applied and its rollback / snapshot markers; everything else of an update
(directions, dither, rounding) follows from the seed, the step and the stream, so the independent
reference's update maths (reference/zo_math.py) replays the run without the data."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from zoflash.compiler.tflite_import import load_tflite, model_sha256
from zoflash.errors import DataError, ZoflashError
from zoflash.monitor.session import read_log
from zoflash.reference import zo_math as zm
from zoflash.spec import training as spec
from zoflash.spec import wire
from zoflash.training.export import export_weights
from zoflash.training.options import TrainOptions, make_options
from zoflash.training.pipeline import trainable_start
from zoflash.training.weights_file import save_weights

LogPaths = str | Path | Sequence[str | Path]  # a log, or a run's logs in order
FRAME_OVERHEAD = wire.HEAD + 4 + wire.STRUCTS["updates"].size  # header, CRC and fixed fields per frame


@dataclass
class ReplayResult:
    out_path: Path
    steps: int  # steps the log covers (calibration and lr-trial steps included)
    complete: bool  # the log has its run's done record (else: the weights after its last logged step)
    updates: int  # applied updates
    frame_bytes: int  # wire bytes of the updates frames
    values: dict[int, np.ndarray] = field(default_factory=dict)  # tensor index -> the last values
    residuals: dict[int, np.ndarray] = field(default_factory=dict)
    best: dict[int, np.ndarray] = field(default_factory=dict)  # the snapshot (best by validation)
    crc: int = 0  # wire.tensors_crc of the last values
    device_crc: int | None = None  # the device's own, from the log's crc record (checked equal)

    @property
    def bytes_per_update(self) -> float:
        return self.frame_bytes / self.updates if self.updates else 0.0

    def summary(self) -> str:
        text = (
            f"replayed {self.updates} updates from {self.frame_bytes} bytes ({self.bytes_per_update:.2f} bytes/update)"
        )
        if self.device_crc is not None:
            text += f"; weights identical to the device's (crc {self.device_crc:#010x})"
        if not self.complete:
            text += f"; the log has no done record: these are the weights after its step {self.steps - 1}"
        return text


HELLO_KEYS = ("model_sha256_prefix", "seed", "rounding", "density_log2", "n_tensors", "trainable_params", "headroom")


def _hello(records: list[dict], log: str) -> dict:
    """The run's hello; several (the device restarted: run segments) must be of one model and options."""
    hellos = [r for r in records if r["type"] == "hello"]
    if not hellos:
        raise DataError(f"'{log}' has no hello record: not a training log of zoflash simulate, run or monitor")
    for other in hellos[1:]:
        if any(other.get(k) != hellos[0].get(k) for k in HELLO_KEYS):
            raise DataError(
                f"'{log}' holds runs of different models or options (the device was reflashed between them): "
                "split the log at the hello record where the new firmware starts"
            )
    return hellos[0]


class CrcCheck(NamedTuple):
    step: int  # the device's tensors after this many steps
    crc32: int


def _entries(records: list[dict], log: str, done: dict | None) -> tuple[list[wire.UpdateEntry], int, list[CrcCheck]]:
    """Every step's entry, checked contiguous from step 0; the frames' wire bytes; the device's CRCs.

    Run segments: a device restarted afresh (a hello, then updates from step 0 again) starts the
    chain anew; a resume from a checkpoint (an updates record of 0 steps at the checkpoint's step
    k) keeps the chain's steps before k and continues it from there."""
    entries: list[wire.UpdateEntry] = []
    checks: list[CrcCheck] = []
    size = 0
    if not any(r["type"] == "updates" for r in records):
        raise DataError(
            f"'{log}' has no updates records: its run was made by a zoflash or a firmware without the update log; "
            "rebuild and run it again"
        )
    fresh = True  # a hello came and no updates since: a restart from step 0 is no repeat
    for rec in records:
        if rec["type"] == "hello":
            fresh = True
            continue
        if rec["type"] == "crc" and not rec.get("pushed"):
            checks.append(CrcCheck(int(rec["step"]), int(rec["crc32"])))
            continue
        if rec["type"] != "updates":
            continue
        try:
            first, steps, data = int(rec["step"]), int(rec["steps"]), bytes.fromhex(rec["entries"])
            if steps == 0:  # a checkpoint restored: the chain continues from its step
                if first > len(entries):
                    raise DataError(
                        f"'{log}' resumes from a checkpoint of step {first} but holds the updates of "
                        f"{len(entries)} steps before it: the checkpoint was taken by a run this log does not "
                        "hold; give that run's log first (--log FIRST.jsonl --log THIS.jsonl)"
                    )
                del entries[first:]
                checks = [c for c in checks if c.step <= first]
                fresh = False
                size += FRAME_OVERHEAD
                continue
            if fresh and first == 0 and entries:  # the device restarted afresh: a new chain
                entries, checks = [], []
            fresh = False
            expected = entries[-1].step + 1 if entries else 0
            if first > expected:
                raise DataError(
                    f"'{log}' misses the updates of steps {expected}..{first - 1} (a lost updates frame): "
                    "the weights cannot be rebuilt from it"
                )
            if first < expected:
                raise DataError(
                    f"'{log}' has the updates of step {first} twice (a repeated frame, or two runs in one log): "
                    "the weights cannot be rebuilt from it"
                )
            entries += wire.parse_updates(first, steps, data)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"'{log}': an updates record that does not decode ({exc}): a damaged log") from None
        size += FRAME_OVERHEAD + len(data)
    if done is not None and done["steps"] != len(entries):
        raise DataError(
            f"'{log}' has the updates of {len(entries)} steps, but its run did {done['steps']}: "
            "the last updates frame is missing, the weights cannot be rebuilt from it"
        )
    return entries, size, checks


@dataclass
class Rebuilt:
    """A run's chain replayed in memory (rebuild): what replay writes and push sends."""

    sha256: str  # of the model
    hello: dict
    plan: Any  # the training plan (training.plan.TrainPlan)
    report: dict | None  # the headroom report
    opts: TrainOptions
    entries: list[wire.UpdateEntry]
    frame_bytes: int
    complete: bool
    values: list[np.ndarray]
    residuals: list[np.ndarray | None]
    best: list[np.ndarray]
    base_crc: int  # of the model's own trainable values (wire.tensors_crc)
    crc: int  # of the values after the last step
    device_crc: int | None  # the device's CRC after the last step, when its log carries it
    log: str  # the log's name (logs: "A + B"), for messages

    @property
    def updates(self) -> int:
        return sum(1 for e in self.entries if e.flags & wire.UPDATE_APPLIED)


def apply_update(plan, opts: TrainOptions, values: list, residual: list, seed: int, e: wire.UpdateEntry) -> None:
    """One applied update-log entry on the trainable `values` and their `residual`s (lists, in place):
    the directions of (seed, e.step), the device's update maths (reference/zo_math.py)."""
    c = zm.f32_from_f16(np.array(e.coefficients, np.uint16))
    for k, t in enumerate(plan.tensors):
        if t.is_bias:
            assert t.eps_b is not None  # a bias of the plan has its perturbation sizes
            values[k] = zm.update_bias(
                values[k].reshape(-1), c, t.eps_b.reshape(-1), t.max_step, seed, e.step, t.stream, opts.density_log2
            ).reshape(t.values.shape)
        else:
            w, residual[k] = zm.update_s8(
                values[k].reshape(-1),
                residual[k],
                c,
                seed,
                e.step,
                t.stream,
                opts.density_log2,
                opts.rounding,
                w_max=spec.INT8_WEIGHT_LIMIT - opts.eps,
            )
            values[k] = w.reshape(t.values.shape)


def scaled_entry(e: wire.UpdateEntry, rate: float) -> wire.UpdateEntry:
    """An applied entry with its coefficients times `rate` (binary16, rounded as the device rounds)."""
    if rate == 1.0 or not e.flags & wire.UPDATE_APPLIED:
        return e
    c = zm.f32_from_f16(np.array(e.coefficients, np.uint16)) * np.float32(rate)
    return e._replace(coefficients=tuple(int(h) for h in zm.f16_from_f32(c)))


def tensors_crc(plan, values) -> int:
    """The crc frame's CRC-32 of trainable `values` (wire.tensors_crc)."""
    return wire.tensors_crc((v, t.values.dtype) for t, v in zip(plan.tensors, values))[0]


def rebuild(model_path: str | Path, log_path: LogPaths, opts: TrainOptions | None = None) -> Rebuilt:
    """Replay the run logged in `log_path` on the model it started from (see replay); every CRC the
    device reported on the way (the crc records) is checked against the replay's own state.
    `log_path`: one log, or several read as one in their order (a run and its resumed segments)."""
    logs = [Path(log_path)] if isinstance(log_path, (str, Path)) else [Path(p) for p in log_path]
    model_path, where = Path(model_path), " + ".join(str(p) for p in logs)
    records = [r for p in logs for r in read_log(p)]
    hello = _hello(records, where)
    graph, raw = load_tflite(model_path)
    sha = model_sha256(raw)
    if not sha.startswith(hello["model_sha256_prefix"]):
        raise DataError(
            f"'{where}' is the log of a run of the model {hello['model_sha256_prefix']}..., not of "
            f"'{model_path}' ({sha[:16]}...): replay it on the model that run started from"
        )
    last_hello = max(k for k, r in enumerate(records) if r["type"] == "hello")
    done = next((r for r in records[last_hello:] if r["type"] == "done"), None)
    entries, size, checks = _entries(records, where, done)
    opts = replace(
        opts or make_options(),
        seed=hello["seed"],
        rounding=hello["rounding"],
        density=1.0 / (1 << hello["density_log2"]),
        headroom=hello["headroom"],
        eps=next(r["eps"] for r in records if r["type"] == "updates"),
    )
    plan, report = trainable_start(graph, opts)
    if len(plan.tensors) != hello["n_tensors"] or plan.params != hello["trainable_params"]:
        raise DataError(
            f"the run of '{where}' trained {hello['n_tensors']} tensors ({hello['trainable_params']} values); "
            f"with these options '{model_path}' trains {len(plan.tensors)} ({plan.params}): pass the --train, "
            "--biases-only and --max-params the run was built with"
        )
    values = [t.values.copy() for t in plan.tensors]
    residual = [None if t.is_bias else np.zeros(t.count, np.int8) for t in plan.tensors]
    snapshot = ([v.copy() for v in values], [None if r is None else r.copy() for r in residual])
    factory = snapshot
    base_crc = tensors_crc(plan, values)
    device_crc = None

    def check(step: int) -> None:
        nonlocal device_crc
        for c in checks:
            if c.step == step:
                ours = tensors_crc(plan, values)
                if ours != c.crc32:
                    raise DataError(
                        f"'{where}': after step {step} the device's weights had the CRC {c.crc32:#010x}, the "
                        f"replay's have {ours:#010x}: the log does not hold the run that made them (a checkpoint "
                        "of another run resumed, or a damaged log)"
                    )
                if step == len(entries):
                    device_crc = c.crc32

    for e in entries:
        check(e.step)
        if e.flags & wire.UPDATE_APPLIED:
            apply_update(plan, opts, values, residual, opts.seed, e)
        if e.flags & wire.UPDATE_RESTORE:
            values = [v.copy() for v in snapshot[0]]
            residual = [None if r is None else r.copy() for r in snapshot[1]]
        if e.flags & wire.UPDATE_FACTORY:  # --mode continual: back to the built-in weights
            values = [v.copy() for v in factory[0]]
            residual = [None if r is None else r.copy() for r in factory[1]]
        if e.flags & wire.UPDATE_SNAPSHOT:
            snapshot = ([v.copy() for v in values], [None if r is None else r.copy() for r in residual])
    check(len(entries))
    return Rebuilt(
        sha,
        hello,
        plan,
        report,
        opts,
        entries,
        size,
        done is not None,
        values,
        residual,
        snapshot[0],
        base_crc,
        tensors_crc(plan, values),
        device_crc,
        where,
    )


def replay(
    model_path: str | Path,
    log_path: LogPaths,
    out_path: str | Path,
    opts: TrainOptions | None = None,
    select: str | None = None,
) -> ReplayResult:
    """Rebuild the trained tensors of the run logged in `log_path` from the model it started from.

    `opts`: the build's options that choose the trained tensors (train, biases_only, max_params,
    bias_bound; defaults as a build's); seed, rounding, density and headroom come from the log.
    `out_path`: a weights file (.npz, as simulate writes: last, residuals and best) or a model
    (.tflite, written like `zoflash export --select`).
    """
    out_path = Path(out_path)
    if out_path.suffix not in (".npz", ".tflite"):
        raise ZoflashError(f"--out {out_path}: give a weights file (.npz) or a model (.tflite)")
    run = rebuild(model_path, log_path, opts)
    plan, report = run.plan, run.report
    result = ReplayResult(
        out_path,
        len(run.entries),
        run.complete,
        run.updates,
        run.frame_bytes,
        values={t.index: v for t, v in zip(plan.tensors, run.values)},
        residuals={t.index: r.reshape(t.values.shape) for t, r in zip(plan.tensors, run.residuals) if r is not None},
        best={t.index: v for t, v in zip(plan.tensors, run.best)},
        crc=run.crc,
        device_crc=run.device_crc,
    )

    def write(npz: Path) -> None:
        save_weights(
            npz,
            run.sha256,
            [(t.index, t.name, result.values[t.index], result.residuals.get(t.index)) for t in plan.tensors],
            scales={t["index"]: t["scales"] for t in report["tensors"]} if report else None,
            headroom=report["bits"] if report else 0,
            best=result.best,
            # the snapshot never moved from the start: export writes the model unchanged
            best_is_start=all(np.array_equal(result.best[t.index], t.values) for t in plan.tensors),
        )

    if out_path.suffix == ".npz":
        write(out_path)
    else:
        with tempfile.TemporaryDirectory(prefix="zoflash-replay-") as tmp:
            write(Path(tmp) / "replayed.weights.npz")
            export_weights(model_path, Path(tmp) / "replayed.weights.npz", out_path, select=select)
    return result
