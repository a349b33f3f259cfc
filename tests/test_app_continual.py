"""--mode continual --data-source app: the continual controller as a C library in the user's own
firmware (zo_continual.h: zo_cl_start, zo_cl_serve, zo_cl_end), with the example application
examples/app_sensor/app_continual.c.  Built and run on the host, its records equal those of the
stream form (`simulate --mode continual --data-source stream`) fed the same readings; on the
emulated Cortex-M55 the same as on the host."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import numpy as np
import pytest
from conftest import FIXTURES, ROOT

from zoflash import api
from zoflash.monitor.session import Session, comparable
from zoflash.training.options import make_options

pytestmark = pytest.mark.cc

APP = ROOT / "examples" / "app_sensor"
MLP = FIXTURES / "mlp.tflite"
OPTS = dict(mode="continual", steps=20, buffer=16, holdout=32, duty=0.75, train="all")
READINGS, REMOUNT = 2400, 1200  # as in app_continual.c


def _make_data():
    spec = importlib.util.spec_from_file_location("make_data", APP / "make_data.py")
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    return make_data


@pytest.fixture(scope="module")
def sensor_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("sensor") / "sensor.npz"
    _make_data().main(str(path))
    return path


def app_stream(path) -> None:
    """The readings app_continual.c serves, as a stream: remounted (reversed) from REMOUNT on, a
    shift mark (the reading again, y = -2) before it, every 4th reading without its label."""
    x, y = _make_data().readings(0, READINGS)
    x[REMOUNT:] = x[REMOUNT:, ::-1]
    y = np.where(np.arange(READINGS) % 4 == 3, -1, y)
    x = np.concatenate([x[:REMOUNT], x[REMOUNT : REMOUNT + 1], x[REMOUNT:]])
    y = np.concatenate([y[:REMOUNT], [-2], y[REMOUNT:]])
    np.savez(path, x=x, y=y)


def app_records(tmp_path, board: str, data) -> list[dict]:
    opts = make_options(**OPTS, data_source="app")
    bundle = api.build(str(MLP), board, str(tmp_path / board), data_path=str(data), options=opts).bundle
    assert not (bundle.path / "zo_app.c").exists()  # the one-shot library's API is not in this bundle
    subprocess.run(["make", "-s", "-C", str(bundle.path), "app", f"APP={APP / 'app_continual.c'}"], check=True)
    if board == "host":
        argv = [str(bundle.path / "build" / "app")]
    else:
        argv = ["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-semihosting", "-icount", "shift=0"]
        argv += ["-monitor", "none", "-kernel", str(bundle.path / "build" / "app.elf")]
    run = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=300, check=True)
    session = Session(None, None)
    session.feed(run.stdout)
    return session.close().records


def test_app_form_serves_as_the_stream_form(tmp_path, sensor_data):
    from zoflash.workflows.continual import simulate_continual

    app = app_records(tmp_path, "host", sensor_data)

    stream = tmp_path / "stream.npz"
    app_stream(stream)
    fed = simulate_continual(
        MLP, sensor_data, stream, make_options(**OPTS, data_source="stream"), plot=False, say=lambda *_: None
    ).records

    decisions = [r["decision"] for r in app if r["type"] == "continual"]
    assert "episode" in decisions and decisions.count("boot") == 1  # the mark started an episode
    assert any(r["type"] == "done" for r in app)
    assert comparable(app) == comparable(fed)
    (line,) = [r["text"] for r in app if r["type"] == "text" and r["text"].strip()]
    assert line.strip().startswith("app_continual: ") and line.strip().endswith(f" of {READINGS} readings served right")


@pytest.mark.cross
@pytest.mark.qemu
def test_app_form_on_qemu_equals_the_host_build(tmp_path, sensor_data):
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed")
    m55, host = app_records(tmp_path, "mps3-an547", sensor_data), app_records(tmp_path, "host", sensor_data)
    assert comparable(m55) == comparable(host)
    assert [r["text"] for r in m55 if r["type"] == "text"] == [r["text"] for r in host if r["type"] == "text"]
