"""--mode continual on the boards: the continual firmware builds for the STM32N6 boards and the
emulated Cortex-M55 (warnings are errors), its memory (rings, candidate, factory copy, A/B slots)
is in the build's report and fit check, and under QEMU it decides exactly as the host simulation
(the same records, bit for bit, on a stream with a shift)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.monitor.session import read_log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import continual_streams as streams  # noqa: E402

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
CONTINUAL = ["--mode", "continual", "--data-source", "stream", "--steps", "20", "--duty", "0.75", "--calib-q", "1"]
CONTINUAL += ["--holdout", "32", "--buffer", "32"]


def _build(tmp_path, board: str, capsys) -> tuple[Path, str]:
    out = tmp_path / board
    code = main(
        ["build", "--board", board, "--model", str(DIGITS), "--data", str(SHIFT), *CONTINUAL, "--out", str(out)]
    )
    assert code == 0
    return out, capsys.readouterr().out


@pytest.mark.cross
@pytest.mark.parametrize("board", ["stm32n6570-dk", "mps3-an547"])
def test_continual_firmware_builds_and_reports_its_memory(tmp_path, capsys, board):
    out, text = _build(tmp_path, board, capsys)
    assert (out / "build" / "digits_cnn.elf").stat().st_size > 0
    make = (out / "Makefile").read_text()
    assert (
        "zo_continual.c" in make
        and "zo_continual_main.c" in make
        and "zo_train_main.c" not in make.split("SOURCES")[-1]
    )
    # the report names the continual memory: 32 + 32 samples of 64 + 2 bytes, the candidate, the
    # factory copy and two slots of the 2570 trainable values (2560 int8 weights + their residuals,
    # 10 int32 biases: 5160 bytes) with their 16-byte headers
    # (on the STM32N6 the slots are in the NOR's checkpoint store: tests/test_continual_n6_slots.py)
    in_nor = " in the NOR (XSPI2_CKPT, not RAM)" if board == "stm32n6570-dk" else ""
    assert (
        "RAM     continual (training ring 32 samples 2112, held-back ring 32 samples 2112, candidate 5160, "
        f"factory 5160, A/B slots 10352{in_nor})" in text
    )
    # ... and the fit check counts it: the zero-initialised RAM holds the training state and it
    # (the slots' 10352 bytes less, and the slot struct's alignment, on the STM32N6)
    assert f"zero-initialised RAM (training state) {30312 if in_nor else 40656}" in text
    manifest = (out / "manifest.json").read_text()
    assert '"ab_slots_bytes": 10352' in manifest and '"episode_steps": 20' in manifest


def test_continual_options_are_checked_together(tmp_path, capsys):
    code = main(["build", "--board", "host", "--model", str(DIGITS), "--data", str(SHIFT), "--mode", "continual"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--mode continual serves samples as they arrive: add --data-source stream" in err


def _stream(path: Path) -> None:
    """500 samples as built (the detectors warm up), then 700 rotated by 35 degrees."""
    x = np.load(ROOT / "examples" / "digits_test_x.npy")[..., 0]
    y = np.load(ROOT / "examples" / "digits_test_y.npy")
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, len(x), 500), rng.integers(0, len(x), 700)
    xs = np.concatenate([streams.transform("as-built", 0, x[a], rng), streams.transform("rotate", 35.0, x[b], rng)])
    np.savez(path, x=xs[..., None], y=np.concatenate([y[a], y[b]]))


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_continual_is_bit_identical_to_the_host(tmp_path, capsys):
    stream = tmp_path / "stream.npz"
    _stream(stream)
    common = ["--model", str(DIGITS), "--data", str(SHIFT), *CONTINUAL, "--stream", str(stream)]
    m55, host = tmp_path / "m55.jsonl", tmp_path / "host.jsonl"
    assert (
        main(
            [
                "run",
                "--board",
                "mps3-an547",
                "--out",
                str(tmp_path / "b"),
                "--log",
                str(m55),
                "--timeout",
                "600",
                *common,
            ]
        )
        == 0
    )
    assert main(["simulate", "--log", str(host), "--no-plot", *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(m55), str(host)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    decisions = [r["decision"] for r in read_log(m55) if r["type"] == "continual" and r["decision"] != "window"]
    assert decisions[:3] == ["boot", "suspected", "episode"]
    assert decisions[3] in ("accepted", "rejected")  # the episode ended in a decision before the stream did
