"""A cache of compiled objects shared by all bundles, so the static runtime (kernels, ZO maths,
trainer, ports) is compiled once per compiler, flags and source content, not once per bundle.

Only sources copied verbatim from firmware_templates/ (the manifest's `static_files`) whose
quoted includes are static too are cached. An object's key hashes the compiler's identity, the
exact compile line the bundle's Makefile uses (`make compile-line`), and the bytes of the source
and of every header it includes; anything that could change the object changes the key. Before
`make`, cached objects are copied into build/obj/ (newer than their inputs, so make keeps them);
after it, the objects make compiled are added. Writes are atomic (a temporary file renamed into
place), so concurrent builds share the cache safely.

Each entry is named by its key and by the sha256 of the object's bytes (objects/<k[:2]>/<key>-<sha>.o),
recorded when it is stored: what is restored is checked against it, and an entry that does not match
(a flipped byte, a truncated file) is removed and compiled again, with one warning. An entry that
matches but whose object then breaks the build (stored broken) is caught by the build: the objects
restored are compiled afresh once, and those that differ from what the compiler makes are removed
(host_build.run_make).

The cache lives in $ZOFLASH_CACHE, else $XDG_CACHE_HOME/zoflash, else ~/.cache/zoflash;
ZOFLASH_CACHE=off disables it; `zoflash cache --clear` empties it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "ZOFLASH_CACHE"
KEY_VERSION = b"zoflash-object-cache 1\n"
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_INCLUDE = re.compile(rb'^\s*#\s*include\s*(["<])([^">]+)[">]', re.M)
_COMPUTED_INCLUDE = re.compile(rb"^\s*#\s*include\s+[A-Za-z_]", re.M)

log = logging.getLogger("zoflash")


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

    def _entries(self, key: str) -> list[Path]:
        """The stored files of a key: normally one, <key>-<sha256 of the object>.o."""
        folder = self.root / "objects" / key[:2]
        return sorted(folder.glob(f"{key}-*.o")) if folder.is_dir() else []

    def _entry_path(self, key: str, data: bytes) -> Path:
        return self.root / "objects" / key[:2] / f"{key}-{hashlib.sha256(data).hexdigest()}.o"

    def lookup(self, key: str) -> bytes | None:
        """The object stored under `key`, checked against the sha256 in its entry's name; an entry
        that does not match is evicted (with a warning), and a key with no good entry is a miss."""
        found = None
        for entry in self._entries(key):
            recorded = entry.name[len(key) + 1 : -2]
            try:
                data = entry.read_bytes()
            except FileNotFoundError:  # evicted by a concurrent build
                continue
            if _SHA256_HEX.match(recorded) and hashlib.sha256(data).hexdigest() == recorded:
                found = data if found is None else found
            else:
                self.evict(entry, "its content does not match the checksum recorded when it was stored")
        return found

    def evict(self, entry: Path, why: str) -> None:
        try:
            entry.unlink(missing_ok=True)
        except OSError:  # a read-only cache: the entry stays, but is never used
            pass
        log.warning("object cache: removed %s (%s); the object is compiled again", entry, why)

    def evict_key(self, key: str, why: str) -> None:
        for entry in self._entries(key):
            self.evict(entry, why)

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

    def restore(self, bundle_dir: Path, keys: dict) -> list[str]:
        """Copy cached objects, checked, into build/obj/ where make would compile them; the names
        of the objects restored."""
        obj_dir = bundle_dir / "build" / "obj"
        restored = []
        for name, (key, files) in keys.items():
            if _up_to_date(obj_dir / name, [bundle_dir / f for f in files + ["Makefile"]]):
                continue  # an up-to-date object stays untouched, so nothing is relinked
            data = self.lookup(key)
            if data is None:
                continue
            obj_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(data, obj_dir / name)  # the very bytes just checked
            restored.append(name)
        return restored

    def store(self, bundle_dir: Path, keys: dict) -> int:
        """Add the objects make built that the cache lacks; the number added.  Only objects newer
        than their sources are taken: after a failed make some may be left from an older bundle."""
        added = 0
        for name, (key, files) in keys.items():
            built = bundle_dir / "build" / "obj" / name
            if not _up_to_date(built, [bundle_dir / f for f in files + ["Makefile"]]) or self._entries(key):
                continue
            data = built.read_bytes()
            cached = self._entry_path(key, data)
            cached.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(data, cached)
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


def _atomic_write(data: bytes, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
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


@dataclass
class Prepared:
    """The cache and the bundle's object keys, and the objects restored into build/obj/ for this make."""

    cache: ObjectCache
    keys: dict
    restored: list[str]

    def store(self, bundle_dir: Path) -> None:
        try:
            self.cache.store(bundle_dir, self.keys)
        except OSError:
            pass  # a full or read-only cache costs speed, never the build

    def drop_restored(self, bundle_dir: Path) -> dict[str, bytes]:
        """Take the restored objects out of build/obj/ so make compiles them afresh; their bytes."""
        taken = {}
        for name in self.restored:
            path = bundle_dir / "build" / "obj" / name
            try:
                taken[name] = path.read_bytes()
                path.unlink()
            except FileNotFoundError:
                pass
        return taken

    def evict_differing(self, bundle_dir: Path, taken: dict[str, bytes]) -> None:
        """After a fresh compile of the objects drop_restored took: evict the entries whose object
        is not what the compiler makes."""
        for name, cached in taken.items():
            built = bundle_dir / "build" / "obj" / name
            if built.is_file() and built.read_bytes() != cached:
                self.cache.evict_key(self.keys[name][0], f"its {name} broke the build of {bundle_dir}")


def prepared(bundle_dir: Path, manifest: dict, extra_cflags: str = "") -> Prepared | None:
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
        restored = cache.restore(bundle_dir, keys)
    except OSError:  # an unreadable cache never breaks a build: build without it
        return None
    return Prepared(cache, keys, restored)
