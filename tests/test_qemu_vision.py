"""The public vision models train on the emulated Cortex-M55 (mps3-an547) exactly as the host
simulation does: person_detect (weights in the ITCM, data in the 2 MiB SRAM) and the MobileNetV2
0.35/128 stand-in (weights in the SRAM, data in the DDR).  Head training, a few steps on seeded
synthetic images: the check is that every telemetry record equals the simulation's, not that it learns.
About a minute each on 2 cores (slow)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC

from zoflash.cli import main

CASES = {
    "person_detect": (PUBLIC / "person_detect.tflite", (96, 96, 1), 2, ("ITCM", "SRAM")),
    "mobilenet_v2_0.35_128": (FIXTURES / "standin_mobilenet_v2_0.35_128.tflite", (128, 128, 3), 10, ("SRAM", "DDR")),
}


def run_and_simulate(tmp_path, capsys, name):
    model, shape, classes, (weights, data) = CASES[name]
    rng = np.random.default_rng(11)
    npz = tmp_path / "data.npz"
    np.savez(
        npz,
        x_train=rng.integers(-128, 128, (32, *shape), dtype=np.int8),
        y_train=rng.integers(0, classes, 32),
        x_test=rng.integers(-128, 128, (8, *shape), dtype=np.int8),
        y_test=rng.integers(0, classes, 8),
    )
    common = [
        "--model",
        str(model),
        "--data",
        str(npz),
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--batch",
        "4",
        "--scheduler",
        "fixed",
        "--q",
        "2",
        "--calib-steps",
        "1",
        "--calib-q",
        "2",
    ]
    m55, host = tmp_path / "m55.jsonl", tmp_path / "host.jsonl"
    assert (
        main(
            [
                "run",
                "--board",
                "mps3-an547",
                "--out",
                str(tmp_path / "bundle"),
                "--log",
                str(m55),
                "--timeout",
                "600",
                *common,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "done (steps) after 4 steps" in out
    regions = {line.split()[1]: line for line in out.splitlines() if line.startswith("region  ")}
    assert "constant weights" in regions[weights] and "training data" in regions[data]
    assert main(["simulate", "--log", str(host), "--no-plot", *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(m55), str(host)]) == 0
    assert "IDENTICAL: 13 records (4 steps)" in capsys.readouterr().out  # with the update log and crc frames


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.zoo
def test_person_detect_trains_on_qemu_as_on_the_host(tmp_path, capsys):
    run_and_simulate(tmp_path, capsys, "person_detect")


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.slow
def test_mobilenet_v2_trains_on_qemu_as_on_the_host(tmp_path, capsys):
    run_and_simulate(tmp_path, capsys, "mobilenet_v2_0.35_128")
