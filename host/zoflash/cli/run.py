"""`zoflash run`: build, flash and monitor: train on a board from one command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from zoflash import api
from zoflash.cli.common import (
    FORCE_OPTION,
    RECONNECT_OPTION,
    checkpoint_options,
    fresh_log,
    live_view,
    options_from,
    say,
    training_options,
)
from zoflash.targets.build_options import build_settings
from zoflash.workflows import run as run_workflow


@click.command()
@click.option("--board", required=True, help="Board id or family (see `zoflash boards`).")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option(
    "--data",
    "data_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Training data .npz (x_train, y_train, x_test, y_test).",
)
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Bundle directory [generated/<model>-<board>]."
)
@click.option("--method", help="Flash method or [[flash]] entry of the board [the board's first].")
@click.option("--port", help="Serial port of a real board [auto: by the board's USB VID:PID]; QEMU gives its own.")
@click.option("--baud", type=int, help="Baud rate [the board's].")
@click.option(
    "--log",
    "log_path",
    default="run.jsonl",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="JSONL log; the weights (<log>.weights.npz) and the plot (<log>.png) go next to it.",
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write step and evaluation records as CSV."
)
@click.option("--timeout", type=float, help="Stop monitoring after this many seconds.")
@click.option(
    "--check-boundary",
    is_flag=True,
    help="Build in the host simulation's boundary checksum: the run says whether the device's prefix agrees with it.",
)
@click.option(
    "--stream",
    "stream_path",
    type=click.Path(dir_okay=False),
    help="--mode continual: the samples to serve, in arrival order (.npz: x, y; y -1 no label, -2 a shift mark).",
)
@RECONNECT_OPTION
@checkpoint_options
@FORCE_OPTION
@training_options
def run(
    board: str,
    model_path: str,
    data_path: str,
    out_dir: str | None,
    method: str | None,
    port: str | None,
    baud: int | None,
    log_path: str,
    csv_path: str | None,
    timeout: float | None,
    check_boundary: bool,
    reconnect_timeout: float,
    checkpoint_path: str | None,
    resume_path: str | None,
    stream_path: str | None,
    force: bool,
    **kwargs,
) -> int:
    """Build, flash and monitor: train on a board (or on the emulated Cortex-M55) from one command.

    Stops at once when the emulator ends or the device reports a fault (exit status 3); an output
    written to a rescue folder: 4; telemetry frames lost on the way: 5; Ctrl-C keeps what
    arrived: 130."""
    log_path = fresh_log(
        log_path, force, csv=csv_path, out=out_dir and str(Path(out_dir) / "manifest.json"), checkpoint=checkpoint_path
    )
    settings = build_settings(kwargs.get("project_file"))  # zoflash.toml [build]: boot, device_headers
    opts = options_from(kwargs)
    why = run_workflow.refuse_to_run(board, opts) or run_workflow.refuse_stream(opts, stream_path)
    if why:
        raise click.UsageError(why)
    return api.run(
        board,
        model_path,
        data_path,
        opts,
        settings,
        out_dir,
        method,
        port,
        baud,
        log_path,
        csv_path,
        timeout,
        check_boundary,
        reconnect_timeout,
        checkpoint_path,
        resume_path,
        view=live_view(),
        say=say,
        keys_from=sys.stdin,
        stream_path=stream_path,
    )
