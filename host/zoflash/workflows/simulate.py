"""`zoflash simulate`: the training firmware's C built and run on the host (engine "c"), or the
independent Python reference (engine "reference"); both stream the same telemetry frames into
a Session (JSONL log, live view, weights file, plot).  ENGINE_RUNNERS is the one place that
holds the engines."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import BuildError, ZoflashError
from zoflash.monitor.feed import Feeder
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.outputs import Rescue, raw_weights_path_for, save_raw_weights
from zoflash.monitor.plots import plot_run
from zoflash.monitor.session import Session, SessionResult, plot_path_for, weights_path_for
from zoflash.monitor.telemetry import Decoder, decode
from zoflash.reference.trainer import ReferenceTrainer
from zoflash.registry import Registry
from zoflash.spec.wire import LAYOUTS, Frame, encode_command
from zoflash.targets.host_build import run_make
from zoflash.targets.project import Bundle
from zoflash.training.compiled import CompiledTraining
from zoflash.training.options import FLEET_NEEDS_A_FLEET, TrainOptions
from zoflash.training.weights_file import save_weights
from zoflash.workflows.monitor import Say, log_line
from zoflash.workflows.training import compile_for_training, training_bundle


@dataclass
class StopSwitch:
    """Set by Ctrl-C: an engine that can (the C program) finishes its run now, sending its final
    weights and done record as a stopped device does."""

    requested: bool = False
    presses: int = 0
    writing: bool = False  # the results are being written: a Ctrl-C no longer interrupts


def c_frames(
    bundle: Bundle, feeder: Feeder | None = None, stop: StopSwitch | None = None
) -> Generator[bytes, None, None]:
    """Build the host training program and stream its stdout.  With a feeder (--data-source
    stream) its answers to the program's need frames go to the program's stdin, as a host feeds
    a board over the serial link.  With `stop`, its stdin is the command input: a requested stop
    sends the stop command (the program then sends its weights and done record)."""
    prefix = bundle.prefix
    run_make(bundle, f"build/{prefix}_train")
    exe = bundle.path / "build" / f"{prefix}_train"
    # stdin: nothing (the program reads commands from a pipe on stdin: not from ours), or the
    # feed and the stop command.  Its own session: Ctrl-C in the terminal reaches only zoflash,
    # which stops the program with a command, so its weights are not lost.
    proc = subprocess.Popen(
        [str(exe)],
        stdin=subprocess.PIPE if feeder or stop else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=stop is not None,
    )
    stop_sent = False
    needs = Decoder() if feeder else None
    assert proc.stdout is not None and proc.stderr is not None  # started with both PIPEs
    try:
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            if stop is not None and stop.requested and not stop_sent:
                stop_sent = True
                try:
                    assert proc.stdin is not None  # a PIPE with `stop`
                    proc.stdin.write(encode_command("stop", 0))
                    proc.stdin.flush()
                except OSError:  # the program ended meanwhile: its frames tell how
                    pass
            if needs is not None and feeder is not None:  # both or neither
                _answer_needs(needs, chunk, feeder, proc.stdin)
            yield chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        err = proc.stderr.read().decode(errors="replace")
        rc = proc.wait()
    if rc != 0:
        raise BuildError(f"the training program {exe} exited with status {rc}: {err.strip()[-2000:]}")


def _answer_needs(decoder: Decoder, chunk: bytes, feeder: Feeder, stdin) -> None:
    for item in decoder.feed(chunk):
        if isinstance(item, Frame) and item.type == NEED_TYPE:
            try:
                stdin.write(feeder.answer(decode(item)))
                stdin.flush()
            except BrokenPipeError:  # the program ended: its exit status tells why
                return


NEED_TYPE = LAYOUTS["need"][0]


def reference_frames(prep: CompiledTraining, stop: StopSwitch | None = None) -> Iterator[bytes]:
    """The independent Python reference trainer's telemetry (the only product code that runs it).
    A requested `stop` ends its run before the next step, as the stop command ends the C's."""
    t = prep.training
    trainer = ReferenceTrainer(prep.model, t.plan, t.options, t.data, prep.sha256)
    for frame in trainer.frames():
        yield frame
        if stop is not None and stop.requested:
            trainer.stop_requested = True


# (compiled training, bundle directory, prefix, Ctrl-C's stop switch) -> (telemetry byte stream,
# the bundle if one is made)
Engine = Callable[[CompiledTraining, Path, "str | None", StopSwitch], "tuple[Iterator[bytes], Bundle | None]"]
# The engines, the first the default; an engine is its decorated function here.
ENGINE_RUNNERS: Registry[Engine] = Registry("simulation engine", "see `zoflash simulate --help`")


@ENGINE_RUNNERS.register("c")
def _c_engine(
    prep: CompiledTraining, bundle_dir: Path, prefix: str | None, stop: StopSwitch
) -> tuple[Iterator[bytes], Bundle]:
    """The generated training C, built and run on the host."""
    bundle = training_bundle(prep, "host", bundle_dir, prefix)
    stream = prep.training.options.data_source == "stream"
    return c_frames(bundle, Feeder.from_dataset(prep.training.data) if stream else None, stop), bundle


@ENGINE_RUNNERS.register("reference")
def _reference_engine(
    prep: CompiledTraining, bundle_dir: Path, prefix: str | None, stop: StopSwitch
) -> tuple[Iterator[bytes], None]:
    """The independent Python reference trainer."""
    return reference_frames(prep, stop), None


ENGINES = ENGINE_RUNNERS.names()  # what `zoflash simulate --engine` offers


