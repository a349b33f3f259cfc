"""Fault injection: the real commands (the installed `zoflash`, as subprocesses) killed, interrupted,
starved of disk, fed a damaged cache, run twice at once. For each: nothing learned is lost, and
nothing wrong is reported as success (exit 0 only with complete, right outputs).

Kill points are seeded (tests/faults.py: ZOFLASH_FAULT_SEED); ZOFLASH_FAULT_COUNT=N tries N kill
points per case (nightly), 1 by default."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import faults
import pytest
from conftest import FIXTURES, small_disk
from faults import interrupt, jsonl_records, kill_points, run, tree, wait_gone

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")

MODEL = str(FIXTURES / "digits_cnn.tflite")
DATA = str(FIXTURES / "digits_shift.npz")
TRAIN = ["--model", MODEL, "--data", DATA]


def build_args(board: str, out: str) -> list[str]:
    return ["build", "--board", board, *TRAIN, "--out", out]


def assert_nothing_left(where: Path, seconds: float = 5.0) -> None:
    left = wait_gone(str(where), seconds)
    faults.end_all(str(where))
    assert not left, f"processes left running after the kill: {left}"


# ============================================================================== 1. SIGKILL, then again


@pytest.mark.parametrize(
    "board", [pytest.param("host", marks=pytest.mark.cc), pytest.param("mps3-an547", marks=pytest.mark.cross)]
)
def test_a_killed_build_builds_the_same_bytes_again(tmp_path, board):
    """Killed anywhere (cold cache: the compilers run), the same build again gives a bundle
    byte-identical to a clean build into a fresh folder; no make or compiler of the killed build
    goes on writing into the folder while the next build runs."""
    clean = run(build_args(board, "clean"), tmp_path, tmp_path / "cache-clean")
    assert clean.code == 0, clean.text
    for n, delay in enumerate(kill_points(f"build-{board}", clean.seconds)):
        out, cache = f"killed{n}", tmp_path / f"cache{n}"
        interrupt(build_args(board, out), tmp_path, delay, signal.SIGKILL, cache)
        assert_nothing_left(tmp_path / out, 3.0)
        again = run(build_args(board, out), tmp_path, cache)
        assert again.code == 0, again.text
        assert tree(tmp_path / out) == tree(tmp_path / "clean"), f"killed after {delay:.2f} s"


SIMULATE = ["simulate", *TRAIN, "--steps", "400", "--eval-every", "50", "--batch", "4", "--no-plot"]


@pytest.mark.cc
def test_a_killed_simulate_leaves_a_valid_log_and_the_rerun_does_not_overwrite_it(tmp_path):
    clean = run([*SIMULATE, "--log", "clean.jsonl"], tmp_path)
    assert clean.code == 0, clean.text
    for n, delay in enumerate(kill_points("simulate", clean.seconds)):
        log = tmp_path / f"run{n}.jsonl"
        interrupt([*SIMULATE, "--log", log.name], tmp_path, delay, signal.SIGKILL)
        assert_nothing_left(tmp_path / "digits_cnn")  # no training program left running
        left = log.read_bytes() if log.exists() else None
        if left is not None:
            jsonl_records(log)  # valid line by line, at most the last line cut
        again = run([*SIMULATE, "--log", log.name], tmp_path)
        assert again.code == 0, again.text
        if left is not None:
            assert log.read_bytes() == left, "the rerun overwrote the killed run's log"
            assert f"writing run{n}-2.jsonl instead" in again.out
            written = tmp_path / f"run{n}-2.jsonl"
        else:
            written = log
        assert _comparable(written) == _comparable(tmp_path / "clean.jsonl")


def _comparable(log: Path) -> list[dict]:
    """A simulate log without its times (what two clean runs share exactly)."""
    keep = []
    for r in jsonl_records(log):
        keep.append({k: v for k, v in r.items() if "time" not in k and k not in ("seconds", "wall_s", "date")})
    return keep


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A weights file of a short reference simulation (for export)."""
    folder = tmp_path_factory.mktemp("trained")
    done = run(["simulate", *TRAIN, "--steps", "20", "--eval-every", "10", "--engine", "reference", "--no-plot",
                "--log", "t.jsonl"], folder)  # fmt: skip
    assert done.code == 0, done.text
    return folder / "t.weights.npz"


