"""`zoflash split`: cut a model into its frozen prefix and trainable suffix."""

from __future__ import annotations

from pathlib import Path

import click

from zoflash import api
from zoflash.cli.common import check_outputs, say
from zoflash.spec.options import TRAIN_DEFAULTS
from zoflash.training.options import make_options


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option(
    "--at",
    "tensor",
    help="Cut at this tensor (its name, as `zoflash inspect` shows it) [where the training plan cuts].",
)
@click.option(
    "--config",
    "project_file",
    type=click.Path(dir_okay=False),
    help="Project file with a [train] table [./zoflash.toml if present].",
)
@click.option("--train", help=f"Trainable layers, as `zoflash build` takes them [{TRAIN_DEFAULTS['train']}].")
@click.option("--max-params", type=int, help="Cap on trainable parameters (drops the earliest layers).")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for prefix.tflite and suffix.tflite.",
)
def split(
    model_path: str,
    tensor: str | None,
    project_file: str | None,
    train: str | None,
    max_params: int | None,
    out_dir: str,
) -> None:
    """Cut a model in two .tflite files: the frozen prefix and the trainable suffix."""
    if tensor is not None and (train is not None or max_params is not None):
        raise click.UsageError("give either --at or the training options (--train, --max-params), not both")
    check_outputs(out=str(Path(out_dir) / "prefix.tflite"))
    opts = None if tensor is not None else make_options(project_file, train=train, max_params=max_params)
    result = api.split_model(model_path, out_dir, tensor, opts)
    say(f"cut     at '{result.tensor}'")
    say(f"prefix  {result.prefix_path}  ({len(result.prefix_ops)} ops)")
    say(f"suffix  {result.suffix_path}  ({len(result.suffix_ops)} ops)")
