"""Flash runners: exact command lines per board and method, missing tools, boot switch messages,
CMSIS pack lookup (offline, cached, local file), QEMU state file, and a real QEMU run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest
from conftest import need_module, need_program

from zoflash.cli import main
from zoflash.errors import ToolMissingError
from zoflash.targets import runners
from zoflash.targets.runners import base, qemu
from zoflash.targets.runners import openocd as openocd_runner
from zoflash.targets.runners import pyocd as pyocd_runner
from zoflash.targets.runners import stm32cubeprogrammer as stm

ENTRY = 0x3418_0481  # a reset handler in AXISRAM2 (Thumb bit set)
DK, NUCLEO, AN547 = "stm32n6570-dk", "nucleo-n657x0-q", "mps3-an547"


def _elf_header(entry: int) -> bytes:
    """A 52-byte ELF32 little-endian ARM header: enough for the entry point."""
    ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    return (
        ident
        + (2).to_bytes(2, "little")
        + (40).to_bytes(2, "little")
        + (1).to_bytes(4, "little")
        + entry.to_bytes(4, "little")
        + bytes(52 - 28)
    )


def make_bundle(root: Path, board: str, prefix: str = "app", entry: int = ENTRY, built: bool = True) -> Path:
    d = root / f"bundle-{board}"
    (d / "build").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"manifest_version": 1, "board": board, "prefix": prefix}))
    if built:
        (d / "build" / f"{prefix}.elf").write_bytes(_elf_header(entry) + bytes(64))
        (d / "build" / f"{prefix}.bin").write_bytes(bytes(64))
        (d / "build" / f"{prefix}.hex").write_text(":00000001FF\n")
    return d


def make_pack(path: Path, device: str = "STM32N657X0HxQ") -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("Keil.STM32N6xx_DFP.pdsc", f'<package><devices><device Dname="{device}"/></devices></package>')
    return path


@pytest.fixture
def no_tools(monkeypatch, tmp_path):
    """No program on PATH, no STM32CubeProgrammer anywhere, no pyocd module."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(stm.PRG_ENV, raising=False)
    monkeypatch.setattr(stm, "_default_programmer_dirs", list)
    monkeypatch.setattr(stm, "_cubeclt_dirs", lambda sub: [])
    orig = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyocd" else orig(name, *a))
    return empty


def _firmware(d: Path, method: str) -> base.Firmware:
    return base.load_firmware(d, method)


def _commands(d: Path, method: str, **opts) -> list[list[str]]:
    fw = _firmware(d, method)
    return base.runner_for(fw.entry).commands(fw, base.FlashOptions(**opts))


# --------------------------------------------------------------------------- exact commands


@pytest.mark.parametrize(
    "board,loader", [(DK, "MX66UW1G45G_STM32N6570-DK.stldr"), (NUCLEO, "MX25UM51245G_STM32N6570-NUCLEO.stldr")]
)
def test_stm32cubeprogrammer_flash_commands(tmp_path, board, loader):
    d = make_bundle(tmp_path, board)
    cube = tmp_path / "cube" / "bin"
    b = d / "build"
    assert _commands(d, "flash", programmer_bin=cube) == [
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
        [
            f"{cube}/STM32_Programmer_CLI",
            "--connect",
            "port=swd",
            "mode=HOTPLUG",
            "ap=1",
            "-el",
            f"{cube}/ExternalLoader/{loader}",
            "--download",
            f"{b}/app-trusted.bin",
            "0x70000000",
            "--start",
        ],
    ]


@pytest.mark.parametrize("board", [DK, NUCLEO])
def test_stm32cubeprogrammer_ram_commands(tmp_path, board):
    d = make_bundle(tmp_path, board)
    cube = tmp_path / "cube" / "bin"
    assert _commands(d, "ram", programmer_bin=cube) == [
        ["ST-LINK_gdbserver", "-p", "61234", "-l", "1", "-d", "-s", "-m", "1", "-g", "-cp", str(cube)],
        [
            "arm-none-eabi-gdb",
            "-nx",
            "-batch",
            "-ex",
            "target remote :61234",
            "-ex",
            "load",
            "-ex",
            "detach",
            f"{d}/build/app.elf",
        ],
    ]
    fw = _firmware(d, "ram")
    opts = base.FlashOptions(programmer_bin=cube, tools={"arm-none-eabi-gdb": ["/usr/bin/gdb-multiarch"]})
    assert base.runner_for(fw.entry).commands(fw, opts)[1][0] == "/usr/bin/gdb-multiarch"


