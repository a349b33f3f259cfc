"""`zoflash simulate`: train on the host, the generated C or the Python reference, live."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from zoflash import api
from zoflash.cli.common import FORCE_OPTION, check_outputs, fresh_log, options_from, refuse_app, say, training_options
from zoflash.errors import ZoflashError
from zoflash.monitor.continual import state_line
from zoflash.monitor.continual import summary as continual_summary
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.telemetry import has_accuracy
from zoflash.training.headroom import describe
from zoflash.workflows.monitor import EXIT_INTERRUPTED, EXIT_RESCUED
from zoflash.workflows.simulate import ENGINES


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option(
    "--data",
    "data_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Training data .npz (x_train, y_train, x_test, y_test).",
)
@click.option(
    "--log",
    "log_path",
    default="run.jsonl",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="JSONL log; the weights (<log>.weights.npz) and the plot (<log>.png) go next to it.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default=ENGINES[0],
    show_default=True,
    help="c: the generated firmware C on the host; reference: the independent Python reference.",
)
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False), help="Keep the generated C here.")
@click.option("--no-plot", is_flag=True, help="Do not write the PNG.")
@click.option(
    "--stream",
    "stream_path",
    type=click.Path(dir_okay=False),
    help="--mode continual: the samples to serve, in arrival order (.npz: x, y; y -1 no label, -2 a shift mark).",
)
@FORCE_OPTION
@training_options
def simulate(
    model_path: str,
    data_path: str,
    log_path: str,
    engine: str,
    bundle_dir: str | None,
    no_plot: bool,
    stream_path: str | None,
    force: bool,
    **kwargs,
) -> int | None:
    """Train on the host: the generated training C (or the Python reference), live.

    Ctrl-C stops the run early and keeps its log and weights (exit status 130)."""
    check_outputs(out=bundle_dir and str(Path(bundle_dir) / "manifest.json"))
    log_path = fresh_log(log_path, force)
    opts = options_from(kwargs)
    refuse_app(opts)
    quiet = logging.getLogger().level >= logging.ERROR
    if opts.mode == "continual" or stream_path is not None:
        return _continual(model_path, data_path, stream_path, opts, log_path, engine, bundle_dir, no_plot, quiet)
    say(f"simulate {model_path} on {data_path} ({engine}): {opts.describe()}")
    result = api.simulate(
        model_path,
        data_path,
        opts,
        log_path,
        engine=engine,
        bundle_dir=bundle_dir,
        view=LiveView(enabled=not quiet),
        plot=not no_plot,
        say=say,
    )
    if result.headroom:
        say(f"requant {describe(result.headroom)}")
    if result.interrupted:
        return _interrupted(result, model_path)
    if not result.evals:  # the program stopped before its first evaluation (its log frames say why)
        why = [r["text"] for r in result.records if r.get("type") == "log"]
        raise ZoflashError(
            "the training program ended without an evaluation"
            + (f": {why[-1]}" if why else "")
            + f" (log {result.log_path})"
        )
    first, last = result.evals[0], result.evals[-1]
    accuracy = (
        (
            f"accuracy {first['accuracy'] * 100:.1f}% -> {last['accuracy'] * 100:.1f}% "
            f"({(last['accuracy'] - first['accuracy']) * 100:+.1f} points), "
        )
        if has_accuracy(result.records)
        else ""
    )
    say(
        f"{accuracy}test loss {first['loss']:.4f} -> {last['loss']:.4f}"
        + (f", validation loss {first['val_loss']:.4f} -> {last['val_loss']:.4f}" if "val_loss" in last else "")
    )
    if result.best_is_start:
        say(
            "best    no step improved the validation loss: the best weights are the start, and "
            "zoflash export writes the model unchanged"
        )
    say(f"log     {result.log_path}")
    say(
        f"weights {result.weights_path}  (zoflash export --model {model_path} --weights {result.weights_path} "
        "--out trained.tflite)"
    )
    if result.plot_path is not None:
        say(f"plot    {result.plot_path}")
    elif not no_plot:
        say("plot    skipped: matplotlib is not installed (pip install 'zoflash[plot]')")
    bad = {
        k: v for k, v in result.stats.items() if k in ("crc_errors", "dropped_bytes", "truncated", "malformed") and v
    }
    if bad:
        say(f"warning: telemetry problems {bad}")
    if result.rescued:
        say(result.rescued)
        return EXIT_RESCUED
    return None


def _continual(model_path, data_path, stream_path, opts, log_path, engine, bundle_dir, no_plot, quiet) -> int | None:
    """--mode continual: serve the stream with the continual firmware's C; say what it decided."""
    if opts.mode != "continual":
        raise click.UsageError("--stream is served by --mode continual (add --mode continual --data-source stream)")
    if stream_path is None:
        raise click.UsageError("--mode continual needs --stream S.npz: the samples to serve, in arrival order")
    if engine != "c":
        raise click.UsageError("--mode continual runs the generated C only (--engine c)")
    say(f"simulate {model_path} serving {stream_path} (continual, built with {data_path}): {opts.describe()}")
    view = LiveView(enabled=not quiet)
    result = api.simulate_continual(
        model_path, data_path, stream_path, opts, log_path, bundle_dir=bundle_dir, view=view, plot=not no_plot, say=say
    )
    s = continual_summary(result.records)
    d = s["decisions"]
    say(
        f"served {s['samples']} samples, serving accuracy {s['accuracy'] * 100:.1f}%: {d['suspected']} drift "
        f"alarms, {d['episode']} episodes, {d['accepted']} candidates promoted, {d['rejected']} discarded, "
        f"{d['rollback']} rollbacks to the factory weights"
    )
    say(state_line(result.records))
    say(f"log     {result.log_path}")
    if result.weights_path is not None:
        say(f"weights {result.weights_path}  (the deployed weights at the end of the stream)")
    if result.plot_path is not None:
        say(f"plot    {result.plot_path}")
    if result.interrupted:
        return EXIT_INTERRUPTED
    if result.rescued:
        say(result.rescued)
        return EXIT_RESCUED
    return None


def _interrupted(result, model_path: str) -> int:
    """Ctrl-C: say what was kept where; exit status 130."""
    done = result.done
    say(
        f"stopped (Ctrl-C) after {done['steps']} steps: the run was finished early and its weights kept"
        if done is not None
        else "stopped (Ctrl-C) before the run could finish"
    )
    say(f"log     {result.log_path}")
    if result.weights_path is not None:
        say(
            f"weights {result.weights_path}  (zoflash export --model {model_path} --weights {result.weights_path} "
            "--out trained.tflite)"
        )
    if result.raw_weights_path is not None:
        say(f"weights kept raw (incomplete) in {result.raw_weights_path}")
    for note in result.notes:
        say(note)
    if result.plot_path is not None:
        say(f"plot    {result.plot_path}")
    if result.rescued:
        say(result.rescued)
    return EXIT_INTERRUPTED
