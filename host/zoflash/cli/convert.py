"""`zoflash convert`: a float model quantized to full INT8 with TensorFlow."""

from __future__ import annotations

import click

from zoflash.cli.common import check_outputs
from zoflash.compiler.convert import convert as run_convert


@click.command()
@click.option("--keras", "keras_path", type=click.Path(dir_okay=False), help="A Keras model file (.keras, .h5).")
@click.option("--saved-model", "saved_model_dir", type=click.Path(file_okay=False), help="A SavedModel directory.")
@click.option("--tflite", "tflite_path", type=click.Path(dir_okay=False), help="A float .tflite model.")
@click.option(
    "--calibration",
    "calibration_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Float samples in the model's input units: .npy [N, ...], or .npz with x (or x_train).",
)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="The INT8 .tflite to write.")
@click.option(
    "--io",
    "io_type",
    type=click.Choice(["int8", "uint8", "float"]),
    default="int8",
    show_default=True,
    help="The converted model's input and output type.",
)
def convert(keras_path, saved_model_dir, tflite_path, calibration_path, out_path, io_type) -> None:
    """Quantize a float model to full INT8 (batch size 1) with TensorFlow, and report on it."""
    check_outputs(out=out_path)
    given = [
        (k, v)
        for k, v in (("keras", keras_path), ("saved-model", saved_model_dir), ("tflite", tflite_path))
        if v is not None
    ]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --keras, --saved-model or --tflite")
    ((kind, source),) = given
    report = run_convert(kind, source, calibration_path, out_path, io_type)
    click.echo(report.describe())
