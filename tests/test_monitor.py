"""The serial monitor and the command channel.

- The device's command parser (zo_command.c) against random, damaged and hostile byte streams:
  it returns exactly the intact frames, the same as the host decoder, never a false command,
  and never reads more than its bound per poll.
- The monitor on pyserial's loop://, and on a TCP peer that replays a real training stream with
  flipped bits, dropped bytes, truncated frames, garbage between frames and a disconnection
  with the port gone for a while: every accepted record is one that was sent intact, nothing
  sent before the fault is lost, the reconnection is counted, and it stops at done.
- End to end: the host training program paused, resumed, queried, dumped and stopped by the
  monitor through pipes; without commands its records are those of an undisturbed run.
- Stopping when the run cannot go on: a fault line, the emulator ended (QEMU killed under
  `zoflash run`), a port away longer than --reconnect-timeout; Ctrl-C fetches the weights.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import serial
from ccompile import M55_FLAGS, RUNTIME_INCLUDES, STRICT_FLAGS, TRAINING, build_shared, compile_object
from conftest import FIXTURES, need_program
from test_telemetry import damage, is_subsequence

from zoflash.monitor import telemetry as tm
from zoflash.monitor.serial_monitor import DeviceError, KeyCommands, Monitor, PortGone, board_console, weights_from_raw
from zoflash.monitor.serialport import PortError, ProgramPort, find_port, open_port, parse_usb_id
from zoflash.monitor.session import comparable, read_log
from zoflash.spec import wire as proto
from zoflash.targets.host_build import run_make
from zoflash.targets.runners.qemu import emulator_ended
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.simulate import reference_frames
from zoflash.workflows.training import compile_for_training, training_bundle

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
COMMAND_TYPES = sorted(tm.COMMAND_NAMES)


# ============================================================================== device parser

SHIM = r"""
#include <stdint.h>
#include <string.h>
#include "zo_command.h"
#include "zo_port.h"

static uint8_t g_in[1u << 22];
static uint32_t g_n, g_pos, g_reads;

void zo_port_init(void) {}
void zo_port_write(const uint8_t *data, uint32_t n) { (void)data; (void)n; }
uint64_t zo_port_time_us(void) { return 0u; }
int zo_port_read_byte(uint8_t *byte)
{
    if (g_pos >= g_n) return 0;
    *byte = g_in[g_pos++];
    g_reads++;
    return 1;
}
_Noreturn void zo_port_exit(int code) { (void)code; for (;;) {} }

/* Make n more bytes available to zo_port_read_byte. */
void t_feed(const uint8_t *data, uint32_t n)
{
    memmove(g_in, g_in + g_pos, g_n - g_pos);
    g_n -= g_pos;
    g_pos = 0;
    memcpy(g_in + g_n, data, n);
    g_n += n;
}
uint32_t t_left(void) { return g_n - g_pos; }
uint32_t t_reads(void) { return g_reads; }
uint32_t t_counter(int which)
{
    const zo_cmd_parser_t *p = zo_cmd_state();
    return which == 0 ? p->frames : which == 1 ? p->crc_errors : p->dropped;
}
/* One poll: 1 and the command's type, seq, len and payload, or 0. */
int t_poll(uint8_t *type, uint16_t *seq, uint8_t *payload, uint16_t *len)
{
    zo_cmd_t c;
    if (!zo_cmd_poll(&c)) return 0;
    *type = c.type; *seq = c.seq; *len = c.len;
    memcpy(payload, c.payload, c.len);
    return 1;
}
"""


@pytest.fixture(scope="module")
def cmdlib(tmp_path_factory):
    lib = build_shared(
        [TRAINING / "zo_command.c", TRAINING / "zo_telemetry.c", TRAINING / "zo_wire.c"],
        tmp_path_factory.mktemp("zo_cmd"),
        "zo_cmd",
        {"shim.c": SHIM},
    )
    lib.t_feed.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    for f in ("t_left", "t_reads", "t_counter"):
        getattr(lib, f).restype = ctypes.c_uint32
    return lib


CMD_BOUND = 1024  # ZO_CMD_MAX_PAYLOAD


def c_parse(lib, data: bytes, chunk: int | None = None) -> list[tm.Frame]:
    """Every frame the firmware's parser returns for `data` (made available `chunk` bytes at a
    time, as a UART delivers them), polling as the trainer does."""
    lib.zo_cmd_reset()
    lib.t_feed(b"", 0)
    out, pos = [], 0
    t, s, n = ctypes.c_uint8(), ctypes.c_uint16(), ctypes.c_uint16()
    payload = ctypes.create_string_buffer(proto.CMD_MAX_PAYLOAD)
    while True:
        if lib.t_left() == 0 and pos < len(data):
            step = len(data) - pos if chunk is None else chunk
            lib.t_feed(data[pos : pos + step], len(data[pos : pos + step]))
            pos += step
        before = lib.t_left()
        got = lib.t_poll(ctypes.byref(t), ctypes.byref(s), payload, ctypes.byref(n))
        assert before - lib.t_left() <= 64  # never reads more than ZO_CMD_POLL_BYTES per poll
        if got:
            out.append(tm.Frame(t.value, s.value, payload.raw[: n.value]))
        elif lib.t_left() == 0 and pos >= len(data):
            return out


def rand_command_stream(rng: random.Random, n: int, p_fault: float):
    """Elements (what, bytes, bytes on the wire, intact): command frames (known and unknown types, payloads up to
    16 bytes, within the 1024-byte bound), telemetry frames, text and garbage; some damaged."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            what = "frame"
            if rng.random() < 0.7:
                b = proto.encode_command(rng.choice(list(tm.COMMANDS)), rng.randrange(65536))
            else:  # any type, payload within the bound
                b = tm.Frame(rng.randrange(256), rng.randrange(65536), rng.randbytes(rng.randrange(17))).to_bytes()
        elif r < 0.8:
            what, b = "garbage", rng.randbytes(rng.randint(1, 40))
        else:
            what, b = "garbage", rng.choice([b"\xa5", b"\xa5\x5a", b"\xa5\x5a\x01", b"\xa5\x5a\x01\x10\x00"])
        intact = rng.random() >= p_fault
        out.append((what, b, b if intact else damage(b, rng), intact))
    return out


