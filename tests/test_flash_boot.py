"""Flash boot on the STM32N6 boards: the boot modes as board data, the plan that puts
code and small data in the signed FSBL image and large weights and data in the memory-mapped NOR,
the two images, the exact signing and programming commands, and the [build] project table.

Nothing here runs on a board (none is available): the images are checked as files, the
programs as command lines."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from conftest import FIXTURES
from n6regs import port_dir
from test_boards import board_text, parse
from test_flash import make_bundle

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError
from zoflash.targets import boards
from zoflash.targets.budget import BudgetError
from zoflash.targets.runners import base
from zoflash.training.options import make_options

DIGITS = FIXTURES / "digits_cnn.tflite"
DK, NUCLEO = "stm32n6570-dk", "nucleo-n657x0-q"
IMAGE_BYTES = 255 * 1024  # the boot ROM copies at most ~255 KB (targets.md): 0x34180400..0x341C0000
SAMPLE = 8 * 8 + 2  # an int8 8x8 image and its uint16 label


def _dataset(path, n_train: int):
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.random((n_train, 8, 8, 1), dtype=np.float32),
        y_train=rng.integers(0, 10, n_train),
        x_test=rng.random((10, 8, 8, 1), dtype=np.float32),
        y_test=rng.integers(0, 10, 10),
    )
    return path


def _no_compiling(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the compiler ran")

    monkeypatch.setattr("zoflash.targets.firmware_build.run_make", refuse)


# ------------------------------------------------------------------------------ board data


@pytest.mark.parametrize("board_id,nor_mib", [(DK, 128), (NUCLEO, 64)])
def test_flash_boot_is_board_data(board_id, nor_mib):
    dev = boards.load_board(board_id)
    flash = boards.for_boot(dev, "flash")
    assert boards.for_boot(dev, "dev") is dev and dev.boot_mode == "dev" and flash.boot_mode == "flash"
    assert flash.candidates["weights"] == flash.candidates["train_data"] == ("IMAGE", "XSPI2_NOR")
    for key in ("data", "bss", "arena", "stack"):
        assert flash.candidates[key] == dev.candidates[key]
    # the code and its constants: in the image, where the boot ROM copies it (FLEXMEM in development
    # mode when the arena covers AXISRAM1..6, test_n6_span.py)
    assert flash.candidates["code"] == flash.candidates["rodata"] == ("IMAGE",)
    assert dev.candidates["code"] == dev.candidates["rodata"] == ("IMAGE", "FLEXMEM")
    image, fsbl, nor = dev.region("IMAGE"), dev.region("XSPI2_FSBL"), dev.region("XSPI2_NOR")
    assert (image.origin, image.size) == (0x34180400, IMAGE_BYTES)
    entry = next(f for f in dev.flash if f["name"] == "flash")
    assert fsbl.origin == entry["address"] == 0x70000000 and fsbl.end == nor.origin == 0x70100000
    store = dev.region(dev.checkpoint_store)  # the NOR's last sectors: checkpoints (test_n6_nor.py)
    assert store.end - fsbl.origin == nor_mib << 20 and nor.end == store.origin
    assert nor.kind == "flash" and nor.enable == ("XSPI2",)
    switches = boards.load_port("stm32n6").memories
    port_c = (port_dir() / "zo_port_stm32n6.c").read_text()  # the start-up code tests the same bit
    assert int(re.search(r"#define SWITCH_XSPI2 (\d+)u", port_c)[1]) == switches.index("XSPI2") == 5


def test_boards_without_flash_boot_say_so(tmp_path, capsys):
    with pytest.raises(BoardError, match="board 'mps3-an547' has no flash boot"):
        boards.for_boot(boards.load_board("mps3-an547"), "flash")
    assert (
        main(
            [
                "build",
                "--board",
                "host",
                "--boot",
                "flash",
                "--model",
                str(DIGITS),
                "--no-compile",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 2
    )
    assert (
        "board 'host' has no flash boot ([flash_boot] in its board file): build it with --boot dev"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "old,new,message",
    [
        (
            'train_data = ["IMAGE", "XSPI2_NOR"]',
            'train_data = ["IMAGE", "AXISRAM1"]',
            r"'train_data' may use only the image region 'IMAGE' or flash regions .* lists 'AXISRAM1'",
        ),
        ('fsbl = "XSPI2_FSBL"', 'fsbl = "RAM"', "'fsbl' must be a region of kind 'flash', but 'RAM' is 'ram'"),
        ('image = "IMAGE"', 'image = "SRAM9"', "'image' names region 'SRAM9'"),
        ('image = "IMAGE"', 'image = "RAM"', "the code must be placed in the image region 'RAM'"),
        ('fsbl = "XSPI2_FSBL"', 'fsbl = "XSPI2_FSBL"\nstack_bytes = 4', "unknown key 'stack_bytes'"),
    ],
)
def test_bad_flash_boot_tables(old, new, message):
    text = board_text(DK)
    assert old in text
    with pytest.raises(BoardError, match=message):
        parse(text.replace(old, new))


# ---------------------------------------------------------------------------------- the plan


def test_flash_boot_keeps_large_data_in_the_nor(tmp_path, monkeypatch):
    """5000 samples (330 KB) do not fit the 255 KiB image: in flash boot they stay in the NOR
    (switch XSPI2 on), in development mode they go to AXISRAM1; the rest is placed alike."""
    _no_compiling(monkeypatch)
    data = _dataset(tmp_path / "d.npz", 5000)
    opts = make_options(steps=5)
    flash = api.generate(DIGITS, "stm32n6", tmp_path / "flash", data_path=data, options=opts, boot="flash")
    dev = api.generate(DIGITS, "stm32n6", tmp_path / "dev", data_path=data, options=opts)
    pf, pd = flash.manifest["placement"], dev.manifest["placement"]
    assert (flash.manifest["boot"], dev.manifest["boot"]) == ("flash", "dev")
    assert (pf["train_data"], pd["train_data"]) == ("XSPI2_NOR", "AXISRAM1")
    assert {k: v for k, v in pf.items() if k != "train_data"} == {k: v for k, v in pd.items() if k != "train_data"}
    link = (tmp_path / "flash" / "link.ld").read_text()
    assert "} > XSPI2_NOR" in link.split(".train_data :")[1].split(".rodata :")[0]
    assert "XSPI2_NOR (rx) : ORIGIN = 0x70100000, LENGTH = 0x7B00000" in link  # the last 4 MiB: checkpoints
    assert "__zo_enable_memories = 0x00000020;" in link  # XSPI2 only
    make = (tmp_path / "flash" / "Makefile").read_text()
    assert "all: build/digits_cnn.elf build/digits_cnn.bin build/digits_cnn.hex build/digits_cnn_nor.bin\n" in make
    assert "an image written at 0x70100000" in make
    assert "\t$(OBJCOPY) -O binary -j .train_data $< $@" in make
    assert "$(OBJCOPY) -O binary -j .text -j .ARM.extab -j .ARM.exidx -j .weights -j .rodata -j .data $< $@" in make
    assert "_nor.bin" not in (tmp_path / "dev" / "Makefile").read_text()


def test_flash_boot_with_small_data_is_one_image(tmp_path, monkeypatch):
    _no_compiling(monkeypatch)
    bundle = api.generate(
        DIGITS,
        "stm32n6",
        tmp_path / "b",
        data_path=_dataset(tmp_path / "d.npz", 100),
        options=make_options(steps=5),
        boot="flash",
    )
    assert bundle.manifest["placement"]["train_data"] == "IMAGE"
    assert "__zo_enable_memories = 0x00000000;" in (tmp_path / "b" / "link.ld").read_text()
    assert "_nor.bin" not in (tmp_path / "b" / "Makefile").read_text()


def _shrunk_board(monkeypatch, tmp_path, old: str, new: str):
    root = tmp_path / "boards"
    root.mkdir()
    text = (
        board_text(DK).replace('id = "stm32n6570-dk"', 'id = "small"').replace("reference = true", "reference = false")
    )
    assert old in text
    # the variant has no NPU: its pools sit at the full board's addresses (boards/*.toml [npu])
    text = re.sub(r"# --- NPU ---.*# --- end NPU ---\n", "", text, flags=re.S)
    (root / "small.toml").write_text(text.replace(old, new))
    host = boards._board_files()["host"]  # the headroom report (--headroom auto) runs the model on the host
    monkeypatch.setattr(boards, "_board_files", lambda: {"host": host, **{p.stem: p for p in root.glob("*.toml")}})


def test_flash_boot_says_what_does_not_fit_and_what_would(tmp_path, monkeypatch):
    """A board variant with a 64 KiB NOR: 5000 samples fit neither the image nor the NOR; the
    error gives both regions' numbers and how many samples would fit."""
    _no_compiling(monkeypatch)
    _shrunk_board(monkeypatch, tmp_path, "size = 0x07B0_0000", "size = 0x0001_0000")
    data = _dataset(tmp_path / "d.npz", 5000)
    with pytest.raises(BudgetError) as err:
        api.generate(DIGITS, "small", tmp_path / "b", data_path=data, options=make_options(steps=5), boot="flash")
    text = str(err.value)
    need = (5000 + 10) * SAMPLE
    # the data goes where it misses by least: the image (partly used by the code), then says so
    m = re.search(
        r"region IMAGE \(ram, 261120 bytes at 0x34180400\): (\d+) needed .*?training data (\d+), "
        r".*?; (\d+) bytes more than its 261120",
        text,
    )
    assert m and int(m[2]) == need and int(m[1]) - 261120 == int(m[3])
    others = int(m[1]) - need  # code and constants in the image
    fits = (261120 - others - 10 * SAMPLE) // SAMPLE
    assert (
        f"At most {fits} of the 5000 training samples ({SAMPLE} bytes each, with the 10 test samples; the "
        "validation split is carved from them) fit in the regions the data may use (IMAGE, XSPI2_NOR)." in text
    )
    assert "Or build for flash boot" not in text  # it is a flash-boot build already


