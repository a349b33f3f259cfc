"""`zoflash push`: a run's updates sent to a second device, which ends with the same weights."""

from __future__ import annotations

import click

from zoflash import api
from zoflash.cli.common import say
from zoflash.cli.replay import PLAN_OPTIONS, _plan_options, run_logs_option
from zoflash.monitor.serialport import DEFAULT_BAUD


@click.command()
@click.option(
    "--port",
    required=True,
    help="The second device's serial port: /dev/ttyACM0, COM3, socket://HOST:PORT (QEMU), rfc2217://HOST:PORT.",
)
@click.option("--baud", type=int, help=f"Baud rate [{DEFAULT_BAUD}].")
@run_logs_option(": its updates are what is sent")
@click.option(
    "--model",
    "model_path",
    type=click.Path(dir_okay=False, exists=True),
    help="The .tflite both devices started from: the host replays the log on it to know the weights to expect.",
)
@click.option(
    "--bundle",
    "bundle_dir",
    type=click.Path(file_okay=False, exists=True),
    help="Instead of --model: the training bundle the device runs (its manifest names the model, looked for "
    "in the bundle, beside it and here, and gives the trained tensors).",
)
@click.option(
    "--wait",
    "connect_wait",
    type=float,
    default=5.0,
    show_default=True,
    help="Seconds to keep trying to open the port at the start.",
)
@_plan_options
def push(
    port: str,
    baud: int | None,
    log_path: tuple[str, ...],
    model_path: str | None,
    bundle_dir: str | None,
    connect_wait: float,
    project_file: str | None,
    **plan,
) -> int:
    """Send what a run learned to a second device running the same base model.

    The log's updates (binary16 coefficients, rollbacks and snapshots of every step) go down the
    command channel in acknowledged chunks; the device applies them with its own update maths, then
    reports the CRC-32 of its trainable tensors, which must equal the replay's of the same log.
    Refused: a device running another model or built with other options, a log with a gap or of
    another model, a device that has trained already (reset it and push before it trains).

    Exit status: 0 the device's weights are identical to the replay's, 1 they differ, 2 a refusal."""
    if (model_path is None) == (bundle_dir is None):
        raise click.UsageError("give the base model once: --model M.tflite or --bundle DIR")
    model = model_path
    if bundle_dir is not None:
        found, built = api.model_of_bundle(bundle_dir)
        model = str(found)
        plan = {**{k: built[k] for k in PLAN_OPTIONS if k in built}, **{k: v for k, v in plan.items() if v is not None}}
    opts = api.make_options(project_file, **plan)
    assert model is not None  # one of --model and --bundle, checked above
    result = api.push(port, log_path, model, opts, baud=baud, connect_wait=connect_wait, say=say)
    say(result.summary(" + ".join(log_path)))
    return 0
