"""`zoflash cache`: the shared cache of compiled runtime objects."""

from __future__ import annotations

import os

import click

from zoflash.targets.build_cache import CACHE_ENV, ObjectCache, cache_root


@click.command()
@click.option("--clear", is_flag=True, help="Remove every cached object.")
def cache(clear: bool) -> None:
    """The shared cache of compiled runtime objects (where it is, how big; --clear empties it)."""
    root = cache_root()
    if root is None:
        click.echo(f"the object cache is off ({CACHE_ENV}={os.environ.get(CACHE_ENV)})")
        return
    store = ObjectCache(root)
    if clear:
        click.echo(f"removed {store.clear()} cached objects from {root}")
        return
    n, size = store.usage()
    click.echo(f"{root}: {n} cached objects, {size} bytes (set {CACHE_ENV} to move it, {CACHE_ENV}=off to disable)")
