"""`zoflash replay`: the trained tensors rebuilt, bit for bit, from the base model and a run's log
alone.  The log's updates frames (docs/training.md "Update log") hold, per step, the binary16
coefficients the device applied and its rollback / snapshot markers; everything else of an update
(directions, dither, rounding) follows from the seed, the step and the stream, so the independent
reference's update maths (reference/zo_math.py) replays the run without the data."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

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

    @property
    def bytes_per_update(self) -> float:
        return self.frame_bytes / self.updates if self.updates else 0.0

    def summary(self) -> str:
        text = (
            f"replayed {self.updates} updates from {self.frame_bytes} bytes ({self.bytes_per_update:.2f} bytes/update)"
        )
        if not self.complete:
            text += f"; the log has no done record: these are the weights after its step {self.steps - 1}"
        return text


def _hello(records: list[dict], log: Path) -> dict:
    hellos = [r for r in records if r["type"] == "hello"]
    if not hellos:
        raise DataError(f"'{log}' has no hello record: not a training log of zoflash simulate, run or monitor")
    if len(hellos) > 1:
        raise DataError(
            f"'{log}' holds {len(hellos)} runs (the device restarted); replaying a restarted or resumed run is "
            "not supported yet: split the log at its second hello record"
        )
    return hellos[0]


def _entries(records: list[dict], log: Path, done: dict | None) -> tuple[list[wire.UpdateEntry], int]:
    """Every step's entry, checked contiguous from step 0; and the frames' wire bytes."""
    entries: list[wire.UpdateEntry] = []
    size = 0
    frames = [r for r in records if r["type"] == "updates"]
    if not frames:
        raise DataError(
            f"'{log}' has no updates records: its run was made by a zoflash or a firmware without the update log; "
            "rebuild and run it again"
        )
    for rec in frames:
        expected = entries[-1].step + 1 if entries else 0
        try:
            first, data = int(rec["step"]), bytes.fromhex(rec["entries"])
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
            entries += wire.parse_updates(first, int(rec["steps"]), data)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"'{log}': an updates record that does not decode ({exc}): a damaged log") from None
        size += FRAME_OVERHEAD + len(data)
    if done is not None and done["steps"] != len(entries):
        raise DataError(
            f"'{log}' has the updates of {len(entries)} steps, but its run did {done['steps']}: "
            "the last updates frame is missing, the weights cannot be rebuilt from it"
        )
    return entries, size


def replay(
    model_path: str | Path,
    log_path: str | Path,
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
    model_path, log_path, out_path = Path(model_path), Path(log_path), Path(out_path)
    if out_path.suffix not in (".npz", ".tflite"):
        raise ZoflashError(f"--out {out_path}: give a weights file (.npz) or a model (.tflite)")
    records = read_log(log_path)
    hello = _hello(records, log_path)
    graph, raw = load_tflite(model_path)
    sha = model_sha256(raw)
    if not sha.startswith(hello["model_sha256_prefix"]):
        raise DataError(
            f"'{log_path}' is the log of a run of the model {hello['model_sha256_prefix']}..., not of "
            f"'{model_path}' ({sha[:16]}...): replay it on the model that run started from"
        )
    done = next((r for r in records if r["type"] == "done"), None)
    entries, size = _entries(records, log_path, done)
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
            f"the run of '{log_path}' trained {hello['n_tensors']} tensors ({hello['trainable_params']} values); "
            f"with these options '{model_path}' trains {len(plan.tensors)} ({plan.params}): pass the --train, "
            "--biases-only and --max-params the run was built with"
        )
    values = [t.values.copy() for t in plan.tensors]
    residual = [None if t.is_bias else np.zeros(t.count, np.int8) for t in plan.tensors]
    snapshot = ([v.copy() for v in values], [None if r is None else r.copy() for r in residual])
    factory = snapshot
    updates = 0
    for e in entries:
        if e.flags & wire.UPDATE_APPLIED:
            updates += 1
            c = zm.f32_from_f16(np.array(e.coefficients, np.uint16))
            for k, t in enumerate(plan.tensors):
                if t.is_bias:
                    assert t.eps_b is not None  # a bias of the plan has its perturbation sizes
                    values[k] = zm.update_s32(
                        values[k].reshape(-1),
                        c,
                        t.eps_b.reshape(-1),
                        t.max_step,
                        opts.seed,
                        e.step,
                        t.stream,
                        opts.density_log2,
                    ).reshape(t.values.shape)
                else:
                    w, residual[k] = zm.update_s8(
                        values[k].reshape(-1),
                        residual[k],
                        c,
                        opts.seed,
                        e.step,
                        t.stream,
                        opts.density_log2,
                        opts.rounding,
                        w_max=spec.INT8_WEIGHT_LIMIT - opts.eps,
                    )
                    values[k] = w.reshape(t.values.shape)
        if e.flags & wire.UPDATE_RESTORE:
            values = [v.copy() for v in snapshot[0]]
            residual = [None if r is None else r.copy() for r in snapshot[1]]
        if e.flags & wire.UPDATE_FACTORY:  # --mode continual: back to the built-in weights
            values = [v.copy() for v in factory[0]]
            residual = [None if r is None else r.copy() for r in factory[1]]
        if e.flags & wire.UPDATE_SNAPSHOT:
            snapshot = ([v.copy() for v in values], [None if r is None else r.copy() for r in residual])
    result = ReplayResult(
        out_path,
        len(entries),
        done is not None,
        updates,
        size,
        values={t.index: v for t, v in zip(plan.tensors, values)},
        residuals={t.index: r.reshape(t.values.shape) for t, r in zip(plan.tensors, residual) if r is not None},
        best={t.index: v for t, v in zip(plan.tensors, snapshot[0])},
    )

    def write(npz: Path) -> None:
        save_weights(
            npz,
            sha,
            [(t.index, t.name, result.values[t.index], result.residuals.get(t.index)) for t in plan.tensors],
            scales={t["index"]: t["scales"] for t in report["tensors"]} if report else None,
            headroom=report["bits"] if report else 0,
            best=result.best,
        )

    if out_path.suffix == ".npz":
        write(out_path)
    else:
        with tempfile.TemporaryDirectory(prefix="zoflash-replay-") as tmp:
            write(Path(tmp) / "replayed.weights.npz")
            export_weights(model_path, Path(tmp) / "replayed.weights.npz", out_path, select=select)
    return result
