"""Every public model zoflash compiles, on both STM32N6 boards in development mode (the debugger
loads the whole ELF into the SRAM) and in flash boot: inference fits, and head training (the default trainable part)
with 1000 training samples at the model's input size fits, with its plan per region.

The STM32N657 has 4 MiB of SRAM and the training data is one array in one region: where 1000
samples are more than the largest region the data may use (person_detect's are 9.2 MB), the plan
must refuse with how many samples do fit, that many must really fit and one more must not, and
flash boot (`--boot flash`: the data read in place from the memory-mapped NOR) must fit the 1000.
The MobileNetV2 0.35 is the stand-in (tests/fixtures/make_standin_mobilenetv2.py), not a public model.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import FIXTURES
from test_public_models import EXPECTED, PUBLIC
from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError, UnsupportedModelError
from zoflash.targets.boards import load_board
from zoflash.targets.budget import BudgetError
from zoflash.training.options import make_options
from zoflash.training.plan import plan_training

BOARDS = ("stm32n6570-dk", "nucleo-n657x0-q")
MODELS = sorted(PUBLIC / k for k, v in EXPECTED.items() if v == "bit-exact") + [
    FIXTURES / "standin_mobilenet_v2_0.35_128.tflite"]
SAMPLES = 1000
TESTS = 16
# models zoflash compiles but does not train (a clear refusal, checked below)
NOT_TRAINED = {
    "keyword_svdf.tflite": "keeps state across invokes",
    "microwakeword_hey_mycroft.tflite": "keeps state across invokes",
    "mnist_lstm.tflite": "keeps state across invokes",
    "arm_ds_cnn_small_int16.tflite": "int16 activations",
}


def ids(paths):
    return [p.name for p in paths]


def synthetic_data(path, model_path, n: int):
    """n training samples (and TESTS test samples) of the model's input type and shape, labels or
    targets as its default loss wants; seeded."""
    model = api.load_model(model_path)
    t = model.graph.tensors[model.graph.inputs[0]]
    plan = plan_training(api.compile_model(model), make_options())
    rng = np.random.default_rng(n)
    info = np.iinfo(t.dtype)
    x = rng.integers(info.min, info.max, (n + TESTS, *t.shape[1:]), endpoint=True).astype(t.dtype)
    if plan.loss == "mse":
        y = np.zeros((n + TESTS, *api.compile_model(model).storage(plan.logits).shape[1:]), np.float32)
    else:
        y = rng.integers(0, 2 if plan.loss == "sigmoid-bce" else plan.classes, n + TESTS)
    np.savez(path, x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])
    return path, x.itemsize * int(np.prod(t.shape[1:]))


def check_plan(plan, data_bytes: int | None = None, boot: str = "dev"):
    """The per-region plan: every region within its size, the hot state in the board's RAM."""
    assert plan.regions and all(u.used <= u.region.size for u in plan.regions)
    names = {u.region.name for u in plan.regions}
    kinds = ("ram",) if boot == "dev" else ("ram", "flash")  # development mode: SRAM only
    assert names <= {r.name for r in plan.board.memory if r.kind in kinds}
    ram = {r.name for r in plan.board.memory if r.kind == "ram"}
    assert {plan.board.placement[p] for p in ("arena", "stack")} <= ram
    by_name = {u.region.name: u for u in plan.regions}
    assert "arena" in {it.label for it in by_name[plan.board.placement["arena"]].items}
    if data_bytes is not None:
        data = by_name[plan.board.placement["train_data"]]
        assert {it.label: it.bytes for it in data.items}["training data"] >= data_bytes


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", MODELS, ids=ids(MODELS))
def test_inference_fits(model, board):
    check_plan(api.plan_memory(model, board))
    check_plan(api.plan_memory(model, board, boot="flash"), boot="flash")


@pytest.mark.parametrize("model", MODELS, ids=ids(MODELS))
def test_head_training_with_1000_samples(model, tmp_path):
    if model.name in NOT_TRAINED:
        m = api.load_model(model)
        t = m.graph.tensors[m.graph.inputs[0]]
        x = np.zeros((TESTS, *t.shape[1:]), t.dtype)
        np.savez(tmp_path / "data.npz", x_train=x, y_train=np.zeros(TESTS, int), x_test=x, y_test=np.zeros(TESTS, int))
        with pytest.raises(UnsupportedModelError, match=NOT_TRAINED[model.name]):
            api.plan_memory(model, BOARDS[0], tmp_path / "data.npz")
        return
    data, sample_bytes = synthetic_data(tmp_path / "data.npz", model, SAMPLES)
    for board in BOARDS:
        # flash boot: whatever does not fit the image is read in place from the NOR
        check_plan(api.plan_memory(model, board, data, boot="flash"), SAMPLES * sample_bytes, boot="flash")
        try:
            plan = api.plan_memory(model, board, data)
        except BudgetError as err:
            too_big_for_sram(model, board, str(err), sample_bytes, tmp_path)
            continue
        check_plan(plan, SAMPLES * sample_bytes)


def too_big_for_sram(model, board: str, message: str, sample_bytes: int, tmp_path):
    b = load_board(board)
    regions = {r.name: r for r in b.memory}
    data_bytes = (SAMPLES + TESTS) * sample_bytes
    assert data_bytes > max(regions[c].size for c in b.candidates["train_data"]), message
    assert "--boot flash" in message  # what would fit: the 1000 samples, read in place from the NOR
    fits = int(re.search(rf"At most (\d+) of the {SAMPLES} training samples", message).group(1))
    assert 0 < fits < SAMPLES
    check_plan(api.plan_memory(model, board, synthetic_data(tmp_path / "n.npz", model, fits)[0]),
               fits * sample_bytes)
    with pytest.raises(BudgetError):
        api.plan_memory(model, board, synthetic_data(tmp_path / "n1.npz", model, fits + 1)[0])


@pytest.mark.cross
def test_build_for_stm32n6_links_the_plan(tmp_path, capsys):
    """`zoflash build --board stm32n6` cross-compiles and links person_detect's head training with
    as many images as the SRAM holds: the data in AXISRAM3..6, which the port turns on."""
    model = PUBLIC / "person_detect.tflite"
    data, _ = synthetic_data(tmp_path / "pd.npz", model, 150)
    assert main(["build", "--board", "stm32n6", "--model", str(model), "--data", str(data), "--steps", "3",
                 "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "b" / "build" / "person_detect.elf").is_file()
    row = next(line for line in out.splitlines() if line.startswith("region  AXISRAM3_6"))
    images = (150 + TESTS) * 96 * 96  # int8 samples; then a uint16 label each, aligned
    assert images < int(re.search(r"training data (\d+)", row).group(1)) <= images + 2 * (150 + TESTS) + 16


def test_plan_memory_needs_a_firmware_board():
    with pytest.raises(BoardError, match="no memory regions"):
        api.plan_memory(MODELS[0], "host")
