"""The cross build of a firmware bundle (ELF, BIN, HEX, or the model as a static library) and
its per-region size report (budget.py)."""

from __future__ import annotations

import shlex
import subprocess

from zoflash.errors import BuildError, ToolMissingError
from zoflash.targets.boards import Board
from zoflash.targets.budget import (
    check_fit,
    flash_data_address,
    library_sizes,
    measured_code,
    placed_board,
    section_sizes,
    size_report,
)
from zoflash.targets.host_build import REGION_OVERFLOW, BuildResult, require, run_make
from zoflash.targets.npu import pool_items
from zoflash.targets.project import Bundle

# ----------------------------------------------------------------------------------- build

FIRMWARE_SUFFIXES = (".elf", ".bin", ".hex")


def _require_newlib(cc: str, hint: str) -> None:
    proc = subprocess.run([cc, "-print-file-name=libc.a"], capture_output=True, text=True)
    if proc.returncode != 0 or "/" not in proc.stdout.strip():
        raise ToolMissingError(f"the C library for {cc} (newlib)", hint or "install newlib for the cross compiler")


def build_firmware(bundle: Bundle, board: Board) -> BuildResult:
    """Cross-compile the bundle: the training firmware (ELF, BIN, HEX) when it trains, else the
    model as a static library; then measure every region."""
    tc = bundle.manifest["toolchain"]
    hint = f"install it (Debian/Ubuntu: {tc['install']})" if tc.get("install") else ""
    for tool in (tc["cc"], tc["objcopy"], tc["size"]):
        require(tool, hint)
    _require_newlib(tc["cc"], hint)
    run_make(bundle, "all")
    prefix, build_dir = bundle.prefix, bundle.path / "build"
    state_bytes = bundle.manifest["memory"].get("state_bytes", 0)
    if (bundle.manifest.get("training") or {}).get("data_source", {}).get("kind") == "app":
        outputs, usage = [build_dir / f"lib{prefix}_train.a"], []  # regions: known once your firmware links it
    elif bundle.manifest.get("training"):
        outputs = [build_dir / f"{prefix}{s}" for s in FIRMWARE_SUFFIXES]
        if flash_data_address(board) is not None:  # the data read in place from the flash
            outputs.append(build_dir / f"{prefix}_nor.bin")
            if board.boot_mode == "dev":  # what the debugger loads into RAM (the ram method writes the NOR first)
                outputs.append(build_dir / f"{prefix}_ram.elf")
        npu = bundle.manifest["training"].get("npu") or {}  # --- NPU: its pools, beside the ELF's
        usage = size_report(board, section_sizes(tc["size"], outputs[0]), pool_items(npu.get("pools", ())), state_bytes)
    else:
        outputs = [build_dir / f"lib{prefix}.a"]
        usage = library_sizes(tc["size"], outputs[0], prefix, board, state_bytes)
    code = sum(u.bytes for r in usage for u in r.items if u.label == "code")
    result = BuildResult(bundle=bundle, outputs=outputs, code_bytes=code, regions=usage)
    over = [u for u in usage if u.over > 0]
    if over:  # cannot happen for a linked ELF (the linker checks); possible for the library
        check_fit(board, usage, "the compiled model")
    return result


# --- flash boot ---
def flash_boot_lines(result: BuildResult) -> list[str]:
    """What a flash-boot build made and what to do with it: the FSBL image to sign (the exact
    signing command), the data image and its flash address, the command writing both."""
    from zoflash.targets.runners.base import Firmware
    from zoflash.targets.runners.stm32cubeprogrammer import sign_command

    bundle = result.bundle
    board = placed_board(bundle)
    entry = next((f for f in board.flash if f.get("mode") == "flash"), None)
    if entry is None or not bundle.manifest.get("training"):
        return []
    fw = Firmware(dir=bundle.path, board=board, entry=entry, prefix=bundle.prefix)
    image = board.region(board.flash_boot["image"])
    lines = [
        f"image   {fw.bin} ({fw.bin.stat().st_size} bytes): the FSBL image the boot ROM copies to "
        f"{image.name} at 0x{image.origin:08X} (at most {image.size}); signed by: {shlex.join(sign_command(fw))}"
    ]
    nor = flash_data_address(board)
    if nor is not None:
        lines.append(
            f"image   {fw.nor_bin} ({fw.nor_bin.stat().st_size} bytes): weights and data read in place, "
            f"written to the external flash at 0x{nor:08X}"
        )
    lines.append(
        f"flash   sign and write: zoflash flash --bundle {bundle.path} --method {entry['name']} "
        "(--dry-run prints the commands)"
    )
    return lines


# --- end flash boot ---


# --- re-planning after a link overflow ---
_OVERFLOW = REGION_OVERFLOW


def overflowed_region(err: BuildError) -> str | None:
    """The memory region the linker found too small (the plan used the port's code estimate)."""
    m = _OVERFLOW.search(str(err))
    return m[1] if m else None


def measured_sizes(bundle: Bundle) -> dict:
    """Code and read-only data of the bundle's compiled objects other than the weights and the
    data (their sizes are exact in the plan): what replaces the code estimate when re-planning."""
    prefix = bundle.prefix
    objects = [
        p
        for p in sorted((bundle.path / "build" / "obj").glob("*.o"))
        if p.name not in (f"{prefix}_weights.o", f"{prefix}_data.o")
    ]
    return measured_code(bundle.manifest["toolchain"]["size"], objects)


# --- end re-planning ---
