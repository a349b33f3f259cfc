"""Helpers of the fault-injection suite (test_faults.py): the installed `zoflash` run as a
subprocess, killed or interrupted at seeded random points; checks that what it leaves is either
complete or visibly incomplete.

Randomness is seeded (SEED, or $ZOFLASH_FAULT_SEED) so a failure replays; $ZOFLASH_FAULT_COUNT
sets how many kill points each case tries (1 by default: the whole suite stays a few minutes; a
nightly run sets more)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ZOFLASH = str(Path(sys.executable).with_name("zoflash"))  # the installed console script of this venv
SEED = int(os.environ.get("ZOFLASH_FAULT_SEED", "20261205"))
FAULT_COUNT = max(1, int(os.environ.get("ZOFLASH_FAULT_COUNT", "1")))


def rng(case: str) -> random.Random:
    """One generator per case: adding a case does not move the kill points of the others."""
    return random.Random(f"{SEED}:{case}")


def kill_points(case: str, duration: float) -> list[float]:
    """FAULT_COUNT delays in (0, duration): where to kill a command that takes `duration` s."""
    r = rng(case)
    return [r.uniform(0.05, 0.95) * duration for _ in range(FAULT_COUNT)]


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        return self.out + self.err


def env(cache: Path | None = None) -> dict:
    e = dict(os.environ)
    if cache is not None:
        e["ZOFLASH_CACHE"] = str(cache)
    e["PYTHONUNBUFFERED"] = "1"
    return e


def start(args: list[str], cwd: Path, cache: Path | None = None) -> subprocess.Popen:
    """`zoflash ARGS` in its own session (a signal the test sends reaches only it and its children)."""
    return subprocess.Popen(
        [ZOFLASH, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(cache),
        start_new_session=True,
    )


def run(args: list[str], cwd: Path, cache: Path | None = None, timeout: float = 300) -> Ran:
    t0 = time.monotonic()
    proc = start(args, cwd, cache)
    out, err = proc.communicate(timeout=timeout)
    return Ran(proc.returncode, out, err, time.monotonic() - t0)


def interrupt(
    args: list[str], cwd: Path, after: float, sig: int, cache: Path | None = None, group: bool = False, until=None
) -> Ran:
    """Start `zoflash ARGS`, wait `after` seconds (and, if given, until `until()` is true), then send
    `sig`: to the zoflash process alone (a crash: SIGKILL), or to its whole process group (`group`:
    Ctrl-C in a terminal reaches every foreground process). Returns how it ended."""
    t0 = time.monotonic()
    proc = start(args, cwd, cache)
    deadline = t0 + 300
    while proc.poll() is None and (time.monotonic() - t0 < after or (until is not None and not until())):
        assert time.monotonic() < deadline, "the command never reached the point to interrupt"
        time.sleep(0.01)
    if proc.poll() is None:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return Ran(proc.returncode, out, err, time.monotonic() - t0)


def session_processes(sid: int) -> list[tuple[int, str]]:
    """The processes (pid, command line) still in session `sid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append((int(entry.name), cmd))
    return found


def processes_naming(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains `text` (e.g. a bundle's path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state != "Z":
            found.append((int(entry.name), cmd.strip()))
    return found


def wait_gone(text: str, seconds: float = 10.0) -> list[tuple[int, str]]:
    """Wait up to `seconds` for every process naming `text` to end; those left."""
    deadline = time.monotonic() + seconds
    while (left := processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def end_all(text: str) -> None:
    """Clean-up after a failed check: end the processes this test left (naming its own tmp path)."""
    for pid, _ in processes_naming(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tree(folder: Path) -> dict[str, bytes]:
    """Every file of a folder by relative path (the lock and QEMU's state/log excluded: not outputs)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".zoflash-")
    }


def jsonl_records(path: Path) -> list[dict]:
    """A log left behind: valid JSON line by line; only a last line without its newline (cut by
    the kill) may be incomplete, and is left out."""
    text = path.read_text()
    lines = text.split("\n")
    last = lines.pop()  # "" when the file ends with a newline
    records = [json.loads(line) for line in lines]
    if last:
        try:
            records.append(json.loads(last))
        except ValueError:
            pass  # cut short by the kill: allowed, and never taken for a record
    return records
