"""What the commands share: the training flags, output checks, the printing that -q silences."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import click
import numpy as np

from zoflash.errors import ZoflashError
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.serial_monitor import RECONNECT_TIMEOUT
from zoflash.spec import training as spec
from zoflash.training.options import make_options, parse_sched_params


def check_outputs(**paths) -> None:
    """Fail before any work when an output cannot be written: the nearest existing folder of each
    path must be a writable directory (`name=path`, None skipped; the name is the option's)."""
    for name, value in paths.items():
        if value is None:
            continue
        folder = Path(value).expanduser().absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise ZoflashError(f"--{name.replace('_', '-')} {value}: cannot write there ({folder} is not a writable "
                               "folder)")


def say(text: str) -> None:
    """Normal output, silenced by -q."""
    if logging.getLogger().level < logging.ERROR:
        click.echo(text)

def load_array(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ZoflashError(f"cannot read '{path}' as a .npy array: {exc}") from None


def training_options(f):
    """The training flags (docs/training.md); the same keys work in zoflash.toml [train]."""
    d = spec.TRAIN_DEFAULTS
    opts = [
        click.option("--config", "project_file", type=click.Path(dir_okay=False),
                     help="Project file with a [train] table [./zoflash.toml if present]."),
        click.option("--train", help=f"Trainable layers: last, last:N, all, layers:NAME[,NAME] [{d['train']}]."),
        click.option("--biases-only", is_flag=True, default=None, help="Train only the biases of those layers."),
        click.option("--max-params", type=int, help="Cap on trainable parameters (drops the earliest layers)."),
        click.option("--batch", type=int, help=f"Minibatch size b [{d['batch']}]."),
        click.option("--eps", type=int, help=f"Perturbation size in LSB (biases: eps * their eps_b) [{d['eps']}]."),
        click.option("--density", type=float, help="Sparse directions: nonzero fraction 1, 1/2, ..., "
                                                   f"1/{1 << spec.DENSITY_LOG2_MAX} [{d['density']:g}]."),
        click.option("--rounding", type=click.Choice(spec.ROUNDINGS), help=f"int8 update rounding [{d['rounding']}]."),
        click.option("--lr", help="Learning rate lr_1, or 'auto' (calibrated on the device) [auto]."),
        click.option("--rho", type=float, help=f"auto lr: RMS update per step at q = 1, in LSB [{d['rho']:g}]."),
        click.option("--lr-scaling", type=click.Choice(spec.LR_SCALINGS),
                     help=f"lr at q vs q = 1 [{d['lr_scaling']}]."),
        click.option("--lr-decay", type=click.Choice(spec.LR_DECAYS),
                     help=f"lr factor over the run (budget or steps): linear 1 - f, step 1/0.1/0.01, tail 1 then linear "
                          f"to 0 over the last 1/{spec.LR_DECAY_TAIL_DIV} [{d['lr_decay']}]."),
        click.option("--lr-trial", type=int, help="lr trial: steps per candidate lr_1 * 2^j before training, 0 off "
                     f"[{spec.LR_TRIAL_STEPS} for the adaptive schedulers with embedded data, else 0]."),
        click.option("--calib-steps", type=int, help=f"auto lr: calibration steps [{d['calib_steps']}]."),
        click.option("--calib-q", type=int, help=f"auto lr: q during calibration [{d['calib_q']}]."),
        click.option("--seed", type=int, help=f"Run seed [{d['seed']}]."),
        click.option("--steps", type=int, help=f"Training steps [{spec.DEFAULT_STEPS} unless --budget]."),
        click.option("--budget", type=int, help="Forward-pass budget (prefix + suffix sample-passes)."),
        click.option("--eval-every", type=int,
                     help=f"Evaluate on the validation and test sets every N steps [{d['eval_every']}]."),
        click.option("--scheduler", type=click.Choice(spec.SCHEDULERS), help=f"q scheduler [{d['scheduler']}]."),
        click.option("--q", type=int, help=f"q of the fixed scheduler, starting q of plateau/adazeta [{d['q']}]."),
        click.option("--q-min", type=int, help=f"Smallest q [{d['q_min']}]."),
        click.option("--q-max", type=int, help=f"Largest q [{d['q_max']}]."),
        click.option("--sched-param", "sched_param", multiple=True, metavar="NAME=VALUE",
                     help="Scheduler parameter (repeatable), e.g. tau=0.02, patience=3, alpha=2."),
        click.option("--bias-bound", type=int,
                     help=f"Bound of a step's bias change, in units of eps_b [{d['bias_bound']}]."),
        click.option("--guard-sat", type=float, help=f"Guard: saturated-logit fraction [{d['guard_sat']:g}]."),
        click.option("--guard-zero", type=float, help=f"Guard: zero-loss-difference fraction [{d['guard_zero']:g}]."),
        click.option("--guard-steps", type=int,
                     help=f"Guard: consecutive steps before a rollback [{d['guard_steps']}]."),
        click.option("--guard-loss", type=float,
                     help=f"Guard: roll back when a validation loss exceeds best x this [{d['guard_loss']:g}; 0 off] ..."),
        click.option("--guard-loss-z", type=float,
                     help=f"... plus this many standard errors of the validation mean [{d['guard_loss_z']:g}]."),
        click.option("--guard-max-rollbacks", type=int,
                     help=f"Guard: stop after this many rollbacks [{d['guard_max_rollbacks']}; 0 never]."),
        click.option("--headroom", help="Re-quantize the trainable layers with H bits of headroom (scales x 2^H, "
                                        "weights / 2^H), 0..4, or auto: the most bits that keep the trainable "
                                        f"weights' RMS at least {spec.HEADROOM_AUTO_LSB:g} LSB [{d['headroom']}]."),
        click.option("--loss", type=click.Choice(spec.LOSS_CHOICES),
                     help="Loss: auto = mse with --target input, sigmoid-bce for one output (labels 0/1), "
                          f"else softmax-ce; mse for float targets [{d['loss']}]."),
        click.option("--target", type=click.Choice(spec.TARGETS),
                     help=f"What the output should match: the data's y, or the sample's own input "
                          f"(autoencoders; no y needed) [{d['target']}]."),
      
        click.option("--data-source", type=click.Choice(spec.DATA_SOURCES),
                     help="Where training samples come from: built in, fed by the host over the serial link, or "
                          f"pushed by your own firmware (a library) [{d['data_source']}]."),
        click.option("--buffer", type=int, help=f"stream/app: samples the device keeps for minibatches [{d['buffer']}]."),
        click.option("--refresh", type=int, help=f"stream/app: new samples before each step [{d['refresh']}]."),
        click.option("--val-fraction", type=float,
                     help="Share of the training data carved off for validation (guards, snapshots, best weights; "
                          f"the test set is only reported) [{d['val_fraction']:g}]."),
        click.option("--checkpoint-every", type=int,
                     help=f"Send a checkpoint every N steps (monitor/run --checkpoint keeps it) "
                          f"[{d['checkpoint_every']}: never]."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


_TRAIN_KEYS = tuple(spec.TRAIN_DEFAULTS)  # every option has a flag (sched: --sched-param)


def options_from(kwargs: dict):
    """Pop the training flags from a command's kwargs into TrainOptions."""
    project = kwargs.pop("project_file", None)
    sched = parse_sched_params(kwargs.pop("sched_param", ()) or ())
    overrides = {k: kwargs.pop(k, None) for k in _TRAIN_KEYS}
    return make_options(project, sched=sched, **overrides)


def refuse_app(opts) -> None:
    """--data-source app builds a library for your firmware: nothing to simulate or run as it is."""
    if opts.data_source == "app":
        raise click.UsageError("--data-source app builds the trainer as a library for your own firmware: use "
                               "`zoflash build --data-source app` and link your main() (examples/app_sensor)")


RECONNECT_OPTION = click.option(
    "--reconnect-timeout", type=float, default=RECONNECT_TIMEOUT, show_default=True,
    help="Seconds to keep retrying a serial port that disappeared before stopping (exit status 1).")


def checkpoint_options(f):
    f = click.option("--resume", "resume_path", type=click.Path(dir_okay=False),
                     help="Send this checkpoint to the device first: training continues from its step.")(f)
    return click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False),
                        help="Keep the latest valid checkpoint the device sends (build with --checkpoint-every N) "
                             "in this file.")(f)



def live_view() -> LiveView:
    """The live view of a training run, off under -q."""
    return LiveView(enabled=logging.getLogger().level < logging.ERROR)
