"""`zoflash flash`: put a bundle's firmware on its board, or start it in QEMU."""

from __future__ import annotations

from pathlib import Path

import click

from zoflash.cli.common import say
from zoflash.targets.runners import FlashOptions, flash_bundle
from zoflash.targets.runners.base import DEFAULT_QEMU_TIMEOUT
from zoflash.targets.runners.qemu import stop_qemu


@click.command()
@click.option(
    "--bundle",
    "bundle_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Bundle directory (from `zoflash build --board BOARD --data ...`): its build/ holds the firmware.",
)
@click.option(
    "--method",
    help="A [[flash]] entry of the board, or a method (qemu, stm32cubeprogrammer, pyocd, "
    "openocd) used by one entry [the board's first; see `zoflash boards show BOARD`].",
)
@click.option("--stop", is_flag=True, help="qemu: stop the emulator started for this bundle.")
@click.option("--dry-run", is_flag=True, help="Print the boot switch positions and the exact commands; run nothing.")
@click.option(
    "--pack",
    "pack_path",
    type=click.Path(dir_okay=False),
    help="pyocd: the part's CMSIS pack file (.pack), e.g. when offline [from cmsis-pack-manager's cache].",
)
@click.option("--port", "tcp_port", type=int, help="qemu: local TCP port for the console UART [a free one].")
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_QEMU_TIMEOUT,
    show_default=True,
    help="qemu: stop the emulator after this many seconds.",
)
def flash(
    bundle_dir: str,
    method: str | None,
    stop: bool,
    dry_run: bool,
    pack_path: str | None,
    tcp_port: int | None,
    timeout: float,
) -> None:
    """Put a bundle's firmware on its board (or start it in QEMU); prints the boot switch positions first.

    STM32CubeProgrammer is found through $STM32_PRG_PATH (its bin folder), else STM32_Programmer_CLI
    on PATH, else ST's default install folders."""
    if stop:
        if dry_run or pack_path or method:
            raise click.UsageError("--stop takes only --bundle")
        stop_qemu(bundle_dir, say=say)
        return
    opts = FlashOptions(pack=Path(pack_path) if pack_path else None, port=tcp_port, timeout=timeout)
    flash_bundle(bundle_dir, method, opts, dry_run=dry_run, say=say)
