"""Test helper: compile the runtime kernels into a shared library and call them through ctypes.

The library is cached in the system temp directory, keyed by a hash of the sources and flags,
so repeated test runs compile once.  Parameter structs are generated from zo_kernels.h itself
(and the family headers it includes), which also lets the tests check that the Python builders
produce exactly the struct's fields.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
INFERENCE = ROOT / "firmware_templates" / "runtime" / "inference"
KERNEL_SOURCES = sorted(INFERENCE.glob("zo_kernels_*.c"))
KERNEL_HEADER = INFERENCE / "zo_kernels.h"

WARN_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]
# ZOFLASH_TEST_CFLAGS adds flags to the host build (e.g. "-O3" or "-fsanitize=undefined").
HOST_FLAGS = ["-O2", *WARN_FLAGS, *os.environ.get("ZOFLASH_TEST_CFLAGS", "").split()]
CROSS_FLAGS = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16", "-O2", *WARN_FLAGS]


def host_cc() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def build_shared(sources=None, flags=None, name: str = "zo_kernels") -> Path:
    """Compile `sources` (default: all kernel files) into a cached shared library; return its path."""
    cc = host_cc()
    if cc is None:
        raise RuntimeError("no host C compiler (gcc/cc) found")
    sources = [Path(s) for s in (sources or KERNEL_SOURCES)]
    flags = list(flags or HOST_FLAGS)
    h = hashlib.sha256()
    h.update(" ".join([cc, *flags]).encode())
    for f in sorted(set(sources) | set(INFERENCE.glob("*.h"))):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    cache = Path(tempfile.gettempdir()) / "zoflash_cbuild"
    cache.mkdir(parents=True, exist_ok=True)
    lib = cache / f"{name}_{h.hexdigest()[:16]}.so"
    if not lib.exists():
        tmp = cache / f"{lib.name}.{os.getpid()}.tmp"
        cmd = [cc, *flags, "-fPIC", "-shared", "-I", str(INFERENCE), *map(str, sources), "-o", str(tmp)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{res.stderr}")
        os.replace(tmp, lib)
    return lib


# ------------------------------------------------------------------------- header parsing

_CTYPES = {"int32_t": ctypes.c_int32, "float": ctypes.c_float}


def header_text(header: Path = KERNEL_HEADER, seen: set[Path] | None = None) -> str:
    """The header with its local includes (zo_kernels.h's family headers) expanded, each once."""
    seen = set() if seen is None else seen
    if header in seen:
        return ""
    seen.add(header)
    return re.sub(
        r'^#include "([^"]+)"',
        lambda m: (
            header_text(header.parent / m.group(1), seen) if (header.parent / m.group(1)).exists() else m.group(0)
        ),
        header.read_text(),
        flags=re.M,
    )


def parse_structs(header: Path = KERNEL_HEADER) -> dict[str, list[tuple[str, str]]]:
    """{struct name: [(field, kind)]} with kind 'int32_t', 'float', 'int32_t*', 'int16_t*' or 'int64_t*'."""
    text = header_text(header)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    structs = {}
    for body, name in re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            m = re.match(r"(const\s+)?(int32_t|int16_t|int64_t|float)\s+(.*)", decl)
            if not m:
                raise ValueError(f"cannot parse field declaration {decl!r} in {name}")
            ctype = m.group(2)
            for var in m.group(3).split(","):
                var = var.strip()
                if var.startswith("*"):
                    fields.append((var[1:].strip(), ctype + "*"))
                else:
                    fields.append((var, ctype))
        structs[name] = fields
    return structs


class Kernels:
    """The compiled library plus ctypes struct classes for every zo_*_params_t."""

    def __init__(self, lib_path: Path | None = None):
        self.lib = ctypes.CDLL(str(lib_path or build_shared()))
        self.fields = parse_structs()
        self.structs = {}
        for name, fields in self.fields.items():
            cfields = [(f, ctypes.c_void_p if k.endswith("*") else _CTYPES[k]) for f, k in fields]
            self.structs[name] = type(name, (ctypes.Structure,), {"_fields_": cfields})

    def make(self, struct_name: str, params: dict):
        """Fill a struct from a params dict; returns (struct, keepalive list)."""
        names = [f for f, _ in self.fields[struct_name]]
        if set(names) != set(params):
            missing = sorted(set(names) - set(params))
            extra = sorted(set(params) - set(names))
            raise KeyError(f"{struct_name}: missing fields {missing}, unknown fields {extra}")
        keep = []
        s = self.structs[struct_name]()
        for f, kind in self.fields[struct_name]:
            v = params[f]
            if kind.endswith("*") and v is None:
                continue  # an optional pointer stays NULL
            if kind.endswith("*"):
                arr = np.ascontiguousarray(v, dtype=kind[:-1].replace("_t", ""))
                keep.append(arr)
                setattr(s, f, arr.ctypes.data)
            elif kind == "float":
                setattr(s, f, float(v))
            else:
                iv = int(v)
                assert -(1 << 31) <= iv < (1 << 31), (f, iv)
                setattr(s, f, iv)
        return s, keep

    def call(self, func: str, struct_name: str, params: dict, *arrays):
        """Call func(&params, *arrays); arrays are numpy arrays (passed by pointer) or None."""
        s, keep = self.make(struct_name, params)
        args = [ctypes.byref(s)]
        for a in arrays:
            if a is None:
                args.append(None)
            elif isinstance(a, (list, tuple)):  # array of input pointers
                conv = [np.ascontiguousarray(x) for x in a]
                ptrs = (ctypes.c_void_p * len(conv))(*[x.ctypes.data for x in conv])
                keep.append(conv)
                keep.append(ptrs)
                args.append(ptrs)
            else:
                assert a.flags["C_CONTIGUOUS"]
                args.append(ctypes.c_void_p(a.ctypes.data))
        getattr(self.lib, func)(*args)


def model_sources(bundles) -> tuple[list[Path], list[str]]:
    """The generated model sources of these bundles and the flags that let the assembler find the
    binary files they link (zo_incbin.h: .incbin looks in the -I folders), to compile them together
    from any directory."""
    sources = [b.path / name for b in bundles for name in (f"{b.prefix}.c", f"{b.prefix}_weights.c")]
    return sources, [f"-Wa,-I{b.path}" for b in bundles]


def cross_compile_bundle(bundle_dir: Path, obj_dir: Path, generated_only: bool = False) -> None:
    """Compile a bundle's C sources for the Cortex-M55 with -Werror and assert each is clean (the
    host runner's main is host-only; `generated_only` skips the static zo_* files, which
    tests/test_kernels.py cross-compiles once)."""
    import subprocess

    for src in sorted(Path(bundle_dir).glob("*.c")):
        if src.name == "zo_host_main.c" or (generated_only and src.name.startswith("zo_")):
            continue
        proc = subprocess.run(
            [
                "arm-none-eabi-gcc",
                *CROSS_FLAGS,
                "-ffreestanding",
                "-c",
                "-o",
                str(Path(obj_dir).resolve() / (src.stem + ".o")),
                src.name,
            ],
            capture_output=True,
            text=True,
            cwd=bundle_dir,
        )  # in the bundle, as its Makefile: .incbin finds its files
        assert proc.returncode == 0, f"{src.name}:\n{proc.stderr}"
