"""`zoflash run` (build + flash + monitor) on the emulated Cortex-M55, and `zoflash compare`."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from zoflash.cli import main

DIGITS = str(FIXTURES / "digits_cnn.tflite")
SHIFT = str(FIXTURES / "digits_shift.npz")


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_run_on_qemu_equals_the_host_simulation(tmp_path, capsys):
    common = [
        "--model",
        DIGITS,
        "--data",
        SHIFT,
        "--steps",
        "60",
        "--eval-every",
        "30",
        "--scheduler",
        "critical",
        "--headroom",
        "0",
    ]  # at the default (2 bits) 60 steps at the auto lr, no lr trial, do not lower the loss
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
                "300",
                *common,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "region  ITCM" in out and "socket://127.0.0.1:" in out and "done (steps) after 60 steps" in out
    assert (tmp_path / "m55.weights.npz").is_file() and (tmp_path / "m55.png").is_file()
    assert not (tmp_path / "bundle" / ".zoflash-qemu.json").exists()  # the emulator is gone
    assert main(["simulate", "--log", str(host), "--no-plot", *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(m55), str(host)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    records = [json.loads(line) for line in m55.read_text().splitlines()]
    assert sum(r["type"] == "step" for r in records) == 60
    evals = [r for r in records if r["type"] == "eval"]
    assert evals[-1]["loss"] < 0.6 * evals[0]["loss"]  # training on the device really learns


def test_compare_reports_the_first_difference(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rec = {"type": "step", "step": 0, "q": 1, "loss": 2.5, "time_s": 1.0}
    a.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "step": 1}) + "\n")
    b.write_text(json.dumps({**rec, "time_s": 9.0}) + "\n" + json.dumps({**rec, "step": 1, "loss": 2.25}) + "\n")
    assert main(["compare", str(a), str(b)]) == 1
    assert "record 1 (step): loss: 2.5 vs 2.25" in capsys.readouterr().out
    b.write_text(json.dumps({**rec, "time_s": 9.0}) + "\n" + json.dumps({**rec, "step": 1, "time_s": 3.0}) + "\n")
    assert main(["compare", str(a), str(b)]) == 0
    b.write_text(json.dumps(rec) + "\n")
    assert main(["compare", str(a), str(b)]) == 1
    assert "2 vs 1 records" in capsys.readouterr().out


def test_run_refuses_the_host_board(tmp_path, capsys):
    assert (
        main(
            ["run", "--board", "host", "--model", DIGITS, "--data", SHIFT, "--steps", "5", "--out", str(tmp_path / "b")]
        )
        == 2
    )
    assert "zoflash simulate" in capsys.readouterr().err
