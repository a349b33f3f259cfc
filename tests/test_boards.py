"""Boards are data: every board file validates, the schema rejects unknown and missing keys by
name, family names select the reference board, and `zoflash boards` lists and shows them."""

from __future__ import annotations

import sys
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib

import pytest
from conftest import ROOT

from zoflash.cli import main
from zoflash.errors import BoardError
from zoflash.targets import boards

BOARDS = ("host", "mps3-an547", "nucleo-n657x0-q", "stm32n6570-dk")
ARM = BOARDS[1:]
M55_FLAGS = ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16", "-O2"]


def board_text(board_id: str) -> str:
    return (ROOT / "boards" / f"{board_id}.toml").read_text()


def parse(text: str):
    return boards.parse_board(text, "board file test.toml")


def edited(board_id: str, old: str, new: str) -> str:
    text = board_text(board_id)
    assert old in text, old
    return text.replace(old, new, 1)


def test_every_board_file_loads():
    found = {b.id: b for b in boards.list_boards()}
    assert set(BOARDS) <= set(found)
    for bid in ARM:
        b = found[bid]
        assert b.is_firmware and b.toolchain.cc == "arm-none-eabi-gcc"
        assert list(b.toolchain.cflags) == M55_FLAGS
        assert b.cpu["core"] == "cortex-m55" and b.console["baud"] == 115200
        assert b.placement["stack_bytes"] > 0 and b.flash
    assert not found["host"].is_firmware and found["mps3-an547"].emulated


def test_stm32n6_facts():
    dk, nucleo = boards.load_board("stm32n6570-dk"), boards.load_board("nucleo-n657x0-q")
    for b in (dk, nucleo):
        assert b.family == "stm32n6" and b.port == "stm32n6"
        assert (b.console["uart"], b.console["tx"], b.console["rx"]) == ("USART1", "PE5", "PE6")
        assert all(vid == 0x0483 for vid, _ in b.usb_ids) and (0x0483, 0x374E) in b.usb_ids
        assert b.region_of("code").origin == 0x34180400  # where the boot ROM copies the FSBL image
        sram = sum(r.size for r in b.memory if r.kind == "ram")
        assert sram == 4096 * 1024 - 1024  # all the SRAM but the video encoder's 128 KiB and the image header
        assert {r.name: r.enable for r in b.memory if r.enable} == {
            "AXISRAM3_6": ("AXISRAM3", "AXISRAM4", "AXISRAM5", "AXISRAM6"),
            "NPU_CACHE_RAM": ("CACHEAXIRAM",),
            "XSPI2_NOR": ("XSPI2",),
        }
        assert b.region("AXISRAM3_6").origin == 0x34200000 and b.region("AXISRAM3_6").end == 0x343C0000
        methods = {f["name"]: f for f in b.flash}
        assert {m["method"] for m in methods.values()} == {"stm32cubeprogrammer", "pyocd", "openocd"}
        assert methods["flash"]["address"] == 0x70000000 and "fsbl" in methods["flash"]["sign"]
        assert methods["pyocd"]["pack"] == "Keil.STM32N6xx_DFP"
        assert set(b.boot) >= {"development", "flash"}
    assert dk.reference and not nucleo.reference
    loaders = {b.id: next(f for f in b.flash if f["name"] == "flash")["external_loader"] for b in (dk, nucleo)}
    assert loaders == {
        "stm32n6570-dk": "MX66UW1G45G_STM32N6570-DK.stldr",
        "nucleo-n657x0-q": "MX25UM51245G_STM32N6570-NUCLEO.stldr",
    }


