"""`zoflash compare`: two training logs, record by record, time fields aside."""

from __future__ import annotations

import click

from zoflash.monitor.session import comparable, read_log


@click.command()
@click.argument("log_a", type=click.Path(dir_okay=False, exists=True))
@click.argument("log_b", type=click.Path(dir_okay=False, exists=True))
def compare(log_a: str, log_b: str) -> int:
    """Compare two training logs (e.g. a board's and the host simulation's), time fields aside."""
    a, b = comparable(read_log(log_a)), comparable(read_log(log_b))
    for k, (ra, rb) in enumerate(zip(a, b)):
        if ra != rb:
            keys = sorted(key for key in set(ra) | set(rb) if ra.get(key) != rb.get(key))
            click.echo(
                f"DIFFERENT at record {k} ({ra.get('type')}): "
                + ", ".join(f"{key}: {ra.get(key)!r} vs {rb.get(key)!r}" for key in keys)
            )
            return 1
    if len(a) != len(b):
        click.echo(f"DIFFERENT: {len(a)} vs {len(b)} records (identical up to the shorter)")
        return 1
    steps = sum(r["type"] == "step" for r in a)
    click.echo(f"IDENTICAL: {len(a)} records ({steps} steps), every field but the times")
    return 0
