"""The adaptation tasks of benchmarks/experiments.py (made by tests/fixtures/make_sensor_task.py and
make_vision_task.py): the domain shift is real (the pretrained int8 model, run in TFLM, is clearly
worse on the target than on the source, which is the target with the shift undone), ZO head
training recovers part of it, and the vision task fits the STM32N6 and trains under QEMU exactly
as the host simulation does, for its two trainable settings."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.cli import main
from zoflash.targets import boards
from zoflash.targets.budget import section_sizes
from zoflash.training.options import make_options
from zoflash.workflows.simulate import simulate

SENSOR = (FIXTURES / "motions_cnn.tflite", FIXTURES / "motions_shift.npz")
VISION = (FIXTURES / "fmnist_mbv2.tflite", FIXTURES / "fmnist_shift.npz")
VISION_SETTINGS = {"head": "last:1", "block": "last:2"}


def unrotate_watch(x: np.ndarray) -> np.ndarray:
    """The inverse of the sensor shift (x, y, z) -> (y, -x, z), on both 3-axis sensors."""
    out = x.copy()
    for base in (0, 3):
        out[..., base], out[..., base + 1] = -x[..., base + 1], x[..., base]
    return out


def unrotate_image(x: np.ndarray) -> np.ndarray:
    """Near the source domain: the 30-degree rotation undone (interpolated twice, corners lost)."""
    from scipy import ndimage

    return ndimage.rotate(x, -30, axes=(1, 2), reshape=False, order=1)


def tflm_accuracy(model, x, y) -> float:
    sys.path.insert(0, str(FIXTURES))
    from make_fixtures import tflm_predict  # the TFLM interpreter, independent of zoflash

    return float(np.mean(np.argmax(tflm_predict(model.read_bytes(), x), axis=1) == y))


@pytest.mark.tflm
@pytest.mark.parametrize(
    "task, undo, n, source_min, drop_min",
    [(SENSOR, unrotate_watch, 400, 0.95, 0.15), (VISION, unrotate_image, 150, 0.70, 0.30)],
    ids=["sensor", "vision"],
)
def test_the_shift_is_real(task, undo, n, source_min, drop_min):
    model, data = task
    with np.load(data) as d:
        x, y = d["x_test"][:n], d["y_test"][:n]
    source, target = tflm_accuracy(model, undo(x), y), tflm_accuracy(model, x, y)
    assert source >= source_min and target <= source - drop_min, (source, target)


@pytest.mark.cc
def test_zo_head_training_recovers_the_sensor_task():
    opts = make_options(scheduler="fixed", q=1, seed=1, budget=20_000, eval_every=100)
    res = simulate(*SENSOR, opts, log_path=None, engine="c", plot=False)
    acc = [r["accuracy"] for r in res.records if r["type"] == "eval"]
    assert acc[-1] >= acc[0] + 0.10, acc


def test_vision_head_training_fits_the_stm32n6(tmp_path):
    opts = make_options(train=VISION_SETTINGS["head"])
    plan = api.plan_memory(VISION[0], "stm32n6570-dk", VISION[1], options=opts)
    assert plan is not None


def test_vision_block_training_fits_the_stm32n6_in_both_boot_modes():
    """161k trainable parameters: their pretrained values go with the constant weights (not into
    the 255 KiB image region with the code) and their RAM copy with the RAM data."""
    opts = make_options(train=VISION_SETTINGS["block"])
    for boot, weights in (("dev", "AXISRAM2"), ("flash", "XSPI2_NOR")):
        plan = api.plan_memory(VISION[0], "stm32n6570-dk", VISION[1], options=opts, boot=boot)
        assert plan.board.placement["weights"] == weights and plan.board.placement["data"] == "RAM", boot


@pytest.mark.cross
@pytest.mark.parametrize("setting, boot", [("head", "dev"), ("block", "dev"), ("block", "flash")])
def test_vision_training_links_for_the_stm32n6(tmp_path, capsys, setting, boot):
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(VISION[0]),
                "--data",
                str(VISION[1]),
                "--train",
                VISION_SETTINGS[setting],
                "--boot",
                boot,
                "--steps",
                "3",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    elf = tmp_path / "b" / "build" / "fmnist_mbv2.elf"
    sections = {name: (addr, size) for name, size, addr in section_sizes("arm-none-eabi-size", elf)}
    board = boards.load_board("stm32n6570-dk")
    trainable = sections[".trainable"]  # the RAM copy of the trained tensors, nothing loaded there
    assert board.region("RAM").origin <= trainable[0] and trainable[0] + trainable[1] <= board.region("RAM").end
    assert trainable[1] >= (161_290 if setting == "block" else 12_810)


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(VISION_SETTINGS))
def test_vision_trains_on_qemu_as_on_the_host(tmp_path, capsys, setting):
    with np.load(VISION[1]) as d:  # a slice of the real adaptation set: a few steps, not learning
        np.savez(
            tmp_path / "data.npz",
            x_train=d["x_train"][:32],
            y_train=d["y_train"][:32],
            x_test=d["x_test"][:8],
            y_test=d["y_test"][:8],
        )
    common = [
        "--model",
        str(VISION[0]),
        "--data",
        str(tmp_path / "data.npz"),
        "--train",
        VISION_SETTINGS[setting],
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
                "900",
                *common,
            ]
        )
        == 0
    )
    assert "done (steps) after 4 steps" in capsys.readouterr().out
    assert main(["simulate", "--log", str(host), "--no-plot", *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(m55), str(host)]) == 0
    assert "IDENTICAL: 13 records (4 steps)" in capsys.readouterr().out  # with the update log and crc frames
