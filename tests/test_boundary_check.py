"""The boundary checksum: every training firmware with a frozen prefix reports the CRC-32
of the first test sample's boundary activations once after hello; a build with --check-boundary
(always with --npu) bakes in the host simulation's value, and the monitor says whether they agree.

The oracles are independent of zoflash's C: the tflite-micro interpreter on `zoflash split`'s
prefix and zlib's CRC-32. Under QEMU the prefix runs on the emulated Cortex-M55's CPU (no NPU is
emulated): the checksum path is the one an NPU build takes, with zoflash's kernels computing it."""

from __future__ import annotations

import subprocess
import zlib

import pytest
from conftest import FIXTURES
from test_monitor import qemu_serial

from zoflash import api
from zoflash.monitor import telemetry as tm
from zoflash.monitor.live_view import LiveView, boundary_line
from zoflash.monitor.serial_monitor import Monitor
from zoflash.reference.tflm import TflmInterpreter
from zoflash.spec import training as spec
from zoflash.spec import wire as proto
from zoflash.training.options import make_options
from zoflash.workflows.boundary_check import simulated_crc32
from zoflash.workflows.training import compile_for_training

MODEL, DATA = FIXTURES / "digits_cnn.tflite", FIXTURES / "digits_shift.npz"


def _tflm_crc32(prep, tmp_path) -> int:
    parts = api.split_model(prep.path, tmp_path / "split", at=api.training_cut(prep.path, prep.training.options))
    x = prep.training.data.x_test[:1]
    return zlib.crc32(TflmInterpreter(parts.prefix_path.read_bytes()).run_batch(x)[0].tobytes())


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize(
    "model, data", [("digits_cnn.tflite", "digits_shift.npz"), ("motions_cnn.tflite", "motions_shift.npz")]
)
def test_the_host_simulation_s_checksum_is_tflm_s(model, data, tmp_path):
    prep = compile_for_training(FIXTURES / model, FIXTURES / data, make_options(steps=5))
    assert simulated_crc32(prep) == _tflm_crc32(prep, tmp_path)


def test_the_frame_decodes_and_the_monitor_says_agree_or_not():
    def rec(crc, expected, flags):
        data = proto.encode("boundary", dict(crc32=crc, expected_crc32=expected, bytes=256, boundary_flags=flags))
        return tm.decode(tm.Decoder().feed(data)[0])

    npu = spec.BOUNDARY_FLAGS["npu"] | spec.BOUNDARY_FLAGS["expected"]
    agree, differ, unknown = rec(0x1234ABCD, 0x1234ABCD, npu), rec(0x1234ABCD, 0x0BADF00D, npu), rec(7, 0, 0)
    assert (agree["agree"], differ["agree"], unknown["agree"]) == (True, False, None)
    assert boundary_line(agree) == (
        "boundary check: the NPU's prefix on the first test sample gives CRC-32 0x1234ABCD "
        "(256 bytes): agrees with the host simulation"
    )
    assert "DISAGREES with the host simulation (0x0BADF00D)" in boundary_line(differ)
    assert boundary_line(unknown).endswith("no simulation value built in (zoflash build --check-boundary)")


def _qemu_records(elf, tmp_path, name: str) -> tuple[list[dict], str]:
    """The firmware's records under QEMU (UART0 on a TCP port, as `zoflash flash` starts it) and
    what the live view printed."""
    out = tmp_path / f"{name}.txt"
    with qemu_serial(elf) as url, out.open("w") as text:
        mon = Monitor(url, log_path=tmp_path / f"{name}.jsonl", view=LiveView(out=text))
        mon.connect(timeout=20)
        mon.run(timeout=120)
        res = mon.close()
    return res.records, out.read_text()


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_the_emulated_m55_reports_the_checksum_and_a_wrong_one_is_caught(tmp_path):
    options = make_options(steps=2, eval_every=2, batch=2)
    built = api.build(MODEL, "mps3-an547", tmp_path / "fw", data_path=DATA, options=options, check_boundary=True)
    expected = built.bundle.manifest["training"]["boundary_check"]["crc32"]
    records, text = _qemu_records(built.outputs[0], tmp_path, "right")
    (b,) = [r for r in records if r["type"] == "boundary"]
    assert (b["crc32"], b["expected_crc32"], b["agree"], b["npu"]) == (expected, expected, True, False)
    assert "prefix on the first test sample gives CRC-32" in text and "agrees with the host simulation" in text

    # the same firmware with a deliberately wrong expected value: the monitor says they disagree
    wiring = built.bundle.path / "digits_cnn_train.c"
    old = f".boundary_crc_expected = 0x{expected:08X}u"
    assert old in wiring.read_text()
    wrong = expected ^ 0xFFFFFFFF
    wiring.write_text(wiring.read_text().replace(old, f".boundary_crc_expected = 0x{wrong:08X}u"))
    subprocess.run(["make", "-C", str(built.bundle.path)], check=True, capture_output=True)
    records, text = _qemu_records(built.outputs[0], tmp_path, "wrong")
    (b,) = [r for r in records if r["type"] == "boundary"]
    assert (b["crc32"], b["expected_crc32"], b["agree"]) == (expected, wrong, False)
    assert f"DISAGREES with the host simulation (0x{wrong:08X})" in text
