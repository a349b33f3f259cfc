"""Every public model zoflash compiles, on both STM32N6 boards in development mode (the debugger
loads the ELF into the SRAM) and in flash boot: inference fits, and head training (the default trainable part)
with 1000 training samples at the model's input size fits, with its plan per region.

The STM32N657 has 4 MiB of SRAM and the training data is one array in one region: where 1000
samples are more than the largest SRAM region the data may use (person_detect's are 9.2 MB), the
data is read in place from the memory-mapped NOR, in development mode (the ram method writes it
there first) as in flash boot; the hot state (arena, stack, RAM data) stays in the SRAM.
The MobileNetV2 0.35 is the stand-in (tests/fixtures/make_standin_mobilenetv2.py), not a public model.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC, zoo_param
from test_public_models import EXPECTED

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError, UnsupportedModelError
from zoflash.training.options import make_options
from zoflash.training.plan import plan_training

BOARDS = ("stm32n6570-dk", "nucleo-n657x0-q")
STANDIN = FIXTURES / "standin_mobilenet_v2_0.35_128.tflite"
MODELS = sorted(PUBLIC / k for k, v in EXPECTED.items() if v == "bit-exact") + [STANDIN]
MODEL_PARAMS = [m if m == STANDIN else zoo_param(m) for m in MODELS]
SAMPLES = 1000
TESTS = 16
# models zoflash compiles but does not train (a clear refusal, checked below)
NOT_TRAINED: dict[str, str] = {}


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


def check_plan(plan, data_bytes: int | None = None):
    """The per-region plan: every region within its size, the hot state in the board's RAM, only
    weights and training data (read in place) in the external flash, and there only when they fit
    no SRAM region of theirs."""
    assert plan.regions and all(u.used <= u.region.size for u in plan.regions)
    kind = {r.name: r.kind for r in plan.board.memory}
    for part in ("arena", "stack", "data", "bss"):
        assert kind[plan.board.placement[part]] == "ram", part
    by_name = {u.region.name: u for u in plan.regions}
    assert "arena" in {it.label for it in by_name[plan.board.placement["arena"]].items}
    for u in plan.regions:
        if kind[u.region.name] == "flash":
            assert {it.label for it in u.items} <= {"training data", "constant weights"}, u.describe()
    if data_bytes is not None:
        region = plan.board.placement["train_data"]
        assert {it.label: it.bytes for it in by_name[region].items}["training data"] >= data_bytes
        # the room each SRAM candidate has beside what else the plan put there
        sram = [
            plan.board.region(c).size
            - sum(it.bytes for it in (by_name[c].items if c in by_name else ()) if it.label != "training data")
            for c in plan.board.candidates["train_data"]
            if kind[c] == "ram"
        ]
        assert (kind[region] == "flash") == (data_bytes > max(sram)), region


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("model", MODEL_PARAMS, ids=ids(MODELS))
def test_inference_fits(model, board):
    check_plan(api.plan_memory(model, board))
    check_plan(api.plan_memory(model, board, boot="flash"))


@pytest.mark.parametrize("model", MODEL_PARAMS, ids=ids(MODELS))
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
        for boot in ("dev", "flash"):  # whatever fits no SRAM region is read in place from the NOR
            check_plan(api.plan_memory(model, board, data, boot=boot), SAMPLES * sample_bytes)


@pytest.mark.zoo
@pytest.mark.cross
def test_build_for_stm32n6_links_the_plan(tmp_path, capsys):
    """`zoflash build --board stm32n6` cross-compiles and links person_detect's head training with
    as many images as the SRAM holds: the data in AXISRAM3..6, which the port turns on."""
    model = PUBLIC / "person_detect.tflite"
    data, _ = synthetic_data(tmp_path / "pd.npz", model, 150)
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(model),
                "--data",
                str(data),
                "--steps",
                "3",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (tmp_path / "b" / "build" / "person_detect.elf").is_file()
    row = next(line for line in out.splitlines() if line.startswith("region  AXISRAM3_6"))
    images = (150 + TESTS) * 96 * 96  # int8 samples; then a uint16 label each, aligned
    assert images < int(re.search(r"training data (\d+)", row).group(1)) <= images + 2 * (150 + TESTS) + 16


def test_plan_memory_needs_a_firmware_board():
    with pytest.raises(BoardError, match="no memory regions"):
        api.plan_memory(STANDIN, "host")


@pytest.mark.cross
def test_development_mode_links_the_data_in_the_nor(tmp_path, capsys):
    """30000 digits (2 MB, more than any SRAM region) in development mode: the linked ELF holds them
    at the NOR's address; the ELF the debugger loads (_ram.elf) holds everything else but them."""
    import subprocess

    model = FIXTURES.parent.parent / "examples" / "digits_cnn.tflite"
    data, _ = synthetic_data(tmp_path / "d.npz", model, 30000)
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(model),
                "--data",
                str(data),
                "--steps",
                "3",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert re.search(
        r"^region  XSPI2_NOR \(flash, \d+ bytes at 0x70100000\): \d+ used .*: training data \d+$",
        capsys.readouterr().out,
        re.M,
    )
    build = tmp_path / "b" / "build"

    def sections(elf):
        out = subprocess.run(["arm-none-eabi-objdump", "-h", str(elf)], capture_output=True, text=True).stdout
        return {
            f[1]: int(f[3], 16) for f in (line.split() for line in out.splitlines()) if len(f) > 3 and f[0].isdigit()
        }

    whole, ram = sections(build / "digits_cnn.elf"), sections(build / "digits_cnn_ram.elf")
    assert whole[".train_data"] == 0x70100000 and ".train_data" not in ram
    assert {k: v for k, v in whole.items() if k != ".train_data"} == ram
    assert (build / "digits_cnn_nor.bin").stat().st_size >= 30000 * 64
