"""Nothing a device learned is lost:

- weights without --model: written for the bundle's model (--bundle), else kept raw, and
  `zoflash export` reads the raw file;
- a full disk (a small tmpfs, or a write made to fail with ENOSPC): the files go to a rescue
  folder, named in one message; with nowhere to write, the log stays in memory and the device is
  asked to pause;
- runs never overwrite each other's outputs silently (run-2.jsonl, or --force), and outputs are
  checked before the run;
- Ctrl-C saves what exists and exits 130 (simulate: the program is stopped and sends its weights;
  a second Ctrl-C while the files are written does not cut them short);
- x in the live view stops the device only when pressed twice.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import small_disk
from test_monitor import DIGITS, decoded, logged, loop_opener, small_data, stream, weights_of, write_later

from zoflash.cli import main
from zoflash.monitor import outputs
from zoflash.monitor import serial_monitor as sm
from zoflash.monitor.outputs import Rescue, unused_log_path
from zoflash.monitor.serial_monitor import KeyCommands, Monitor, save_dumped, weights_from_raw
from zoflash.monitor.session import comparable, read_log
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.training import compile_for_training, training_bundle

__all__ = ["small_data", "stream"]  # fixtures shared with test_monitor


def monitored(tmp_path: Path, frames: list[bytes], **options) -> sm.MonitorResult:
    """A run's frames through a loop:// port into a Monitor; its result."""
    port, opener = loop_opener()
    mon = Monitor(opener=opener, **options)
    mon.connect()
    write_later(port, b"".join(frames))
    mon.run(timeout=20)
    return mon.close()


def same_tensors(path: Path, frames: list[bytes]) -> dict:
    final = weights_of(decoded(frames))
    w = load_weights(path)
    for i, values in w.tensors.items():
        assert values.tobytes() == final[(i, 0)]
    return w.tensors


@pytest.fixture(scope="module")
def prep(small_data):
    return compile_for_training(DIGITS, small_data, make_options(steps=40, eval_every=10, batch=4))


# ============================================================================== weights without --model


def test_without_a_model_the_weights_are_kept_raw_and_export_reads_them(tmp_path, stream):
    res = monitored(tmp_path, stream, log_path=tmp_path / "run.jsonl")
    assert res.done is not None and res.weights_path is None
    assert res.raw_weights_path == tmp_path / "run.raw-weights.npz" and res.raw_weights_path.exists()
    assert outputs.is_raw_weights(res.raw_weights_path)
    converted = weights_from_raw(res.raw_weights_path, DIGITS, tmp_path / "converted.weights.npz")
    same_tensors(converted, stream)
    out = tmp_path / "trained.tflite"
    assert (
        main(["-q", "export", "--model", str(DIGITS), "--weights", str(res.raw_weights_path), "--out", str(out)]) == 0
    )
    assert out.stat().st_size == DIGITS.stat().st_size


def test_the_bundle_names_the_model(tmp_path, stream, prep):
    bundle = training_bundle(prep, "host", tmp_path / "bundle")
    res = monitored(tmp_path, stream, log_path=tmp_path / "run.jsonl", manifest=bundle.manifest)
    assert res.weights_path == tmp_path / "run.weights.npz" and res.raw_weights_path is None
    tensors = same_tensors(res.weights_path, stream)
    # the same file as with --model
    with_model = monitored(tmp_path, stream, log_path=tmp_path / "m.jsonl", model_path=DIGITS)
    reference = load_weights(with_model.weights_path)
    assert load_weights(res.weights_path).model_sha256 == reference.model_sha256 == prep.sha256
    for i, values in reference.tensors.items():
        assert np.array_equal(tensors[i], values)
    assert load_weights(res.weights_path).scales.keys() == reference.scales.keys()


def test_a_bundle_that_is_not_for_training_is_refused_before_connecting(tmp_path, capsys):
    (tmp_path / "b").mkdir()
    t0 = time.monotonic()
    code = main(["monitor", "--port", "loop://", "--bundle", str(tmp_path / "b"), "--log", str(tmp_path / "r.jsonl")])
    assert code == 2 and "not a zoflash bundle" in capsys.readouterr().err
    assert time.monotonic() - t0 < 5 and not (tmp_path / "r.jsonl").exists()


def test_weights_of_another_model_are_kept_raw(tmp_path, stream):
    other = Path(__file__).parent / "fixtures" / "mlp.tflite"
    res = monitored(tmp_path, stream, log_path=tmp_path / "run.jsonl", model_path=other)
    assert res.weights_path is None and "give the model the firmware was built from" in res.weights_error
    same_tensors(weights_from_raw(res.raw_weights_path, DIGITS, tmp_path / "w.weights.npz"), stream)


# ============================================================================== a full disk


@pytest.fixture
def tiny_disk(tmp_path):
    """A 16 KiB tmpfs (root only)."""
    with small_disk(tmp_path, 16) as disk:
        yield disk


