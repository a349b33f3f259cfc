"""`zoflash monitor`: watch a board that trains."""

from __future__ import annotations

import sys

import click

from zoflash import api
from zoflash.cli.common import FORCE_OPTION, RECONNECT_OPTION, checkpoint_options, fresh_log, live_view, say
from zoflash.monitor.feed import load_feeder
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.workflows.monitor import serial_settings, training_manifest


@click.command()
@click.option(
    "--port",
    required=True,
    help="The board's serial port: /dev/ttyACM0, COM3, socket://HOST:PORT, rfc2217://HOST:PORT, loop://, "
    "or auto (found by USB VID:PID).",
)
@click.option("--baud", type=int, help=f"Baud rate [the board's, or {DEFAULT_BAUD}].")
@click.option(
    "--board",
    help="The board (id or family): its USB VID:PID for --port auto, its baud rate "
    "[--port auto: any ST-LINK, vendor 0483].",
)
@click.option(
    "--log",
    "log_path",
    default="run.jsonl",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="JSONL log, as `zoflash simulate` writes it (plus the monitor's own notes).",
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write step and evaluation records as CSV."
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="At the end, plot loss, accuracy and q of the last run into this PNG.",
)
@click.option(
    "--model",
    "model_path",
    type=click.Path(dir_okay=False),
    help="The model the firmware trains: the weights it sends at the end go to <log>.weights.npz.",
)
@click.option(
    "--bundle",
    "bundle_dir",
    type=click.Path(file_okay=False),
    help="Instead of --model: the bundle the firmware was built from (its manifest names the model). "
    "With neither, the weights are kept raw in <log>.raw-weights.npz.",
)
@click.option(
    "--until-done/--forever",
    default=True,
    show_default=True,
    help="Stop when the device reports done, or keep watching (across device restarts) until Ctrl-C.",
)
@click.option("--timeout", type=float, help="Stop after this many seconds.")
@click.option(
    "--wait",
    "connect_wait",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to keep trying to open the port at the start.",
)
@click.option(
    "--feed",
    "feed_path",
    type=click.Path(dir_okay=False),
    help="--data-source stream firmware: feed it the training split of this .npz (needs --model; the loss "
    "and target from zoflash.toml).",
)
@RECONNECT_OPTION
@checkpoint_options
@FORCE_OPTION
def monitor(
    port: str,
    baud: int | None,
    board: str | None,
    log_path: str,
    csv_path: str | None,
    plot_path: str | None,
    model_path: str | None,
    bundle_dir: str | None,
    until_done: bool,
    timeout: float | None,
    connect_wait: float,
    feed_path: str | None,
    reconnect_timeout: float,
    checkpoint_path: str | None,
    resume_path: str | None,
    force: bool,
) -> int:
    """Watch a training run on a board: live view, log, and the trained weights at the end.

    Exit status: 0 done (or --timeout with --forever), 1 stopped before done (timeout, port
    lost), 3 the device reported a fault, 4 an output went to a rescue folder, 5 done but
    telemetry frames were lost on the way (the log has gaps), 130 Ctrl-C (what arrived is saved)."""
    log_path = fresh_log(log_path, force, csv=csv_path, plot=plot_path, checkpoint=checkpoint_path)
    manifest = None
    if bundle_dir is not None:
        if model_path is not None:
            raise click.UsageError("give the model once: --model or --bundle")
        manifest = training_manifest(bundle_dir)
    usb_ids, baud = serial_settings(board, baud, say)
    feeder = None
    if feed_path is not None:
        if model_path is None:
            raise click.UsageError("--feed quantizes the samples for the model: give --model M.tflite too")
        feeder = load_feeder(model_path, feed_path)
        say(
            f"feed    {feed_path}: {len(feeder.records)} training samples of {len(feeder.records[0])} bytes, "
            "in file order, on the device's request"
        )
    return api.monitor(
        port,
        baud,
        usb_ids,
        log_path,
        csv_path,
        plot_path,
        model_path,
        until_done,
        timeout,
        connect_wait,
        reconnect_timeout=reconnect_timeout,
        feeder=feeder,
        checkpoint_path=checkpoint_path,
        resume_path=resume_path,
        view=live_view(),
        say=say,
        keys_from=sys.stdin,
        manifest=manifest,
    )
