"""`zoflash infer`: run the generated C on samples (host or emulated board)."""

from __future__ import annotations

import click
import numpy as np

from zoflash import api
from zoflash.cli.common import check_outputs, load_array, say


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--inputs",
    "inputs_path",
    required=True,
    type=click.Path(dir_okay=False),
    help=".npy, [N, *input shape] of the model's input type (int8, uint8 or float32); float data for "
    "an integer input is quantized with the input's parameters.",
)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .npy.")
@click.option(
    "--board",
    "board_id",
    default="host",
    show_default=True,
    help="host, or an emulated board (mps3-an547: the firmware build on QEMU, samples in order).",
)
def infer(model_path: str, inputs_path: str, out_path: str, board_id: str) -> None:
    """Run the generated C on every sample and write the outputs (output 0)."""
    check_outputs(out=out_path)
    if board_id == "host":
        y = api.infer(model_path, load_array(inputs_path))
    else:
        y = api.infer_on_board(model_path, load_array(inputs_path), board_id)[0]
    with open(out_path, "wb") as f:  # the file named, exactly: np.save on a name would append .npy
        np.save(f, y)
    say(f"wrote {out_path}: {y.dtype} {list(y.shape)}")