@pytest.mark.parametrize("board", [DK, NUCLEO])
def test_pyocd_commands_load_into_ram_without_reset(tmp_path, board):
    d = make_bundle(tmp_path, board)
    pack = tmp_path / "Keil.STM32N6xx_DFP.1.0.0.pack"
    assert _commands(d, "pyocd", pack=pack) == [
        [
            "pyocd",
            "commander",
            "--target",
            "stm32n657x0hxq",
            "--pack",
            str(pack),
            "--halt",
            "-c",
            f"load {d}/build/app.elf",
            "-c",
            "wreg pc 0x34180480",
            "-c",
            "go",
        ]
    ]


@pytest.mark.parametrize("board", [DK, NUCLEO])
def test_openocd_commands_load_into_ram_without_reset(tmp_path, board):
    d = make_bundle(tmp_path, board)
    elf = f"{d}/build/app.elf"
    assert _commands(d, "openocd") == [
        [
            "openocd",
            "-f",
            "interface/stlink-dap.cfg",
            "-f",
            "target/stm32n6x.cfg",
            "-c",
            "init",
            "-c",
            "halt",
            "-c",
            f"load_image {elf}",
            "-c",
            f"verify_image {elf}",
            "-c",
            "resume 0x34180480",
            "-c",
            "shutdown",
        ]
    ]


def test_flash_images_use_program_and_load(tmp_path):
    """A board whose code is in a flash region: `pyocd load` and OpenOCD's `program`."""
    d = make_bundle(tmp_path, DK)
    fw = _firmware(d, "openocd")
    code = fw.board.placement["code"]
    board = type(fw.board)(
        **{
            **fw.board.__dict__,
            "memory": tuple(
                type(r)(r.name, r.origin, r.size, "flash", r.description) if r.name == code else r
                for r in fw.board.memory
            ),
        }
    )
    elf = f"{d}/build/app.elf"
    fw = base.Firmware(d, board, fw.entry, "app")
    assert openocd_runner.OpenOcdRunner().commands(fw, base.FlashOptions()) == [
        [
            "openocd",
            "-f",
            "interface/stlink-dap.cfg",
            "-f",
            "target/stm32n6x.cfg",
            "-c",
            f"program {elf} verify reset exit",
        ]
    ]
    pfw = base.Firmware(d, board, base.select_entry(board, "pyocd"), "app")
    assert pyocd_runner.PyOcdRunner().commands(pfw, base.FlashOptions(pack=Path("/p/x.pack"))) == [
        ["pyocd", "load", "--target", "stm32n657x0hxq", "--pack", "/p/x.pack", elf]
    ]


def test_openocd_board_commands_and_tcl_quoting(tmp_path):
    d = make_bundle(tmp_path / "with space", DK)
    fw = _firmware(d, "openocd")
    entry = {**fw.entry, "commands": ["init", "reset halt", "load_image {elf}", "resume {entry}", "shutdown"]}
    fw = base.Firmware(fw.dir, fw.board, entry, "app")
    assert openocd_runner.OpenOcdRunner().commands(fw, base.FlashOptions()) == [
        [
            "openocd",
            "-f",
            "interface/stlink-dap.cfg",
            "-f",
            "target/stm32n6x.cfg",
            "-c",
            "init",
            "-c",
            "reset halt",
            "-c",
            f"load_image {{{d}/build/app.elf}}",
            "-c",
            "resume 0x34180480",
            "-c",
            "shutdown",
        ]
    ]


def test_qemu_command(tmp_path):
    d = make_bundle(tmp_path, AN547, entry=0x9)
    assert _commands(d, "qemu", port=4567) == [
        [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-nographic",
            "-semihosting",
            "-icount",
            "shift=0",
            "-monitor",
            "none",
            "-serial",
            "tcp:127.0.0.1:4567,server=on,wait=on,nodelay=on",
            "-kernel",
            f"{d}/build/app.elf",
        ]
    ]


