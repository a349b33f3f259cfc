"""The cross build of a firmware bundle (ELF, BIN, HEX, or the model as a static library) and
its per-region size report (budget.py)."""
from __future__ import annotations

import subprocess

from zoflash.compiler.bundle import Bundle
from zoflash.errors import ToolMissingError
from zoflash.targets.boards import Board
from zoflash.targets.budget import check_fit, library_sizes, section_sizes, size_report
from zoflash.targets.host_build import BuildResult, require, run_make

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
    if (bundle.manifest.get("training") or {}).get("data_source", {}).get("kind") == "app":
        outputs, usage = [build_dir / f"lib{prefix}_train.a"], []  # regions: known once your firmware links it
    elif bundle.manifest.get("training"):
        outputs = [build_dir / f"{prefix}{s}" for s in FIRMWARE_SUFFIXES]
        usage = size_report(board, section_sizes(tc["size"], outputs[0]))
    else:
        outputs = [build_dir / f"lib{prefix}.a"]
        usage = library_sizes(tc["size"], outputs[0], prefix, board)
    code = sum(u.bytes for r in usage for u in r.items if u.label == "code")
    result = BuildResult(bundle=bundle, outputs=outputs, code_bytes=code, regions=usage)
    over = [u for u in usage if u.over > 0]
    if over:  # cannot happen for a linked ELF (the linker checks); possible for the library
        check_fit(board, usage, "the compiled model")
    return result
