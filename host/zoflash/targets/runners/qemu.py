"""QEMU in the background, the console UART on a local TCP port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zoflash.targets.boards import LIST
from zoflash.targets.runners.base import (
    QEMU_LOG,
    STATE_FILE,
    FlashError,
    FlashResult,
    Runner,
    Say,
    ToolCommand,
    _end,
    _require,
    _show,
    check_files,
    register,
)

# ------------------------------------------------------------------------------------- QEMU


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _is_qemu(pid: int, argv: list[str] | None = None) -> bool:
    """The process exists and, where /proc tells, is a QEMU (running exactly `argv` when given):
    a PID reused by another process is never signalled."""
    if not _alive(pid):
        return False
    if not Path("/proc/self/cmdline").exists():
        return True
    try:
        text = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if not text:  # a zombie waiting for its parent: it has exited
        return False
    if argv is not None:
        return text.rstrip(b"\0").split(b"\0") == [os.fsencode(a) for a in argv]
    return b"qemu" in text


def read_state(bundle_dir: Path) -> dict | None:
    path = Path(bundle_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _log_tail(log: Path, n: int = 1, match: str = "") -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if match:
        lines = [ln for ln in lines if match in ln]
    return " / ".join(lines[-n:])


def stop_qemu(bundle_dir: str | Path, say: Say = print, grace: float = 5.0) -> bool:
    """End the QEMU started for this bundle (and remove the state file). True if one was running;
    a stale state file (QEMU already gone, or unreadable) is removed with a note."""
    bundle_dir = Path(bundle_dir)
    path = bundle_dir / STATE_FILE
    state = read_state(bundle_dir)
    if state is None:
        say(f"qemu    not running for {bundle_dir} (no {STATE_FILE})")
        return False
    pid, argv = state.get("pid"), state.get("command")
    log = Path(state.get("log", bundle_dir / QEMU_LOG))
    if not isinstance(pid, int) or not isinstance(argv, list) or not _is_qemu(pid, argv):
        path.unlink(missing_ok=True)
        end = _log_tail(log, match="[zoflash]")
        say(f"qemu    was not running any more (stale {STATE_FILE} removed)" + (f": {end}" if end else ""))
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while _is_qemu(pid, argv) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _is_qemu(pid, argv):
        try:
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except ProcessLookupError:
            pass
    path.unlink(missing_ok=True)
    say(f"qemu    stopped (pid {pid}, {state.get('url', 'serial port')})")
    return True


def emulator_ended(bundle_dir: str | Path) -> Callable[[], str | None]:
    """For the monitor (Monitor(ended=...)): None while the QEMU started for this bundle runs,
    then a message saying how it ended (its supervisor's note and QEMU's last words)."""
    state = read_state(Path(bundle_dir)) or {}
    pid, argv = state.get("pid"), state.get("command")
    log = Path(state.get("log", Path(bundle_dir) / QEMU_LOG))

    def ended() -> str | None:
        if isinstance(pid, int) and isinstance(argv, list) and _is_qemu(pid, argv):
            return None
        how = _log_tail(log, match="[zoflash] qemu").replace("[zoflash] qemu ", "")
        said = [
            ln
            for ln in _log_tail(log, 3).split(" / ")
            if ln and "[zoflash]" not in ln and "waiting for connection" not in ln
        ]
        return (
            "the emulator has ended"
            + (f" ({how})" if how else "")
            + (f": {said[-1]}" if said else "")
            + f" (output in {log})"
        )

    return ended


DETACH = "detach"  # what `zoflash flash` writes to the supervisor's stdin once QEMU is recorded


def supervise(argv: list[str]) -> int:
    """The background process that owns QEMU: `python -c ... LOG TIMEOUT QEMU-ARGV...`. Starts QEMU
    with its output appended to LOG, prints its PID (one line) for the parent, waits at most
    TIMEOUT seconds, then stops it; the outcome is the last `[zoflash]` line of LOG.

    Its stdin is a pipe from the program that started it. That program writes `detach` once the
    state file names this QEMU (`zoflash flash`: QEMU then runs on in the background); if the pipe
    closes without it, the program has ended (`zoflash run`, which never detaches, or a flash killed
    before it recorded QEMU) and QEMU is stopped at once: otherwise a killed `run`, or a flash
    killed mid-start, would leave a QEMU that nobody watches and no state file names running until
    its time limit."""
    log_path, limit, cmd = argv[0], float(argv[1]), argv[2:]
    owner_gone = threading.Event()

    def watch_owner() -> None:
        if sys.stdin.readline().strip() != DETACH:  # EOF: the program ended without detaching
            owner_gone.set()

    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            os.write(sys.stdout.fileno(), f"{proc.pid}\n".encode())
            os.close(sys.stdout.fileno())
            threading.Thread(target=watch_owner, daemon=True).start()
        except OSError:  # the pipe is broken: the program that started it is gone already
            owner_gone.set()
        deadline, how = time.monotonic() + limit, ""
        while not how:
            try:
                code = proc.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                how = f"exited with status {code}" if code >= 0 else f"ended by signal {-code}"
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    _end(proc)
                    how = f"stopped: time limit of {limit:g} s reached"
                elif owner_gone.is_set():
                    _end(proc)
                    how = "stopped: the zoflash command that started it has ended"
        log.write(f"[zoflash] qemu {how}\n".encode())
    return 0


_BACKGROUND: list = []  # keeps the supervisors' Popen objects alive in this process


# --- NPU ---
def _runs_on_an_npu(bundle_dir: Path) -> bool:
    """The bundle was built with --npu (its manifest's training.npu)."""
    try:
        manifest = json.loads((Path(bundle_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False  # check_files and the loader report a broken bundle
    return bool((manifest.get("training") or {}).get("npu"))


# --- end NPU ---


@register
class QemuRunner(Runner):
    """qemu-system-arm in the background, the console UART on a local TCP port.

    Serial design: `-serial tcp:127.0.0.1:PORT,server=on,wait=on,nodelay=on`. With wait=on QEMU
    listens and holds the guest until the first client (`zoflash monitor --port socket://127.0.0.1:PORT`)
    connects, so no byte of the output is lost and a run starts when someone watches it (with
    wait=off the guest would start at once and its output before the connection would be
    dropped). A client may disconnect and reconnect: QEMU accepts the next one; what the firmware
    writes in between is dropped. QEMU runs under a small supervisor process that stops it after
    --timeout seconds (waiting for a client included), so it never lingers; its PID, port and
    time limit are in DIR/.zoflash-qemu.json, its output in DIR/.zoflash-qemu.log. `--stop` ends
    it; flashing again replaces a running instance. nodelay=on: a device's request (a `need` frame,
    an ack) leaves at once; Nagle's algorithm held each for the host's delayed acknowledgement, about
    50 ms a round trip on Linux."""

    method = "qemu"
    settings = {"program": (str, True), "machine": (str, True), "args": (LIST, False)}
    needs_boot = False  # an emulated board has no boot switches
    tools = {"qemu-system-arm": "install QEMU (Debian/Ubuntu: apt-get install qemu-system-arm)"}

    def prepare(self, fw, opts, dry_run=False):
        if os.name != "posix" and not dry_run:
            raise FlashError(
                "running QEMU in the background is supported on Linux and macOS only; run the "
                "command of `zoflash flash --dry-run` by hand"
            )
        _require(opts, fw.entry["program"], dry_run)
        if not dry_run and _runs_on_an_npu(fw.dir):  # --- NPU ---
            raise FlashError(
                "this firmware runs its frozen prefix on the Ethos-U NPU (built with --npu), which QEMU "
                "does not emulate: load it on the board, or build without --npu for QEMU"
            )
        if opts.port is None:
            opts.port, opts.auto_port = free_port(), True
        if opts.timeout is None or opts.timeout <= 0:
            raise FlashError("the QEMU time limit (--timeout) must be a positive number of seconds")
        return opts

    def serial_arg(self, port: int) -> str:
        return f"tcp:127.0.0.1:{port},server=on,wait=on,nodelay=on"

    def steps(self, fw, opts):
        e = fw.entry
        argv = [
            *opts.tool(e["program"]),
            "-M",
            e["machine"],
            *e.get("args", ()),
            "-monitor",
            "none",
            "-serial",
            self.serial_arg(opts.port),
            "-kernel",
            str(fw.elf),
        ]
        return [ToolCommand(argv, "emulator (background)", opts.timeout, background=True)]

    def done_message(self, fw):
        return "QEMU runs in the background"

    def run(self, fw, opts, say):
        check_files(fw, self.inputs(fw))
        state = read_state(fw.dir)
        if state is not None:
            say("qemu    replacing the QEMU already started for this bundle")
            stop_qemu(fw.dir, say)
        for attempt in range(3):
            step = self.steps(fw, opts)[0]
            say(f"flash   [1/1] {step.what}: {_show(step.argv)}")
            started = self._start(fw, opts, step)
            if started is not None:
                break
            if attempt == 2 or not opts.auto_port:
                raise FlashError(
                    f"QEMU could not listen on 127.0.0.1:{opts.port}: "
                    f"{_log_tail(fw.dir / QEMU_LOG, match='Address already in use')}"
                )
            say(f"qemu    port {opts.port} is taken; trying another")
            opts.port = free_port()
        pid, url = started
        say(
            f"qemu    running (pid {pid}); it stops after {opts.timeout:g} s, or with "
            f"`zoflash flash --bundle {fw.dir} --stop`"
        )
        say(f"serial  {url}  (the firmware starts when a client connects: zoflash monitor --port {url})")
        return FlashResult(
            self.method,
            fw.entry["name"],
            [step.argv],
            serial_url=url,
            pid=pid,
            port=opts.port,
            state_path=fw.dir / STATE_FILE,
            message=self.done_message(fw),
        )

    def _start(self, fw, opts, step: ToolCommand):
        log = fw.dir / QEMU_LOG
        log.write_text("")
        pkg_parent = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        code = "import sys; from zoflash.targets.runners.qemu import supervise; sys.exit(supervise(sys.argv[1:]))"
        sup = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(log),
                f"{opts.timeout:g}",
                *step.argv,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            start_new_session=True,
        )
        _BACKGROUND.append(sup)
        assert sup.stdout is not None  # started with stdout=PIPE
        line = sup.stdout.readline().strip()
        sup.stdout.close()
        if not line.isdigit():
            sup.wait(timeout=10)
            raise FlashError(f"could not start the QEMU supervisor (exit {sup.returncode})")
        pid = int(line)
        url = f"socket://127.0.0.1:{opts.port}"
        deadline = time.monotonic() + 10.0
        while True:
            text = log.read_text(errors="replace")
            if "waiting for connection" in text:
                break
            if sup.poll() is not None:  # QEMU has ended already
                if "Address already in use" in text:
                    return None
                raise FlashError(f"QEMU stopped at once: {_log_tail(log, 2) or 'no output'} (output in {log})")
            if time.monotonic() > deadline:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                raise FlashError(f"QEMU did not open {url} within 10 s (output in {log})")
            time.sleep(0.02)
        state = {
            "pid": pid,
            "supervisor_pid": sup.pid,
            "port": opts.port,
            "url": url,
            "elf": str(fw.elf),
            "board": fw.board.id,
            "command": step.argv,
            "log": str(log),
            "started": time.time(),
            "timeout_s": opts.timeout,
            "deadline": time.time() + opts.timeout,
        }
        tmp = fw.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(fw.dir / STATE_FILE)
        assert sup.stdin is not None  # started with stdin=PIPE
        if not opts.tied:  # recorded: QEMU may now outlive this process (`zoflash flash`)
            sup.stdin.write(DETACH + "\n")
            sup.stdin.close()
        # Tied (`zoflash run`): the pipe stays open while this process lives; its end ends QEMU.
        return pid, url
