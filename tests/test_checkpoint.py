"""Checkpoint and resume: the device sends checkpoints (telemetry type 11), the
monitor keeps the latest valid one, a restart resumes from it (restore commands, type 22), and
every record after the resume point and the final weights equal an uninterrupted run's, bit for
bit.  A corrupt or mismatched checkpoint is refused by the host and, defensively, by the device."""

from __future__ import annotations

import random
import struct
import subprocess
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import test_monitor as monitor_tests
from conftest import FIXTURES, need_program, need_public_models

from zoflash.monitor import telemetry as tm
from zoflash.monitor.checkpoint import (
    HEADER,
    Checkpoint,
    CheckpointAssembler,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from zoflash.monitor.serial_monitor import Monitor
from zoflash.monitor.session import comparable
from zoflash.spec import wire as proto
from zoflash.targets.host_build import run_make
from zoflash.training.options import make_options
from zoflash.workflows.training import compile_for_training, training_bundle

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
EVERY = 10


def image(step=7, body=b"state and tensors", model=b"\x01" * 8, options=b"\x02" * 8, crc=None) -> bytes:
    """A checkpoint image built from the header layout in docs/training.md."""
    crc = zlib.crc32(body) if crc is None else crc
    return struct.pack("<4sHH8s8sIII", b"ZOCK", 1, 4, model, options, step, len(body), crc) + body


# ----------------------------------------------------------------------------- host side, no device


def test_header_and_crc_checks(tmp_path):
    ck = Checkpoint.from_image(image())
    assert (ck.step, ck.model_prefix, ck.options_prefix) == (7, "01" * 8, "02" * 8)
    with pytest.raises(CheckpointError, match="damaged"):
        Checkpoint.from_image(image(crc=1))
    with pytest.raises(CheckpointError, match="cut short"):
        Checkpoint.from_image(image()[:-1])
    with pytest.raises(CheckpointError, match="not a zoflash checkpoint"):
        Checkpoint.from_image(b"ZOCX" + image()[4:])
    with pytest.raises(CheckpointError, match="another model"):
        ck.check_for("03" * 8)
    with pytest.raises(CheckpointError, match="other training options"):
        ck.check_for("01" * 8, "ff" * 32)
    ck.check_for("01" * 8, "02" * 8 + "ab" * 24)
    path = save_checkpoint(tmp_path / "c.npz", ck)
    assert load_checkpoint(path) == ck
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a zoflash checkpoint file"):
        load_checkpoint(tmp_path / "other.npz")


def test_assembler_takes_only_complete_images():
    img = image(body=bytes(range(256)) * 5)
    chunks = [dict(step=7, offset=o, total=len(img), data=img[o : o + 512]) for o in range(0, len(img), 512)]
    asm = CheckpointAssembler()
    assert [asm.add(c) for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert asm.add(chunks[-1]).image == img
    asm = CheckpointAssembler()  # a lost chunk: nothing until the next image starts
    assert all(asm.add(c) is None for c in chunks[:1] + chunks[2:])
    assert [asm.add(c) for c in chunks][-1].image == img


def test_restore_payloads_cover_the_image_and_fit_a_command():
    img = image(body=bytes(3000))
    payloads = Checkpoint.from_image(img).restore_payloads()
    # a frame (12 bytes more) fits the Cortex-M ports' 512-byte receive ring
    assert all(len(p) + 12 <= 512 for p in payloads) and proto.CMD_MAX_PAYLOAD == 1024
    got = b""
    for p in payloads:
        offset, total = struct.unpack_from("<II", p)
        assert offset == len(got) and total == len(img)
        got += p[8:]
    assert got == img
    frame = proto.encode_command("restore", 5, payloads[0])
    dec = tm.Decoder()
    rec = dec.records(dec.feed(frame))
    assert rec == [
        {
            "type": "command",
            "command": "restore",
            "seq": 5,
            "offset": 0,
            "total": len(img),
            "bytes": len(payloads[0]) - 8,
        }
    ]
    with pytest.raises(ValueError, match="exceeds 1024"):
        proto.encode_command("restore", 1, bytes(1025))


# ----------------------------------------------------------------------------- the host training program


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """The host training program with checkpoints every EVERY steps, and its uninterrupted run."""
    need_program("cc")
    need_program("make")
    d = np.load(SHIFT)
    data = tmp_path_factory.mktemp("data") / "small.npz"
    np.savez(
        data, x_train=d["x_train"][:400], y_train=d["y_train"][:400], x_test=d["x_test"][:60], y_test=d["y_test"][:60]
    )
    opts = dict(steps=400, eval_every=25, batch=4, checkpoint_every=EVERY, scheduler="critical")
    return _program(DIGITS, data, opts, tmp_path_factory.mktemp("prog"))


def _program(model, data, opts, where):
    """The host training program of `model` and its uninterrupted run."""
    prep = compile_for_training(model, data, make_options(**opts))
    bundle = training_bundle(prep, "host", where / "bundle")
    run_make(bundle, f"build/{bundle.prefix}_train")
    exe = bundle.path / "build" / f"{bundle.prefix}_train"
    raw = subprocess.run([str(exe)], stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
    dec = tm.Decoder()
    return SimpleNamespace(
        exe=exe,
        records=dec.records(dec.feed(raw)),
        data=data,
        opts=opts,
        options_sha256=bundle.manifest["training"]["options_sha256"],
    )


@pytest.fixture(scope="module")
def stateful_program(tmp_path_factory):
    """mnist_lstm (an LSTM keeping its state across invokes before the trained FC) with
    checkpoints every EVERY steps, and its uninterrupted run."""
    need_program("cc")
    need_program("make")
    model = need_public_models() / "mnist_lstm.tflite"
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (140, 1, 28, 28)).astype(np.int8)
    y = rng.integers(0, 10, 140)
    data = tmp_path_factory.mktemp("lstm_data") / "lstm.npz"
    np.savez(data, x_train=x[:120], y_train=y[:120], x_test=x[120:], y_test=y[120:])
    opts = dict(steps=80, eval_every=20, batch=2, checkpoint_every=EVERY)
    return _program(model, data, opts, tmp_path_factory.mktemp("lstm_prog"))


def program_monitor(exe: Path, tmp_path: Path, name: str, queued: tuple[str, ...] = ()):
    """test_monitor's program monitor, keeping checkpoints in tmp_path/ckpt.npz."""
    return monitor_tests.program_monitor(exe, tmp_path, queued, name, checkpoint_path=tmp_path / "ckpt.npz")


def after(records: list[dict], step: int) -> list[dict]:
    """The comparable records from the step record `step` on."""
    # the update log's frames restart at a resume (its buffer is not in the image): their framing
    # is no record of the training (tests/test_push.py replays resumed runs)
    recs = [r for r in comparable(records) if r["type"] != "updates"]
    first = next(k for k, r in enumerate(recs) if r["type"] == "step" and r["step"] == step)
    return recs[first:]


def killed_and_resumed(program, tmp_path, kill_at: int):
    """Kills the program after step kill_at, restarts it from the monitor's last checkpoint, and
    checks every record from there and the final weights against the uninterrupted run."""
    mon, port = program_monitor(program.exe, tmp_path, "first")
    end = time.monotonic() + 60
    while not any(r["type"] == "step" and r["step"] >= kill_at for r in mon.session.result.records):
        assert time.monotonic() < end and mon.done is None
        mon.pump()
    port.proc.kill()  # the power cut
    port.proc.wait()
    saved = mon.checkpoint
    mon.close()
    # the checkpoint before step kill_at was seen; the program may have run further (what the pipe holds)
    assert saved is not None and saved.step % EVERY == 0 and saved.step >= kill_at // EVERY * EVERY, (kill_at, saved)
    assert load_checkpoint(tmp_path / "ckpt.npz") == saved

    # a restart, paused at its first command poll, then restored; the restore ends the pause
    mon, port = program_monitor(program.exe, tmp_path, "second", queued=("pause",))
    try:
        assert mon.restore(tmp_path / "ckpt.npz", options_sha256=program.options_sha256).step == saved.step
        mon.run(until_done=True, timeout=120)
    finally:
        res = mon.close()
    assert res.done is not None and res.done["reason"] == "steps", (kill_at, saved.step)
    restored = [r for r in res.records if r["type"] == "ack" and r["command"] == "restore"]
    assert restored and all(r["result"] == "ok" for r in restored)
    tail = res.records[res.records.index(restored[-1]) + 1 :]
    assert after(tail, saved.step) == after(program.records, saved.step), (kill_at, saved.step)


@pytest.mark.cc
def test_killed_program_resumes_bit_for_bit(program, tmp_path):
    killed_and_resumed(program, tmp_path, random.Random().randrange(EVERY + 1, 300))  # after the first checkpoint


@pytest.mark.cc
@pytest.mark.zoo
def test_a_stateful_model_resumes_with_its_state(stateful_program, tmp_path):
    """The checkpoint carries the model's state (the LSTM's hidden and cell state, which the
    frozen prefix updates on every sample): the resumed run goes on as the uninterrupted one."""
    killed_and_resumed(stateful_program, tmp_path, 3 * EVERY + 5)


@pytest.mark.cc
def test_device_refuses_a_checkpoint_of_other_options(program, tmp_path):
    mon, port = program_monitor(program.exe, tmp_path, "first")
    end = time.monotonic() + 60
    while mon.checkpoint is None:
        assert time.monotonic() < end
        mon.pump()
    port.proc.kill()
    port.proc.wait()
    good = mon.checkpoint
    mon.close()
    head = list(HEADER.unpack_from(good.image))
    head[4] = bytes(8)  # another build's options hash (the host cannot tell without the bundle)
    forged = Checkpoint.from_image(HEADER.pack(*head) + good.image[HEADER.size :])
    save_checkpoint(tmp_path / "forged.npz", forged)
    mon, port = program_monitor(program.exe, tmp_path, "second", queued=("pause",))
    try:
        with pytest.raises(
            CheckpointError,
            match="refused the checkpoint: checkpoint refused: it was taken by a build with other training options",
        ):
            mon.restore(tmp_path / "forged.npz")
        with pytest.raises(CheckpointError, match="other training options"):  # the host, given the bundle's hash
            mon.restore(tmp_path / "forged.npz", options_sha256=program.options_sha256)
        mon.resume()
        mon.run(until_done=True, timeout=120)  # the refused checkpoint left the run untouched
    finally:
        res = mon.close()
    assert comparable(res.records)[-1] == comparable(program.records)[-1]
    assert [r for r in res.records if r["type"] == "weights"] == [r for r in program.records if r["type"] == "weights"]


@pytest.mark.cc
def test_program_resumes_alone_from_its_stored_checkpoint(program, tmp_path):
    """The host port's persistence hook (ZOFLASH_CHECKPOINT_FILE): killed, started again with the
    same file, the program resumes by itself."""
    import os

    env = {**os.environ, "ZOFLASH_CHECKPOINT_FILE": str(tmp_path / "stored.ckpt")}
    kill_at = random.Random().randrange(EVERY + 1, 300)
    proc = subprocess.Popen([str(program.exe)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    dec, recs = tm.Decoder(), []
    while not any(r["type"] == "step" and r["step"] >= kill_at for r in recs):
        recs += dec.records(dec.feed(proc.stdout.read1(4096)))
    proc.kill()
    proc.wait()
    proc.stdout.close()
    stored = Checkpoint.from_image((tmp_path / "stored.ckpt").read_bytes())  # a complete image, never a torn one
    raw = subprocess.run([str(program.exe)], stdin=subprocess.DEVNULL, capture_output=True, env=env, check=True).stdout
    dec = tm.Decoder()
    again = dec.records(dec.feed(raw))
    assert {"type": "log", "text": "resumed from the stored checkpoint"} in again
    assert after(again, stored.step) == after(program.records, stored.step), (kill_at, stored.step)


# ----------------------------------------------------------------------------- the emulated Cortex-M55


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.slow
def test_killed_emulator_resumes_bit_for_bit(program, tmp_path):
    """QEMU killed at a random step, started again and resumed: the records after the resume
    point equal the uninterrupted host program's (the M55 and the host compute the same bits)."""
    from zoflash.targets.boards import load_board
    from zoflash.targets.firmware_build import build_firmware
    from zoflash.targets.runners import FlashOptions, flash_bundle
    from zoflash.targets.runners.qemu import stop_qemu

    prep = compile_for_training(DIGITS, program.data, make_options(**program.opts))
    bundle = training_bundle(prep, "mps3-an547", tmp_path / "bundle")
    build_firmware(bundle, load_board("mps3-an547"))
    assert bundle.manifest["training"]["options_sha256"] == program.options_sha256
    kill_at = random.Random().randrange(EVERY + 1, 300)
    ckpt = tmp_path / "ckpt.npz"

    def start(name: str) -> Monitor:
        flashed = flash_bundle(bundle.path, None, FlashOptions(timeout=300), say=lambda _: None)
        mon = Monitor(
            flashed.serial_url, log_path=tmp_path / f"{name}.jsonl", checkpoint_path=ckpt, reconnect_timeout=5
        )
        mon.connect(10)
        return mon

    mon = start("first")
    try:
        end = time.monotonic() + 240
        while not any(r["type"] == "step" and r["step"] >= kill_at for r in mon.session.result.records):
            assert time.monotonic() < end and mon.done is None
            mon.pump(time.monotonic() + 1)
        assert stop_qemu(bundle.path, say=lambda _: None)  # the emulator is killed mid-run
    finally:
        mon.close()
    saved = load_checkpoint(ckpt)
    assert saved.step % EVERY == 0 and saved.step >= kill_at // EVERY * EVERY, (kill_at, saved.step)
    mon = start("second")
    try:
        mon.restore(ckpt, options_sha256=bundle.manifest["training"]["options_sha256"])
        mon.run(until_done=True, timeout=240)
    finally:
        res = mon.close()
        stop_qemu(bundle.path, say=lambda _: None)
    restored = [r for r in res.records if r["type"] == "ack" and r["command"] == "restore"]
    tail = res.records[res.records.index(restored[-1]) + 1 :]
    assert res.done is not None and after(tail, saved.step) == after(program.records, saved.step), (kill_at, saved.step)


@pytest.mark.cc
def test_c_checkpoint_frames_equal_python_frames(tmp_path):
    """zo_tm_checkpoint (C) and protocol.encode("checkpoint") write the same bytes."""
    import ctypes

    from ccompile import TRAINING, build_shared
    from test_telemetry import SHIM, take

    lib = build_shared([TRAINING / "zo_telemetry.c", TRAINING / "zo_wire.c"], tmp_path, "zo_tm_ck", {"shim.c": SHIM})
    lib.t_take.restype = ctypes.c_uint32
    lib.t_take.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.zo_tm_checkpoint.argtypes = [ctypes.c_uint32] * 3 + [ctypes.c_char_p, ctypes.c_uint32]
    rng = random.Random(3)
    enc = proto.Encoder()
    for _ in range(20):
        total = rng.randrange(1, 5000)
        offset = rng.randrange(total)
        data = rng.randbytes(min(512, total - offset))
        step = rng.getrandbits(32)
        lib.zo_tm_checkpoint(step, offset, total, data, len(data))
        want = enc.frame("checkpoint", dict(step=step, offset=offset, total=total, data=data))
        assert take(lib) == want
        dec = tm.Decoder()
        assert dec.records(dec.feed(want)) == [
            dict(type="checkpoint", step=step, offset=offset, total=total, data=data)
        ]


def test_cli_refuses_a_damaged_checkpoint(tmp_path, capsys):
    from zoflash.cli import main

    bad = tmp_path / "bad.npz"
    save_checkpoint(bad, Checkpoint.from_image(image()))
    raw = bytearray(np.load(bad)["image"].tobytes())
    raw[-1] ^= 1  # one flipped bit in the body
    np.savez(bad, image=np.frombuffer(bytes(raw), np.uint8), meta=np.load(bad)["meta"])
    assert (
        main(
            ["monitor", "--port", "loop://", "--resume", str(bad), "--log", str(tmp_path / "m.jsonl"), "--timeout", "1"]
        )
        == 2
    )
    assert "is damaged (its CRC does not match)" in capsys.readouterr().err
    assert (
        main(
            [
                "run",
                "--board",
                "mps3-an547",
                "--model",
                str(DIGITS),
                "--data",
                str(SHIFT),
                "--resume",
                str(bad),
                "--log",
                str(tmp_path / "r.jsonl"),
            ]
        )
        == 2
    )  # refused before anything is built
    assert "is damaged" in capsys.readouterr().err and not (tmp_path / "r.jsonl").exists()