@pytest.mark.cc
@pytest.mark.parametrize("p_fault", [0.0, 0.2, 0.5])
def test_parser_returns_exactly_the_intact_frames(cmdlib, p_fault):
    for seed in range(60):
        rng = random.Random(seed * 7 + int(p_fault * 10))
        elems = rand_command_stream(rng, rng.randint(1, 30), p_fault)
        data = b"".join(w for _, _, w, _ in elems) + bytes(
            tm.HEAD + proto.CMD_MAX_PAYLOAD + 4
        )  # settles a pending candidate
        sent = [b for what, b, _, _ in elems if what == "frame"]  # as meant, before any damage
        intact = [b for what, b, _, ok in elems if what == "frame" and ok]
        got = c_parse(cmdlib, data, chunk=rng.choice([None, 1, 7, 64]))
        # Never a false command: each frame returned is one that was sent, in order; and every
        # frame that arrived intact is returned.  (A damaged frame can come back whole, e.g. a
        # lost first byte after garbage ending in 0xA5: then it was received as sent.)
        assert is_subsequence([f.to_bytes() for f in got], sent) and is_subsequence(intact, [f.to_bytes() for f in got])
        if p_fault == 0.0:
            assert [f.to_bytes() for f in got] == intact, seed
        # The host decoder finds the same frames (its length bound is larger; pad past it).
        dec = tm.Decoder()
        assert [f for f in dec.feed(data + bytes(tm.HEAD + tm.MAX_PAYLOAD + 4)) if isinstance(f, tm.Frame)] == got
        frames, crc_errors, dropped = (cmdlib.t_counter(k) for k in range(3))
        assert frames == len(got)
        assert dropped == len(data) - sum(len(f.to_bytes()) for f in got)
        if not any(what == "garbage" for what, _, _, _ in elems) and p_fault == 0.0:
            assert crc_errors == 0


@pytest.mark.cc
def test_parser_never_takes_noise_for_a_command(cmdlib):
    rng = random.Random(5)
    noise = bytearray(rng.randbytes(1 << 20))
    for k in range(0, len(noise) - 8, 97):  # many plausible headers: sync, version, small lengths
        noise[k : k + 8] = bytes(
            [0xA5, 0x5A, 3, rng.choice(COMMAND_TYPES), rng.randrange(256), 0, rng.randrange(17), 0]
        )
    assert c_parse(cmdlib, bytes(noise)) == []
    assert cmdlib.t_counter(1) > 5000  # those headers were checked, and failed their CRC


@pytest.mark.cc
def test_parser_length_bound_and_bounded_polls(cmdlib):
    ok = tm.Frame(22, 3, bytes(1024)).to_bytes()  # ZO_CMD_MAX_PAYLOAD
    too_long = tm.Frame(22, 4, bytes(1025)).to_bytes()  # valid CRC, but over the bound
    assert c_parse(cmdlib, too_long + ok) == [tm.Frame(22, 3, bytes(1024))]
    # A flood of garbage: each poll returns promptly, having read at most 64 bytes.
    cmdlib.zo_cmd_reset()
    cmdlib.t_feed(b"\xa5" * 10000, 10000)
    t, s, n = ctypes.c_uint8(), ctypes.c_uint16(), ctypes.c_uint16()
    buf = ctypes.create_string_buffer(CMD_BOUND)
    assert cmdlib.t_poll(ctypes.byref(t), ctypes.byref(s), buf, ctypes.byref(n)) == 0
    assert cmdlib.t_left() == 10000 - 64
    cmdlib.t_feed(b"", 0)
    while cmdlib.t_left():
        cmdlib.t_poll(ctypes.byref(t), ctypes.byref(s), buf, ctypes.byref(n))


@pytest.mark.cc
def test_parser_finds_a_frame_inside_a_damaged_one(cmdlib):
    inner = proto.encode_command("stop", 9)
    outer = bytearray(tm.Frame(18, 1, bytes(16)).to_bytes())
    outer[10 : 10 + len(inner)] = inner  # the outer frame's CRC no longer matches
    assert c_parse(cmdlib, bytes(outer) + bytes(28)) == [tm.Frame(20, 9, b"")]


@pytest.mark.cross
def test_parser_cross_compiles_for_m55(tmp_path):
    src = TRAINING / "zo_command.c"
    for opt in ("-O2", "-Os"):
        res = compile_object("arm-none-eabi-gcc", src, STRICT_FLAGS + [opt] + M55_FLAGS)
        assert res.returncode == 0, res.stderr
    nm = shutil.which("arm-none-eabi-nm")
    if nm:
        obj = tmp_path / "zo_command.o"
        subprocess.run(
            ["arm-none-eabi-gcc", *STRICT_FLAGS, *M55_FLAGS, *RUNTIME_INCLUDES, "-c", str(src), "-o", str(obj)],
            check=True,
        )
        out = subprocess.run([nm, "-u", str(obj)], check=True, capture_output=True, text=True).stdout
        assert {line.split()[-1] for line in out.splitlines() if line.strip()} <= {
            "zo_port_read_byte",
            "zo_tm_crc32",
            "memcpy",
            "memmove",
            "memset",
        }