def test_a_full_disk_moves_the_files_to_the_rescue_folder(tmp_path, stream, tiny_disk):
    rescue = tmp_path / "rescue"
    res = monitored(
        tmp_path,
        stream,
        log_path=tiny_disk / "run.jsonl",
        csv_path=tiny_disk / "run.csv",
        model_path=DIGITS,
        rescue=Rescue([rescue]),
    )
    assert res.done is not None
    assert res.log_path == rescue / "run.jsonl"
    assert comparable(read_log(res.log_path)) == logged(decoded(stream))  # every line, none twice
    assert res.weights_path == rescue / "run.weights.npz"
    same_tensors(res.weights_path, stream)
    assert f"log {tiny_disk / 'run.jsonl'} -> {rescue / 'run.jsonl'}" in res.rescued
    assert "No space left on device" in res.rescued


def test_a_write_failure_mid_run_rescues_the_weights(tmp_path, stream, monkeypatch):
    real = sm.save_dumped

    def disk_full_here(weights, model, out, *a, **k):
        if Path(out).parent == tmp_path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(weights, model, out, *a, **k)

    monkeypatch.setattr(sm, "save_dumped", disk_full_here)
    res = monitored(
        tmp_path, stream, log_path=tmp_path / "run.jsonl", model_path=DIGITS, rescue=Rescue([tmp_path / "r"])
    )
    assert res.weights_path == tmp_path / "r" / "run.weights.npz"
    same_tensors(res.weights_path, stream)
    assert res.rescued.startswith("could not write where asked (No space left on device)")


