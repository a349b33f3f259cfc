"""`zoflash boards`: the boards zoflash builds for."""

from __future__ import annotations

import click

from zoflash.targets.boards import describe, list_boards, resolve_board


@click.group(invoke_without_command=True)
@click.pass_context
def boards(ctx) -> None:
    """List the boards zoflash can build for (`boards show ID` for one in full)."""
    if ctx.invoked_subcommand is not None:
        return
    click.echo(f"{'id':<18} {'family':<14} name")
    for b in list_boards():
        marks = [
            m for m, on in (("family reference", b.reference and b.family != b.id), ("emulated", b.emulated)) if on
        ]
        click.echo(f"{b.id:<18} {b.family:<14} {b.name}" + (f"  [{', '.join(marks)}]" if marks else ""))
    click.echo("(--board also takes a family name: its reference board)")


@boards.command("show")
@click.argument("board_id")
def boards_show(board_id: str) -> None:
    """Everything a board file says: CPU, flags, memory and placement, console, boot, flash."""
    board, note = resolve_board(board_id)
    if note:
        click.echo(f"({note})")
    click.echo(describe(board))