# ============================================================================== a recorded stream


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    d = np.load(SHIFT)
    path = tmp_path_factory.mktemp("data") / "digits_small.npz"
    np.savez(path, x_train=d["x_train"], y_train=d["y_train"], x_test=d["x_test"][:60], y_test=d["y_test"][:60])
    return path


@pytest.fixture(scope="module")
def stream(small_data):
    """A real training run's telemetry (the Python reference; the C sends the same bytes): its
    frames, in order."""
    prep = compile_for_training(DIGITS, small_data, make_options(steps=40, eval_every=10, batch=4))
    data = b"".join(reference_frames(prep))
    frames = tm.Decoder().feed(data)
    assert all(isinstance(f, tm.Frame) for f in frames) and b"".join(f.to_bytes() for f in frames) == data
    assert tm.TYPE_NAMES[frames[-1].type] == "done"
    return [f.to_bytes() for f in frames]


def device_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] not in ("text", "monitor", "command")]


def decoded(frames: list[bytes]) -> list[dict]:
    dec = tm.Decoder()
    return dec.records(dec.feed(b"".join(frames)))


def logged(records: list[dict]) -> list[dict]:
    """What the JSONL log holds of these records (weights chunks go to the weights file)."""
    return [r for r in comparable(records) if r["type"] != "weights"]


def loop_opener():
    port = serial.serial_for_url("loop://", timeout=0.05)
    return port, (lambda: port)


def write_later(port, data: bytes) -> threading.Thread:
    """Write into a loop:// port from another thread: its buffer holds 4096 bytes, and a write
    waits for the reader."""
    t = threading.Thread(target=port.write, args=(data,), daemon=True)
    t.start()
    return t


# ============================================================================== loop://


def test_loop_port_stream_to_done(tmp_path, stream):
    port, opener = loop_opener()
    mon = Monitor(
        opener=opener, log_path=tmp_path / "run.jsonl", csv_path=tmp_path / "run.csv", plot_path=tmp_path / "run.png"
    )
    mon.connect()
    write_later(port, b"boot: zoflash firmware\r\n" + b"".join(stream) + b"after done\n")
    mon.run(timeout=20)
    res = mon.close()
    assert not res.timed_out and res.done is not None and res.done["reason"] == "steps"
    assert device_records(res.records) == decoded(stream)
    assert res.records[0] == {"type": "text", "text": "boot: zoflash firmware"}
    assert res.stats["crc_errors"] == res.stats["dropped_bytes"] == res.stats["seq_gaps"] == 0
    assert comparable(read_log(tmp_path / "run.jsonl")) == logged(decoded(stream))
    rows = (tmp_path / "run.csv").read_text().splitlines()
    assert rows[0].startswith("type,step,q,state") and len(rows) == 1 + sum(
        r["type"] in ("step", "eval") for r in res.records
    )
    assert res.plot_path is None or res.plot_path.exists()


def test_loop_port_commands_are_frames(tmp_path):
    """On a loopback the monitor reads its own command frames back: they are well formed, and
    a request without a device behind it fails after its timeout instead of hanging."""
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "cmd.jsonl")
    seqs = [mon.send(c) for c in ("pause", "resume", "status", "dump", "stop")]
    while mon.pump():
        pass
    with pytest.raises(DeviceError, match="no answer to 'status'"):
        mon.request("status", timeout=0.3)
    res = mon.close()
    echoed = [r for r in res.records if r["type"] == "command"]
    assert [(r["command"], r["seq"]) for r in echoed][:5] == list(
        zip(("pause", "resume", "status", "dump", "stop"), seqs)
    )
    sent = [r for r in read_log(tmp_path / "cmd.jsonl") if r["type"] == "monitor" and r["event"] == "command"]
    assert [r["command"] for r in sent][:5] == ["pause", "resume", "status", "dump", "stop"]


