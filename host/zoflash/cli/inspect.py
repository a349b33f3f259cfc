"""`zoflash inspect`: ops, tensors, quantization, memory plan and legality of a model."""

from __future__ import annotations

import sys

import click

from zoflash import api


@click.command()
@click.argument("model_path", type=click.Path(dir_okay=False))
def inspect(model_path: str) -> None:
    """Ops, tensors, quantization, memory plan and legality of a model (exit 2 if it is not supported)."""
    report = api.inspect(model_path)
    click.echo(report.text)
    if not report.supported:
        sys.exit(2)
