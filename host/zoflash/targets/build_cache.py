"""A cache of compiled objects shared by all bundles, so the static runtime (kernels, ZO maths,
trainer, ports) is compiled once per compiler, flags and source content, not once per bundle.

Only sources copied verbatim from firmware_templates/ (the manifest's `static_files`) whose
quoted includes are static too are cached. An object's key hashes the compiler's identity, the
exact compile line the bundle's Makefile uses (`make compile-line`), and the bytes of the source
and of every header it includes; anything that could change the object changes the key. Before
`make`, cached objects are copied into build/obj/ (newer than their inputs, so make keeps them);
after it, the objects make compiled are added. Writes are atomic (a temporary file renamed into
place), so concurrent builds share the cache safely.

The cache lives in $ZOFLASH_CACHE, else $XDG_CACHE_HOME/zoflash, else ~/.cache/zoflash;
ZOFLASH_CACHE=off disables it; `zoflash cache --clear` empties it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "ZOFLASH_CACHE"
KEY_VERSION = b"zoflash-object-cache 1\n"
_INCLUDE = re.compile(rb'^\s*#\s*include\s*(["<])([^">]+)[">]', re.M)
_COMPUTED_INCLUDE = re.compile(rb"^\s*#\s*include\s+[A-Za-z_]", re.M)


def cache_root() -> Path | None:
    """Where the objects live, or None when the cache is off."""
    value = os.environ.get(CACHE_ENV, "")
    if value.lower() in ("off", "0", "no"):
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zoflash"


@functools.lru_cache(maxsize=16)
def _compiler_identity(cc: str) -> bytes:
    path = shutil.which(cc) or cc
    try:
        out = subprocess.run([path, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = b""
    return path.encode() + b"\n" + out


def _closure(bundle_dir: Path, source: str, static: set[str]) -> list[str] | None:
    """The source and the bundle headers it includes, transitively; None if any is not static (a
    generated header) or an include cannot be read statically."""
    seen, todo = [], [source]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in static:
            return None
        seen.append(name)
        text = (bundle_dir / name).read_bytes()
        if _COMPUTED_INCLUDE.search(text):
            return None
        for kind, header in _INCLUDE.findall(text):
            header = header.decode()
            if kind == b'"' or (bundle_dir / header).exists():  # a bundle file, by either spelling
                todo.append(header)
    return sorted(seen)


@dataclass
class ObjectCache:
    root: Path

    def _path(self, key: str) -> Path:
        return self.root / "objects" / key[:2] / f"{key}.o"

    def keys(self, bundle_dir: Path, manifest: dict, compile_line: bytes) -> dict[str, tuple[str, list[str]]]:
        """Object name (build/obj/<stem>.o) -> (key, the files it is compiled from), for every
        cacheable source of the bundle."""
        static = set(manifest.get("static_files", ()))
        ident = _compiler_identity(manifest["toolchain"]["cc"])
        keys = {}
        for source in sorted(n for n in static if n.endswith(".c")):
            files = _closure(bundle_dir, source, static)
            if files is None:
                continue
            h = hashlib.sha256(KEY_VERSION + ident + b"\0" + compile_line + b"\0" + source.encode() + b"\0")
            for name in files:
                data = (bundle_dir / name).read_bytes()
                h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
            keys[source[:-2] + ".o"] = (h.hexdigest(), files)
        return keys

    def restore(self, bundle_dir: Path, keys: dict) -> int:
        """Copy cached objects into build/obj/ where make would compile them; the number restored."""
        obj_dir = bundle_dir / "build" / "obj"
        restored = 0
        for name, (key, files) in keys.items():
            cached = self._path(key)
            if not cached.is_file() or _up_to_date(obj_dir / name, [bundle_dir / f for f in files + ["Makefile"]]):
                continue  # an up-to-date object stays untouched, so nothing is relinked
            obj_dir.mkdir(parents=True, exist_ok=True)
            _atomic_copy(cached, obj_dir / name)
            restored += 1
        return restored

    def store(self, bundle_dir: Path, keys: dict) -> int:
        """Add the objects make built that the cache lacks; the number added.  Only objects newer
        than their sources are taken: after a failed make some may be left from an older bundle."""
        added = 0
        for name, (key, files) in keys.items():
            built, cached = bundle_dir / "build" / "obj" / name, self._path(key)
            if _up_to_date(built, [bundle_dir / f for f in files + ["Makefile"]]) and not cached.is_file():
                cached.parent.mkdir(parents=True, exist_ok=True)
                _atomic_copy(built, cached)
                added += 1
        return added

    def usage(self) -> tuple[int, int]:
        """(objects, bytes) in the cache."""
        files = [p for p in (self.root / "objects").rglob("*.o")] if (self.root / "objects").is_dir() else []
        return len(files), sum(p.stat().st_size for p in files)

    def clear(self) -> int:
        """Remove every cached object; the number removed."""
        n, _ = self.usage()
        shutil.rmtree(self.root / "objects", ignore_errors=True)
        return n


def _up_to_date(target: Path, inputs: list[Path]) -> bool:
    try:
        built = target.stat().st_mtime_ns
        return all(p.stat().st_mtime_ns <= built for p in inputs)
    except OSError:
        return False


def _atomic_copy(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.")
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.replace(tmp, dst)  # a fresh mtime: newer than the bundle's files, so make keeps it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def compile_line(bundle_dir: Path, extra_cflags: str = "") -> bytes | None:
    """The compiler and flags the bundle's Makefile compiles with, or None if it cannot say."""
    cmd = ["make", "-s", "--no-print-directory", "-C", str(bundle_dir), "compile-line"]
    if extra_cflags:
        cmd.append(f"EXTRA_CFLAGS={extra_cflags}")
    proc = subprocess.run(cmd, capture_output=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def prepared(bundle_dir: Path, manifest: dict, extra_cflags: str = "") -> tuple[ObjectCache, dict] | None:
    """The cache and the bundle's object keys, with the cached objects already in build/obj/;
    None when the cache is off or the bundle's Makefile has no compile line."""
    root = cache_root()
    if root is None:
        return None
    line = compile_line(bundle_dir, extra_cflags)
    if line is None:
        return None
    cache = ObjectCache(root)
    try:
        keys = cache.keys(bundle_dir, manifest, line)
        cache.restore(bundle_dir, keys)
    except OSError:  # an unreadable cache never breaks a build: build without it
        return None
    return cache, keys