def test_a_killed_export_leaves_no_output_or_a_complete_one(tmp_path, trained):
    args = ["export", "--model", MODEL, "--weights", str(trained), "--out"]
    clean = run([*args, "clean.tflite"], tmp_path)
    assert clean.code == 0, clean.text
    expected = (tmp_path / "clean.tflite").read_bytes()
    for n, delay in enumerate(kill_points("export", clean.seconds)):
        out = tmp_path / f"t{n}.tflite"
        interrupt([*args, out.name], tmp_path, delay, signal.SIGKILL)
        assert not out.exists() or out.read_bytes() == expected
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f".t{n}")], "a partial file is left"
        again = run([*args, out.name], tmp_path)
        assert again.code == 0 and out.read_bytes() == expected, again.text


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    """A training firmware for the emulated Cortex-M55 (module-wide: flash and monitor cases)."""
    folder = tmp_path_factory.mktemp("fw")
    done = run([*build_args("mps3-an547", "fw"), "--steps", "600", "--eval-every", "200"], folder)
    assert done.code == 0, done.text
    return folder / "fw"


def _qemu_port(flashed: faults.Ran) -> int:
    found = re.findall(r"serial  socket://127\.0\.0\.1:(\d+)", flashed.out)  # not the replaced QEMU's
    assert found, flashed.out
    return int(found[-1])


def _qemu_of(bundle: Path) -> list[tuple[int, str]]:
    return [p for p in faults.processes_naming(str(bundle)) if "qemu-system" in p[1].split(" ", 1)[0]]


@pytest.mark.cross
@pytest.mark.qemu
def test_a_killed_flash_can_flash_again(firmware):
    args = ["flash", "--bundle", str(firmware), "--timeout", "60"]
    try:
        clean = run(args, firmware.parent)
        assert clean.code == 0, clean.text
        assert run(["flash", "--bundle", str(firmware), "--stop"], firmware.parent).code == 0
        for delay in kill_points("flash", clean.seconds):
            interrupt(args, firmware.parent, delay, signal.SIGKILL)
            again = run(args, firmware.parent)
            assert again.code == 0, again.text
            assert len(_qemu_of(firmware)) == 1  # the rerun replaced any QEMU the killed flash started
            assert run(["flash", "--bundle", str(firmware), "--stop"], firmware.parent).code == 0
            assert not wait_gone(f"-kernel {firmware}", 5)
    finally:
        faults.end_all(f"-kernel {firmware}")


RUN = ["run", "--board", "mps3-an547", *TRAIN, "--steps", "40", "--eval-every", "20", "--timeout", "120"]


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_a_killed_run_leaves_no_emulator_and_runs_again(tmp_path):
    clean = run([*RUN, "--out", "clean", "--log", "clean.jsonl"], tmp_path)
    assert clean.code == 0, clean.text
    try:
        for n, delay in enumerate(kill_points("run", clean.seconds)):
            out, log = tmp_path / f"b{n}", tmp_path / f"run{n}.jsonl"
            interrupt([*RUN, "--out", out.name, "--log", log.name], tmp_path, delay, signal.SIGKILL)
            assert not wait_gone(f"-kernel {out}", 5), "QEMU outlived the killed `zoflash run`"
            assert_nothing_left(out)
            left = log.read_bytes() if log.exists() else None
            if left is not None:
                jsonl_records(log)
            again = run([*RUN, "--out", out.name, "--log", log.name], tmp_path)
            assert again.code == 0, again.text
            assert tree(out / "build") == tree(tmp_path / "clean" / "build")
            if left is not None:
                assert log.read_bytes() == left, "the rerun overwrote the killed run's log"
    finally:
        faults.end_all(str(tmp_path))


