"""Build a bundle with its generated Makefile and measure what it uses."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from zoflash.errors import BuildError, ToolMissingError
from zoflash.targets import build_cache
from zoflash.targets.project import Bundle

log = logging.getLogger("zoflash")

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


# The linker's word for a memory region too small: the plan's to fix (a re-plan), not the cache's.
REGION_OVERFLOW = re.compile(r"region `(\w+)' overflowed by (\d+) bytes")


_PR_SET_PDEATHSIG = 1  # linux/prctl.h
try:  # loaded here, not in the child between fork and exec
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None


def _make_ends_with(parent: int):
    """preexec_fn for make: SIGTERM when `parent` (this process) dies. Without it, a zoflash killed
    mid-build leaves make and its compilers writing into the bundle while the next build of the same
    folder runs; on SIGTERM make stops its jobs and deletes the targets it was making."""

    def tie() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return tie


MAKE_UNFINISHED = ".zoflash-make-unfinished"  # in build/ while make runs


def _start_make(build_dir: Path) -> Path:
    """Mark build/ as being made; if the last make there never finished (zoflash killed, a crash,
    a power cut), start build/ afresh first: a compiler or linker cut short leaves an empty or
    partial object or firmware newer than its sources, which make would take as up to date and
    link or ship. The object cache restores the runtime's objects, so this costs little."""
    marker = build_dir / MAKE_UNFINISHED
    if marker.exists():
        log.warning("the last build of %s did not finish: building %s afresh", build_dir.parent, build_dir)
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return marker


def run_make(bundle: Bundle, *targets: str, extra_cflags: str = "") -> None:
    require("make")
    tc = bundle.manifest["toolchain"]
    require(tc["cc"], f"install it (Debian/Ubuntu: {tc['install']})" if tc.get("install") else "")
    unfinished = _start_make(bundle.path / "build")
    cache = build_cache.prepared(bundle.path, bundle.manifest, extra_cflags)  # shared runtime objects
    cmd = ["make", "-s", "-C", str(bundle.path), *targets]
    if extra_cflags:
        cmd.append(f"EXTRA_CFLAGS={extra_cflags}")
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_make_ends_with(os.getpid()))
    cache_suspect = proc.returncode != 0 and not REGION_OVERFLOW.search(proc.stdout + proc.stderr)
    if cache is not None and cache.restored and cache_suspect:
        # A cached object may be what broke the build (stored broken: its checksum matches): compile
        # the restored objects afresh once, and evict the entries that differ from what the
        # compiler makes. A build that still fails fails for its own reasons.
        taken = cache.drop_restored(bundle.path)
        proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_make_ends_with(os.getpid()))
        cache.evict_differing(bundle.path, taken)  # one warning per entry evicted
    unfinished.unlink(missing_ok=True)  # make ran to its end (a failed compile leaves no object)
    if cache is not None:  # after a failed link too: the objects compiled before it are good
        cache.store(bundle.path)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise BuildError(f"building {bundle.path} failed:\n{tail}")


# The host port's own programs (command-line runner, training port): not the model's code.
HOST_PROGRAM_SOURCES = ("zo_host_main.c", "zo_port_host.c")


def code_size(bundle: Bundle) -> int:
    """Bytes of machine code of the model, the kernels and the ZO-step maths (and the training
    loop in a training bundle): the `.text` sections of the objects the bundle's Makefile built
    into build/obj/ (with the board's flags), without the host port's programs."""
    require("size")
    sources = [name for name in bundle.manifest["files"] if name.endswith(".c") and name not in HOST_PROGRAM_SOURCES]
    objects = [bundle.path / "build" / "obj" / (name[:-2] + ".o") for name in sorted(sources)]
    mains = ("zo_train_main.o", "zo_continual_main.o")  # the library forms have no main
    objects = [o for o in objects if o.is_file() or o.name not in mains]
    proc = subprocess.run(["size", "-A", *map(str, objects)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"size failed on {bundle.path / 'build' / 'obj'}:\n{proc.stderr[-2000:]}")
    total = 0
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(".text") and parts[1].isdigit():
            total += int(parts[1])
    return total


def build_host(bundle: Bundle) -> BuildResult:
    run_make(bundle, "all")
    prefix = bundle.prefix
    outputs = [bundle.path / "build" / f"lib{prefix}.so", bundle.path / "build" / f"{prefix}_run"]
    return BuildResult(bundle=bundle, outputs=outputs, code_bytes=code_size(bundle))