def test_development_mode_reads_large_data_from_the_nor(tmp_path, monkeypatch, capsys):
    """30000 samples fit no SRAM region: in development mode they are read in place from the NOR
    too. The ram method writes them there (external loader), then gdb loads the ELF without them;
    methods that cannot write the NOR refuse and name the one that can."""
    _no_compiling(monkeypatch)
    data = _dataset(tmp_path / "d.npz", 30000)
    d = tmp_path / "b"
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(DIGITS),
                "--data",
                str(data),
                "--steps",
                "5",
                "--out",
                str(d),
                "--no-compile",
            ]
        )
        == 0
    )
    manifest = json.loads((d / "manifest.json").read_text())
    assert (manifest["boot"], manifest["placement"]["train_data"]) == ("dev", "XSPI2_NOR")
    assert manifest["placement"]["arena"] != "XSPI2_NOR"
    make = (d / "Makefile").read_text()
    assert "build/digits_cnn_nor.bin build/digits_cnn_ram.elf\n" in make
    assert "\t$(OBJCOPY) -R .train_data $< $@" in make
    assert "__zo_enable_memories = 0x00000020;" in (d / "link.ld").read_text()  # the port maps the NOR
    capsys.readouterr()
    cube = tmp_path / "cube" / "bin"
    fw = base.load_firmware(d, "ram")
    b = d / "build"
    cmds = base.runner_for(fw.entry).commands(fw, base.FlashOptions(programmer_bin=cube))
    assert cmds[0] == [
        f"{cube}/STM32_Programmer_CLI",
        "--connect",
        "port=swd",
        "mode=HOTPLUG",
        "ap=1",
        "-el",
        f"{cube}/ExternalLoader/MX66UW1G45G_STM32N6570-DK.stldr",
        "--download",
        f"{b}/digits_cnn_nor.bin",
        "0x70100000",
    ]
    assert cmds[1][0].endswith("ST-LINK_gdbserver") and cmds[2][-1] == f"{b}/digits_cnn_ram.elf"
    assert main(["flash", "--bundle", str(d), "--method", "pyocd", "--dry-run"]) == 2
    assert (
        "reads weights or data in place from the external flash at 0x70100000, which method 'pyocd' does "
        "not write: use --method ram"
    ) in capsys.readouterr().err


