"""`zoflash` command line: a thin layer over zoflash.api. Errors print one paragraph, no traceback."""
from __future__ import annotations

import logging
import sys

import click
import numpy as np

from . import __version__
from .errors import ZoflashError

log = logging.getLogger("zoflash")


class _Group(click.Group):
    """Turns ZoflashError into a clean message and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ZoflashError as err:
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zoflash")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for debug output).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def cli(verbose: int, quiet: bool) -> None:
    """zoflash: INT8 TFLite models to bit-exact C, trained on-device with zeroth-order optimization."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s")


def _say(text: str) -> None:
    """Normal output, silenced by -q."""
    if logging.getLogger().level < logging.ERROR:
        click.echo(text)


@cli.command()
def boards() -> None:
    """List the boards zoflash can build for."""
    from .boards import list_boards

    for b in list_boards():
        click.echo(f"{b.id:<20} {b.name}")


@cli.command()
@click.option("--board", default="host", show_default=True, help="Board id (see `zoflash boards`).")
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False), help="INT8 .tflite model.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Bundle directory [generated/<model>-<board>].")
@click.option("--prefix", help="C name prefix for the model's functions [from the model file name].")
@click.option("--no-compile", is_flag=True, help="Only generate the bundle; do not run the compiler.")
def build(board: str, model_path: str, out_dir: str | None, prefix: str | None, no_compile: bool) -> None:
    """Generate the C bundle for a board and compile it."""
    from . import api

    if no_compile:
        bundle = api.generate(model_path, board, out_dir, prefix)
        code = None
    else:
        result = api.build(model_path, board, out_dir, prefix)
        bundle, code = result.bundle, result.code_bytes
    mem = bundle.manifest["memory"]
    _say(f"bundle  {bundle.path}  (board {bundle.board}, prefix {bundle.prefix})")
    _say(f"RAM     arena {mem['arena_bytes']} bytes (activations, inputs and outputs; plan {mem['plan_strategy']})")
    flash = f"flash   constant weights {mem['weights_bytes']} bytes"
    if code is not None:
        flash += f", code {code} bytes (host compiler, -O2)"
    _say(flash)


def _load_array(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ZoflashError(f"cannot read '{path}' as a .npy array: {exc}") from None


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", required=True, type=click.Path(dir_okay=False),
              help=".npy, int8 [N, *input shape] (float32 is quantized with the input's parameters).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Output .npy.")
def infer(model_path: str, inputs_path: str, out_path: str) -> None:
    """Run the generated C on every sample and write the outputs."""
    from . import api

    y = api.infer(model_path, _load_array(inputs_path))
    np.save(out_path, y)
    _say(f"wrote {out_path}: {y.dtype} {list(y.shape)}")


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False), help="Inputs .npy (as for infer).")
@click.option("--random", "n_random", type=int, help="Use N random int8 inputs instead.")
@click.option("--seed", default=0, show_default=True, help="Seed for --random.")
def validate(model_path: str, inputs_path: str | None, n_random: int | None, seed: int) -> None:
    """Compare the generated C with the tflite-micro interpreter, bit for bit."""
    from . import api

    if (inputs_path is None) == (n_random is None):
        raise click.UsageError("give exactly one of --inputs or --random N")
    x = _load_array(inputs_path) if inputs_path else api.random_inputs(api.load_model(model_path), n_random, seed)
    report = api.validate(model_path, x)
    for o in report.outputs:
        status = "OK" if o.mismatches == 0 else "MISMATCH"
        click.echo(f"{status}  output '{o.name}': {report.samples} samples, max abs diff {o.max_abs_diff:g}, "
                   f"{o.mismatches} of {o.elements} elements differ")
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.argument("model_path", type=click.Path(dir_okay=False))
def inspect(model_path: str) -> None:
    """Ops, tensors, quantization, memory plan and legality of a model."""
    from . import api

    click.echo(api.inspect(model_path))


@cli.command()
@click.option("--model", "model_path", required=True, type=click.Path(dir_okay=False),
              help="The .tflite the weights were trained from.")
@click.option("--weights", "weights_path", required=True, type=click.Path(dir_okay=False),
              help="Trained weights file (<log>.weights.npz).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Trained .tflite to write.")
@click.option("--allow-other-model", is_flag=True,
              help="Accept weights recorded for a model file with another SHA-256 (tensors must still match).")
def export(model_path: str, weights_path: str, out_path: str, allow_other_model: bool) -> None:
    """Write trained weights into a copy of the model."""
    from .export import export_weights

    report = export_weights(model_path, weights_path, out_path, allow_other_model=allow_other_model)
    for p in report.tensors:
        _say(f"tensor {p.index:3d} '{p.name}' {p.dtype}{list(p.shape)}: {p.changed} of {p.count} values changed")
    note = " (weights recorded for another model file)" if report.other_model else ""
    _say(f"wrote {report.out_path}: {len(report.tensors)} tensor(s), {report.values_changed} value(s) changed{note}")


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


if __name__ == "__main__":
    sys.exit(main())
