"""Putting a bundle's firmware on a board: one runner class per flash method, in a registry.

A board file lists its ways of loading firmware as [[flash]] entries (name, method, the boot
mode the board must be in while loading, and method settings); `zoflash flash --bundle DIR
[--method NAME]` picks one (by entry name, or by method when only one entry uses it; the first
entry by default), prints the boot switch positions it needs, then runs the method's programs.

Every runner turns (firmware, options) into the exact command lines first (`commands`: pure, no
tool needed, what `--dry-run` prints and the tests check), and `run` executes them with a
progress line per program and a one-line reason on failure; a missing program is a one-line
ToolMissingError saying how to get it.

Methods:
  qemu                 qemu-system-arm in the background (see QemuRunner: serial over TCP, state
                       file, time limit, --stop).
  stm32cubeprogrammer  mode "ram": ST-LINK_gdbserver + gdb `load`, then detach (the core runs);
                       mode "flash": STM32_SigningTool_CLI signs the BIN as an FSBL image, then
                       STM32_Programmer_CLI writes it to the external flash with the external loader.
  pyocd                the part's CMSIS pack from cmsis-pack-manager's cache, or --pack FILE.pack.
  openocd              interface and target configs from the board file.

A method is declared once, in its own module here: its Runner class names the method and gives
its board-file settings (the [[flash]] keys boards.py checks), the rules of its entries, and how to
get each program it runs; `@register` puts it in the registry (boards.FLASH_METHODS). Adding a
method is that module and its name in the import line below.

RAM images (the board places its code in a region of kind "ram", as on the STM32N6 boards) are
loaded without a system reset afterwards: on the STM32N6 a system reset erases AXISRAM1/2, so
the runners set the PC to the ELF's entry point (the reset handler sets the stack and VTOR
itself) and let the core run.
"""

from __future__ import annotations

from pathlib import Path

from zoflash.targets.budget import flash_data_address
from zoflash.targets.runners import openocd, pyocd, qemu, stm32cubeprogrammer  # noqa: F401  (register)
from zoflash.targets.runners.base import (
    FlashError,
    FlashOptions,
    FlashResult,
    Say,
    _show,
    boot_lines,
    check_files,
    load_firmware,
    runner_for,
)

# ------------------------------------------------------------------------------------- API


def flash_bundle(
    bundle_dir: str | Path,
    method: str | None = None,
    options: FlashOptions | None = None,
    dry_run: bool = False,
    say: Say = print,
) -> FlashResult:
    """Load a bundle's firmware with one of its board's flash methods (see the module doc)."""
    fw = load_firmware(bundle_dir, method)
    opts = options or FlashOptions()
    runner = runner_for(fw.entry)
    e = fw.entry
    nor = flash_data_address(fw.board)
    if nor is not None and fw.board.boot_mode == "flash" and e.get("mode") != "flash":  # --- flash boot ---
        flashers = ", ".join(f["name"] for f in fw.board.flash if f.get("mode") == "flash")
        raise FlashError(
            f"this build keeps weights or data in the external flash at 0x{nor:08X} (--boot flash), "
            f"which method '{e['name']}' does not write: use --method {flashers or 'with mode flash'}, "
            "or rebuild with --boot dev to load it in development mode"
        )
    if nor is not None and "external_loader" not in e:  # development mode, data read in place from the NOR
        writers = ", ".join(f["name"] for f in fw.board.flash if "external_loader" in f and f.get("mode") != "flash")
        raise FlashError(
            f"this build reads weights or data in place from the external flash at 0x{nor:08X}, which "
            f"method '{e['name']}' does not write: use --method {writers or '(none on this board)'} "
            "(it writes them with the external loader, then loads the rest into RAM), or use less "
            "data so that everything fits in RAM"
        )
    mode = f", {e['mode']} mode" if "mode" in e else ""
    say(
        f"flash   {fw.board.id}: method '{e['name']}' ({e['method']}{mode})"
        + (f": {e['description']}" if e.get("description") else "")
    )
    for line in boot_lines(fw):
        say(line)
    if not dry_run:
        check_files(fw, runner.inputs(fw))
    runner.prepare(fw, opts, dry_run=dry_run)
    for note in opts.notes:
        say(note)
    if dry_run:
        if any(not p.is_file() for p in runner.inputs(fw)):
            say(f"note    not built yet: {', '.join(str(p) for p in runner.inputs(fw) if not p.is_file())}")
        cmds = runner.commands(fw, opts)
        for argv in cmds:
            say(_show(argv))
        return FlashResult(runner.method, e["name"], cmds, message="dry run")
    return runner.run(fw, opts, say)