def test_ctrl_c_closes_the_log_and_draws_the_plot(tmp_path, stream):
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "run.jsonl", plot_path=tmp_path / "run.png")
    half = stream[: len(stream) // 2]  # no done: the monitor would wait for ever
    write_later(port, b"".join(half))
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        mon.run(timeout=60)  # a missed interrupt fails the test instead of hanging it
    finally:
        timer.cancel()
    res = mon.close()
    assert res.interrupted and res.done is None
    assert comparable(read_log(tmp_path / "run.jsonl")) == logged(decoded(half))
    pytest.importorskip("matplotlib")
    assert res.plot_path == tmp_path / "run.png" and res.plot_path.stat().st_size > 0


# ============================================================================== TCP peer with faults


class Peer(threading.Thread):
    """A TCP server playing one script per connection: the connection's bytes in small chunks,
    then it closes; before the next connection the listener is gone for `gap` seconds (the
    port disappears, as a USB serial port does when the board is unplugged)."""

    def __init__(self, scripts: list[bytes], gap: float = 0.3):
        super().__init__(daemon=True)
        self.scripts, self.gap = scripts, gap
        self.listener = self._listen(0)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.error: BaseException | None = None

    @staticmethod
    def _listen(port: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        s.settimeout(20)
        return s

    def run(self):
        try:
            rng = random.Random(1)
            for k, script in enumerate(self.scripts):
                if k > 0:
                    self.listener.close()
                    time.sleep(self.gap)
                    self.listener = self._listen(self.port)
                conn, _ = self.listener.accept()
                self.connections += 1
                pos = 0
                while pos < len(script):
                    n = rng.randint(1, 700)
                    conn.sendall(script[pos : pos + n])
                    pos += n
                    time.sleep(0.001)
                conn.close()
            self.listener.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def faulty(frames: list[bytes], rng: random.Random, p_fault: float) -> tuple[bytes, list[bytes]]:
    """The frames with faults (a flipped bit, a dropped byte, a truncated frame, inserted
    garbage) on some of them and garbage between some others; returns the bytes and the
    frames sent intact."""
    out, intact = bytearray(), []
    for f in frames:
        if rng.random() < 0.15:
            out += rng.randbytes(rng.randint(1, 30))  # garbage between frames
        if rng.random() < p_fault:
            out += damage(f, rng)
        else:
            out += f
            intact.append(f)
    return bytes(out), intact


@pytest.mark.parametrize("seed", range(3))
def test_tcp_peer_faults_and_reconnect(tmp_path, stream, seed):
    rng = random.Random(seed)
    cut = len(stream) // 2
    first, intact1 = faulty(stream[:cut], rng, 0.2)
    half_frame = stream[cut][: len(stream[cut]) // 2]  # the connection drops in the middle of a frame
    second, intact2 = faulty(stream[cut + 1 : -1], rng, 0.2)
    second = rng.randbytes(20) + second + stream[-1]  # done arrives intact: the run can end
    peer = Peer([first + half_frame, second])
    peer.start()
    mon = Monitor(f"socket://127.0.0.1:{peer.port}", log_path=tmp_path / "run.jsonl", max_backoff=0.2)
    mon.connect(timeout=5)
    mon.run(timeout=30)
    res = mon.close()
    peer.join(5)
    assert peer.error is None
    sent_intact = intact1 + intact2 + [stream[-1]]
    # No corrupt record accepted, none lost: exactly the frames that were sent intact, in order.
    assert device_records(res.records) == decoded(sent_intact)
    assert res.done is not None and not res.timed_out
    assert res.reconnects == 1 and peer.connections == 2
    assert res.stats["crc_errors"] + res.stats["dropped_bytes"] > 0
    events = [r["event"] for r in read_log(tmp_path / "run.jsonl") if r["type"] == "monitor"]
    assert events == ["disconnected", "reconnected"]


def test_socket_bytes_before_a_close_are_not_lost(stream):
    """The peer sends everything and closes at once: pyserial's own socket read would raise
    'socket disconnected' and drop what it had received in the same call."""
    peer = Peer([b"".join(stream[:5])])
    peer.start()
    port = open_port(f"socket://127.0.0.1:{peer.port}")
    got = bytearray()
    with pytest.raises(serial.SerialException, match="disconnected"):
        while True:
            got += port.read(1 << 20)
    port.close()
    peer.join(5)
    assert bytes(got) == b"".join(stream[:5])


def test_device_restart_starts_a_new_segment(tmp_path, stream):
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "run.jsonl")
    write_later(port, b"".join(stream[: len(stream) // 2]) + b"reset\n" + b"".join(stream))  # reset mid-run, rerun
    mon.run(timeout=20)
    res = mon.close()
    assert res.segments == 2 and res.done is not None and res.stats["seq_gaps"] == 0
    log = read_log(tmp_path / "run.jsonl")
    k = next(i for i, r in enumerate(log) if r["type"] == "monitor")
    assert log[k]["event"] == "restart" and log[k]["segment"] == 2 and log[k + 1]["type"] == "hello"
    assert device_records(res.last_segment) == decoded(stream)


# ============================================================================== finding the port


def fake_port(device, vid=None, pid=None, product=None):
    return SimpleNamespace(device=device, vid=vid, pid=pid, manufacturer=None, product=product, description="n/a")


def test_find_port_by_usb_id():
    ports = [
        fake_port("/dev/ttyS0"),
        fake_port("/dev/ttyACM0", 0x0483, 0x374E, "STLINK-V3"),
        fake_port("/dev/ttyACM1", 0x1366, 0x0105, "J-Link"),
    ]
    assert find_port(ports=ports) == "/dev/ttyACM0"
    assert find_port([(0x1366, 0x0105)], ports=ports) == "/dev/ttyACM1"
    assert find_port(["0483:374e"], ports=ports) == "/dev/ttyACM0"
    with pytest.raises(PortError) as err:
        find_port([(0x0483, 0x3754)], ports=ports)
    msg = str(err.value)
    assert "0483:3754" in msg and "/dev/ttyS0 (no USB id)" in msg and "/dev/ttyACM1 (1366:0105, J-Link)" in msg
    with pytest.raises(PortError, match="2 serial ports"):
        find_port(ports=ports + [fake_port("/dev/ttyACM2", 0x0483, 0x374F)])
    with pytest.raises(PortError, match="Ports seen: none"):
        find_port(ports=[])


def test_parse_usb_id():
    assert parse_usb_id("0483:374E") == (0x0483, 0x374E)
    assert parse_usb_id("0x0483:0x374e") == (0x0483, 0x374E)
    assert parse_usb_id("0483") == parse_usb_id("0483:*") == (0x0483, None)
    assert parse_usb_id([0x0483, 0x374E]) == (0x0483, 0x374E)
    for bad in ("", "xyz", "12345:1", (0x10000, 1), "0483:"):
        with pytest.raises(PortError):
            parse_usb_id(bad)


def test_board_serial_settings():
    with pytest.raises(PortError, match="board 'host' has no USB id"):
        board_console("host")
    con = board_console("stm32n6")  # a family name: its reference board
    assert con.baud == 115200 and con.usb_ids and all(vid == 0x0483 for vid, _ in con.usb_ids)
    assert con.note and "stm32n6570-dk" in con.note


def test_unopenable_port_is_a_clear_error():
    with pytest.raises(PortError, match="cannot open /dev/zoflash-no-such-port"):
        Monitor("/dev/zoflash-no-such-port").connect(timeout=0.2)
    with pytest.raises(PortError, match="use socket://HOST:PORT"):
        Monitor("socket://127.0.0.1:")


# ============================================================================== the host training program


@pytest.fixture(scope="module")
def program(tmp_path_factory, small_data):
    """The host training program (long enough to pause it in the middle) and its undisturbed run."""
    need_program("cc")  # a module fixture runs before the tier check: fail loudly under `make test`
    need_program("make")
    prep = compile_for_training(DIGITS, small_data, make_options(steps=3000, eval_every=500, batch=4))
    bundle = training_bundle(prep, "host", tmp_path_factory.mktemp("prog") / "bundle")
    run_make(bundle, f"build/{bundle.prefix}_train")
    exe = bundle.path / "build" / f"{bundle.prefix}_train"
    raw = subprocess.run([str(exe)], stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
    dec = tm.Decoder()
    return SimpleNamespace(exe=exe, records=dec.records(dec.feed(raw)), prep=prep)


def program_monitor(
    exe: Path, tmp_path: Path, queued: tuple[str, ...] = (), name: str = "run", **monitor_options
) -> tuple[Monitor, ProgramPort]:
    # the queued commands are already waiting when the program starts
    port = ProgramPort([exe], preload=b"".join(proto.encode_command(c, 1000 + k) for k, c in enumerate(queued)))
    opened = []

    def opener():
        if opened:
            raise PortGone("the program ended")
        opened.append(port)
        return port

    mon = Monitor(opener=opener, log_path=tmp_path / f"{name}.jsonl", **monitor_options)
    mon.connect()
    return mon, port


def wait_step(mon: Monitor, step: int) -> None:
    end = time.monotonic() + 30
    while not any(r["type"] == "step" and r["step"] >= step for r in mon.session.result.records):
        assert time.monotonic() < end and mon.done is None
        mon.pump()


def weights_of(records: list[dict]) -> dict:
    asm = tm.WeightsAssembler()
    for r in records:
        if r["type"] == "weights":
            asm.add(r)
    return {k: asm.get(*k, np.uint8).tobytes() for k in asm.keys()}


@pytest.mark.cc
def test_pause_status_dump_resume_leave_the_run_unchanged(tmp_path, program):
    mon, port = program_monitor(program.exe, tmp_path, queued=("pause",))
    st = mon.status()
    assert st["paused"] and st["step"] == 0 and st["calibrating"]
    assert st["model_sha256_prefix"] == program.prep.sha256[:16]
    time.sleep(0.2)
    while mon.pump():
        pass
    assert not mon.session.result.steps  # paused before the first step
    assert mon.resume()["result"] == "ok"
    wait_step(mon, 3)
    assert mon.pause()["result"] == "ok"
    assert mon.pause()["result"] == "ignored"
    st = mon.status()
    assert st["paused"] and 3 < st["step"] < 3000
    n_steps = len(mon.session.result.steps)
    time.sleep(0.2)
    while mon.pump():
        pass
    assert len(mon.session.result.steps) == n_steps == st["step"]  # nothing ran while paused
    path = mon.save_dump(DIGITS, tmp_path / "mid.weights.npz")
    mid = load_weights(path)
    assert mid.model_sha256 == program.prep.sha256 and mid.tensors
    assert mon.resume()["result"] == "ok" and mon.resume()["result"] == "ignored"
    mon.run(timeout=60)
    res = mon.close()
    port.close()
    assert res.done["reason"] == "steps" and res.done["steps"] == 3000
    # The commands changed nothing: records and final weights as in the undisturbed run.
    assert logged(res.records) == logged(program.records)
    acks = [r for r in res.records if r["type"] == "ack"]
    assert [(a["command"], a["result"]) for a in acks] == [
        ("pause", "ok"),
        ("status", "ok"),
        ("resume", "ok"),
        ("pause", "ok"),
        ("pause", "ignored"),
        ("status", "ok"),
        ("dump", "ok"),
        ("resume", "ok"),
        ("resume", "ignored"),
    ]
    assert weights_of(res.records) == weights_of(program.records)  # the last dump: the end of the run


@pytest.mark.cc
def test_stop_finishes_like_a_run(tmp_path, program):
    mon, port = program_monitor(program.exe, tmp_path)
    wait_step(mon, 2)
    mon.pause()
    st = mon.status()
    dump = mon.dump()
    done = mon.stop()
    res = mon.close()
    port.close()
    assert done["reason"] == "command" and done["steps"] == st["step"]
    assert port.proc.returncode == 0
    recs = res.records
    k = next(i for i, r in enumerate(recs) if r["type"] == "ack" and r["command"] == "stop")
    tail = [r for r in recs[k + 1 :] if r["type"] != "monitor"]
    assert {r["type"] for r in tail} <= {"updates", "eval", "weights", "crc", "done"} and tail[-1]["type"] == "done"
    assert tail[-2]["type"] == "crc" and tail[-2]["step"] == st["step"]  # the weights' checksum, as at any end
    assert [r["type"] for r in tail[:1]] == ["updates"]  # the update log's last frame first, as at any end
    tail = tail[1:]
    if st["step"] % 500:  # not just evaluated: a final evaluation, as at the end of any run
        assert tail[0]["type"] == "eval" and tail[0]["step"] == st["step"]
    assert {key: dump.get(*key, np.uint8).tobytes() for key in dump.keys()} == weights_of(tail)
    # Before the stop, the same records as the undisturbed run.
    before = logged(recs[:k])
    assert before == logged(program.records)[: len(before)]


@pytest.mark.cc
def test_closing_the_command_input_while_paused_ends_the_program(program):
    proc = subprocess.Popen([str(program.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(proto.encode_command("pause", 1), timeout=20)  # then its input closes
    finally:
        proc.kill()
    assert proc.returncode == 3 and b"closed while paused" in err
    dec = tm.Decoder()
    recs = dec.records(dec.feed(out))
    assert recs[-1]["type"] == "ack" and recs[-1]["command"] == "pause"  # and nothing after it


# ============================================================================== CLI


class Bridge(threading.Thread):
    """A board on a TCP port: each connection runs the host training program, its output to the
    socket and the socket's bytes to its command input (as QEMU serves a UART)."""

    def __init__(self, exe: Path):
        super().__init__(daemon=True)
        self.exe = exe
        self.listener = Peer._listen(0)
        self.port = self.listener.getsockname()[1]
        self.returncodes: list[int] = []

    def run(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        proc = subprocess.Popen(
            [str(self.exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )

        def to_program():
            try:
                while data := conn.recv(4096):
                    proc.stdin.write(data)
                    proc.stdin.flush()
            except OSError:
                pass
            try:  # the host went away: no more commands; a run not about to end is stopped
                proc.stdin.close()
                proc.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()

        threading.Thread(target=to_program, daemon=True).start()
        try:
            while data := proc.stdout.read1(65536):
                conn.sendall(data)
        except OSError:
            pass
        self.returncodes.append(proc.wait())
        conn.close()
        self.listener.close()


@pytest.mark.cc
def test_cli_monitor_and_export_over_a_socket(tmp_path, program):
    from zoflash.cli import main

    bridge = Bridge(program.exe)
    bridge.start()
    out = tmp_path / "trained.tflite"
    assert (
        main(
            [
                "-q",
                "export",
                "--port",
                f"socket://127.0.0.1:{bridge.port}",
                "--model",
                str(DIGITS),
                "--out",
                str(out),
                "--save-weights",
                str(tmp_path / "dumped.weights.npz"),
            ]
        )
        == 0
    )
    bridge.join(20)
    assert out.exists() and out.stat().st_size == DIGITS.stat().st_size
    assert load_weights(tmp_path / "dumped.weights.npz").model_sha256 == program.prep.sha256

    bridge = Bridge(program.exe)
    bridge.start()
    log = tmp_path / "mon.jsonl"
    assert (
        main(
            [
                "-q",
                "monitor",
                "--port",
                f"socket://127.0.0.1:{bridge.port}",
                "--log",
                str(log),
                "--csv",
                str(tmp_path / "mon.csv"),
                "--model",
                str(DIGITS),
                "--timeout",
                "60",
            ]
        )
        == 0
    )
    bridge.join(20)
    assert bridge.returncodes == [0]
    assert comparable(read_log(log)) == logged(program.records)
    w = load_weights(tmp_path / "mon.weights.npz")
    final = weights_of(program.records)
    for i, values in w.tensors.items():
        assert values.tobytes() == final[(i, 0)]
    assert json.loads(log.read_text().splitlines()[-1])["type"] == "done"


def test_cli_export_needs_one_source(tmp_path):
    from zoflash.cli import main

    assert main(["export", "--model", str(DIGITS), "--out", str(tmp_path / "x.tflite")]) == 2
    assert (
        main(
            [
                "export",
                "--model",
                str(DIGITS),
                "--out",
                str(tmp_path / "x.tflite"),
                "--weights",
                "w.npz",
                "--port",
                "loop://",
            ]
        )
        == 2
    )


@pytest.mark.cc
def test_keys_typed_in_the_terminal_send_commands(tmp_path, program):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    said = []
    mon, port = program_monitor(program.exe, tmp_path, queued=("pause",))
    with open(slave, "rb", buffering=0) as tty_in, KeyCommands(tty_in, said.append) as keys:
        assert keys.active
        os.write(master, b"s?x")  # status, an unknown key, stop (not yet: x asks to be pressed again)
        mon.run(timeout=1.0, on_tick=keys)
        assert mon.done is None and said == ["x: press x again within 3 s to stop the device (its run ends)"]
        os.write(master, b"dx")  # dump (no model given: kept raw), x again: stop
        mon.run(timeout=30, on_tick=keys)
    os.close(master)
    res = mon.close()
    port.close()
    assert res.done["reason"] == "command" and res.done["steps"] == 0
    acks = [(a["command"], a["result"]) for a in res.records if a["type"] == "ack"]
    assert acks == [("pause", "ok"), ("status", "ok"), ("dump", "ok"), ("stop", "ok")]
    raw = tmp_path / "run.dump.raw-weights.npz"
    assert said[1] == f"dump: raw weights saved in {raw} (zoflash export --weights {raw} --model M.tflite)"
    # the raw dump is whole: export reads it for the model the device trains
    w = load_weights(weights_from_raw(raw, DIGITS, tmp_path / "from_raw.weights.npz"))
    assert w.model_sha256 == program.prep.sha256 and w.tensors


# ============================================================================== the emulated Cortex-M55


@contextlib.contextmanager
def qemu_serial(elf: Path):
    """The firmware under QEMU (mps3-an547) with UART0 on a free local TCP port, as `zoflash flash`
    starts it: yields the pyserial URL; the emulator must then exit cleanly (the firmware's exit 0)."""
    with socket.socket() as s:  # a free local port for QEMU's server socket
        s.bind(("127.0.0.1", 0))
        tcp = s.getsockname()[1]
    qemu = subprocess.Popen(
        [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-nographic",
            "-semihosting",
            "-icount",
            "shift=0",
            "-monitor",
            "none",
            "-serial",
            f"tcp:127.0.0.1:{tcp},server=on,wait=on,nodelay=on",
            "-kernel",
            str(elf),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"socket://127.0.0.1:{tcp}"
        assert qemu.wait(timeout=60) == 0
    finally:
        qemu.kill()
        qemu.wait()


@pytest.mark.cross
@pytest.mark.qemu
def test_commands_on_the_emulated_m55(tmp_path, small_data):
    """The firmware under QEMU (mps3-an547, UART0 on a TCP port, as `zoflash flash` starts it):
    paused, queried, dumped and resumed over the serial link, it still sends the records of
    the host simulation, and its dump is the host's weights at that step."""
    from zoflash import api
    from zoflash.workflows.simulate import simulate

    # Long enough not to end before the pause lands. A constant lr (no decay over the run's tail),
    # so that the run stopped at step k below follows the same trajectory up to k; the pause comes
    # after the lr calibration (8 steps at lr 0), so the dump holds trained weights.
    options = dict(steps=400, eval_every=100, batch=4, lr_decay="none")
    built = api.build(DIGITS, "mps3-an547", tmp_path / "fw", data_path=small_data, options=make_options(**options))
    with qemu_serial(built.outputs[0]) as url:
        mon = Monitor(url, log_path=tmp_path / "qemu.jsonl")
        mon.connect(timeout=20)
        wait_step(mon, 40)
        assert mon.pause()["result"] == "ok"
        st = mon.status()
        assert st["paused"] and 40 <= st["step"] < 400
        dump = mon.dump()
        assert mon.resume()["result"] == "ok"
        mon.run(timeout=120)
        res = mon.close()
    assert res.done["reason"] == "steps" and res.stats["crc_errors"] == res.stats["seq_gaps"] == 0
    host = simulate(DIGITS, small_data, make_options(**options), tmp_path / "host.jsonl", engine="c", plot=False)
    assert logged(res.records) == logged(host.records)
    assert weights_of(res.records) == weights_of(host.records)
    # The dump at step k is the host's end of run after k steps (the same run, stopped there).
    at_k = simulate(DIGITS, small_data, make_options(**{**options, "steps": st["step"]}), None, engine="c", plot=False)
    assert {key: dump.get(*key, np.uint8).tobytes() for key in dump.keys()} == weights_of(at_k.records)


# ============================================================================== stopping when the run cannot go on
# A fault reported by the device, the emulator ended, a port that stays away longer than
# --reconnect-timeout: monitor and run stop at once with a clear message and a non-zero exit.
# Ctrl-C asks the device for its weights first; lost weights frames are reported.

FAULT = b"\nzoflash: fault 003 (HardFault) pc=0000abcd lr=ffffffff cfsr=00020000 hfsr=40000000\n"


def test_a_fault_line_stops_the_monitor_at_once(tmp_path, stream):
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "run.jsonl")
    mon.connect()
    write_later(port, b"".join(stream[:6]) + FAULT)  # no done follows: without the fault line it would wait
    t0 = time.monotonic()
    mon.run(timeout=20)
    res = mon.close()
    assert time.monotonic() - t0 < 5 and not res.timed_out and res.done is None
    assert res.faulted and "fault 003 (HardFault) pc=0000abcd" in res.stopped


class DyingPort:
    """A port that delivers `data`, then breaks like a socket whose peer has gone."""

    def __init__(self, data: bytes):
        self.data = data
        self.timeout = 0.05

    def read(self, n):
        if not self.data:
            raise serial.SerialException("socket disconnected")
        out, self.data = self.data[:n], self.data[n:]
        return out

    def write(self, data):
        return len(data)

    def close(self):
        pass


def dying_opener(data: bytes):
    opened = []

    def opener():
        if opened:
            raise ConnectionRefusedError("connection refused")
        opened.append(1)
        return DyingPort(data)

    return opener


def test_an_ended_emulator_stops_the_monitor(tmp_path, stream):
    mon = Monitor(
        opener=dying_opener(b"".join(stream[:6])),
        log_path=tmp_path / "run.jsonl",
        ended=lambda: "the emulator has ended (exited with status 3)",
    )
    mon.connect()
    t0 = time.monotonic()
    mon.run(timeout=30)
    res = mon.close()
    assert time.monotonic() - t0 < 5 and not res.timed_out and not res.faulted
    assert res.stopped == "the emulator has ended (exited with status 3)"
    assert len([r for r in res.records if r["type"] == "step"]) > 0  # what came before is kept


def test_a_lost_port_is_retried_for_the_reconnect_timeout(tmp_path, stream):
    mon = Monitor(opener=dying_opener(b"".join(stream[:6])), reconnect_timeout=0.6, max_backoff=0.1)
    mon.connect()
    t0 = time.monotonic()
    mon.run(timeout=30)
    res = mon.close()
    assert 0.5 < time.monotonic() - t0 < 5 and not res.timed_out
    assert "did not come back within 0.6 s (--reconnect-timeout)" in res.stopped
    assert "connection refused" in res.stopped


def test_emulator_ended_reads_the_supervisors_note(tmp_path):
    """emulator_ended: None while the process of the state file runs, then how it ended."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    argv: list[str] = []
    end = time.monotonic() + 10
    while "time.sleep(30)" not in " ".join(argv) and time.monotonic() < end:  # until the child has exec'd
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
        time.sleep(0.01)
    log = tmp_path / ".zoflash-qemu.log"
    log.write_text(
        "QEMU waiting for connection on: disconnected:tcp:127.0.0.1:4444,server=on\n"
        "qemu: fatal: Lockup: can't escalate 3 to HardFault\n"
    )
    (tmp_path / ".zoflash-qemu.json").write_text(json.dumps({"pid": proc.pid, "command": argv, "log": str(log)}))
    ended = emulator_ended(tmp_path)
    assert ended() is None
    proc.kill()
    proc.wait()
    with log.open("a") as f:
        f.write("[zoflash] qemu ended by signal 9\n")
    assert ended() == (
        f"the emulator has ended (ended by signal 9): qemu: fatal: Lockup: can't escalate 3 to "
        f"HardFault (output in {log})"
    )


def test_lost_weights_frames_are_reported(tmp_path, stream):
    """The done record arrives, but one weights frame was damaged: no weights file, and the
    reason says the frame was lost."""
    frames = list(stream)
    k = next(i for i, f in enumerate(frames) if tm.TYPE_NAMES[tm.Decoder().feed(f)[0].type] == "weights")
    damaged = bytearray(frames[k])
    damaged[-3] ^= 0xFF  # the CRC no longer matches
    frames[k] = bytes(damaged)
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "run.jsonl", model_path=DIGITS)
    mon.connect()
    write_later(port, b"".join(frames))
    mon.run(timeout=20)
    res = mon.close()
    assert res.done is not None and res.weights_path is None
    assert "damaged telemetry frame(s) were dropped" in res.weights_error
    assert not (tmp_path / "run.weights.npz").exists()


@pytest.mark.cc
def test_ctrl_c_asks_the_device_for_its_weights(tmp_path, program, capsys):
    bridge = Bridge(program.exe)
    bridge.start()
    log = tmp_path / "mon.jsonl"

    def interrupt_after_a_step():
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if log.exists() and '"type": "step"' in log.read_text():
                _thread.interrupt_main()
                return
            time.sleep(0.02)

    threading.Thread(target=interrupt_after_a_step, daemon=True).start()
    from zoflash.cli import main

    rc = main(
        [
            "monitor",
            "--port",
            f"socket://127.0.0.1:{bridge.port}",
            "--log",
            str(log),
            "--model",
            str(DIGITS),
            "--timeout",
            "60",
        ]
    )
    out = capsys.readouterr().out
    bridge.join(20)
    assert rc == 130, out  # the run did not end by itself
    assert "Ctrl-C: asking the device for its weights" in out and "stopped (Ctrl-C)" in out
    w = load_weights(tmp_path / "mon.weights.npz")
    assert w.model_sha256 == program.prep.sha256 and w.tensors
    steps = [json.loads(line) for line in log.read_text().splitlines() if '"type": "step"' in line]
    assert 0 < len(steps) < 3000  # the run was cut short


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_run_stops_when_the_emulator_is_killed(tmp_path, capsys):
    """`zoflash run` on the emulated M55; QEMU killed in the middle of training: the run stops
    at once (no endless reconnection) with exit status 1, the log kept."""
    bundle, log = tmp_path / "bundle", tmp_path / "m55.jsonl"
    state = bundle / ".zoflash-qemu.json"

    def kill_qemu_after_a_step():
        end = time.monotonic() + 240
        while time.monotonic() < end:
            if state.exists() and log.exists() and '"type": "step"' in log.read_text():
                os.kill(json.loads(state.read_text())["pid"], signal.SIGKILL)
                return
            time.sleep(0.05)

    threading.Thread(target=kill_qemu_after_a_step, daemon=True).start()
    t0 = time.monotonic()
    from zoflash.cli import main

    rc = main(
        [
            "run",
            "--board",
            "mps3-an547",
            "--model",
            str(DIGITS),
            "--data",
            str(FIXTURES / "digits_shift.npz"),
            "--steps",
            "100000",
            "--out",
            str(bundle),
            "--log",
            str(log),
            "--timeout",
            "300",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "stopped: the emulator has ended (ended by signal 9)" in out
    assert time.monotonic() - t0 < 200
    assert any(json.loads(line)["type"] == "step" for line in log.read_text().splitlines())
    assert not state.exists()


@pytest.mark.cc
def test_best_is_start_is_read_from_the_update_log(tmp_path):
    """A run whose snapshot never moved (no SNAPSHOT mark in its update log) has the start as its
    best values; one that improved, or a segment resumed from a checkpoint, does not."""
    from zoflash.monitor.serial_monitor import best_is_start
    from zoflash.monitor.session import read_log
    from zoflash.training.options import make_options
    from zoflash.workflows.simulate import simulate

    data = FIXTURES / "digits_shift.npz"
    for lr, expected in ((1e-9, True), (None, False)):
        log = tmp_path / f"lr{lr}.jsonl"
        opts = make_options(None, train="last:1", steps=120, lr=lr, eval_every=20)
        simulate(FIXTURES / "digits_cnn.tflite", data, opts, log_path=log, plot=False, say=lambda _: None)
        records = read_log(log)
        assert best_is_start(records) is expected
        resumed = [r for r in records if r["type"] != "updates"] + [{"type": "updates", "step": 40, "steps": 0}]
        assert best_is_start(resumed) is False
