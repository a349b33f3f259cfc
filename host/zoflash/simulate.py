"""`zoflash simulate`: the training firmware's C built and run on the host (engine "c"), or the
independent Python reference (engine "reference"); both stream the same telemetry frames into
a Session (JSONL log, live view, weights file, plot)."""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from . import boards as boards_mod
from .build import run_make
from .bundle import Bundle, generate_bundle
from .compiler import CompiledModel, compile_graph
from .dataset import load_dataset
from .errors import BuildError, ZoflashError
from .session import LiveView, Session, SessionResult, plot_path_for, plot_run, weights_path_for
from .tflite_import import load_tflite, model_sha256
from .train_options import TrainOptions
from .traingen import Training
from .trainplan import plan_training
from .weights import save_weights

ENGINES = ("c", "reference")


@dataclass
class Prepared:
    path: Path
    sha256: str
    model: CompiledModel
    training: Training


def prepare(model_path: str | Path, data_path: str | Path, opts: TrainOptions) -> Prepared:
    """Load, compile and plan: every problem with model, options or data surfaces here."""
    graph, raw = load_tflite(model_path)
    model = compile_graph(graph)
    plan = plan_training(model, opts)
    t_in = graph.tensors[graph.inputs[0]]
    q = t_in.quant
    data = load_dataset(data_path, t_in.shape, q.scale if q else None, q.zero_point if q else None, plan.classes)
    report = None
    if opts.headroom:
        model, plan, report = _with_headroom(model, plan, opts, data)
    return Prepared(Path(model_path), model_sha256(raw), model, Training(plan, opts, data, headroom=report))


def _with_headroom(model: CompiledModel, plan, opts: TrainOptions, data):
    """Re-quantize the tensors the first plan made trainable, recompile, re-plan; report the change."""
    from . import headroom

    weights = [t.index for t in plan.tensors if not t.is_bias]
    graph, changed = headroom.apply_headroom(model.graph, weights, opts.headroom, opts.eps, root=model.root)
    new_model = compile_graph(graph)
    new_plan = plan_training(new_model, opts)
    trained = {t.index for t in new_plan.tensors}
    untrained = [i for i in changed if i not in trained]
    if untrained:
        names = ", ".join(f"{i} '{graph.tensors[i].name}'" for i in untrained)
        raise ZoflashError(f"--headroom {opts.headroom} would re-quantize tensor(s) {names}, which are not trained "
                           "(a weight tensor shared with a layer that is not selected); select that layer too "
                           "or drop --headroom")
    g = graph.tensors
    report = {
        "bits": opts.headroom,
        "tensors": [{"index": i, "name": g[i].name, "kind": "bias" if g[i].dtype == "int32" else "weights",
                     "scales": [float(s) for s in g[i].quant.scales] if g[i].quant else None,
                     "values_changed": int(np.count_nonzero(g[i].data != model.graph.tensors[i].data))}
                    for i in changed],
        "outputs": headroom.output_change(model, new_model, data.x_test, data.y_test),
    }
    return new_model, new_plan, report


def training_bundle(prep: Prepared, board_id: str, out_dir: str | Path, prefix: str | None = None) -> Bundle:
    board = boards_mod.load_board(board_id)
    return generate_bundle(prep.model, board, Path(out_dir), prep.path.name, prep.sha256, prefix=prefix,
                           training=prep.training)


def c_frames(bundle: Bundle) -> Iterator[bytes]:
    """Build the host training program and stream its stdout."""
    prefix = bundle.prefix
    run_make(bundle, f"build/{prefix}_train")
    exe = bundle.path / "build" / f"{prefix}_train"
    # stdin: nothing (the program reads commands from a pipe on stdin: not from ours)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            yield chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        err = proc.stderr.read().decode(errors="replace")
        rc = proc.wait()
    if rc != 0:
        raise BuildError(f"the training program {exe} exited with status {rc}: {err.strip()[-2000:]}")


def reference_frames(prep: Prepared) -> Iterator[bytes]:
    from .reference.trainer import ReferenceTrainer  # NumPy only; loaded on demand

    t = prep.training
    yield from ReferenceTrainer(prep.model, t.plan, t.options, t.data, prep.sha256).frames()


@dataclass
class SimulationResult(SessionResult):
    bundle: Bundle | None = None
    log_path: Path | None = None
    headroom: dict | None = None  # the re-quantization report (--headroom), or None


def simulate(model_path: str | Path, data_path: str | Path, opts: TrainOptions, log_path: str | Path | None = None,
             engine: str = "c", bundle_dir: str | Path | None = None, view: LiveView | None = None,
             plot: bool = True, prefix: str | None = None) -> SimulationResult:
    if engine not in ENGINES:
        raise ZoflashError(f"unknown engine '{engine}'; use one of {', '.join(ENGINES)}")
    prep = prepare(model_path, data_path, opts)
    log_path = Path(log_path) if log_path else None
    session = Session(log_path, view)
    bundle = None
    with tempfile.TemporaryDirectory(prefix="zoflash-sim-") as tmp:
        if engine == "c":
            bundle = training_bundle(prep, "host", bundle_dir or Path(tmp) / "bundle", prefix)
            frames = c_frames(bundle)
        else:
            frames = reference_frames(prep)
        try:
            for chunk in frames:
                session.feed(chunk)
        finally:
            result = session.close()
    out = SimulationResult(**vars(result), bundle=bundle, log_path=log_path, headroom=prep.training.headroom)
    if out.done is None:
        raise ZoflashError(f"the run ended without its 'done' record (decoder: {out.stats})")
    if log_path is not None:
        tensors = [dict(index=t.index, name=t.name, dtype=str(t.values.dtype), shape=list(t.values.shape))
                   for t in prep.training.plan.tensors]
        hr = prep.training.headroom
        out.weights_path = save_weights(weights_path_for(log_path), prep.sha256, session.trained_arrays(tensors),
                                        scales={t["index"]: t["scales"] for t in hr["tensors"]} if hr else None,
                                        headroom=hr["bits"] if hr else 0)
        if plot:
            out.plot_path = plot_run(out.records, plot_path_for(log_path),
                                     f"{prep.path.name}: {opts.describe()} ({engine})")
    return out