# ------------------------------------------------------------------------------- the images


@pytest.mark.cross
def test_flash_boot_build_emits_both_images(tmp_path, capsys, monkeypatch):
    """Cross-compiled. With a code estimate far too small (1000 bytes) the plan puts 3600
    samples in the image, which the linker finds too small: the build plans again with the sizes
    of the objects it compiled, and the data goes to the NOR. Then the FSBL image holds the image
    region's sections only, the NOR image exactly the training data's section, linked at the NOR
    region's origin; the build prints the signing command and the NOR image's address."""
    from zoflash.targets import budget

    real = budget.load_port
    monkeypatch.setattr(budget, "load_port", lambda name: replace(real(name), code_bytes=1000))
    data = _dataset(tmp_path / "d.npz", 3600)
    estimate = boards.for_boot(boards.load_board(DK), "flash")
    assert budget.fit(estimate, api.compile_model(api.load_model(DIGITS)), None).placement["weights"] == "IMAGE"
    out = tmp_path / "b"
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--boot",
                "flash",
                "--model",
                str(DIGITS),
                "--data",
                str(data),
                "--steps",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    build = out / "build"
    elf, image, nor = build / "digits_cnn.elf", build / "digits_cnn.bin", build / "digits_cnn_nor.bin"
    sizes = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True, check=True).stdout
    sec = {
        r[0]: (int(r[1]), int(r[2]))
        for r in (ln.split() for ln in sizes.splitlines())
        if len(r) == 3 and r[1].isdigit()
    }
    assert sec[".train_data"][1] == 0x70100000 and nor.stat().st_size == sec[".train_data"][0]
    blob = nor.read_bytes()
    for name in ("x_train", "y_train", "x_test", "y_test"):  # the data files the training reads
        part = (out / f"digits_cnn_{name}.bin").read_bytes()
        assert part in blob and part not in image.read_bytes()
    # the file's 3600 training images: the training split and the validation split carved from it
    assert sum((out / f"digits_cnn_x_{split}.bin").stat().st_size for split in ("train", "val")) == 3600 * 64
    assert sec[".text"][1] == 0x34180400 and image.stat().st_size <= IMAGE_BYTES
    assert f"region  XSPI2_NOR (flash, 128974848 bytes at 0x70100000): {sec['.train_data'][0]} used" in text
    assert (
        f"signed by: STM32_SigningTool_CLI -bin {image} -nk -of 0x80000000 -t fsbl -hv 2.3 -o "
        f"{build / 'digits_cnn-trusted.bin'}"
    ) in text
    assert (
        f"image   {nor} ({nor.stat().st_size} bytes): weights and data read in place, written to the "
        "external flash at 0x70100000" in text
    )
    assert "firmware build/digits_cnn.elf, build/digits_cnn.bin, build/digits_cnn.hex, build/digits_cnn_nor.bin" in text


