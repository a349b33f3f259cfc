"""Build a bundle with its generated Makefile and measure what it uses."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from zoflash.compiler.bundle import Bundle
from zoflash.errors import BuildError, ToolMissingError

INSTALL_HINTS = {
    "make": "install it with your package manager (Debian/Ubuntu: apt-get install make)",
    "cc": "install a C compiler (Debian/Ubuntu: apt-get install gcc)",
    "size": "install binutils (Debian/Ubuntu: apt-get install binutils)",
    "arm-none-eabi-gcc": "install it (Debian/Ubuntu: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)",
    "arm-none-eabi-objcopy": "install it (Debian/Ubuntu: apt-get install binutils-arm-none-eabi)",
    "arm-none-eabi-size": "install it (Debian/Ubuntu: apt-get install binutils-arm-none-eabi)",
}


def require(program: str, hint: str = "") -> str:
    """The program's path, or a one-line ToolMissingError saying how to install it (`hint`,
    e.g. from the board file's toolchain.install, wins over the built-in hints)."""
    path = shutil.which(program)
    if path is None:
        raise ToolMissingError(program, hint or INSTALL_HINTS.get(program, "install it and make sure it is on PATH"))
    return path


@dataclass
class BuildResult:
    bundle: Bundle
    outputs: list[Path]
    code_bytes: int  # machine code of the model and kernels (text of the object files)
    regions: list = field(default_factory=list)  # firmware: budget.RegionUse per memory region


def run_make(bundle: Bundle, *targets: str, extra_cflags: str = "") -> None:
    require("make")
    tc = bundle.manifest["toolchain"]
    require(tc["cc"], f"install it (Debian/Ubuntu: {tc['install']})" if tc.get("install") else "")
    cmd = ["make", "-s", "-C", str(bundle.path), *targets]
    if extra_cflags:
        cmd.append(f"EXTRA_CFLAGS={extra_cflags}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"building {bundle.path} failed:\n{tail}")


def code_size(bundle: Bundle) -> int:
    """Bytes of machine code for the model: compile each source to an object and sum `.text`."""
    require("size")
    objdir = bundle.path / "build" / "obj"
    objdir.mkdir(parents=True, exist_ok=True)
    total = 0
    sources = [p for p in sorted(bundle.path.glob("*.c")) if p.name != "zo_host_main.c"]
    for src in sources:
        obj = objdir / (src.stem + ".o")
        proc = subprocess.run([bundle.manifest["toolchain"]["cc"], "-std=c11", "-O2", "-c", "-o", str(obj), str(src)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"compiling {src.name} failed:\n{proc.stderr[-2000:]}")
        out = subprocess.run(["size", "-A", str(obj)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0].startswith(".text") and len(parts) >= 2 and parts[1].isdigit():
                total += int(parts[1])
    return total


def build_host(bundle: Bundle) -> BuildResult:
    run_make(bundle, "all")
    prefix = bundle.prefix
    outputs = [bundle.path / "build" / f"lib{prefix}.so", bundle.path / "build" / f"{prefix}_run"]
    return BuildResult(bundle=bundle, outputs=outputs, code_bytes=code_size(bundle))
