"""The STM32N6 checkpoint store: the port's checkpoint hooks (zo_port_stm32n6_nor.c)
keep checkpoints in a reserved range at the end of the external NOR, the board's
[checkpoint_store] region.  No board is available: the store is checked as board data, as a
linked firmware (both boards, development and flash boot, warning-free: the Makefile has
-Werror), and its register facts by tests/test_n6_regs.py against ST's header."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import FIXTURES
from test_boards import board_text, edited, parse

from zoflash.cli import main
from zoflash.errors import BoardError
from zoflash.targets import boards

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
NOR_MIB = {"stm32n6570-dk": 128, "nucleo-n657x0-q": 64}  # MX66UW1G45G 1 Gbit, MX25UM51245G 512 Mbit
XSPI2_WINDOW = 0x70000000  # the NOR memory-mapped (RM0486; targets.md)
SECTOR = 4096  # both flashes' smallest erase


@pytest.mark.parametrize("board_id", sorted(NOR_MIB))
def test_the_store_is_the_nors_last_sectors_and_out_of_the_plan(board_id):
    b = boards.load_board(board_id)
    store, nor = b.region(b.checkpoint_store), b.region("XSPI2_NOR")
    assert store.kind == "flash" and store.end == XSPI2_WINDOW + (NOR_MIB[board_id] << 20)
    assert nor.end == store.origin and store.size % (2 * SECTOR) == 0 and store.size >= 2 << 20
    for mode in boards.BOOT_MODES:
        assert all(b.checkpoint_store not in c for c in boards.for_boot(b, mode).candidates.values())


@pytest.mark.parametrize(
    "old,new,message",
    [
        ('region = "XSPI2_CKPT"', 'region = "NOWHERE"', r"\[checkpoint_store\]: 'region' names 'NOWHERE', which"),
        ('region = "XSPI2_CKPT"', 'region = "RAM"', r"'region' must be of kind 'flash', but 'RAM' is 'ram'"),
        (
            'weights = ["IMAGE", "XSPI2_NOR"]',
            'weights = ["IMAGE", "XSPI2_CKPT"]',
            r"region 'XSPI2_CKPT' is reserved for checkpoints, but the placement of 'weights' lists it",
        ),
        ("size = 0x0040_0000", "size = 0x0040_1000", r"must be a non-zero multiple of 8192 bytes"),
    ],
)
def test_a_bad_store_is_named(old, new, message):
    with pytest.raises(BoardError, match=message):
        parse(edited("stm32n6570-dk", old, new))


def test_host_boards_refuse_a_store():
    with pytest.raises(BoardError, match="key 'checkpoint_store' is not used by boards of the 'host' port"):
        parse(board_text("host") + '\n[checkpoint_store]\nregion = "X"\n')


def _symbols(elf) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    return {name: int(value, 16) for value, name in re.findall(r"^([0-9a-f]+) \w (\S+)$", out, flags=re.M)}


@pytest.mark.cross
@pytest.mark.parametrize("board_id,boot", [("stm32n6570-dk", "dev"), ("nucleo-n657x0-q", "flash")])
def test_the_firmware_links_the_nor_hooks(tmp_path, board_id, boot):
    out = tmp_path / "b"
    assert (
        main(
            [
                "build",
                "--board",
                board_id,
                "--boot",
                boot,
                "--model",
                str(DIGITS),
                "--data",
                str(SHIFT),
                "--steps",
                "20",
                "--checkpoint-every",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    b = boards.load_board(board_id)
    store = b.region(b.checkpoint_store)
    sym = _symbols(next(out.glob("build/*.elf")))
    assert (sym["__zo_ckpt_store"], sym["__zo_ckpt_store_bytes"]) == (store.origin, store.size)
    image = b.region("IMAGE")
    for hook in ("zo_port_checkpoint_save", "zo_port_checkpoint_load"):  # the port's, not the weak defaults
        assert image.origin <= sym[hook] < image.end  # in RAM: runs while the NOR is out of memory-mapped mode
    nm = subprocess.run(
        ["arm-none-eabi-nm", "--defined-only", str(out / "build" / "obj" / "zo_checkpoint.o")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(r" W zo_port_checkpoint_save$", nm, flags=re.M)  # the trainer's default (zo_checkpoint.c) is weak
    sections = subprocess.run(
        ["arm-none-eabi-objdump", "-h", str(next(out.glob("build/*.elf")))], capture_output=True, text=True, check=True
    ).stdout
    for vma, size in re.findall(r"^\s+\d+ \S+\s+([0-9a-f]{8}) [0-9a-f]{8} ([0-9a-f]{8})", sections, flags=re.M):
        start, end = int(vma, 16), int(vma, 16) + int(size, 16)
        assert end <= store.origin or start >= store.end  # nothing placed in the store
