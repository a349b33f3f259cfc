"""What the commands share: the training flags, output checks, the printing that -q silences."""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path

import click
import numpy as np

from zoflash.errors import ZoflashError
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.serial_monitor import RECONNECT_TIMEOUT
from zoflash.spec import options as options_table
from zoflash.training.options import make_options, parse_sched_params
from zoflash.workflows.run import APP_IS_A_LIBRARY


def check_outputs(**paths) -> None:
    """Fail before any work when an output cannot be written: the nearest existing folder of each
    path must be a writable directory, and the path itself, if it exists, a writable file
    (`name=path`, None skipped; the name is the option's)."""
    for name, value in paths.items():
        if value is None:
            continue
        target = Path(value).expanduser().absolute()
        if target.is_dir() or (target.exists() and not os.access(target, os.W_OK)):
            raise ZoflashError(
                f"--{name.replace('_', '-')} {value}: cannot write there ("
                + ("it is a folder" if target.is_dir() else "the file is read-only")
                + "): give another path"
            )
        folder = target.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise ZoflashError(
                f"--{name.replace('_', '-')} {value}: cannot write there ({folder} is not a writable folder)"
            )


FORCE_OPTION = click.option(
    "--force",
    is_flag=True,
    help="Overwrite the outputs of an earlier run (log, weights, plot) [default: pick run-2.jsonl, ... and say so].",
)


def fresh_log(log_path: str, force: bool, **others: str | None) -> str:
    """The log to write: `log_path`, or with --force off and an earlier run's outputs (log,
    weights, plot) or one of `others` (name=path) in place, the first free run-N name, said in
    one line.  Every output (the log's and `others`) is then checked writable, before any work."""
    from zoflash.monitor.outputs import outputs_of, unused_log_path

    if not force:
        fresh = unused_log_path(log_path)
        if str(fresh) != str(log_path):
            say(f"outputs {log_path} (or its weights, plot) exists: writing {fresh} instead (--force overwrites)")
            log_path = str(fresh)
    for path in outputs_of(log_path):  # the log, its weights, plot, raw weights, dumps: all named by --log
        check_outputs(log=str(path))
    check_outputs(**others)
    return log_path


def say(text: str) -> None:
    """Normal output, silenced by -q."""
    if logging.getLogger().level < logging.ERROR:
        click.echo(text)


def load_array(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except EOFError:  # an empty file (click would take it for Ctrl-D and say "aborted")
        raise ZoflashError(f"cannot read '{path}' as a .npy array: the file is empty") from None
    except (OSError, ValueError) as exc:
        raise ZoflashError(f"cannot read '{path}' as a .npy array: {exc}") from None


def load_samples(path: str) -> np.ndarray | list[np.ndarray]:
    """An .npy (the samples of a one-input model) or an .npz (one array per model input, in the order
    they were saved: np.savez(path, x0, x1, ...) or by name)."""
    if not zipfile.is_zipfile(path):
        return load_array(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            return [npz[name] for name in npz.files]
    except Exception as exc:  # pickled objects; a damaged member fails in many ways (CRC, EOF, zlib)
        raise ZoflashError(f"cannot read '{path}' as an .npz of arrays ({type(exc).__name__}: {exc})") from None


def _click_option(o: options_table.Option):
    """A training flag from its table row. Values are checked by validate(), not by click, so a
    value has the same message from a flag, zoflash.toml or the Python API; choices show as click's."""
    if o.name == "sched":
        return click.option(o.flag, "sched_param", multiple=True, metavar="NAME=VALUE", help=o.help)
    if o.type == "bool":
        return click.option(o.flag, is_flag=True, default=None, help=options_table.help_text(o))
    kind = None if o.auto or o.choices else {"int": int, "float": float}.get(o.type.split(" ")[0])
    metavar = "[" + "|".join(o.choices) + "]" if o.choices else None
    return click.option(o.flag, type=kind, metavar=metavar, help=options_table.help_text(o))


def training_option(name: str):
    """One training flag, by its name in the option table (for a command that takes a few of them)."""
    return _click_option(options_table.BY_NAME[name])


def training_options(f):
    """The training flags (docs/options.md, from spec/options.py); the same keys work in zoflash.toml [train]."""
    opts = [
        click.option(
            "--config",
            "project_file",
            type=click.Path(dir_okay=False),
            help="Project file with a [train] table [./zoflash.toml if present].",
        )
    ]
    opts += [_click_option(o) for o in options_table.OPTIONS]
    for o in reversed(opts):
        f = o(f)
    return f


_TRAIN_KEYS = tuple(n for n in options_table.OPTION_NAMES if n != "sched")  # sched: --sched-param


def options_from(kwargs: dict):
    """Pop the training flags from a command's kwargs into TrainOptions."""
    project = kwargs.pop("project_file", None)
    sched = parse_sched_params(kwargs.pop("sched_param", ()) or ())
    overrides = {k: kwargs.pop(k, None) for k in _TRAIN_KEYS}
    return make_options(project, sched=sched, **overrides)


def refuse_app(opts) -> None:
    """--data-source app builds a library for your firmware: nothing to simulate or run as it is."""
    if opts.data_source == "app":
        raise click.UsageError(APP_IS_A_LIBRARY)


RECONNECT_OPTION = click.option(
    "--reconnect-timeout",
    type=float,
    default=RECONNECT_TIMEOUT,
    show_default=True,
    help="Seconds to keep retrying a serial port that disappeared before stopping (exit status 1).",
)


def checkpoint_options(f):
    f = click.option(
        "--resume",
        "resume_path",
        type=click.Path(dir_okay=False),
        help="Send this checkpoint to the device first: training continues from its step.",
    )(f)
    return click.option(
        "--checkpoint",
        "checkpoint_path",
        type=click.Path(dir_okay=False),
        help="Keep the latest valid checkpoint the device sends (build with --checkpoint-every N) in this file.",
    )(f)


def live_view() -> LiveView:
    """The live view of a training run, off under -q."""
    return LiveView(enabled=logging.getLogger().level < logging.ERROR)