def test_dry_run_prints_boot_switches_and_exact_commands(tmp_path, capsys, monkeypatch):
    d = make_bundle(tmp_path, DK)
    cube = tmp_path / "cube"
    (cube / "bin").mkdir(parents=True)
    (cube / "bin" / "STM32_Programmer_CLI").write_text("")
    monkeypatch.setenv(stm.PRG_ENV, str(cube))  # the install folder: bin/ is found below it
    assert main(["flash", "--bundle", str(d), "--method", "flash", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    boot = [ln for ln in out if ln.startswith("boot")]
    assert boot == [
        "boot    before loading, development mode: BOOT0 and BOOT1 both to the right (BOOT1 = 1: development mode, "
        "the boot ROM waits for the debugger)",
        "boot    after loading, to run it, flash mode: BOOT0 and BOOT1 both to the left (boot from the external "
        "flash), then press RESET",
    ]
    assert f"tools   STM32CubeProgrammer {cube}/bin (from ${stm.PRG_ENV})" in out
    assert out[-1] == (
        f"{cube}/bin/STM32_Programmer_CLI --connect port=swd mode=HOTPLUG ap=1 -el "
        f"{cube}/bin/ExternalLoader/MX66UW1G45G_STM32N6570-DK.stldr --download "
        f"{d}/build/app-trusted.bin 0x70000000 --start"
    )
    assert out.index(boot[0]) < len(out) - 2  # before any command


def test_nucleo_boot_jumpers(tmp_path, capsys):
    d = make_bundle(tmp_path, NUCLEO)
    assert main(["flash", "--bundle", str(d), "--method", "openocd", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "boot    before loading, development mode: JP1 on position 1, JP2 on position 2" in out
    assert "after loading" not in out


def test_qemu_dry_run_has_no_boot_switches(tmp_path, capsys):
    d = make_bundle(tmp_path, AN547)
    assert main(["flash", "--bundle", str(d), "--dry-run", "--port", "4999"]) == 0
    out = capsys.readouterr().out
    assert "\nboot " not in out and "tcp:127.0.0.1:4999,server=on,wait=on,nodelay=on" in out
    assert not (d / base.STATE_FILE).exists()


# --------------------------------------------------------------------------- choosing a method


def test_method_selection(tmp_path):
    d = make_bundle(tmp_path, DK)
    assert _firmware(d, None).entry["name"] == "ram"  # the board's first entry
    assert _firmware(d, "pyocd").entry["method"] == "pyocd"
    with pytest.raises(base.FlashError, match=r"several 'stm32cubeprogrammer' entries \(ram, flash\)"):
        _firmware(d, "stm32cubeprogrammer")
    with pytest.raises(base.FlashError, match="no flash method 'jlink' .*methods: ram, flash, pyocd, openocd"):
        _firmware(d, "jlink")
    assert set(base.RUNNERS) == {"qemu", "stm32cubeprogrammer", "pyocd", "openocd"}


def test_unbuilt_and_library_bundles(tmp_path, no_tools):
    d = make_bundle(tmp_path, AN547, built=False)
    with pytest.raises(base.FlashError, match="no firmware .*app.elf: build the bundle first"):
        runners.flash_bundle(d, say=lambda s: None)
    (d / "build" / "libapp.a").write_bytes(b"!<arch>\n")
    with pytest.raises(base.FlashError, match="model as a library"):
        runners.flash_bundle(d, say=lambda s: None)


def test_host_board_has_no_flash(tmp_path):
    d = make_bundle(tmp_path, "host")
    with pytest.raises(base.FlashError, match="no flash methods"):
        base.load_firmware(d)


def test_elf_entry(tmp_path):
    p = tmp_path / "a.elf"
    p.write_bytes(_elf_header(0x1234_5679))
    assert base.elf_entry(p) == 0x1234_5679
    p.write_bytes(b"not an elf" * 10)
    with pytest.raises(base.FlashError, match="not a 32-bit ELF"):
        base.elf_entry(p)


# ------------------------------------------------------------------------------ missing tools


@pytest.mark.parametrize(
    "board,method,tool,how",
    [
        (AN547, "qemu", "qemu-system-arm", "apt-get install qemu-system-arm"),
        (DK, "ram", "STM32_Programmer_CLI", "STM32CubeProg"),
        (NUCLEO, "flash", "STM32_Programmer_CLI", "STM32_PRG_PATH"),
        (DK, "openocd", "openocd", "apt-get install openocd"),
        (NUCLEO, "pyocd", "pyocd", "pip install pyocd"),
    ],
)
def test_missing_tool_is_one_line(tmp_path, no_tools, capsys, board, method, tool, how):
    d = make_bundle(tmp_path, board)
    args = ["flash", "--bundle", str(d), "--method", method]
    if method == "pyocd":
        args += ["--pack", str(make_pack(tmp_path / "x.pack"))]
    assert main(args) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert "\n" not in err and err.startswith(f"error: '{tool}' is not available") and how in err
    assert "Traceback" not in cap.err
    if board != AN547:  # the switch positions come first, before any tool is looked for
        assert "boot    before loading, development mode" in cap.out


def test_missing_gdb_and_gdbserver(tmp_path, no_tools, monkeypatch):
    d = make_bundle(tmp_path, DK)
    cube = tmp_path / "cube-bin"
    cube.mkdir()
    (cube / "STM32_Programmer_CLI").write_text("")
    monkeypatch.setenv(stm.PRG_ENV, str(cube))
    with pytest.raises(ToolMissingError, match="'ST-LINK_gdbserver' is not available: .*STM32CubeCLT"):
        runners.flash_bundle(d, "ram", say=lambda s: None)
    (no_tools / "ST-LINK_gdbserver").write_text("#!/bin/sh\n")
    (no_tools / "ST-LINK_gdbserver").chmod(0o755)
    with pytest.raises(ToolMissingError, match="'arm-none-eabi-gdb' is not available: .*gdb-multiarch"):
        runners.flash_bundle(d, "ram", say=lambda s: None)
    (no_tools / "gdb-multiarch").write_text("#!/bin/sh\n")
    (no_tools / "gdb-multiarch").chmod(0o755)
    fw = _firmware(d, "ram")
    opts = stm.StM32CubeProgrammerRunner().prepare(fw, base.FlashOptions())
    assert opts.tools["arm-none-eabi-gdb"] == [str(no_tools / "gdb-multiarch")]


def test_missing_signing_tool(tmp_path, no_tools, monkeypatch):
    d = make_bundle(tmp_path, DK)
    (no_tools / "STM32_Programmer_CLI").write_text("#!/bin/sh\n")
    (no_tools / "STM32_Programmer_CLI").chmod(0o755)
    with pytest.raises(
        ToolMissingError, match="'STM32_SigningTool_CLI' is not available: it comes with STM32CubeProgrammer"
    ):
        runners.flash_bundle(d, "flash", say=lambda s: None)


def test_programmer_found_through_path_link(tmp_path, monkeypatch):
    install = tmp_path / "STM32CubeProgrammer" / "bin"
    install.mkdir(parents=True)
    (install / "STM32_Programmer_CLI").write_text("#!/bin/sh\n")
    (install / "STM32_Programmer_CLI").chmod(0o755)
    links = tmp_path / "links"
    links.mkdir()
    (links / "STM32_Programmer_CLI").symlink_to(install / "STM32_Programmer_CLI")
    monkeypatch.setenv("PATH", str(links))
    assert stm.find_programmer_bin({}) == (install, "STM32_Programmer_CLI on PATH")
    assert stm.find_programmer_bin({stm.PRG_ENV: str(install)}) == (install, f"${stm.PRG_ENV}")
    assert stm.find_programmer_bin({stm.PRG_ENV: str(install.parent)}) == (install, f"${stm.PRG_ENV}")


# -------------------------------------------------------------- running programs (fake tools)


def _fake_tool(bindir: Path, name: str, body: str = "") -> Path:
    """A program that appends its argv (JSON) to calls.jsonl in its folder, then runs `body`."""
    p = bindir / name
    p.write_text(
        f"#!{sys.executable}\nimport json, sys, pathlib\n"
        f"with open(pathlib.Path(__file__).parent / 'calls.jsonl', 'a') as f:\n"
        f"    f.write(json.dumps([pathlib.Path(sys.argv[0]).name] + sys.argv[1:]) + '\\n')\n{body}"
    )
    p.chmod(0o755)
    return p


def _calls(bindir: Path) -> list[list[str]]:
    f = bindir / "calls.jsonl"
    return [json.loads(ln) for ln in f.read_text().splitlines()] if f.exists() else []


def test_stm32_flash_runs_the_exact_commands(tmp_path, no_tools, monkeypatch, capsys):
    d = make_bundle(tmp_path, NUCLEO)
    cube = tmp_path / "cube" / "bin"
    cube.mkdir(parents=True)
    _fake_tool(cube, "STM32_SigningTool_CLI")
    _fake_tool(cube, "STM32_Programmer_CLI", "print('File download complete')\n")
    monkeypatch.setenv(stm.PRG_ENV, str(cube))
    (d / "build" / "app-trusted.bin").write_bytes(b"old")  # removed first: the signing tool would ask
    res = runners.flash_bundle(d, "flash", say=print)
    assert [[Path(c[0]).name, *c[1:]] for c in res.commands] == _calls(cube)
    assert not (d / "build" / "app-trusted.bin").exists()
    out = capsys.readouterr().out
    assert "flash   [1/2] sign the FSBL image" in out and "flash   [2/2] write the external flash" in out
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith("flash   done: app-trusted.bin written to the external flash at 0x70000000")
    )


def test_failure_is_one_line_with_the_reason(tmp_path, no_tools, capsys):
    d = make_bundle(tmp_path, DK)
    _fake_tool(
        no_tools,
        "openocd",
        "print('Open On-Chip Debugger 0.12.0')\n"
        "print('Error: open failed', file=sys.stderr)\nprint('in procedure init')\n"
        "sys.exit(1)\n",
    )
    assert main(["flash", "--bundle", str(d), "--method", "openocd"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: load (OpenOCD): openocd failed (exit 1): Error: open failed (output in {d}/{base.FLASH_LOG})"
    )
    assert "in procedure init" in (d / base.FLASH_LOG).read_text()


def test_stm32_ram_retries_until_the_gdbserver_listens(tmp_path, no_tools, monkeypatch, capsys):
    d = make_bundle(tmp_path, DK)
    cube = tmp_path / "cube"
    cube.mkdir()
    _fake_tool(cube, "STM32_Programmer_CLI")
    monkeypatch.setenv(stm.PRG_ENV, str(cube))
    _fake_tool(no_tools, "ST-LINK_gdbserver", "import time\ntime.sleep(30)\n")
    # gdb: the first attempt finds no server yet, the second loads
    _fake_tool(
        no_tools,
        "arm-none-eabi-gdb",
        "n = sum(ln.startswith('[\"arm') for ln in open(pathlib.Path(__file__).parent / 'calls.jsonl'))\n"
        "if n < 2:\n    print(':61234: Connection refused.')\n    sys.exit(1)\n",
    )
    monkeypatch.setattr(stm.StM32CubeProgrammerRunner, "server_exit_wait", 0.2)
    t0 = time.monotonic()
    res = runners.flash_bundle(d, "ram", say=print)
    calls = _calls(no_tools)
    assert sorted(c[0] for c in calls) == ["ST-LINK_gdbserver", "arm-none-eabi-gdb", "arm-none-eabi-gdb"]
    server = next(c for c in calls if c[0] == "ST-LINK_gdbserver")
    gdb = [c for c in calls if c[0] == "arm-none-eabi-gdb"]
    assert server[1:] == res.commands[0][1:] and gdb[0][1:] == gdb[1][1:] == res.commands[1][1:]
    assert time.monotonic() - t0 < 10  # the server that does not exit is ended
    assert "flash   done: app.elf loaded into RAM and running" in capsys.readouterr().out


# ------------------------------------------------------------------------------- CMSIS packs


class FakeCache:
    def __init__(self, root: Path, index: dict | None = None, downloads: dict | None = None):
        self.index_path = str(root / "json" / "index.json")
        self.data_path = str(root / "data")
        self._index = index or {}
        self._downloads = downloads
        self.refreshed = 0

    @property
    def index(self):
        return self._index

    def cache_descriptors(self):  # offline: a warning, an empty index, no exception
        self.refreshed += 1
        print("warning: could not download the index", file=sys.stderr)
        if self._downloads:
            self._index = self._downloads


def _install_fake_cmsis(monkeypatch, cache: FakeCache):
    mod = types.ModuleType("cmsis_pack_manager")
    mod.Cache = lambda *a, **k: cache
    monkeypatch.setitem(sys.modules, "cmsis_pack_manager", mod)


N6_DEVICE = {"name": "STM32N657X0HxQ", "from_pack": {"vendor": "Keil", "pack": "STM32N6xx_DFP", "version": "1.1.0"}}


def test_pyocd_offline_says_so_and_suggests_a_local_pack(tmp_path, monkeypatch):
    cache = FakeCache(tmp_path)
    _install_fake_cmsis(monkeypatch, cache)
    d = make_bundle(tmp_path, DK)
    with pytest.raises(base.FlashError) as info:
        runners.flash_bundle(d, "pyocd", say=lambda s: None)
    msg = str(info.value)
    assert cache.refreshed == 1
    assert msg.startswith(
        "no CMSIS pack for 'stm32n657x0hxq': offline: cmsis-pack-manager could not download the "
        "CMSIS pack index (it stays empty"
    )
    assert "Keil.STM32N6xx_DFP" in msg and "--pack FILE.pack" in msg and "\n" not in msg


def test_pyocd_dry_run_does_not_download(tmp_path, monkeypatch, capsys):
    cache = FakeCache(tmp_path)
    _install_fake_cmsis(monkeypatch, cache)
    d = make_bundle(tmp_path, NUCLEO)
    assert main(["flash", "--bundle", str(d), "--method", "pyocd", "--dry-run"]) == 0
    assert cache.refreshed == 0
    out = capsys.readouterr().out
    assert "cmsis-pack-manager's pack index is empty" in out and "--pack '<Keil.STM32N6xx_DFP .pack>'" in out


def test_pyocd_pack_from_the_cache(tmp_path, monkeypatch):
    cache = FakeCache(tmp_path, downloads={"STM32N657X0HxQ": N6_DEVICE})
    _install_fake_cmsis(monkeypatch, cache)
    path, why = pyocd_runner.find_cached_pack("stm32n657x0hxq", "Keil.STM32N6xx_DFP")
    assert path is None and "Keil.STM32N6xx_DFP.1.1.0 for 'stm32n657x0hxq' is in the index but not downloaded" in why
    assert "pyocd pack install stm32n657x0hxq" in why
    pack = Path(cache.data_path) / "Keil" / "STM32N6xx_DFP" / "1.1.0.pack"
    pack.parent.mkdir(parents=True)
    make_pack(pack)
    assert pyocd_runner.find_cached_pack("stm32n657x0hxq", "Keil.STM32N6xx_DFP") == (pack, "")
    assert cache.refreshed == 1  # the index was empty once, then filled
    path, why = pyocd_runner.find_cached_pack("stm32h743zitx", "Keil.STM32H7xx_DFP")
    assert path is None and "device 'stm32h743zitx' is not in cmsis-pack-manager's pack index (1 devices)" in why


def test_pyocd_without_cmsis_pack_manager(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmsis_pack_manager", None)  # import fails
    path, why = pyocd_runner.find_cached_pack("stm32n657x0hxq", "Keil.STM32N6xx_DFP")
    assert path is None and why.startswith("'cmsis-pack-manager' is not available: install it with pip")


def test_real_cmsis_pack_manager_cache_layout(tmp_path):
    """The library's own Cache reads an index and the pack path follows its layout."""
    need_module("cmsis_pack_manager")
    import cmsis_pack_manager

    (tmp_path / "index.json").write_text(json.dumps({"STM32N657X0HxQ": N6_DEVICE}))
    cache = cmsis_pack_manager.Cache(True, True, json_path=str(tmp_path), data_path=str(tmp_path))
    pack = make_pack(tmp_path / "placeholder.pack")
    dest = tmp_path / "Keil" / "STM32N6xx_DFP" / "1.1.0.pack"
    dest.parent.mkdir(parents=True)
    pack.rename(dest)
    assert pyocd_runner.find_cached_pack("stm32n657x0hxq", "Keil.STM32N6xx_DFP", refresh=False, cache=cache) == (
        dest,
        "",
    )
    assert cache.pack_from_cache(N6_DEVICE).filename == str(dest)


def test_local_pack_is_accepted_and_checked(tmp_path, monkeypatch, capsys):
    cache = FakeCache(tmp_path)  # offline: the cache is never asked when --pack is given
    _install_fake_cmsis(monkeypatch, cache)
    d = make_bundle(tmp_path, DK)
    pack = make_pack(tmp_path / "Keil.STM32N6xx_DFP.1.1.0.pack")
    assert main(["flash", "--bundle", str(d), "--method", "pyocd", "--pack", str(pack), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert cache.refreshed == 0 and f"pack    {pack} (given with --pack)" in out
    assert f"--pack {pack} --halt" in out
    other = make_pack(tmp_path / "other.pack", device="STM32H743ZITx")
    assert any(
        "does not mention device 'stm32n657x0hxq'" in n for n in pyocd_runner.check_pack_file(other, "stm32n657x0hxq")
    )
    bad = tmp_path / "bad.pack"
    bad.write_text("not a zip")
    with pytest.raises(base.FlashError, match="not a CMSIS pack"):
        pyocd_runner.check_pack_file(bad, "x")
    with zipfile.ZipFile(tmp_path / "empty.pack", "w") as z:
        z.writestr("readme.txt", "")
    with pytest.raises(base.FlashError, match="holds no .pdsc"):
        pyocd_runner.check_pack_file(tmp_path / "empty.pack", "x")
    with pytest.raises(base.FlashError, match="does not exist"):
        pyocd_runner.check_pack_file(tmp_path / "nope.pack", "x")


# ------------------------------------------------------------------------------ QEMU state file


def test_stop_without_state(tmp_path, capsys):
    d = make_bundle(tmp_path, AN547)
    assert main(["flash", "--bundle", str(d), "--stop"]) == 0
    assert f"qemu    not running for {d} (no {base.STATE_FILE})" in capsys.readouterr().out


def test_stale_state_is_removed(tmp_path):
    d = make_bundle(tmp_path, AN547)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / base.STATE_FILE).write_text(json.dumps({"pid": dead.pid, "log": str(d / base.QEMU_LOG)}))
    (d / base.QEMU_LOG).write_text("[zoflash] qemu exited with status 0\n")
    lines = []
    assert qemu.stop_qemu(d, lines.append) is False
    assert lines == [
        f"qemu    was not running any more (stale {base.STATE_FILE} removed): [zoflash] qemu exited with status 0"
    ]
    assert not (d / base.STATE_FILE).exists()
    (d / base.STATE_FILE).write_text("{not json")
    assert qemu.stop_qemu(d, lines.append) is False and not (d / base.STATE_FILE).exists()


def test_a_reused_pid_is_never_signalled(tmp_path):
    """A state file naming a live process that is not QEMU (here: this test) is stale."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc to tell what a process is")
    d = make_bundle(tmp_path, AN547)
    for command in (["qemu-system-arm", "-M", "mps3-an547"], None):
        (d / base.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "command": command}))
        assert qemu.stop_qemu(d, lambda s: None) is False
        assert not (d / base.STATE_FILE).exists()


def test_stop_takes_only_the_bundle(tmp_path, capsys):
    d = make_bundle(tmp_path, AN547)
    assert main(["flash", "--bundle", str(d), "--stop", "--dry-run"]) == 2
    assert "--stop takes only --bundle" in capsys.readouterr().err


def test_qemu_timeout_must_be_positive(tmp_path, capsys):
    d = make_bundle(tmp_path, AN547)
    assert main(["flash", "--bundle", str(d), "--timeout", "0", "--dry-run"]) == 2
    assert "must be a positive number of seconds" in capsys.readouterr().err


# ------------------------------------------------------------------------------- real QEMU

ECHO_C = r"""
#include <stdint.h>
#define UART0 0x59303000u
#define REG(a) (*(volatile uint32_t *)(a))
extern uint32_t __stack_top;
void reset(void);
__attribute__((section(".vectors"), used)) static const void *vectors[2] = {&__stack_top, (void *)reset};
static void put(char c) { while (REG(UART0 + 4u) & 1u) {} REG(UART0) = (uint8_t)c; }
void reset(void)
{
    REG(UART0 + 0x10u) = 16u;
    REG(UART0 + 8u) = 3u;
    for (const char *s = "hello from the emulated Cortex-M55\n"; *s; ++s) put(*s);
    for (;;) {
        if (REG(UART0 + 4u) & 2u) put((char)REG(UART0));
    }
}
"""
ECHO_LD = """
MEMORY { ITCM (rx) : ORIGIN = 0x0, LENGTH = 512K  DTCM (rw) : ORIGIN = 0x20000000, LENGTH = 512K }
ENTRY(reset)
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > ITCM
  .bss (NOLOAD) : { *(.bss*) *(COMMON) } > DTCM
  __stack_top = ORIGIN(DTCM) + LENGTH(DTCM);
}
"""


@pytest.fixture
def echo_bundle(tmp_path):
    """A bundle for mps3-an547 whose firmware prints a line on UART0, then echoes what it gets."""
    d = make_bundle(tmp_path, AN547, built=False)
    (tmp_path / "echo.c").write_text(ECHO_C)
    (tmp_path / "echo.ld").write_text(ECHO_LD)
    subprocess.run(
        [
            need_program("arm-none-eabi-gcc"),
            "-mcpu=cortex-m55",
            "-mthumb",
            "-O1",
            "-ffreestanding",
            "-nostdlib",
            "-nostartfiles",
            "-Wall",
            "-Werror",
            "-T",
            str(tmp_path / "echo.ld"),
            "-Wl,--no-warn-rwx-segments",
            "-o",
            str(d / "build" / "app.elf"),
            str(tmp_path / "echo.c"),
        ],
        check=True,
        timeout=60,
    )
    yield d
    qemu.stop_qemu(d, lambda s: None)


def _url(out: str) -> str:
    return re.search(r"^serial  (socket://127\.0\.0\.1:\d+)", out, re.MULTILINE).group(1)


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while qemu._is_qemu(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_flash_serial_and_stop(echo_bundle, capsys):
    import serial

    d = echo_bundle
    assert main(["flash", "--bundle", str(d), "--timeout", "60"]) == 0
    url = _url(capsys.readouterr().out)
    state = json.loads((d / base.STATE_FILE).read_text())
    assert state["url"] == url and qemu._is_qemu(state["pid"])
    port = serial.serial_for_url(url, timeout=5)
    try:
        assert port.read_until(b"\n") == b"hello from the emulated Cortex-M55\n"  # nothing lost (wait=on)
        port.write(b"ping")
        assert port.read(4) == b"ping"
    finally:
        port.close()
    assert main(["flash", "--bundle", str(d), "--stop"]) == 0
    assert f"qemu    stopped (pid {state['pid']}, {url})" in capsys.readouterr().out
    assert not (d / base.STATE_FILE).exists() and _gone(state["pid"], 5)


@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_time_limit_and_restart(echo_bundle, capsys):
    d = echo_bundle
    assert main(["flash", "--bundle", str(d), "--timeout", "30"]) == 0
    first = json.loads((d / base.STATE_FILE).read_text())
    assert main(["flash", "--bundle", str(d), "--timeout", "1"]) == 0  # replaces the running one
    out = capsys.readouterr().out
    assert "qemu    replacing the QEMU already started for this bundle" in out and _gone(first["pid"], 5)
    second = json.loads((d / base.STATE_FILE).read_text())
    assert second["pid"] != first["pid"] and second["timeout_s"] == 1
    assert _gone(second["pid"], 8)  # nobody connected: stopped by the time limit
    deadline = time.monotonic() + 5
    while "time limit" not in (d / base.QEMU_LOG).read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert main(["flash", "--bundle", str(d), "--stop"]) == 0
    assert (
        "was not running any more (stale .zoflash-qemu.json removed): [zoflash] qemu stopped: time limit of 1 s reached"
    ) in capsys.readouterr().out


@pytest.mark.parametrize("board", [DK, NUCLEO])
def test_flash_boot_refuses_a_plan_with_data_outside_the_image(tmp_path, capsys, board):
    """The boot ROM copies only the image region: a build whose memory plan put the training
    data in AXISRAM1 runs in development mode only, and flash boot says so before any tool runs."""
    d = make_bundle(tmp_path, board)
    manifest = json.loads((d / "manifest.json").read_text())
    place = {
        "code": "IMAGE",
        "rodata": "IMAGE",
        "weights": "IMAGE",
        "train_data": "AXISRAM1",
        "data": "RAM",
        "bss": "RAM",
        "arena": "AXISRAM3_6",
        "stack": "RAM",
        "stack_bytes": 16384,
    }
    (d / "manifest.json").write_text(json.dumps({**manifest, "placement": place}))
    assert main(["flash", "--bundle", str(d), "--method", "flash", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "flash boot copies only the IMAGE image, but the memory plan put .train_data in AXISRAM1" in err
    assert "development mode (method 'ram')" in err
    assert main(["flash", "--bundle", str(d), "--method", "ram", "--dry-run"]) == 0  # the arena is not loaded