def _flash_boot_bundle(tmp_path, board_id: str):
    d = make_bundle(tmp_path, board_id)
    (d / "build" / "app_nor.bin").write_bytes(bytes(32))
    manifest = json.loads((d / "manifest.json").read_text())
    place = {
        "code": "IMAGE",
        "rodata": "IMAGE",
        "weights": "XSPI2_NOR",
        "train_data": "XSPI2_NOR",
        "data": "RAM",
        "bss": "RAM",
        "arena": "AXISRAM1",
        "stack": "RAM",
        "stack_bytes": 16384,
    }
    (d / "manifest.json").write_text(json.dumps({**manifest, "placement": place, "boot": "flash"}))
    return d


@pytest.mark.parametrize(
    "board_id,loader", [(DK, "MX66UW1G45G_STM32N6570-DK.stldr"), (NUCLEO, "MX25UM51245G_STM32N6570-NUCLEO.stldr")]
)
def test_flash_boot_writes_both_images(tmp_path, board_id, loader):
    d = _flash_boot_bundle(tmp_path, board_id)
    cube = tmp_path / "cube" / "bin"
    fw = base.load_firmware(d, "flash")
    b = d / "build"
    write = [
        f"{cube}/STM32_Programmer_CLI",
        "--connect",
        "port=swd",
        "mode=HOTPLUG",
        "ap=1",
        "-el",
        f"{cube}/ExternalLoader/{loader}",
    ]
    assert base.runner_for(fw.entry).commands(fw, base.FlashOptions(programmer_bin=cube)) == [
        [
            f"{cube}/STM32_SigningTool_CLI",
            "-bin",
            f"{b}/app.bin",
            "-nk",
            "-of",
            "0x80000000",
            "-t",
            "fsbl",
            "-hv",
            "2.3",
            "-o",
            f"{b}/app-trusted.bin",
        ],
        [*write, "--download", f"{b}/app_nor.bin", "0x70100000"],
        [*write, "--download", f"{b}/app-trusted.bin", "0x70000000", "--start"],
    ]


