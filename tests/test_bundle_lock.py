"""One build at a time per bundle folder (targets/bundle_lock.py): a second build into the same
--out waits for the first, saying so, or is refused after $ZOFLASH_LOCK_TIMEOUT; a crashed build
never blocks the next; two concurrent `zoflash build` into one folder leave one build's firmware."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.targets.bundle_lock import lock_path

MODEL = str(FIXTURES / "mlp.tflite")
HOLD = """
import sys, time
from zoflash.targets.bundle_lock import bundle_lock
with bundle_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(out: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the folder's lock for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_build_into_a_folder_being_built_is_refused_after_the_timeout(monkeypatch, tmp_path, capsys):
    out = tmp_path / "bundle"
    holder = _holder(out, 60)
    try:
        monkeypatch.setenv("ZOFLASH_LOCK_TIMEOUT", "0.5")
        assert main(["build", "--model", MODEL, "--no-compile", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert f"{out} is being built by pid {holder.pid} (waited 0.5 s)" in err and "another --out" in err, err
        assert not out.exists()  # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_a_second_build_waits_for_the_first_and_says_so(monkeypatch, tmp_path, caplog):
    out = tmp_path / "bundle"
    holder = _holder(out, 1.5)
    monkeypatch.setenv("ZOFLASH_LOCK_TIMEOUT", "60")
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="zoflash"):
        assert main(["build", "--model", MODEL, "--no-compile", "--out", str(out)]) == 0
    assert holder.wait() == 0 and time.monotonic() - started >= 1.0
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting")]
    assert waits == [f"waiting for the build of {out} by pid {holder.pid}"]
    assert (out / "manifest.json").is_file() and not lock_path(out).exists()  # released and removed


def test_a_crashed_build_does_not_block_the_next(monkeypatch, tmp_path):
    out = tmp_path / "bundle"
    holder = _holder(out, 60)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert lock_path(out).exists()  # left behind, but no longer locked
    monkeypatch.setenv("ZOFLASH_LOCK_TIMEOUT", "0")
    assert main(["build", "--model", MODEL, "--no-compile", "--out", str(out)]) == 0
    assert not lock_path(out).exists()


def test_the_lock_is_inside_a_folder_whose_parent_cannot_be_written(monkeypatch, tmp_path):
    from zoflash.targets import bundle_lock

    out = tmp_path / "bundle"
    out.mkdir()
    monkeypatch.setattr(bundle_lock, "_writable", lambda folder: folder != tmp_path)
    assert lock_path(out) == out / bundle_lock.INNER_LOCK_NAME
    with bundle_lock.bundle_lock(out):
        assert (out / bundle_lock.INNER_LOCK_NAME).is_file()
        assert main(["build", "--model", MODEL, "--no-compile", "--out", str(out)]) == 0  # the same thread
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
    assert not (out / bundle_lock.INNER_LOCK_NAME).exists()


@pytest.mark.cc
def test_two_concurrent_builds_into_one_folder_leave_one_builds_firmware(tmp_path):
    models = {"mlp": FIXTURES / "mlp.tflite", "cnn": FIXTURES / "digits_cnn.tflite"}
    outputs = ("build/libnet.so", "build/net_run")

    def zoflash(model: Path, out: Path) -> subprocess.Popen:
        argv = [sys.executable, "-m", "zoflash", "build", "--model", str(model), "--prefix", "net", "--out", str(out)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    reference = {}
    for name, model in models.items():  # each alone, for what its firmware is
        proc = zoflash(model, tmp_path / name)
        assert proc.wait() == 0, proc.communicate()
        reference[name] = [(tmp_path / name / o).read_bytes() for o in outputs]
    shared = tmp_path / "shared"
    procs = [zoflash(model, shared) for model in models.values()]
    results = [(p.wait(), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), results
    final = [(shared / o).read_bytes() for o in outputs]
    winner = [name for name, ref in reference.items() if ref == final]
    assert len(winner) == 1, "the firmware in the folder matches neither build"
    manifest = (shared / "manifest.json").read_text()
    assert f'"file": "{models[winner[0]].name}"' in manifest
