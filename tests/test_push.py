"""`zoflash push`: a run's update log sent to a second device, which applies it with its own update
maths and reports the CRC-32 of its trainable tensors; and the replay of resumed runs.

- The chunking (every chunk fits the device's receive ring and decodes back to the same entries)
  and the stop-and-wait exchange against a fake device on a slow link that loses acks: every
  entry arrives exactly once, in order, never more than one chunk in flight.
- The host training program as the second device: the pushed weights are the replay's, bit for
  bit (CRC and dump); the refusals (another model, a gap, a tampered log, a device that trained).
- The emulated Cortex-M55 under QEMU as the second device.
- A run killed and resumed from its stored checkpoint replays bit for bit from its one log.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FIXTURES, need_program

from zoflash.cli.main import main
from zoflash.errors import DataError, ZoflashError
from zoflash.monitor import telemetry as tm
from zoflash.monitor.serial_monitor import Monitor, PortGone
from zoflash.monitor.serialport import ProgramPort
from zoflash.spec import wire
from zoflash.targets.host_build import run_make
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows import push as push_flow
from zoflash.workflows.replay import rebuild, replay
from zoflash.workflows.simulate import simulate
from zoflash.workflows.training import compile_for_training, training_bundle

DIGITS = FIXTURES / "digits_cnn.tflite"
MLP = FIXTURES / "mlp.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
OPTIONS = dict(steps=150, eval_every=25, batch=4, scheduler="plateau", q=8)  # q = 8: most steps packed


def plain(entries: list[wire.UpdateEntry]) -> list[tuple]:
    """The entries without their framing (UPDATE_Q says where a frame restates q)."""
    return [(e.step, e.flags & ~(wire.UPDATE_Q | wire.UPDATE_PACKED), e.coefficients) for e in entries]


def random_entries(rng: random.Random, n: int) -> list[wire.UpdateEntry]:
    out = []
    for step in range(n):
        flags = rng.choice([0, wire.UPDATE_APPLIED, wire.UPDATE_APPLIED | wire.UPDATE_SNAPSHOT])
        flags |= wire.UPDATE_RESTORE if rng.random() < 0.05 else 0
        q = rng.choice([1, 1, 2, 8, 64, 200])
        spread = rng.choice([0, 2, 31])  # exponents within 2 of each other: packed; any: mostly raw
        top = rng.randrange(spread, 32)
        c16 = [rng.getrandbits(1) << 15 | (top - rng.randint(0, spread)) << 10 | rng.getrandbits(10) for _ in range(q)]
        coefficients = tuple(c16) if flags & wire.UPDATE_APPLIED else ()
        out.append(wire.UpdateEntry(step, flags, coefficients))
    return out


def test_chunks_fit_the_receive_ring_and_decode_back():
    rng = random.Random(5)
    for _ in range(20):
        entries = random_entries(rng, rng.randrange(1, 400))
        chunks = push_flow.pack_entries(entries)
        back = []
        for first, steps, data in chunks:
            size = push_flow.FRAME_BYTES + wire.COMMAND_STRUCTS["push"].size + len(data)
            assert size <= wire.PUSH_WINDOW
            back += wire.parse_updates(first, steps, data)  # the device's format: the updates frame's tail
        assert plain(back) == plain(entries)
    with pytest.raises(DataError, match="more than a push chunk"):
        alternating = tuple((0x7BFF, 0x0001)[i % 2] for i in range(255))  # exponents 30 and 0: raw is shorter
        push_flow.pack_entries([wire.UpdateEntry(0, wire.UPDATE_APPLIED, alternating)])


# ---------------------------------------------------------------------------- a fake device


class FakeDevice:
    """A device on a slow link: it takes command frames, answers pause, status and push like the
    firmware (acks, the crc frame), loses the first ack of every `lose_every`-th chunk, and records
    what it applied.  It fails the test if a second command arrives before the first is answered."""

    returns_early = True

    def __init__(self, base_crc: int, final_crc: int, model_prefix: str, lose_every: int = 3, delay: float = 0.002):
        self.base_crc, self.final_crc, self.prefix = base_crc, final_crc, bytes.fromhex(model_prefix)
        self.lose_every, self.delay = lose_every, delay
        self.enc, self.dec = wire.Encoder(), tm.Decoder()
        self.out = bytearray()
        self.entries: list[wire.UpdateEntry] = []
        self.taken, self.repeats, self.chunks = None, 0, 0
        self.timeout = 0.01

    def write(self, data: bytes) -> int:
        frames = [f for f in self.dec.feed(data) if isinstance(f, tm.Frame)]
        assert len(frames) <= 1 and not self.out, "a command was sent before the last one was answered"
        for f in frames:
            time.sleep(self.delay)  # the slow link
            self.answer(f)
        return len(data)

    def ack(self, f, result: int = 0) -> None:
        self.out += self.enc.frame("ack", dict(step=0, command_seq=f.seq, command=f.type, result=result))

    def crc(self, value: int) -> None:
        self.out += self.enc.frame("crc", dict(step=0, crc32=value, bytes=0, pushed=len(self.entries)))

    def answer(self, f) -> None:
        name = tm.COMMAND_NAMES[f.type]
        if name == "status":
            fields = {n: 0 for n, _ in wire.LAYOUTS["status"][1]}
            self.out += self.enc.frame("status", {**fields, "paused": 1, "model_sha256": self.prefix})
        if name != "push":
            self.ack(f)
            return
        head = wire.COMMAND_STRUCTS["push"]
        step, steps, _eps, _rounding, _density, last, _seed, _params = head.unpack_from(f.payload)
        if steps and self.taken == (step, steps):  # the host sent it again: its ack was lost
            self.repeats += 1
            if last:
                self.crc(self.final_crc)
            self.ack(f, 1)
            return
        assert step == (self.entries[-1].step + 1 if self.entries else 0) or not steps
        self.entries += wire.parse_updates(step, steps, f.payload[head.size :])
        if steps:
            self.taken, self.chunks = (step, steps), self.chunks + 1
        if last:
            self.crc(self.final_crc if steps else self.base_crc)
        if steps and self.chunks % self.lose_every == 0 and self.repeats < self.chunks // self.lose_every:
            return  # this ack is lost on the way
        self.ack(f)

    def read(self, n: int) -> bytes:
        if not self.out:
            time.sleep(self.timeout)
        data, self.out = bytes(self.out[:n]), self.out[n:]
        return data

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """Device A's run: the C simulation (the firmware's C on the host), a log with its updates."""
    need_program("cc")
    need_program("make")
    d = np.load(SHIFT)
    tmp = tmp_path_factory.mktemp("push")
    data = tmp / "small.npz"
    np.savez(
        data, x_train=d["x_train"][:400], y_train=d["y_train"][:400], x_test=d["x_test"][:60], y_test=d["y_test"][:60]
    )
    run = simulate(DIGITS, data, make_options(**OPTIONS), tmp / "a.jsonl", engine="c", plot=False)
    return SimpleNamespace(data=data, log=run.log_path, weights=run.weights_path, tmp=tmp, run=run)


def fake_monitor(device: FakeDevice) -> Monitor:
    mon = Monitor(opener=lambda: device)
    mon.connect()
    return mon


def test_push_waits_for_every_ack_and_resends_lost_ones(run_a):
    """Stop-and-wait on a slow link that loses acks: every entry arrives once, in order."""
    rebuilt = rebuild(DIGITS, run_a.log)
    device = FakeDevice(rebuilt.base_crc, rebuilt.crc, rebuilt.hello["model_sha256_prefix"], lose_every=2)
    said = []
    result = push_flow.push(
        fake_monitor(device),
        "fake",
        rebuilt,
        say=said.append,
        chunk_tail=64,
        chunk_timeout=0.6,
    )
    assert plain(device.entries) == plain(rebuilt.entries) and device.repeats >= 1
    assert result.chunks == device.chunks > 3 and result.crc == rebuilt.crc
    n = len(rebuilt.entries)
    assert said[-1].startswith(f"push    {n}/{n} steps")
    # a device that ends with other weights: exit status 1
    device = FakeDevice(rebuilt.base_crc, rebuilt.crc ^ 1, rebuilt.hello["model_sha256_prefix"])
    with pytest.raises(push_flow.PushMismatch, match="differ from the replay") as err:
        push_flow.push(fake_monitor(device), "fake", rebuild(DIGITS, run_a.log), say=said.append)
    assert err.value.exit_code == 1


def test_push_refuses_a_device_whose_weights_are_not_the_base_models(run_a):
    rebuilt = rebuild(DIGITS, run_a.log)
    device = FakeDevice(rebuilt.base_crc ^ 1, rebuilt.crc, rebuilt.hello["model_sha256_prefix"])
    with pytest.raises(ZoflashError, match="has trained .* Reset it and push before it trains"):
        push_flow.push(fake_monitor(device), "fake", rebuild(DIGITS, run_a.log), say=lambda s: None)
    assert device.entries == []


# ---------------------------------------------------------------------------- the host training program


def build_program(model: Path, data: Path, tmp: Path, **options) -> Path:
    prep = compile_for_training(model, data, make_options(**{**OPTIONS, **options}))
    bundle = training_bundle(prep, "host", tmp / "bundle")
    run_make(bundle, f"build/{bundle.prefix}_train")
    return bundle.path / "build" / f"{bundle.prefix}_train"


@pytest.fixture(scope="module")
def device_b(run_a):
    return build_program(DIGITS, run_a.data, run_a.tmp / "b")


def program_monitor(exe: Path, paused: bool = True) -> tuple[Monitor, ProgramPort]:
    """The program as a device, paused at its first step (the pause waits on its input)."""
    port = ProgramPort([exe], preload=wire.encode_command("pause", 1000) if paused else b"")
    opened = []

    def opener():
        if opened:
            raise PortGone("the program ended")
        opened.append(port)
        return port

    mon = Monitor(opener=opener)
    mon.connect()
    return mon, port


@pytest.mark.cc
def test_pushed_program_ends_with_the_replayed_weights(run_a, device_b, tmp_path):
    flags = [e.flags for e in rebuild(DIGITS, run_a.log).entries if e.flags & wire.UPDATE_APPLIED]
    assert 0 < sum(bool(f & wire.UPDATE_PACKED) for f in flags) < len(flags)  # the device decodes both forms
    mon, port = program_monitor(device_b)
    try:
        result = push_flow.push(mon, "program", rebuild(DIGITS, run_a.log), say=lambda s: None)
        dump = mon.dump()
    finally:
        mon.close()
        port.close()
    replay(DIGITS, run_a.log, tmp_path / "replayed.npz")
    want = load_weights(tmp_path / "replayed.npz")
    plan = rebuild(DIGITS, run_a.log).plan
    for t in plan.tensors:
        dtype = np.int32 if t.is_bias else np.int8
        assert dump.get(t.index, 0, dtype).tobytes() == want.tensors[t.index].astype(dtype).tobytes()
        assert dump.get(t.index, 2, dtype).tobytes() == want.best[t.index].astype(dtype).tobytes()
        if not t.is_bias:
            assert dump.get(t.index, 1, np.int8).tobytes() == want.residuals[t.index].tobytes()
    assert result.steps == OPTIONS["steps"] and result.crc == rebuild(DIGITS, run_a.log).device_crc


@pytest.mark.cc
def test_cli_push_refusals(run_a, device_b, tmp_path, capsys):
    records = [json.loads(line) for line in run_a.log.read_text().splitlines()]
    # a gap: one updates record lost
    updates = [k for k, r in enumerate(records) if r["type"] == "updates"]
    assert len(updates) >= 2
    gap = tmp_path / "gap.jsonl"
    gap.write_text("".join(json.dumps(r) + "\n" for k, r in enumerate(records) if k != updates[0]))
    # tampered: one coefficient changed (the device's own crc at the end no longer matches)
    tampered = [dict(r) for r in records]
    frame = tampered[updates[-1]]  # the last frame: no restore to an earlier snapshot undoes it
    entries = wire.parse_updates(frame["step"], frame["steps"], bytes.fromhex(frame["entries"]))
    last = max(k for k, e in enumerate(entries) if e.coefficients)
    largest = (0x7BFF,) * len(entries[last].coefficients)  # binary16's largest: the weights move for sure
    entries[last] = entries[last]._replace(coefficients=largest)
    (chunk,) = push_flow.pack_entries(entries, wire.UPDATES_CHUNK)  # re-encoded: it still decodes
    frame["entries"] = chunk[2].hex()
    bad = tmp_path / "tampered.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in tampered))
    for log, model, message in (
        (gap, DIGITS, "misses the updates of steps 0.."),
        (bad, DIGITS, "the log does not hold the run that made them"),
        (run_a.log, MLP, "is the log of a run of the model"),
    ):
        assert main(["push", "--port", "loop://", "--log", str(log), "--model", str(model)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.cc
def test_push_refuses_another_model_and_a_device_that_trained(run_a, tmp_path):
    d = np.load(SHIFT)
    flat = tmp_path / "flat.npz"
    n = 400
    np.savez(
        flat,
        x_train=d["x_train"][:n].reshape(n, -1),
        y_train=d["y_train"][:n],
        x_test=d["x_test"][:60].reshape(60, -1),
        y_test=d["y_test"][:60],
    )
    other = build_program(MLP, flat, tmp_path / "mlp")
    mon, port = program_monitor(other)
    try:
        with pytest.raises(ZoflashError, match="trains the model .* push to a device running the same base model"):
            push_flow.push(mon, "program", rebuild(DIGITS, run_a.log), say=lambda s: None)
    finally:
        mon.close()
        port.close()
    # a device that trains: it is paused, found trained, resumed
    exe = build_program(DIGITS, run_a.data, tmp_path / "long", steps=3000)
    mon, port = program_monitor(exe, paused=False)
    try:
        end = time.monotonic() + 30
        while not any(r["type"] == "step" and r["step"] >= 20 for r in mon.session.result.records):
            assert time.monotonic() < end
            mon.pump()
        with pytest.raises(ZoflashError, match=r"has trained \(step \d+ of its own run\).*it was resumed"):
            push_flow.push(mon, "program", rebuild(DIGITS, run_a.log), say=lambda s: None)
    finally:
        mon.close()
        port.close()


# ---------------------------------------------------------------------------- resumed runs


@pytest.mark.cc
def test_a_killed_and_resumed_run_replays_bit_for_bit(run_a, tmp_path):
    """The host program killed after a checkpoint and started again: it resumes from its stored
    checkpoint; its one log (both segments) replays to the weights it ended with."""
    exe = build_program(DIGITS, run_a.data, tmp_path / "ck", steps=200, checkpoint_every=40)
    env = {**os.environ, "ZOFLASH_CHECKPOINT_FILE": str(tmp_path / "stored.ckpt")}
    kill_at = random.Random().randrange(45, 150)
    proc = subprocess.Popen([str(exe)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    raw = b""
    dec, recs = tm.Decoder(), []
    while not any(r["type"] == "step" and r["step"] >= kill_at for r in recs):
        chunk = proc.stdout.read1(4096)
        raw += chunk
        recs += dec.records(dec.feed(chunk))
    proc.kill()
    proc.wait()
    raw += proc.stdout.read()  # what it sent before the kill: all of it reaches the log (as over a link)
    proc.stdout.close()
    raw += subprocess.run([str(exe)], stdin=subprocess.DEVNULL, capture_output=True, env=env, check=True).stdout
    dec = tm.Decoder()
    records = dec.records(dec.feed(raw) + dec.flush())
    log = tmp_path / "resumed.jsonl"
    log.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "data"}) + "\n" for r in records))
    assert sum(r["type"] == "hello" for r in records) == 2
    resumed = [r for r in records if r["type"] == "updates" and r["steps"] == 0]
    assert len(resumed) == 1 and resumed[0]["step"] % 40 == 0 and resumed[0]["step"] >= 40
    result = replay(DIGITS, log, tmp_path / "replayed.npz")
    assert result.device_crc is not None and "weights identical to the device's" in result.summary()
    asm = tm.WeightsAssembler()
    last_hello = max(k for k, r in enumerate(records) if r["type"] == "hello")
    for r in records[last_hello:]:
        if r["type"] == "weights":
            asm.add(r)
    want = load_weights(tmp_path / "replayed.npz")
    for t in rebuild(DIGITS, log).plan.tensors:
        dtype = np.int32 if t.is_bias else np.int8
        assert asm.get(t.index, 0, dtype).tobytes() == want.tensors[t.index].astype(dtype).tobytes()
        assert asm.get(t.index, 2, dtype).tobytes() == want.best[t.index].astype(dtype).tobytes()
    assert result.steps == 200 == records[-1]["steps"]
    # the second segment alone lacks the steps before its checkpoint: refused, saying why; given
    # after the first segment's log (two logs, as a monitor --resume writes them) it replays
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    first.write_text("".join(lines[:last_hello]))
    second.write_text("".join(lines[last_hello:]))
    with pytest.raises(DataError, match=r"resumes from a checkpoint of step \d+ .* give that run's log first"):
        replay(DIGITS, second, tmp_path / "alone.npz")
    out = tmp_path / "two.npz"
    assert main(["replay", "--model", str(DIGITS), "--log", str(first), "--log", str(second), "--out", str(out)]) == 0
    two = load_weights(out)
    assert all(two.tensors[i].tobytes() == want.tensors[i].tobytes() for i in want.tensors)


@pytest.mark.cc
def test_pushed_weights_are_checkpointed_and_survive_a_reset(run_a, tmp_path):
    """A firmware with checkpoints stores the pushed state at once: killed and started again, it
    resumes with the pushed weights (its crc frame after the resume says so, and its dump)."""
    exe = build_program(DIGITS, run_a.data, tmp_path / "ck", checkpoint_every=40)
    stored = tmp_path / "stored.ckpt"
    os.environ["ZOFLASH_CHECKPOINT_FILE"] = str(stored)  # the program inherits it
    try:
        rebuilt = rebuild(DIGITS, run_a.log)
        mon, port = program_monitor(exe)
        try:
            push_flow.push(mon, "program", rebuilt, say=lambda s: None)
        finally:
            mon.close()
            port.close()
        assert stored.exists()
        mon, port = program_monitor(exe)  # the reset: it resumes from the stored checkpoint, then pauses
        try:
            mon.status()
            dump = mon.dump()
        finally:
            res = mon.close()
            port.close()
    finally:
        del os.environ["ZOFLASH_CHECKPOINT_FILE"]
    assert {"type": "log", "text": "resumed from the stored checkpoint"} in res.records
    crc = [r for r in res.records if r["type"] == "crc"]
    assert len(crc) == 1 and crc[0]["crc32"] == rebuilt.crc and crc[0]["step"] == 0
    for t, v in zip(rebuilt.plan.tensors, rebuilt.values):
        dtype = np.int32 if t.is_bias else np.int8
        assert dump.get(t.index, 0, dtype).tobytes() == v.astype(dtype).tobytes()


# ---------------------------------------------------------------------------- the emulated Cortex-M55


@pytest.mark.cross
@pytest.mark.qemu
def test_push_to_the_emulated_m55(run_a, tmp_path):
    """Device A's run (the host simulation of the same firmware) pushed to a second device under
    QEMU that boots the same bundle: equal CRC, and its dump is the replay's weights."""
    from test_monitor import qemu_serial

    from zoflash import api

    built = api.build(DIGITS, "mps3-an547", tmp_path / "fw", data_path=run_a.data, options=make_options(**OPTIONS))
    replay(DIGITS, run_a.log, tmp_path / "replayed.npz")
    want = load_weights(tmp_path / "replayed.npz")
    said: list[str] = []
    rebuilt = rebuild(DIGITS, run_a.log)  # before the port opens: the emulated device starts then
    with qemu_serial(built.outputs[0]) as url:
        mon = Monitor(url)
        mon.connect(timeout=20)
        try:
            result = push_flow.push(mon, url, rebuilt, say=said.append)
            dump = mon.dump(timeout=20)
            mon.stop(wait=True, timeout=60)  # the run ends: QEMU exits 0
        finally:
            mon.close()
    assert result.crc == rebuilt.device_crc
    for t in rebuilt.plan.tensors:
        dtype = np.int32 if t.is_bias else np.int8
        assert dump.get(t.index, 0, dtype).tobytes() == want.tensors[t.index].astype(dtype).tobytes()