def test_family_name_selects_the_reference_board():
    board, note = boards.resolve_board("stm32n6")
    assert board.id == "stm32n6570-dk" and note.startswith("stm32n6 -> stm32n6570-dk")
    board, note = boards.resolve_board("nucleo-n657x0-q")
    assert board.id == "nucleo-n657x0-q" and note is None
    with pytest.raises(BoardError, match="unknown board 'stm32h7'.*families: .*stm32n6"):
        boards.resolve_board("stm32h7")


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('family = "stm32n6"', 'family = "stm32n6"\ncolour = "blue"', "unknown key 'colour'"),
        ("baud = 115200", "", r"\[console\]: missing required key 'baud'"),
        ("baud = 115200", 'baud = "fast"', "'baud' must be an integer"),
        ('kind = "flash"', 'kind = "rom"', "'kind' must be one of 'ram', 'flash'"),
        (
            'arena = ["RAM", ',
            'arena = ["SRAM9", ',
            r"\[placement\] 'arena' names region 'SRAM9'.*regions: FLEXMEM, AXISRAM1",
        ),
        ('arena = ["RAM", ', "arena = [7, ", "'arena' must be a string or a list of strings"),
        ('code = ["IMAGE", "FLEXMEM"]', 'code = "FLEXMEM"', "the code must be placed in the image region 'IMAGE'"),
        ('stack = ["RAM", "FLEXMEM"]', 'stack = "AXISRAM3_6"', "'stack' must be in a region that is on at reset"),
        (
            'enable = ["CACHEAXIRAM"]',
            'enable = ["DDR"]',
            "needs memory switch 'DDR', which port 'stm32n6' does not have",
        ),
        ('stack = ["RAM", "FLEXMEM"]', 'stack = "XSPI2_NOR"', "'stack' must be in a region of kind 'ram'"),
        ("origin = 0x341C_0000", "origin = 0x341B_0000", "regions 'IMAGE' .* and 'RAM' .* overlap"),
        ('name = "RAM"', 'name = "IMAGE"', "name 'IMAGE' is defined 2 times"),
        ('uart = "USART1"', 'uart = "USART2"', "'uart' is 'USART2' but port 'stm32n6' drives only USART1"),
        ('"0483:374E", ', '"0483-374E", ', "'usb' entries are 'VVVV:PPPP'"),
        (
            'pack = "Keil.STM32N6xx_DFP"\n',
            "",
            r"\[\[flash\]\] #3 \('pyocd'\) \(method pyocd\): missing required key 'pack'",
        ),
        (
            'external_loader = "MX66UW1G45G_STM32N6570-DK.stldr"\naddress',
            "address",
            "missing required key 'external_loader' "
            r"\(flash mode\)",
        ),
        ('run_boot = "flash"', 'run_boot = "sd-card"', "'run_boot' names boot mode 'sd-card'"),
        ('method = "pyocd"', 'method = "jlink"', "'method' must be one of"),
        (
            'target = "stm32n657x0hxq"',
            'target = "stm32n657x0hxq"\nmachine = "x"',
            r"\(method pyocd\): unknown key 'machine'",
        ),
        ('port = "stm32n6"', 'port = "stm32f4"', "port 'stm32f4' does not exist"),
        ('[cpu]\ncore = "cortex-m55"', '[processor]\ncore = "cortex-m55"', "unknown key 'processor'"),
        ('size = "arm-none-eabi-size"\n', "", r"\[toolchain\]: missing required key 'size'"),
    ],
)
def test_schema_errors_name_the_file_and_key(old, new, message):
    with pytest.raises(BoardError, match=message) as err:
        parse(edited("stm32n6570-dk", old, new))
    assert str(err.value).startswith("board file test.toml")


def test_firmware_tables_are_required_and_host_boards_refuse_them():
    text = board_text("mps3-an547")
    cut = text[: text.index("[console]")] + text[text.index("[[flash]]") :]
    with pytest.raises(BoardError, match="missing required key 'console'"):
        parse(cut)
    with pytest.raises(BoardError, match="key 'cpu' is not used by boards of the 'host' port"):
        parse(board_text("host") + '\n[cpu]\ncore = "x"\nclock_hz = 1\n')
    with pytest.raises(BoardError, match="id 'host' must equal the file name 'other'"):
        boards.parse_board(board_text("host"), "board file other.toml", expected_id="other")
    with pytest.raises(BoardError, match="not valid TOML"):
        parse("id = ")


def test_a_new_board_is_a_toml_file_only(tmp_path, monkeypatch):
    """A board for an existing port needs no Python: a copy with other regions just works."""
    root = tmp_path / "board_files"
    root.mkdir()
    for bid in BOARDS:
        (root / f"{bid}.toml").write_text(board_text(bid))
    text = edited("stm32n6570-dk", 'id = "stm32n6570-dk"', 'id = "my-n6-board"').replace(
        "reference = true", "reference = false"
    )
    (root / "my-n6-board.toml").write_text(text.replace('arena = ["RAM", ', 'arena = ["AXISRAM1", '))
    monkeypatch.setattr(boards, "_board_files", lambda: {p.stem: p for p in root.glob("*.toml")})
    b = boards.load_board("my-n6-board")
    assert b.region_of("arena").name == "AXISRAM1" and b.family == "stm32n6"
    assert boards.resolve_board("stm32n6")[0].id == "stm32n6570-dk"
    (root / "my-n6-board.toml").write_text(text.replace("reference = false", "reference = true"))
    with pytest.raises(BoardError, match="family 'stm32n6' has several reference boards"):
        boards.resolve_board("stm32n6")


def test_port_files_validate():
    ports = resources.files("zoflash.firmware_templates") / "ports"
    for name in ("host", "mps3-an547", "stm32n6"):
        port = boards.load_port(name)
        assert port.kind == ("host" if name == "host" else "firmware")
        assert tomllib.loads((ports / name / "port.toml").read_text())["kind"] == port.kind
    assert boards.load_port("stm32n6").base == "cortex-m"


def test_cli_lists_and_shows_boards(capsys):
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    for bid in BOARDS:
        assert bid in out
    line = next(ln for ln in out.splitlines() if ln.startswith("mps3-an547"))
    assert "emulated" in line
    assert "family reference" in next(ln for ln in out.splitlines() if ln.startswith("stm32n6570-dk"))
    assert main(["boards", "show", "stm32n6"]) == 0
    out = capsys.readouterr().out
    assert "stm32n6 -> stm32n6570-dk" in out
    for fact in (
        "USART1 (TX PE5, RX PE6) 115200 baud",
        "0x34180400",
        "0483:374E",
        "MX66UW1G45G_STM32N6570-DK.stldr",
        "BOOT0 and BOOT1 both to the left",
        "Keil.STM32N6xx_DFP",
        "stm32n6x.cfg",
        "-mfpu=fpv5-d16",
    ):
        assert fact in out, fact
    assert main(["boards", "show", "nope"]) == 2
    assert "unknown board 'nope'" in capsys.readouterr().err
