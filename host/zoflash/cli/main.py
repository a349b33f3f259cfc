"""The `zoflash` command group: one module per command (zoflash/cli/<command>.py), each a thin layer
over zoflash.api. Errors print one paragraph, no traceback."""

from __future__ import annotations

import logging

import click

from zoflash import __version__
from zoflash.cli import (
    boards,
    build,
    cache,
    compare,
    convert,
    export,
    flash,
    fleet,
    infer,
    inspect,
    monitor,
    ops,
    profile,
    push,
    replay,
    run,
    runtime,
    simulate,
    split,
    validate,
)
from zoflash.errors import ZoflashError

COMMANDS = (
    boards.boards,
    build.build,
    simulate.simulate,
    infer.infer,
    validate.validate,
    inspect.inspect,
    convert.convert,
    ops.ops,
    export.export,
    monitor.monitor,
    flash.flash,
    run.run,
    cache.cache,
    compare.compare,
    replay.replay,
    profile.profile,
    push.push,
    fleet.fleet,
    split.split,
    runtime.runtime,
)


class _Group(click.Group):
    """Turns ZoflashError into a clean message and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ZoflashError as err:
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)
        except OSError as err:  # a file the user named cannot be read or written: say which and why
            where = f"'{err.filename}': " if err.filename else ""
            click.echo(f"error: {where}{err.strerror or err}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zoflash")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for debug output).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def cli(verbose: int, quiet: bool) -> None:
    """zoflash: INT8 TFLite models to bit-exact C, trained on-device with zeroth-order optimization."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (testable without a subprocess)."""
    try:
        rv = cli.main(args=argv, prog_name="zoflash", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except SystemExit as e:
        return int(e.code or 0)
    return rv if isinstance(rv, int) else 0  # click returns ctx.exit() codes in this mode


for command in COMMANDS:
    cli.add_command(command)
