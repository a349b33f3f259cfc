"""`zoflash runtime`: the static C runtime as a library for your own build (include folders, sources,
the CMake folder)."""

from __future__ import annotations

import click

from zoflash import api

PART_CHOICE = click.Choice(api.RUNTIME_PARTS)


@click.command()
@click.argument("parts", nargs=-1, type=PART_CHOICE)
@click.option("--cflags", is_flag=True, help="Print the -I options the parts' sources need, on one line.")
@click.option("--sources", "list_sources", is_flag=True, help="Print the parts' C sources, one per line.")
@click.option("--cmake-dir", is_flag=True, help="Print the folder to add_subdirectory() in CMake.")
def runtime(parts: tuple[str, ...], cflags: bool, list_sources: bool, cmake_dir: bool) -> None:
    """The C runtime's parts for your own build: e.g. `zoflash runtime training --cflags`.

    Without an option: each part, what it needs and where its files are. The sources that need a
    bundle's generated headers (the firmware's main, the app glue) are left out; link a bundle for those."""
    if sum((cflags, list_sources, cmake_dir)) > 1:
        raise click.UsageError("give one of --cflags, --sources, --cmake-dir")
    chosen = parts or api.RUNTIME_PARTS
    if cflags:
        click.echo(" ".join(f"-I{d}" for d in api.runtime_include_dirs(chosen)))
    elif list_sources:
        for path in api.runtime_c_sources(chosen):
            click.echo(str(path))
    elif cmake_dir:
        click.echo(str(api.runtime_root()))
    else:
        for part in chosen:
            needs = ", ".join(api.runtime_requirements(part)) or "nothing else"
            click.echo(f"{part:<10} {len(api.runtime_c_sources([part]))} source(s), needs {needs}")
        click.echo(f"files under {api.runtime_root()} (CMake: add_subdirectory of that folder)")