def test_flash_boot_needs_the_nor_image(tmp_path, capsys):
    d = _flash_boot_bundle(tmp_path, DK)
    (d / "build" / "app_nor.bin").unlink()
    assert main(["flash", "--bundle", str(d), "--method", "flash"]) == 2
    assert "app_nor.bin" in capsys.readouterr().err


# --------------------------------------------------------------------------- project file


def test_boot_mode_from_the_project_file(tmp_path, monkeypatch, capsys):
    _no_compiling(monkeypatch)
    data = _dataset(tmp_path / "d.npz", 5000)
    project = tmp_path / "zoflash.toml"
    project.write_text('[build]\nboot = "flash"\n\n[train]\nsteps = 5\n')
    args = [
        "build",
        "--board",
        "stm32n6",
        "--model",
        str(DIGITS),
        "--data",
        str(data),
        "--no-compile",
        "--config",
        str(project),
    ]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["boot"] == "flash"
    assert main([*args, "--out", str(tmp_path / "b"), "--boot", "dev"]) == 0  # the flag wins
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["boot"] == "dev"
    project.write_text('[build]\nboot = "usb"\n')
    assert main([*args, "--out", str(tmp_path / "c")]) == 2
    assert "[build]: 'boot' must be one of dev, flash, got 'usb'" in capsys.readouterr().err
    project.write_text('[build]\nbot = "flash"\n')
    assert main([*args, "--out", str(tmp_path / "c")]) == 2
    assert "[build]: unknown key(s) bot; known: boot, device_headers" in capsys.readouterr().err


@pytest.mark.cross
def test_a_library_that_overflows_the_image_is_planned_again(tmp_path, monkeypatch):
    """The inference library's code estimate (20 KiB) is well below the kernels it compiles: on a
    board variant whose image has room for the compiled code but not for the weights as well,
    the size report overflows, and the build plans again with the objects' sizes: the weights go
    to the NOR."""
    first = api.build(DIGITS, DK, tmp_path / "probe", boot="flash")
    image = next(u for u in first.regions if u.region.name == "IMAGE")
    code = sum(i.bytes for i in image.items if i.label != "constant weights")
    room = code + 1024  # the compiled code and constants fit, the 3920 bytes of weights do not
    _shrunk_board(
        monkeypatch, tmp_path, "origin = 0x3418_0400\nsize = 0x0003_FC00", f"origin = 0x3418_0400\nsize = {room:#x}"
    )
    result = api.build(DIGITS, "small", tmp_path / "b", boot="flash")
    assert result.bundle.manifest["placement"]["weights"] == "XSPI2_NOR"
    nor = next(u for u in result.regions if u.region.name == "XSPI2_NOR")
    assert [(i.label, i.bytes) for i in nor.items] == [("constant weights", 3920)]
    assert "__zo_enable_memories = 0x00000020;" in (tmp_path / "b" / "link.ld").read_text()


@pytest.mark.parametrize("method", ["ram", "pyocd", "openocd"])
def test_a_flash_boot_build_is_written_by_the_flash_method_only(tmp_path, capsys, method):
    d = _flash_boot_bundle(tmp_path, DK)
    assert main(["flash", "--bundle", str(d), "--method", method, "--dry-run"]) == 2
    assert (
        "this build keeps weights or data in the external flash at 0x70100000 (--boot flash), which method "
        f"'{method}' does not write: use --method flash"
    ) in capsys.readouterr().err