@dataclass
class SimulationResult(SessionResult):
    """A simulation's records and final weights (SessionResult), the bundle that ran, the log file,
    and the re-quantization report."""

    bundle: Bundle | None = None
    log_path: Path | None = None
    headroom: dict | None = None  # the re-quantization report (--headroom), or None
    warnings: list[str] = field(default_factory=list)  # about the data and options, said before training
    interrupted: bool = False  # Ctrl-C: the run was cut short (what it had made is saved)
    raw_weights_path: Path | None = None  # Ctrl-C before the weights were whole: the chunks that came
    rescued: str | None = None  # outputs that went to a rescue folder (one message), or None
    notes: list[str] = field(default_factory=list)  # what the user should know about the outputs
    best_is_start: bool = False  # no step improved the validation loss: the best weights are the start


@contextmanager
def ctrl_c_stops(stop: StopSwitch):
    """Ctrl-C (in the main thread) requests a stop instead of raising; a second one raises, unless
    `stop.writing` (the results are being written: they are never dropped half-way)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def pressed(signum, frame):
        stop.presses += 1
        stop.requested = True
        if stop.presses > 1 and not stop.writing:
            raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, pressed)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def simulate(
    model_path: str | Path,
    data_path: str | Path,
    opts: TrainOptions,
    log_path: str | Path | None = None,
    engine: str = "c",
    bundle_dir: str | Path | None = None,
    view: LiveView | None = None,
    plot: bool = True,
    prefix: str | None = None,
    say: Say = log_line,
) -> SimulationResult:
    """Train on the host: build the training firmware's C with the host port (engine "c") or run the
    Python reference trainer (engine "reference"), and decode its telemetry as a board's monitor would.

    Args:
        model_path: the INT8 .tflite model.
        data_path: the .npz dataset (x_train, y_train, x_test, y_test).
        opts: the training options (TrainOptions; the same table as the command line's flags).
        log_path: where to write the JSONL log (and, beside it, the weights and the plot); None: no files.
        engine: "c" (the generated C, as on a board) or "reference" (the independent Python trainer).
        bundle_dir: keep the generated bundle there (default: a temporary folder).
        view: a live view to feed with the records as they arrive.
        plot: write the plot next to the log.
        prefix: the C prefix of the generated model (default: from the model's name).
        say: where progress lines go; the warnings about the data and options go there before
            training (and come back in the result's `warnings`).

    Returns:
        The records, the final weights and where the files went.
    """
    run_engine = ENGINE_RUNNERS.get(engine)  # an unknown engine fails before any work
    if opts.mode == "fleet":
        raise ZoflashError(FLEET_NEEDS_A_FLEET)
    prep = compile_for_training(model_path, data_path, opts, say=say)
    log_path = Path(log_path) if log_path else None
    rescue = Rescue()
    session = Session(log_path, view, rescue=rescue)
    stop = StopSwitch()
    with tempfile.TemporaryDirectory(prefix="zoflash-sim-") as tmp:
        frames, bundle = run_engine(prep, Path(bundle_dir or Path(tmp) / "bundle"), prefix, stop)
        with ctrl_c_stops(stop):  # held until the results are written
            try:
                for chunk in frames:
                    session.feed(chunk)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: stop waiting for the program's last frames
            finally:
                stop.writing = True
                result = session.close()
            out = SimulationResult(
                **vars(result),
                bundle=bundle,
                log_path=session.log_path,
                headroom=prep.training.headroom,
                warnings=prep.warnings,
                interrupted=stop.requested,
            )
            if out.done is None and not out.interrupted:
                raise ZoflashError(f"the run ended without its 'done' record (decoder: {out.stats})")
            if log_path is not None:
                _write_results(out, session, rescue, prep, log_path, opts, engine, plot)
    out.rescued = rescue.summary()
    return out


def _write_results(
    out: SimulationResult,
    session: Session,
    rescue: Rescue,
    prep: CompiledTraining,
    log_path: Path,
    opts: TrainOptions,
    engine: str,
    plot: bool,
) -> None:
    """The weights (or what came of them) and the plot beside the log."""
    tensors = [
        dict(index=t.index, name=t.name, dtype=str(t.values.dtype), shape=list(t.values.shape))
        for t in prep.training.plan.tensors
    ]
    hr = prep.training.headroom
    if out.done is not None:
        best = session.best_arrays(tensors)
        # the device's snapshot never moved from the start (the values it trained from)
        out.best_is_start = bool(best) and all(
            np.array_equal(best[t.index], t.values) for t in prep.training.plan.tensors
        )
        out.weights_path = rescue.save(
            "weights",
            weights_path_for(log_path),
            lambda p: save_weights(
                p,
                prep.sha256,
                session.trained_arrays(tensors),
                scales={t["index"]: t["scales"] for t in hr["tensors"]} if hr else None,
                headroom=hr["bits"] if hr else 0,
                best=best,
                best_is_start=out.best_is_start,
            ),
        )
    elif session.weights.keys():  # cut short while the weights came: keep the chunks that did
        out.raw_weights_path = rescue.save(
            "raw weights",
            raw_weights_path_for(log_path),
            lambda p: save_raw_weights(p, session.weights, prep.sha256[:16], hr["bits"] if hr else 0),
        )
    else:
        out.notes.append("weights none: the run was cut short before it sent any")
    if plot:
        title = f"{prep.path.name}: {opts.describe()} ({engine})"
        out.plot_path = rescue.save("plot", plot_path_for(log_path), lambda p: plot_run(out.records, p, title))