def test_with_nowhere_to_write_the_log_stays_in_memory_and_the_device_pauses(tmp_path, stream, monkeypatch):
    class FullFile:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def flush(self):
            pass

        def close(self):
            pass

    real_open = Path.open

    def full_disk_open(self, mode="r", *a, **k):
        return FullFile() if "w" in mode and self.suffix == ".jsonl" else real_open(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", full_disk_open)
    said = []
    port = FakePort(stream)
    mon = Monitor(
        opener=lambda: port,
        log_path=tmp_path / "run.jsonl",
        view=SimpleNamespace(show=lambda rec: None, message=said.append),
        rescue=Rescue([tmp_path / "rescue"]),
    )
    mon.run(timeout=20)
    res = mon.close()
    assert [r["command"] for r in decoded(port.written)] == ["pause"]  # the device was asked to pause
    assert said and "the device is paused" in said[0]
    assert res.log_path is None and "written nowhere" in res.rescued
    assert logged(decoded(stream)) == logged(res.records)


class FakePort:
    """A device that sends `frames`, one per read, and keeps what the host writes."""

    returns_early = True

    def __init__(self, frames: list[bytes]):
        self.frames, self.written = list(frames), []

    def read(self, size: int = 1) -> bytes:
        return self.frames.pop(0) if self.frames else b""

    def write(self, data: bytes) -> int:
        self.written.append(bytes(data))
        return len(data)

    def close(self) -> None:
        pass


# ============================================================================== no silent overwrite


def test_runs_do_not_overwrite_each_other(tmp_path):
    log = tmp_path / "run.jsonl"
    assert unused_log_path(log) == log
    (tmp_path / "run.weights.npz").write_bytes(b"")
    assert unused_log_path(log) == tmp_path / "run-2.jsonl"
    (tmp_path / "run-2.png").write_bytes(b"")
    assert unused_log_path(log) == tmp_path / "run-3.jsonl"


def test_outputs_are_checked_before_the_run(tmp_path, capsys):
    (tmp_path / "run.png").mkdir()  # the plot cannot be written: refused at once, not after the run
    t0 = time.monotonic()
    code = main(["monitor", "--port", "loop://", "--log", str(tmp_path / "run.jsonl"), "--force"])
    err = capsys.readouterr().err
    assert code == 2 and f"--log {tmp_path / 'run.png'}: cannot write there (it is a folder)" in err
    code = main(["monitor", "--port", "loop://", "--plot", str(tmp_path / "run.png"), "--timeout", "20"])
    assert code == 2 and "--plot" in capsys.readouterr().err and time.monotonic() - t0 < 10


def test_simulate_picks_a_new_name_and_force_overwrites(tmp_path, small_data, capsys):
    args = ["simulate", "--model", str(DIGITS), "--data", str(small_data), "--steps", "20", "--eval-every", "10"]
    args += ["--engine", "reference", "--no-plot", "--log", str(tmp_path / "run.jsonl")]
    assert main(args) == 0
    assert main(args) == 0  # a second run: run-2
    out = capsys.readouterr().out
    assert f"writing {tmp_path / 'run-2.jsonl'} instead (--force overwrites)" in out
    assert (tmp_path / "run-2.weights.npz").exists()
    before = (tmp_path / "run.jsonl").stat().st_mtime_ns
    assert main([*args, "--force"]) == 0
    assert (tmp_path / "run.jsonl").stat().st_mtime_ns != before and not (tmp_path / "run-3.jsonl").exists()


# ============================================================================== Ctrl-C


@pytest.mark.parametrize("engine", [pytest.param("c", marks=pytest.mark.cc), "reference"])
def test_ctrl_c_in_simulate_keeps_the_weights(tmp_path, small_data, engine):
    log = tmp_path / "run.jsonl"
    cmd = [sys.executable, "-m", "zoflash", "simulate", "--model", str(DIGITS), "--data", str(small_data)]
    cmd += ["--engine", engine]
    cmd += ["--steps", "100000", "--eval-every", "20", "--batch", "4", "--no-plot", "--log", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not (log.exists() and '"type": "eval"' in log.read_text()):
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[-1]["type"] == "done" and records[-1]["reason"] == "command"
    assert 0 < records[-1]["steps"] < 100000
    w = load_weights(tmp_path / "run.weights.npz")
    assert w.tensors and f"weights {tmp_path / 'run.weights.npz'}" in out and "stopped (Ctrl-C)" in out


def test_a_second_ctrl_c_does_not_cut_the_files_short(tmp_path, stream, monkeypatch):
    real = sm.save_dumped

    def interrupted_while_saving(*a, **k):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again while the weights are written
        time.sleep(0.05)
        return real(*a, **k)

    monkeypatch.setattr(sm, "save_dumped", interrupted_while_saving)
    res = monitored(tmp_path, stream, log_path=tmp_path / "run.jsonl", model_path=DIGITS)
    same_tensors(res.weights_path, stream)


def test_a_whole_dump_is_kept_even_before_its_ack(tmp_path, stream):
    """The dump's weights arrived, the ack not yet (Ctrl-C again): the dump is what is saved."""
    frames = [f for f in stream if decoded([f])[0]["type"] != "done"]
    port, opener = loop_opener()
    mon = Monitor(opener=opener, log_path=tmp_path / "run.jsonl", model_path=DIGITS)
    mon.connect()
    mon._dump = sm.telemetry.WeightsAssembler()  # a dump requested: its frames are coming
    write_later(port, b"".join(frames))
    mon.run(timeout=2)
    res = mon.close()
    assert res.done is None
    same_tensors(res.weights_path, stream)


# ============================================================================== x asks again


def test_x_stops_only_when_pressed_twice(monkeypatch):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    sent, said = [], []
    mon = SimpleNamespace(request=sent.append)
    monkeypatch.setattr(sm, "STOP_CONFIRM_SECONDS", 0.2)
    with open(slave, "rb", buffering=0) as tty_in, KeyCommands(tty_in, said.append) as keys:
        os.write(master, b"x")
        time.sleep(0.05)
        keys(mon)
        assert sent == [] and said == ["x: press x again within 0.2 s to stop the device (its run ends)"]
        time.sleep(0.3)  # too late: this x asks again
        os.write(master, b"x")
        time.sleep(0.05)
        keys(mon)
        assert sent == [] and len(said) == 2
        os.write(master, b"x")
        time.sleep(0.05)
        keys(mon)
        assert sent == ["stop"]
    os.close(master)


def test_save_dumped_is_unchanged_for_a_known_model(tmp_path, stream):
    """--model still writes the same weights file as before."""
    res = monitored(tmp_path, stream, log_path=tmp_path / "run.jsonl", model_path=DIGITS)
    asm = sm.telemetry.WeightsAssembler()
    for r in decoded(stream):
        if r["type"] == "weights":
            asm.add(r)
    direct = save_dumped(asm, DIGITS, tmp_path / "direct.weights.npz", res.records[0]["model_sha256_prefix"])
    assert load_weights(direct).tensors.keys() == load_weights(res.weights_path).tensors.keys()


def test_the_bundle_is_found_by_the_model_the_device_names(tmp_path, stream, prep):
    """Neither --model nor --bundle: a bundle in the bundle folder built from the device's model (its
    hello names it) gives the weights file its model; another model's bundle does not."""
    root = tmp_path / "generated"
    bundle = training_bundle(prep, "host", root / "digits-host")
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    manifest["model"]["sha256"] = "0" * 64  # as if built from another model
    (bundle.path / "manifest.json").write_text(json.dumps(manifest))
    res = monitored(tmp_path, stream, log_path=tmp_path / "a.jsonl", bundle_root=root)
    assert res.weights_path is None and res.found_bundle is None and res.raw_weights_path.exists()
    training_bundle(prep, "host", root / "digits-host")  # the real one again
    res = monitored(tmp_path, stream, log_path=tmp_path / "b.jsonl", bundle_root=root)
    assert res.found_bundle == root / "digits-host" and res.raw_weights_path is None
    assert load_weights(res.weights_path).model_sha256 == prep.sha256
    same_tensors(res.weights_path, stream)
