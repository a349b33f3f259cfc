"""--data-source app: the trainer as a C library (zo_app.h) in the user's own firmware, with the
example application examples/app_sensor (a synthetic sensor pushes samples, the app steps).
Built and run on the host and on the emulated Cortex-M55: it trains, and both give the same
records."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest
from conftest import FIXTURES, ROOT

from zoflash import api
from zoflash.monitor.session import Session, comparable
from zoflash.training.options import make_options

APP = ROOT / "examples" / "app_sensor"
MLP = FIXTURES / "mlp.tflite"
OPTS = dict(steps=100, eval_every=50, data_source="app", buffer=32, refresh=2, train="all")


@pytest.fixture(scope="module")
def sensor_data(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_data", APP / "make_data.py")
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    path = tmp_path_factory.mktemp("sensor") / "sensor.npz"
    make_data.main(str(path))
    return path


def app_records(tmp_path, board: str, data) -> list[dict]:
    bundle = api.build(str(MLP), board, str(tmp_path / board), data_path=str(data), options=make_options(**OPTS)).bundle
    subprocess.run(["make", "-s", "-C", str(bundle.path), "app", f"APP={APP / 'app_sensor.c'}"], check=True)
    if board == "host":
        argv = [str(bundle.path / "build" / "app")]
    else:
        argv = [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-nographic",
            "-semihosting",
            "-icount",
            "shift=0",
            "-monitor",
            "none",
            "-kernel",
            str(bundle.path / "build" / "app.elf"),
        ]
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=300, check=True).stdout
    session = Session(None, None)
    session.feed(out)
    return session.close().records


@pytest.mark.cc
def test_app_trains_on_the_host(tmp_path, sensor_data):
    records = app_records(tmp_path, "host", sensor_data)
    hello = records[0]
    assert hello["type"] == "hello" and hello["n_train"] == 32
    evals = [r for r in records if r["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 50, 100]
    assert evals[-1]["loss"] < 0.7 * evals[0]["loss"]  # the pushed samples train the model
    (done,) = [r for r in records if r["type"] == "done"]
    assert done["steps"] == 100 and done["reason"] == "steps"
    (line,) = [r["text"] for r in records if r["type"] == "text" and r["text"]]
    assert line.startswith("app_sensor: ") and line.endswith(" of 200 fresh readings classified right")


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_app_on_qemu_equals_the_host_build(tmp_path, sensor_data):
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed")
    m55, host = app_records(tmp_path, "mps3-an547", sensor_data), app_records(tmp_path, "host", sensor_data)
    assert comparable(m55) == comparable(host)
    assert [r["text"] for r in m55 if r["type"] == "text"] == [r["text"] for r in host if r["type"] == "text"]
