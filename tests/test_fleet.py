"""Fleet learning (`zoflash fleet`): devices train rounds from the global weights, upload their
effective update logs, and apply the merged round, ending bit-identical to the aggregator's replica.

- The messages: uploads and merged rounds decode back to themselves; a flipped byte, a cut, a
  rollback mark or another format is refused, never applied.
- The aggregator's rules: a late, early, duplicate, foreign or stale upload is never merged; the
  merge applies each device's updates with its own seed, at the rule's rate.
- The data split: every device gets samples, Dirichlet and label skews are skewed.
- A simulated fleet of host twins on Dask through a real Mosquitto broker: replicas identical after
  every round, the summary line, logs and plot; and the fault drills (a device dropping out, a
  duplicate, a corrupted and a late upload, a late joiner, a broker restart).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC, zoo_param

from zoflash.compiler.tflite_import import load_tflite, model_sha256
from zoflash.errors import ZoflashError
from zoflash.spec import fleet as fw
from zoflash.spec import wire
from zoflash.training.options import make_options
from zoflash.training.pipeline import trainable_start
from zoflash.workflows.fleet import Aggregator, device_seed, effective_entries
from zoflash.workflows.fleet_simulate import fleet_simulate, parse_drills, split
from zoflash.workflows.replay import apply_update, tensors_crc

DIGITS, DIGITS_DATA = FIXTURES / "digits_cnn.tflite", FIXTURES / "digits_shift.npz"
F16_ONE = 0x3C00


def _entry(step: int, coefficients=(F16_ONE,), flags=wire.UPDATE_APPLIED) -> wire.UpdateEntry:
    return wire.UpdateEntry(step, flags, tuple(coefficients) if flags & wire.UPDATE_APPLIED else ())


def _upload(device="dev-0", rnd=0, base=0, entries=None, prefix=b"\x01" * 8, seed=7, first=3) -> fw.Upload:
    entries = entries if entries is not None else [_entry(first), _entry(first + 1, (0x3800, 0xB800))]
    return fw.Upload(device, rnd, prefix, base, seed, first, tuple(entries))


def test_an_upload_decodes_to_itself_and_a_damaged_one_is_refused():
    up = _upload(entries=[_entry(3), _entry(4, flags=0), _entry(5, (0x3800, 0xB800, 0x0001))])
    data = up.encode()
    assert fw.Upload.decode(data) == up
    assert len(data) < 64  # three steps in a few dozen bytes
    for k in range(len(data)):
        damaged = bytearray(data)
        damaged[k] ^= 0x10
        with pytest.raises(fw.FleetMessageError):
            fw.Upload.decode(bytes(damaged))
    with pytest.raises(fw.FleetMessageError, match="CRC"):
        fw.Upload.decode(data[:-5] + data[-4:])
    with pytest.raises(fw.FleetMessageError, match="not a fleet upload"):
        fw.Upload.decode(b"junk")


def test_an_upload_with_a_rollback_mark_is_refused():
    body = fw.UPLOAD_HEAD.pack(fw.UPLOAD_MAGIC, fw.VERSION, 1, 0, b"\0" * 8, 0, 1, 0, 1) + b"d"
    tail = wire.Tail()
    tail.add(0, tail.entry(wire.UPDATE_APPLIED | wire.UPDATE_RESTORE, (F16_ONE,)))
    import zlib

    data = body + tail.data()
    data += zlib.crc32(data).to_bytes(4, "little")
    with pytest.raises(fw.FleetMessageError, match="rollback or snapshot"):
        fw.Upload.decode(data)


def test_a_merged_round_decodes_to_its_sections():
    sections = (
        fw.Section("#0", 11, 0, (_entry(0), _entry(1, flags=0), _entry(2, (0x3555,)))),
        fw.Section("#1", 12, 40, (_entry(40, (0x3800, 0x3800)),)),
    )
    m = fw.MergedRound(3, b"\x02" * 8, 0x1234, 0x5678, 0.5, sections)
    back = fw.MergedRound.decode(m.encode())
    assert (back.round, back.base_crc, back.crc, back.rate) == (3, 0x1234, 0x5678, 0.5)
    assert [(s.seed, s.first, s.entries) for s in back.sections] == [(s.seed, s.first, s.entries) for s in sections]
    data = bytearray(m.encode())
    data[len(data) // 2] ^= 1
    with pytest.raises(fw.FleetMessageError):
        fw.MergedRound.decode(bytes(data))


def test_the_effective_entries_are_those_after_the_last_rollback():
    log = [
        _entry(0, flags=0),  # calibration
        _entry(1),
        _entry(2, flags=wire.UPDATE_APPLIED | wire.UPDATE_RESTORE),
        _entry(3),
        _entry(4, flags=0),
        _entry(5),
        _entry(6, flags=0),
    ]
    first, kept = effective_entries(log)
    assert first == 3 and [e.step for e in kept] == [3, 4, 5]
    assert all(e.flags in (0, wire.UPDATE_APPLIED) for e in kept)
    assert effective_entries([_entry(0, flags=wire.UPDATE_APPLIED | wire.UPDATE_RESTORE)]) == (1, [])


def test_device_seeds_differ_per_device_and_round():
    seeds = {device_seed(1, f"dev-{d}", r) for d in range(16) for r in range(16)}
    assert len(seeds) == 256


@pytest.fixture(scope="module")
def digits_plan():
    graph, raw = load_tflite(DIGITS)
    opts = make_options(None, train="last:1", headroom=0, density=1.0)
    plan, _ = trainable_start(graph, opts)
    return plan, opts, bytes.fromhex(model_sha256(raw)[:16])


def test_the_aggregator_merges_only_what_belongs_to_the_round(digits_plan):
    plan, opts, prefix = digits_plan
    agg = Aggregator(plan, opts, prefix, merge="mean", server_lr=1.0)
    base = agg.crc
    a = _upload("dev-a", 0, base, prefix=prefix, seed=5)
    b = _upload("dev-b", 0, base, prefix=prefix, seed=6, entries=[_entry(0, (0x4000,))], first=0)
    assert agg.take(a.encode()).accepted
    assert "duplicate" in agg.take(a.encode()).note
    assert "second, different" in agg.take(_upload("dev-a", 0, base, prefix=prefix, seed=9).encode()).note
    assert "another model" in agg.take(_upload("dev-c", 0, base, prefix=b"\x09" * 8).encode()).note
    assert "other weights" in agg.take(_upload("dev-c", 0, base ^ 1, prefix=prefix).encode()).note
    assert "early" in agg.take(_upload("dev-c", 1, base, prefix=prefix).encode()).note
    damaged = bytearray(b.encode())
    damaged[-1] ^= 0xFF
    assert not agg.take(bytes(damaged)).accepted
    assert agg.take(b.encode()).accepted
    merged = agg.close_round()
    assert [s.device for s in merged.sections] == ["dev-a", "dev-b"] and merged.rate == 0.5
    # the same maths by hand: each device's updates with its own seed, coefficients halved
    values = [t.values.copy() for t in plan.tensors]
    residual = [None if t.is_bias else np.zeros(t.count, np.int8) for t in plan.tensors]
    for up in (a, b):
        for e in up.entries:
            halved = wire.UpdateEntry(e.step, e.flags, tuple(c - 0x0400 if c & 0x7FFF else c for c in e.coefficients))
            apply_update(plan, opts, values, residual, up.seed, halved)
    assert merged.crc == tensors_crc(plan, values) == agg.crc != base
    assert "late" in agg.take(a.encode()).note  # round 0 is closed


def test_the_split_gives_every_device_samples_and_skews_the_classes():
    y = np.repeat(np.arange(10), 100)
    iid = split(y, 8, "iid", 1)
    assert sorted(np.concatenate(iid).tolist()) == list(range(1000))
    skewed = split(y, 8, "dirichlet:0.1", 1)
    assert min(map(len, skewed)) >= 6 and sorted(np.concatenate(skewed).tolist()) == list(range(1000))
    classes = [len(np.unique(y[p])) for p in split(y, 8, "labels:2", 1)]
    assert max(classes) <= 3  # two of its own, at most one more from the top-up
    with pytest.raises(ZoflashError, match="dirichlet:ALPHA"):
        split(y, 8, "skewed", 1)
    with pytest.raises(ZoflashError, match="fewer --devices"):
        split(y, 200, "iid", 1)


def test_drills_parse_and_refuse_what_is_not_one():
    per, broker = parse_drills(("drop:dev-1@2", "corrupt:dev-0@0", "broker-restart@1"))
    assert per == {"dev-1": {"drop": 2}, "dev-0": {"corrupt": 0}} and broker == 1
    with pytest.raises(ZoflashError, match="WHAT:DEVICE@ROUND"):
        parse_drills(("explode:dev-1@2",))


SUMMARY = re.compile(
    r"fleet: devices (\d+), rounds (\d+), uplink (\d+) bytes/device/round, downlink (\d+) bytes/device/round, "
    r"replicas identical (yes|no), accuracy ([\d.]+)% \(centralised ([\d.]+)%, no adaptation ([\d.]+)%\)"
)


@pytest.mark.cc
@pytest.mark.fleet
def test_a_simulated_fleet_keeps_every_replica_identical(tmp_path):
    opts = make_options(None, train="last:1")
    sim = fleet_simulate(
        DIGITS, DIGITS_DATA, opts, devices=3, rounds=3, steps=25, out_dir=tmp_path, round_timeout=60, say=print
    )
    m = SUMMARY.fullmatch(sim.summary())
    assert m, sim.summary()
    assert m.group(5) == "yes" and sim.serve.checks == 3 * 3  # every device reported every round's CRC
    assert 0 < sim.uplink <= 1024
    assert sim.accuracy is not None and sim.start is not None and sim.centralised is not None
    assert all(t["rounds_merged"] == 3 and t["crc"] == sim.serve.crc for t in sim.twins)
    rounds = [json.loads(line) for line in (tmp_path / "fleet.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds if r["type"] == "round"] == [0, 1, 2]
    files = sorted(p.name for p in (tmp_path / "devices").iterdir())
    assert files == [f"dev-{k}.{kind}" for k in range(3) for kind in ("jsonl", "weights.npz")], files
    assert (tmp_path / "fleet.png").stat().st_size > 0


@pytest.mark.cc
@pytest.mark.fleet
@pytest.mark.slow
def test_fleet_faults_lose_nothing_and_keep_the_replicas_identical(tmp_path):
    opts = make_options(None, train="last:1")
    drills = (
        "drop:dev-1@1",  # leaves in round 1, never back
        "duplicate:dev-2@0",
        "corrupt:dev-0@1",
        "late-upload:dev-3@2",
        "late-join:dev-4@1",  # joins in round 1: replays round 0 first
        "broker-restart@2",
    )
    sim = fleet_simulate(
        DIGITS,
        DIGITS_DATA,
        opts,
        devices=5,
        rounds=4,
        steps=20,
        out_dir=tmp_path,
        round_timeout=8,
        drills=drills,
        centralised=False,
        say=print,
    )
    assert sim.serve.identical, sim.serve.events
    events = [json.loads(line) for line in (tmp_path / "fleet.jsonl").read_text().splitlines()]
    said = [(e["round"], e.get("device"), e["what"]) for e in events if e["type"] == "event"]
    print("\n".join(map(str, said)))
    # the second copy comes while round 0 is open (ignored as a duplicate) or after it closed (late)
    assert any(d == "dev-2" and ("duplicate" in w or "late upload for round 0" in w) for r, d, w in said), said
    assert any(r == 1 and d == "dev-0" and "corrupted" in w for r, d, w in said), said
    assert any(r == 1 and d == "dev-1" and "no upload" in w for r, d, w in said), said
    assert any(d == "dev-3" and "late upload for round 2" in w for r, d, w in said), said
    merged = {e["round"]: e["devices"] for e in events if e["type"] == "round"}
    assert "dev-0" not in merged[1] and "dev-1" not in merged[2] and "dev-3" not in merged[2]
    assert "dev-4" not in merged[0] and "dev-4" in merged[1]
    twins = {t["device"]: t for t in sim.twins}
    assert twins["dev-1"]["left"] and twins["dev-4"]["rounds_merged"] == 4
    assert all(twins[d]["crc"] == sim.serve.crc for d in ("dev-0", "dev-2", "dev-3", "dev-4"))


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.fleet
def test_an_emulated_m55_learns_in_the_fleet_bit_identical_with_the_twins(tmp_path):
    opts = make_options(None, train="last:1")
    sim = fleet_simulate(
        DIGITS,
        DIGITS_DATA,
        opts,
        devices=3,
        rounds=2,
        steps=15,
        out_dir=tmp_path,
        round_timeout=240,
        emulated=1,
        centralised=False,
        say=print,
    )
    boards = {t["device"]: t["board"] for t in sim.twins}
    assert boards == {"dev-0": "host", "dev-1": "host", "dev-2": "mps3-an547"}
    assert sim.serve.identical and sim.serve.checks == 3 * 2
    assert {t["crc"] for t in sim.twins} == {sim.serve.crc}
    # the emulated board measured the global weights as the twins did, bit for bit
    assert len({t["accuracy"] for t in sim.twins}) == 1


@pytest.mark.cc
@pytest.mark.fleet
def test_the_fleet_command_line(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "zoflash", "fleet", "simulate", "--model", str(DIGITS), "--data", str(DIGITS_DATA)]
        + ["--train", "last:1", "--devices", "2", "--rounds", "2", "--steps-per-round", "15", "--no-centralised"]
        + ["--out", str(tmp_path / "out"), "--non-iid", "labels:5"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"fleet: devices 2, rounds 2, .*replicas identical yes, accuracy [\d.]+% \(centralised n/a, no adaptation [\d.]+%\)",
        last,
    ), last
    assert "Traceback" not in proc.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "zoflash", "fleet", "simulate", "--model", str(DIGITS), "--data", str(DIGITS_DATA)]
        + ["--devices", "2", "--rounds", "1", "--non-iid", "weird"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "dirichlet:ALPHA" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.cc
@pytest.mark.fleet
def test_fleet_serve_and_two_twins_joining_from_the_command_line(tmp_path):
    """The aggregator and two gateways as separate zoflash processes through a broker of their own."""
    import subprocess
    import sys

    from zoflash.monitor.mqtt import start_broker

    np.savez(tmp_path / "a.npz", **_half(0))
    np.savez(tmp_path / "b.npz", **_half(1))
    common = ["--train", "last:1", "--headroom", "2", "--fleet", "cli"]
    broker = start_broker()
    try:
        serve = subprocess.Popen(
            [sys.executable, "-m", "zoflash", "fleet", "serve", "--model", str(DIGITS), "--devices", "2"]
            + ["--rounds", "2", "--steps-per-round", "15", "--broker", broker.url, "--out", str(tmp_path / "agg")]
            + ["--round-timeout", "60"]
            + common,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        joins = [
            subprocess.Popen(
                [sys.executable, "-m", "zoflash", "fleet", "join", "--twin", "--model", str(DIGITS)]
                + ["--data", str(tmp_path / f"{n}.npz"), "--broker", broker.url, "--name", n]
                + ["--log", str(tmp_path / f"{n}.jsonl")]
                + common,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in ("a", "b")
        ]
        out, err = serve.communicate(timeout=300)
        done = [j.communicate(timeout=120) for j in joins]
    finally:
        broker.close()
    assert serve.returncode == 0, err
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"fleet: devices 2, rounds 2, uplink \d+ .* replicas identical yes, accuracy [\d.]+%", last), (
        last
    )
    crcs = {re.search(r"weights crc (0x[0-9a-f]+)", o).group(1) for o, _ in done}
    assert all(j.returncode == 0 for j in joins) and len(crcs) == 1, done
    assert (tmp_path / "agg" / "fleet.jsonl").exists() and (tmp_path / "a.jsonl").exists()
    refused = subprocess.run(
        [sys.executable, "-m", "zoflash", "fleet", "join", "--twin", "--model", str(DIGITS), "--data", str(DIGITS_DATA)]
        + ["--broker", "mqtt://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--headroom" in refused.stderr and "Traceback" not in refused.stderr


def _half(k: int) -> dict:
    with np.load(DIGITS_DATA) as d:
        data = {n: d[n] for n in d.files}
    keep = np.arange(len(data["y_train"])) % 2 == k
    return {**data, "x_train": data["x_train"][keep], "y_train": data["y_train"][keep]}


def test_simulate_and_run_refuse_a_fleet_firmware_with_one_line(tmp_path, capsys):
    from zoflash.cli.main import main

    for argv in (
        ["simulate", "--model", str(DIGITS), "--data", str(DIGITS_DATA), "--mode", "fleet"],
        ["run", "--board", "mps3-an547", "--model", str(DIGITS), "--data", str(DIGITS_DATA), "--mode", "fleet"],
    ):
        code = main([*argv, "--log", str(tmp_path / "x.jsonl")])
        err = capsys.readouterr().err
        assert code == 2 and "zoflash fleet join" in err and "Traceback" not in err


@pytest.mark.cc
@pytest.mark.fleet
def test_a_fleet_runs_its_devices_on_a_dask_cluster(tmp_path):
    """--cluster: the device tasks go to a Dask scheduler of its own (a scheduler and a worker
    process started here), not to local workers."""
    import socket
    import subprocess
    import sys
    import time

    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    scheduler = subprocess.Popen(
        [*dask, "--host", "127.0.0.1", "--port", str(port), "--dashboard-address", ":0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"tcp://127.0.0.1:{port}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "4", "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(address, timeout=30) as c:  # wait for the worker
            end = time.monotonic() + 60
            while not c.scheduler_info()["workers"] and time.monotonic() < end:
                time.sleep(0.5)
            assert c.scheduler_info()["workers"], "the Dask worker did not register"
        opts = make_options(None, train="last:1")
        sim = fleet_simulate(
            DIGITS,
            DIGITS_DATA,
            opts,
            devices=2,
            rounds=2,
            steps=10,
            cluster=address,
            out_dir=tmp_path,
            centralised=False,
            round_timeout=60,
            say=print,
        )
        assert sim.serve.identical and sim.serve.checks == 2 * 2
    finally:
        for p in (worker, scheduler):
            p.terminate()
            p.wait(timeout=30)


@pytest.mark.cc
@pytest.mark.fleet
@pytest.mark.parametrize("name", [zoo_param(n) for n in ("arm_har_int8.tflite", "mlperf_resnet8.tflite")])
def test_public_models_keep_every_replica_identical_in_a_fleet(name, tmp_path):
    """Models nobody here trained, random data of their input and classes: every round merges
    real updates and every device ends each round on the aggregator's CRC."""
    from test_engines import random_data

    data = random_data(tmp_path / "data.npz", PUBLIC / name, 200, 40)
    sim = fleet_simulate(
        PUBLIC / name,
        data,
        make_options(None, headroom=0),
        devices=3,
        rounds=3,
        steps=12,
        out_dir=tmp_path / "fleet",
        centralised=False,
        round_timeout=120,
        say=print,
    )
    assert sim.serve.identical and sim.serve.checks == 3 * 3
    rounds = [json.loads(line) for line in (tmp_path / "fleet" / "fleet.jsonl").read_text().splitlines()]
    assert sum(r["updates"] for r in rounds if r["type"] == "round") > 0  # past calibration: updates merged
