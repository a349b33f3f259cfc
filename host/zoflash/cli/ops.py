"""`zoflash ops`: the supported operators."""

from __future__ import annotations

import click

from zoflash.compiler.ops import docs


@click.command()
@click.option("--markdown", is_flag=True, help="Markdown, as in docs/ops.md.")
def ops(markdown: bool) -> None:
    """The supported operators: their inputs, options, C kernels and constraints."""
    click.echo(docs.markdown() if markdown else docs.text_table(), nl=False)