# ============================================================================== 2. QEMU killed mid-run


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_killed_mid_run_ends_the_run_with_one_message_and_keeps_the_log(tmp_path):
    long_run = ["run", "--board", "mps3-an547", *TRAIN, "--steps", "100000", "--eval-every", "100"]
    log = tmp_path / "run.jsonl"
    proc = faults.start([*long_run, "--out", "b", "--log", log.name, "--timeout", "120"], tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text().count('"type": "eval"') >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(faults.rng("qemu-kill").uniform(0.0, 1.0))
        (pid, _), *_ = _qemu_of(tmp_path / "b")
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        faults.end_all(str(tmp_path))
    assert proc.returncode not in (0, None), out + err
    assert "Traceback" not in err
    assert (out + err).count("the emulator has ended") == 1, out + err  # one message
    assert not (tmp_path / "run.weights.npz").exists()  # no weights had arrived: none claimed
    records = jsonl_records(log)
    assert sum(r["type"] == "eval" for r in records) >= 1  # what arrived is kept


# ============================================================================== 3. a full disk


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (root only)."""
    with small_disk(tmp_path, 64) as disk:
        yield disk


def _rescued(ran: faults.Ran, tmp_path: Path) -> Path:
    """The rescue folder the one message names (under $TMPDIR, which the test sets to tmp_path)."""
    lines = [ln for ln in ran.text.splitlines() if "zoflash-rescue-" in ln]
    assert lines, ran.text
    word = next(w for w in lines[0].replace(",", " ").split() if "zoflash-rescue-" in w)
    folder = Path(word.rstrip(":;.)"))
    folder = folder if folder.is_dir() else folder.parent
    assert folder.is_dir() and folder.is_relative_to(tmp_path), lines
    return folder


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(SIMULATE + ["--engine", "reference"], id="simulate"),
        pytest.param([*RUN, "--out", "b"], id="run", marks=[pytest.mark.cc, pytest.mark.cross, pytest.mark.qemu]),
    ],
)
def test_a_full_disk_rescues_the_weights_and_export_reads_them(tmp_path, tiny_disk, command, monkeypatch):
    (tiny_disk / "filler").write_bytes(b"\0" * 40 * 1024)  # room for the start of a log, not the weights
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    ran = run([*command, "--log", str(tiny_disk / "run.jsonl")], tmp_path)
    assert ran.code == 4, ran.text
    folder = _rescued(ran, tmp_path)
    weights = sorted(folder.glob("*weights.npz"))
    assert weights, sorted(folder.iterdir())
    export = run(["export", "--model", MODEL, "--weights", str(weights[0]), "--out", "trained.tflite"], tmp_path)
    assert export.code == 0, export.text
    assert (tmp_path / "trained.tflite").stat().st_size == Path(MODEL).stat().st_size


# ============================================================================== 4. a damaged cache


def _damage(entry: Path, how: str) -> None:
    data = entry.read_bytes()
    if how == "flip":
        at = faults.rng(f"flip-{entry.name}").randrange(len(data))
        entry.write_bytes(data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :])
    elif how == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    else:
        entry.write_bytes(b"garbage " * 64)


@pytest.mark.parametrize(
    "board", [pytest.param("host", marks=pytest.mark.cc), pytest.param("mps3-an547", marks=pytest.mark.cross)]
)
def test_damaged_cache_entries_are_evicted_and_the_firmware_is_the_same(tmp_path, board):
    """Three cached objects damaged three ways (a flipped byte, cut short, overwritten): each is
    evicted by name and rebuilt, and the firmware is byte for byte the first build's."""
    cache = tmp_path / "cache"
    first = run(build_args(board, "first"), tmp_path, cache)
    assert first.code == 0, first.text
    entries = sorted((cache / "objects").rglob("*.o"))
    victims = faults.rng(f"cache-{board}").sample(entries, 3)
    for victim, how in zip(victims, ("flip", "truncate", "garbage")):
        _damage(victim, how)
    second = run(build_args(board, "second"), tmp_path, cache)
    assert second.code == 0, second.text
    assert tree(tmp_path / "second") == tree(tmp_path / "first")
    evictions = [ln for ln in second.text.splitlines() if "object cache: removed" in ln]
    assert len(evictions) == 3, second.text
    assert all(any(v.name in ln for ln in evictions) for v in victims), second.text


# ============================================================================== 5. twice at once


@pytest.mark.cc
def test_two_builds_into_one_folder_end_consistent(tmp_path):
    clean = run(build_args("host", "clean"), tmp_path, tmp_path / "c0")
    assert clean.code == 0
    both: list[faults.Ran] = []
    threads = [
        threading.Thread(target=lambda: both.append(run(build_args("host", "shared"), tmp_path, tmp_path / "c1")))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join()
    assert [r.code for r in both] == [0, 0], [r.text for r in both]
    assert any("waiting" in r.text for r in both), [r.text for r in both]  # the second said it waits
    assert tree(tmp_path / "shared") == tree(tmp_path / "clean")


@pytest.mark.cross
@pytest.mark.qemu
def test_a_second_monitor_on_the_same_emulator_does_not_split_the_stream(firmware):
    """QEMU's TCP serial serves one client at a time: a second monitor must end non-zero with one
    message (its connection is reset or refused), and the first must get every record."""
    flashed = run(["flash", "--bundle", str(firmware), "--timeout", "120"], firmware.parent)
    assert flashed.code == 0, flashed.text
    try:
        url = f"socket://127.0.0.1:{_qemu_port(flashed)}"
        watch = ["monitor", "--port", url, "--bundle", str(firmware), "--timeout", "60"]
        first = faults.start([*watch, "--log", "first.jsonl"], firmware.parent)
        time.sleep(1.0)
        second = run([*watch[:-1], "10", "--log", "second.jsonl"], firmware.parent)
        out, err = first.communicate(timeout=120)
    finally:
        run(["flash", "--bundle", str(firmware), "--stop"], firmware.parent)
    assert first.returncode == 0, out + err
    records = jsonl_records(firmware.parent / "first.jsonl")
    steps = [r["step"] for r in records if r["type"] == "step"]
    assert steps == list(range(len(steps))) and records[-1]["type"] == "done"
    assert second.code != 0 and "Traceback" not in second.err, second.text
    assert "connection" in second.text.lower() and not (firmware.parent / "second.weights.npz").exists()


# ============================================================================== 6. a port that drops


class DroppingProxy:
    """A TCP proxy between the monitor and QEMU that drops the monitor's connection once (after
    `drop_after` bytes) and accepts it again."""

    def __init__(self, target: int, drop_after: int):
        self.target, self.drop_after = target, drop_after
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.upstream: socket.socket | None = None
        self.dropped = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        sent = 0
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.upstream is None:
                self.upstream = socket.create_connection(("127.0.0.1", self.target))
            up = self.upstream
            threading.Thread(target=self._pump, args=(client, up), daemon=True).start()
            while True:
                try:
                    data = up.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    client.close()
                    return
                try:
                    client.sendall(data)
                except OSError:
                    break  # the monitor is gone: what QEMU sends meanwhile is lost, as on a real cable
                sent += len(data)
                if not self.dropped and sent >= self.drop_after:
                    client.shutdown(socket.SHUT_RDWR)
                    client.close()
                    self.dropped = self._discard(up, 0.5)
                    break

    @staticmethod
    def _discard(up: socket.socket, seconds: float) -> int:
        """What the device sends while nobody listens is lost (a real cable unplugged): bytes dropped."""
        lost, end = 0, time.monotonic() + seconds
        up.settimeout(0.05)
        while time.monotonic() < end:
            try:
                lost += len(up.recv(4096))
            except TimeoutError:
                pass
        up.settimeout(None)
        return max(lost, 1)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(4096)
                if not data:
                    return
                dst.sendall(data)
            except OSError:
                return


@pytest.mark.cross
@pytest.mark.qemu
def test_a_port_that_drops_and_returns_loses_nothing_silently(firmware):
    flashed = run(["flash", "--bundle", str(firmware), "--timeout", "120"], firmware.parent)
    assert flashed.code == 0, flashed.text
    try:
        proxy = DroppingProxy(_qemu_port(flashed), faults.rng("drop").randrange(2000, 20000))
        ran = run(
            [
                "monitor",
                "--port",
                f"socket://127.0.0.1:{proxy.port}",
                "--bundle",
                str(firmware),
                "--timeout",
                "60",
                "--log",
                "dropped.jsonl",
            ],  # fmt: skip
            firmware.parent,
        )
    finally:
        run(["flash", "--bundle", str(firmware), "--stop"], firmware.parent)
    assert proxy.dropped
    records = jsonl_records(firmware.parent / "dropped.jsonl")
    steps = [r["step"] for r in records if r["type"] == "step"]
    complete = steps == list(range(len(steps))) and records[-1]["type"] == "done"
    if not complete:  # records were lost while the link was down: counted, said, and not exit 0
        assert ran.code == 5 and "'seq_gaps'" in ran.text and "telemetry frame(s) never arrived" in ran.text, ran.text
    else:
        assert ran.code == 0, ran.text
    assert records[-1]["type"] == "done" and (firmware.parent / "dropped.weights.npz").is_file()  # weights kept
    assert "Traceback" not in ran.err


# ============================================================================== 7. Ctrl-C at each stage


@pytest.mark.parametrize(
    "name,args",
    [
        pytest.param("build", build_args("mps3-an547", "b"), marks=pytest.mark.cross),
        pytest.param("simulate", [*SIMULATE, "--engine", "c", "--log", "run.jsonl"], marks=pytest.mark.cc),
        pytest.param("export", ["export", "--model", MODEL, "--out", "t.tflite", "--weights"]),
    ],
)
def test_ctrl_c_exits_non_zero_and_leaves_nothing_taken_for_complete(tmp_path, name, args, trained):
    if name == "export":
        args = [*args, str(trained)]
    clean = run(args, tmp_path, tmp_path / "cache")
    assert clean.code == 0, clean.text
    # From 0.1 s: before that the interpreter itself starts (no zoflash code has run yet)
    for n, delay in enumerate(max(0.1, d) for d in kill_points(f"ctrl-c-{name}", clean.seconds)):
        folder = tmp_path / f"i{n}"
        folder.mkdir()
        ran = interrupt(args, folder, delay, signal.SIGINT, tmp_path / f"cache{n}", group=True)
        # 130: Ctrl-C handled; -SIGINT: it came during the interpreter's exit, after the work (a
        # shell shows 130 too); 0: it came too late to matter. Never a traceback.
        assert ran.code in (0, 130, -signal.SIGINT), ran.text
        assert "Traceback" not in ran.err, ran.err
        if name == "build" and ran.code == 130:
            assert_nothing_left(folder / "b")
            again = run(args, folder, tmp_path / f"cache{n}")  # a later build takes nothing half-made
            assert again.code == 0 and tree(folder / "b") == tree(tmp_path / "b"), again.text
        if name == "simulate" and (folder / "run.jsonl").exists():
            records = jsonl_records(folder / "run.jsonl")
            if ran.code == 0 or any(r["type"] == "step" for r in records):  # training had begun: kept
                assert records[-1]["type"] == "done" and (folder / "run.weights.npz").is_file(), ran.text
        if name == "export" and (folder / "t.tflite").exists():
            assert (folder / "t.tflite").read_bytes() == (tmp_path / "t.tflite").read_bytes()


def _flash(firmware: Path) -> int:
    flashed = run(["flash", "--bundle", str(firmware), "--timeout", "120"], firmware.parent)
    assert flashed.code == 0, flashed.text
    return _qemu_port(flashed)


def _qemu_accounted_for(firmware: Path, seconds: float = 3.0) -> None:
    """Every QEMU running this firmware is the one its state file names (so `flash --stop`, or the
    next flash, ends it), within `seconds` (its supervisor's reaction time): none runs unseen
    until its time limit."""
    path, deadline = firmware / ".zoflash-qemu.json", time.monotonic() + seconds
    while True:
        state = json.loads(path.read_text()) if path.exists() else {}
        running = {pid for pid, _ in _qemu_of(firmware)}
        if running <= {state.get("pid")} or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert running <= {state.get("pid")}, f"QEMU {running} runs without a state file naming it ({state})"


@pytest.mark.cross
@pytest.mark.qemu
def test_a_killed_monitor_keeps_a_valid_log_and_the_next_run_is_whole(firmware):
    folder = firmware.parent
    watch = ["monitor", "--bundle", str(firmware), "--timeout", "60"]
    try:
        port = _flash(firmware)
        clean = run([*watch, "--port", f"socket://127.0.0.1:{port}", "--log", "clean.jsonl"], folder)
        assert clean.code == 0, clean.text
        for n, delay in enumerate(kill_points("monitor", clean.seconds)):
            port = _flash(firmware)
            log = folder / f"m{n}.jsonl"
            args = [*watch, "--port", f"socket://127.0.0.1:{port}", "--log", log.name]
            interrupt(args, folder, delay, signal.SIGKILL)
            left = log.read_bytes() if log.exists() else None
            if left is not None:
                jsonl_records(log)
            port = _flash(firmware)  # a fresh run of the device: the killed monitor's part is gone
            args = [*watch, "--port", f"socket://127.0.0.1:{port}", "--log", log.name]
            again = run(args, folder)
            assert again.code == 0, again.text + f"killed after {delay:.2f} s\n" + _text(firmware / ".zoflash-qemu.log")
            if left is not None:
                assert log.read_bytes() == left, "the rerun overwrote the killed monitor's log"
                written = folder / f"m{n}-2.jsonl"
            else:
                written = log
            assert _comparable(written) == _comparable(folder / "clean.jsonl")
    finally:
        run(["flash", "--bundle", str(firmware), "--stop"], folder)
        faults.end_all(f"-kernel {firmware}")


@pytest.mark.cross
@pytest.mark.qemu
def test_ctrl_c_in_flash_and_monitor(firmware):
    folder = firmware.parent
    flash = ["flash", "--bundle", str(firmware), "--timeout", "120"]
    try:
        clean = run(flash, folder)
        assert clean.code == 0, clean.text
        for delay in kill_points("ctrl-c-flash", clean.seconds):
            ran = interrupt(flash, folder, delay, signal.SIGINT, group=True)
            assert ran.code in (0, 130, -signal.SIGINT) and "Traceback" not in ran.err, ran.text
            _qemu_accounted_for(firmware)
        port = _flash(firmware)
        log = folder / "interrupted.jsonl"
        watch = ["monitor", "--bundle", str(firmware), "--port", f"socket://127.0.0.1:{port}", "--log", log.name]
        ran = interrupt(watch, folder, 0, signal.SIGINT, group=True, until=lambda: '"type": "eval"' in _text(log))
        assert ran.code == 130 and "Traceback" not in ran.err, ran.text
        records = jsonl_records(log)
        assert records[0]["type"] == "hello" and (folder / "interrupted.weights.npz").is_file(), ran.text
    finally:
        run(["flash", "--bundle", str(firmware), "--stop"], folder)
        faults.end_all(f"-kernel {firmware}")


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
