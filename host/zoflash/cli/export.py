"""`zoflash export`: trained weights (a weights file or a running board) into a copy of the model."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from zoflash import api
from zoflash.cli.common import check_outputs, say
from zoflash.monitor.outputs import is_raw_weights
from zoflash.monitor.serial_monitor import dump_from_port, weights_from_raw
from zoflash.monitor.serialport import DEFAULT_BAUD
from zoflash.workflows.monitor import serial_settings


@click.command()
@click.option(
    "--model",
    "model_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The .tflite the weights were trained from.",
)
@click.option(
    "--weights",
    "weights_path",
    type=click.Path(dir_okay=False),
    help="Trained weights file (<log>.weights.npz, or the raw <log>.raw-weights.npz a monitor without --model kept).",
)
@click.option(
    "--port",
    help="Instead of --weights: take the weights from the board training on this serial port, "
    "as they are now (ports as for `zoflash monitor`).",
)
@click.option("--baud", type=int, help=f"With --port: baud rate [the board's, or {DEFAULT_BAUD}].")
@click.option("--board", help="With --port: the board (its USB VID:PID for --port auto, its baud rate).")
@click.option(
    "--save-weights",
    "save_weights_path",
    type=click.Path(dir_okay=False),
    help="With --port: also keep the weights taken from the board in this weights file.",
)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Trained .tflite to write.")
@click.option(
    "--allow-other-model",
    is_flag=True,
    help="Accept weights recorded for a model file with another SHA-256 (tensors must still match).",
)
@click.option(
    "--headroom",
    type=int,
    help="The headroom bits the run trained with (the bundle manifest's "
    "training.options.headroom), for weights files that do not record them "
    "(written before protocol version 3): their tensors get scales x 2^H.",
)
@click.option(
    "--select",
    type=click.Choice(("best", "last")),
    help="Which weights: best = the lowest validation loss (the device's last good snapshot), last = "
    "the end of the run [best when the file holds them, else last].",
)
def export(
    model_path: str,
    weights_path: str | Path | None,
    port: str | None,
    baud: int | None,
    board: str | None,
    save_weights_path: str | None,
    out_path: str,
    allow_other_model: bool,
    headroom: int | None,
    select: str | None,
) -> None:
    """Write trained weights (from a weights file or a running board) into a copy of the model."""
    check_outputs(out=out_path, save_weights=save_weights_path)
    if (weights_path is None) == (port is None):
        raise click.UsageError("give exactly one source of weights: --weights FILE or --port PORT")
    if save_weights_path and not port:
        raise click.UsageError("--save-weights goes with --port")
    with tempfile.TemporaryDirectory(prefix="zoflash-export-") as tmp:
        if port is not None:
            usb_ids, baud = serial_settings(board, baud, say)
            weights_path, st = dump_from_port(
                port,
                model_path,
                save_weights_path or f"{tmp}/device.weights.npz",
                baud=baud,
                usb_ids=usb_ids,
                allow_other_model=allow_other_model,
            )
            say(
                f"weights from {port} after {st['step']} steps ({'paused' if st['paused'] else 'training'}, "
                f"q {st['q']}, {st['state']})" + (f": saved in {save_weights_path}" if save_weights_path else "")
            )
        assert weights_path is not None  # --weights, or the weights just read from --port
        if is_raw_weights(weights_path):  # kept as the device sent them: made a weights file for this model first
            say(f"weights {weights_path}: raw, as a device sent them; read as the weights of {model_path}")
            weights_path = weights_from_raw(weights_path, model_path, f"{tmp}/raw.weights.npz", allow_other_model)
        report = api.export(
            model_path, weights_path, out_path, allow_other_model=allow_other_model, headroom=headroom, select=select
        )
    for p in report.tensors:
        say(
            f"tensor {p.index:3d} '{p.name}' {p.dtype}{list(p.shape)}: {p.changed} of {p.count} values changed"
            + (", quantization scales rewritten" if p.scales is not None else "")
        )
    note = " (weights recorded for another model file)" if report.other_model else ""
    say(
        f"wrote {report.out_path}: {len(report.tensors)} tensor(s), {report.values_changed} value(s) changed{note}, "
        + (
            "no step improved the validation loss: the starting model, unchanged"
            if report.selected == "start"
            else f"{report.selected} weights" + (" (by validation loss)" if report.selected == "best" else "")
        )
    )
