"""One build at a time per bundle folder: two builds into the same --out would interleave their
files and their make runs and could leave firmware that matches neither.

The lock is an fcntl.flock on `.<folder>.zoflash-lock` beside the folder (outside it, so the bundle
holds only its own files; inside it, as `.zoflash-lock`, when only the folder is writable), taken before the bundle is written and released when its build ends; the
kernel releases it when the process dies, so a crashed build never blocks the next. The holder
writes its pid into the file and removes the file as it releases the lock. A second build waits for
it, saying so once, up to $ZOFLASH_LOCK_TIMEOUT seconds (600 by default; 0 refuses at once), then
is refused with one message.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zoflash.errors import BuildError

LOCK_TIMEOUT_ENV = "ZOFLASH_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
_POLL_SECONDS = 0.1

log = logging.getLogger("zoflash")
_held = threading.local()  # the folders this thread holds: a nested build of the same folder goes on


INNER_LOCK_NAME = ".zoflash-lock"


def lock_path(out_dir: str | Path) -> Path:
    """Beside the folder; inside it (INNER_LOCK_NAME) when the folder exists in a folder this user
    cannot write."""
    out = Path(out_dir).resolve()
    if out.is_dir() and out.parent.is_dir() and not _writable(out.parent):
        return out / INNER_LOCK_NAME
    return out.parent / f".{out.name}.zoflash-lock"


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK)


def lock_timeout() -> float:
    value = os.environ.get(LOCK_TIMEOUT_ENV, "")
    try:
        return max(0.0, float(value)) if value else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        raise BuildError(f"${LOCK_TIMEOUT_ENV} is '{value}': give the seconds to wait for another build") from None


@contextmanager
def bundle_lock(out_dir: str | Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the bundle folder's lock while the block writes and builds it."""
    path = lock_path(out_dir)
    held = getattr(_held, "paths", None)
    if held is None:
        held = _held.paths = set()
    if path in held:
        yield
        return
    fd = _acquire(path, Path(out_dir), lock_timeout() if timeout is None else timeout)
    held.add(path)
    try:
        yield
    finally:
        held.discard(path)
        path.unlink(missing_ok=True)  # still holding it: a waiter that opened this file sees it gone
        os.close(fd)


def _acquire(path: Path, out_dir: Path, timeout: float) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline, told = time.monotonic() + timeout, False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if time.monotonic() >= deadline:
                raise BuildError(
                    f"{out_dir} is being built by {holder} (waited {timeout:g} s): wait until that build "
                    f"ends, or build into another --out (${LOCK_TIMEOUT_ENV} sets how long to wait)"
                ) from None
            if not told:
                log.warning("waiting for the build of %s by %s", out_dir, holder)
                told = True
            time.sleep(_POLL_SECONDS)
            continue
        if _same_file(fd, path):
            break
        os.close(fd)  # the holder removed the file as it finished: lock the current one
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
