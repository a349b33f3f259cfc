"""Compile C sources into a shared library for ctypes (host compiler, strict flags)."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "firmware_templates" / "runtime"
ZO_MATH = RUNTIME / "zo_math"
TRAINING = RUNTIME / "training"
PORT = RUNTIME / "port"
# The training runtime includes the ZO-step maths' headers and the port contract.
RUNTIME_INCLUDES = [f"-I{ZO_MATH}", f"-I{TRAINING}", f"-I{PORT}"]

# The flags the firmware is built with (bit-identity needs -ffp-contract=off, no fast-math).
STRICT_FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]
M55_FLAGS = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"]


def compiler() -> str:
    return shutil.which("cc") or shutil.which("gcc") or "cc"


def build_shared(
    sources: list[Path],
    out_dir: Path,
    name: str,
    extra_sources: dict[str, str] | None = None,
    flags: list[str] | None = None,
) -> ctypes.CDLL:
    """Compile `sources` (+ `extra_sources`: file name -> text, written to out_dir) into
    out_dir/lib<name>-<digest>.so and load it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    srcs = [Path(s) for s in sources]
    for fname, text in (extra_sources or {}).items():
        p = out_dir / fname
        p.write_text(text)
        srcs.append(p)
    flags = list(STRICT_FLAGS if flags is None else flags)
    digest = hashlib.sha1()
    for s in srcs:
        digest.update(s.read_bytes())
    digest.update(" ".join(flags).encode())
    lib = out_dir / f"lib{name}-{digest.hexdigest()[:12]}.so"
    if not lib.exists():
        cmd = [compiler(), *flags, "-fPIC", "-shared", *RUNTIME_INCLUDES, *map(str, srcs), "-o", str(lib)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{res.stderr}")
    return ctypes.CDLL(str(lib))


def compile_object(cc: str, source: Path, flags: list[str]) -> subprocess.CompletedProcess:
    """Compile one file to an object in /dev/null (warnings are errors via flags)."""
    cmd = [cc, *flags, *RUNTIME_INCLUDES, "-c", str(source), "-o", "/dev/null"]
    return subprocess.run(cmd, capture_output=True, text=True)
