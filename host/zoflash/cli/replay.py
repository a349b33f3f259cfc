"""`zoflash replay`: the trained tensors rebuilt from the base model and a run's log alone."""

from __future__ import annotations

import click

from zoflash import api
from zoflash.cli.common import check_outputs, say, training_option

# The build options that choose the trained tensors: the log does not carry them (the rest it does).
PLAN_OPTIONS = ("train", "biases_only", "max_params", "bias_bound")


def _plan_options(f):
    for name in reversed(PLAN_OPTIONS):
        f = training_option(name)(f)
    return click.option(
        "--config",
        "project_file",
        type=click.Path(dir_okay=False),
        help="The run's project file with a [train] table [./zoflash.toml if present].",
    )(f)


def run_logs_option(role: str = ""):
    """--log, repeatable: a run's JSONL logs in order (a run resumed from a checkpoint: two)."""
    return click.option(
        "--log",
        "log_path",
        required=True,
        multiple=True,
        type=click.Path(dir_okay=False, exists=True),
        help=f"The run's JSONL log (zoflash simulate, run or monitor){role}. Repeat it for a run resumed from "
        "a checkpoint in a second log: the first run's log first.",
    )


@click.command()
@click.option(
    "--model",
    "model_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="The .tflite the run started from.",
)
@run_logs_option()
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="A weights file (.npz: last, residuals and best) or a trained model (.tflite).",
)
@click.option(
    "--select",
    type=click.Choice(("best", "last")),
    help="With a .tflite --out: the best weights by validation (the default) or the last.",
)
@_plan_options
def replay(
    model_path: str, log_path: tuple[str, ...], out_path: str, select: str | None, project_file: str | None, **plan
) -> int:
    """Rebuild the trained tensors, bit for bit, from the base model and a training log alone."""
    check_outputs(out=out_path)
    opts = api.make_options(project_file, **plan)
    result = api.replay(model_path, log_path, out_path, opts, select=select)
    say(result.summary())
    say(f"wrote {result.out_path}")
    return 0
