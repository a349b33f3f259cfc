"""`zoflash validate`: the generated C against the tflite-micro interpreter, bit for bit."""

from __future__ import annotations

import sys

import click

from zoflash import api
from zoflash.cli.common import load_samples


@click.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--inputs",
    "inputs_path",
    type=click.Path(dir_okay=False),
    help="Inputs .npy (as for infer); for a model with several inputs an .npz with one array per input, in order.",
)
@click.option("--random", "n_random", type=int, help="Use N random samples of each input's type and shape instead.")
@click.option("--seed", default=0, show_default=True, help="Seed for --random.")
def validate(model_path: str, inputs_path: str | None, n_random: int | None, seed: int) -> None:
    """Compare the generated C with the tflite-micro interpreter, bit for bit."""
    if (inputs_path is None) == (n_random is None):
        raise click.UsageError("give exactly one of --inputs or --random N")
    if n_random is not None and n_random < 1:
        raise click.UsageError(f"--random {n_random}: give at least 1 input")
    model = api.load_model(model_path)
    if inputs_path:
        x = load_samples(inputs_path)
    else:
        assert n_random is not None  # exactly one of --inputs and --random (checked above)
        x = api.random_inputs(model, n_random, seed)
    report = api.validate(model, x)
    for o in report.outputs:
        status = "OK" if o.mismatches == 0 else "MISMATCH"
        click.echo(
            f"{status}  output '{o.name}': {report.samples} samples, max abs diff {o.max_abs_diff:g}, "
            f"{o.mismatches} of {o.elements} elements differ"
        )
    if not report.ok:
        sys.exit(1)
