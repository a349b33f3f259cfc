"""`zoflash simulate --mode continual --stream S.npz`: the continual firmware's C on the host,
fed a stream of samples as a board's sensor would (docs/guides/continual.md)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from zoflash.compiler.quant import samples_and_saturation
from zoflash.errors import DataError, ZoflashError
from zoflash.monitor.continual import NO_LABEL, SHIFT_MARK, StreamFeeder
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.outputs import Rescue
from zoflash.monitor.plots import plot_run
from zoflash.monitor.session import Session, plot_path_for, weights_path_for
from zoflash.training.compiled import CompiledTraining
from zoflash.training.options import TrainOptions
from zoflash.training.weights_file import save_weights
from zoflash.workflows.monitor import Say, log_line
from zoflash.workflows.simulate import SimulationResult, StopSwitch, c_frames, ctrl_c_stops
from zoflash.workflows.training import compile_for_training, training_bundle


def load_stream(path: str | Path, prep: CompiledTraining) -> StreamFeeder:
    """A stream .npz: `x` (samples in arrival order, as the model's training data) and `y` (labels;
    -1: served without a label; -2: no label, and the conditions changed here: an episode starts),
    quantized to the model's input as the data is."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            if "x" not in npz.files or "y" not in npz.files:
                raise DataError(f"stream '{path}' needs arrays x (samples in arrival order) and y (labels, -1: none)")
            x, y = npz["x"], npz["y"].astype(np.int64)
    except FileNotFoundError:
        raise DataError(f"stream '{path}' does not exist") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read stream '{path}' as an .npz: {exc}") from None
    if len(x) != len(y) or len(x) == 0:
        raise DataError(f"stream '{path}': x has {len(x)} samples and y {len(y)} labels (need the same, > 0)")
    g = prep.model.graph
    t_in = g.tensors[g.inputs[0]]
    q = t_in.quant
    xs, _ = samples_and_saturation(
        x, t_in.shape, q.scale if q else None, q.zero_point if q else None, what=f"x in '{path}'", dtype=t_in.dtype
    )
    classes = prep.training.plan.classes
    if ((y >= classes) | (y < -2)).any():
        raise DataError(f"stream '{path}': labels must be in 0..{classes - 1} (or -1: none, -2: a shift mark)")
    records = [np.ascontiguousarray(xs[k]).tobytes() for k in range(len(xs))]
    labels = [NO_LABEL if v == -1 else SHIFT_MARK if v == -2 else int(v) for v in y]
    return StreamFeeder(records, labels, f"stream '{path.name}'")


def stream_feeder(
    model_path: str | Path, data_path: str | Path, stream_path: str | Path, opts: TrainOptions
) -> StreamFeeder:
    """The feeder of a stream for a board's continual firmware, quantized as the build's data."""
    return load_stream(stream_path, compile_for_training(model_path, data_path, opts, say=lambda *_: None))


def simulate_continual(
    model_path: str | Path,
    data_path: str | Path,
    stream_path: str | Path,
    opts: TrainOptions,
    log_path: str | Path | None = None,
    bundle_dir: str | Path | None = None,
    view: LiveView | None = None,
    plot: bool = True,
    prefix: str | None = None,
    say: Say = log_line,
    oracle: bool = False,
) -> SimulationResult:
    """Build the continual firmware for the host (opts.mode "continual"), feed it the stream and
    decode its telemetry: the continual records, the update log, the deployed weights at the end.
    `oracle`: no drift detector, only the stream's shift marks (y = -2) start episodes."""
    if opts.mode != "continual":
        raise ZoflashError("a stream is served only with --mode continual (add --mode continual --data-source stream)")
    prep = compile_for_training(model_path, data_path, opts, say=say)
    if oracle:
        prep = replace(prep, training=replace(prep.training, continual_oracle=True))
    feeder = load_stream(stream_path, prep)
    log_path = Path(log_path) if log_path else None
    rescue = Rescue()
    session = Session(log_path, view, rescue=rescue)
    stop = StopSwitch()
    with tempfile.TemporaryDirectory(prefix="zoflash-cl-") as tmp:
        bundle = training_bundle(prep, "host", Path(bundle_dir or Path(tmp) / "bundle"), prefix)
        try:
            with ctrl_c_stops(stop):
                for chunk in c_frames(bundle, feeder, stop):
                    session.feed(chunk)
        finally:
            result = session.close()
    out = SimulationResult(**vars(result), bundle=bundle, log_path=session.log_path, interrupted=stop.requested)
    if out.done is None and not out.interrupted:
        why = [r["text"] for r in out.records if r.get("type") == "log"]
        raise ZoflashError("the continual program ended without its 'done' record" + (f": {why[-1]}" if why else ""))
    if log_path is not None and out.done is not None:
        tensors = [
            dict(index=t.index, name=t.name, dtype=str(t.values.dtype), shape=list(t.values.shape))
            for t in prep.training.plan.tensors
        ]
        hr = prep.training.headroom
        out.weights_path = rescue.save(
            "weights",
            weights_path_for(log_path),
            lambda p: save_weights(
                p,
                prep.sha256,
                session.trained_arrays(tensors),
                scales={t["index"]: t["scales"] for t in hr["tensors"]} if hr else None,
                headroom=hr["bits"] if hr else 0,
                best=session.best_arrays(tensors),
            ),
        )
        if plot:
            title = f"{prep.path.name}: {opts.describe()} (continual, {Path(stream_path).name})"
            out.plot_path = rescue.save("plot", plot_path_for(log_path), lambda p: plot_run(out.records, p, title))
    out.rescued = rescue.summary()
    return out
