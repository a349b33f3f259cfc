"""--mode continual on the STM32N6: the A/B weight slots are the two halves of the board's
checkpoint store in the external NOR (zo_bundle.h switches the generated controller to the port's
zo_port_cl_slot / zo_port_cl_slot_write, zo_port_stm32n6_nor.c).  No board is available: the
firmware is checked as built (both boards, development and flash boot, warning-free: the Makefile
has -Werror), never run."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.targets import boards

pytestmark = pytest.mark.cross

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"


def _symbols(elf) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    return {name: int(value, 16) for value, name in re.findall(r"^([0-9a-f]+) \w (\S+)$", out, flags=re.M)}


def _build(out, board_id: str, boot: str) -> int:
    argv = ["build", "--board", board_id, "--boot", boot, "--model", str(DIGITS), "--data", str(SHIFT)]
    return main([*argv, "--mode", "continual", "--data-source", "stream", "--steps", "20", "--out", str(out)])


@pytest.mark.parametrize("board_id,boot", [("stm32n6570-dk", "dev"), ("nucleo-n657x0-q", "flash")])
def test_the_slots_are_in_the_nor_store(tmp_path, board_id, boot):
    out = tmp_path / "b"
    assert _build(out, board_id, boot) == 0
    assert "#define ZO_CL_SLOT_WRITE zo_port_cl_slot_write" in (out / "zo_bundle.h").read_text()
    sym = _symbols(next(out.glob("build/*.elf")))
    assert not any(name.endswith(("_cl_slot_a", "_cl_slot_b")) for name in sym)  # no slot arrays in RAM
    b = boards.load_board(board_id)
    image = b.region("IMAGE")
    for hook in ("zo_port_cl_slot", "zo_port_cl_slot_write", "zo_cl_start"):
        assert image.origin <= sym[hook] < image.end  # in RAM: runs while the NOR is out of memory-mapped mode


def test_other_boards_keep_the_slots_in_ram(tmp_path):
    out = tmp_path / "b"
    argv = ["build", "--board", "mps3-an547", "--model", str(DIGITS), "--data", str(SHIFT), "--mode", "continual"]
    assert main([*argv, "--data-source", "stream", "--steps", "20", "--out", str(out)]) == 0
    assert "ZO_CL_SLOTS_IN_STORE" not in (out / "zo_bundle.h").read_text()
    sym = _symbols(next(out.glob("build/*.elf")))
    assert any(name.endswith("_cl_slot_a") for name in sym) and "zo_port_cl_slot_write" not in sym
