"""`zoflash build --npu neural-art` (STM32N6): the board's NPU facts, the memory-pool profile and
stedgeai's command line as text, the NPU's pools in the memory plan, and the glue compiled for the
Cortex-M55 against a stand-in of the ll_aton declarations it calls (tests/ll_aton_standin/).

No stedgeai, no ST runtime and no Neural-ART NPU exist here: the build is driven by a fake
stedgeai that writes the files the real one does (names from ST's documentation), so what runs is
zoflash's side only."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib

import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError, ToolMissingError
from zoflash.targets import boards, neuralart
from zoflash.targets.npu import backend_for

MODEL, DATA = FIXTURES / "digits_cnn.tflite", FIXTURES / "digits_shift.npz"
STANDIN = Path(__file__).resolve().parent / "ll_aton_standin"
FACTS = tomllib.loads((FIXTURES / "stm32n657xx_facts.toml").read_text())["facts"]
N6_BOARDS = ("stm32n6570-dk", "nucleo-n657x0-q")


@pytest.mark.parametrize("board_id", N6_BOARDS)
def test_the_n6_boards_carry_the_npu_facts_of_st_s_header(board_id):
    board = boards.load_board(board_id)
    npu = board.npu
    assert (npu["type"], npu["base"], npu["irq"]) == ("neural-art", FACTS["ZO_NPU_BASE"], FACTS["ZO_NPU0_IRQ"])
    ram = [p for p in npu["pools"] if p["use"] == "activations"]
    # AXISRAM3..6: 448 KiB each, back to back from 0x34200000 (RM0486 memory map), then the NPU cache's RAM
    assert [(p["name"], p["origin"], p["size"]) for p in ram] == [
        (f"AXISRAM{i}", 0x34200000 + (i - 3) * 0x70000, 0x70000) for i in range(3, 7)
    ]
    cache = next(p for p in npu["pools"] if p["use"] == "cache")
    assert (cache["origin"], cache["size"]) == (0x343C0000, 0x40000)  # CACHEAXI_RAM_BASE_S, CACHEAXI_RAM_SIZE
    assert backend_for("neural-art").name == "neural-art"


def test_ethos_u_and_neural_art_are_refused_on_each_other_s_boards():
    with pytest.raises(BoardError, match="has an ethos-u55 NPU, not a Neural-ART"):
        neuralart.check(boards.load_board("mps3-an547"), "neural-art")
    with pytest.raises(BoardError, match="board 'host' has no NPU"):
        neuralart.check(boards.load_board("host"), "neural-art")
    with pytest.raises(BoardError, match="not an NPU configuration zoflash knows"):
        backend_for("hexagon")


def test_the_profile_gives_the_npu_its_pools_and_the_constants_one_pool():
    dev = boards.load_board("stm32n6570-dk")
    files = neuralart.profile_files(dev)
    profile = json.loads(files["user_neuralart.json"])["Profiles"]["default"]
    assert profile == {
        "memory_pool": "./zoflash.mpool",
        "options": "--enable-epoch-controller --all-buffers-info --cache-maintenance",
    }
    pools = json.loads(files["zoflash.mpool"])["memory"]["mempools"]
    # development mode: the four AXISRAMs, at their absolute addresses in KiB; the last holds the constants
    assert [(p["name"], p["offset"]["value"], p["size"]["value"]) for p in pools] == [
        ("AXISRAM3", str(0x34200000 // 1024), "448"),
        ("AXISRAM4", str(0x34270000 // 1024), "448"),
        ("AXISRAM5", str(0x342E0000 // 1024), "448"),
        ("AXISRAM6", str(0x34350000 // 1024), "448"),
    ]
    assert [p["prop"]["constantsPreferred"] for p in pools] == [False, False, False, True]
    flash = json.loads(neuralart.profile_files(boards.for_boot(dev, "flash"))["zoflash.mpool"])["memory"]["mempools"]
    nor = flash[-1]
    assert (nor["name"], nor["offset"]["value"], nor["prop"]["rights"], nor["prop"]["constantsPreferred"]) == (
        "xSPI2",
        str(0x76C00000 // 1024),
        "ACC_READ",
        True,
    )
    assert files == neuralart.profile_files(dev)  # deterministic


def test_missing_tools_are_named_in_one_line(monkeypatch, tmp_path):
    for v in (*neuralart.STEDGEAI_ENV, neuralart.RUNTIME_ENV):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match="install ST Edge AI Core from ST's website") as info:
        neuralart.find_stedgeai(None)
    assert "\n" not in str(info.value)
    with pytest.raises(ToolMissingError, match="--st-runtime PATH"):
        neuralart.find_runtime(None)
    with pytest.raises(ToolMissingError, match="no ll_aton/ll_aton_runtime.c"):
        neuralart.find_runtime(tmp_path)
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(MODEL),
                "--data",
                str(DATA),
                "--npu",
                "neural-art",
                "--no-compile",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 2
    )


def test_dry_run_prints_the_commands_and_writes_the_profile(capsys, monkeypatch, tmp_path):
    for v in (*neuralart.STEDGEAI_ENV, neuralart.RUNTIME_ENV):
        monkeypatch.delenv(v, raising=False)
    out_dir = tmp_path / "b"
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(MODEL),
                "--data",
                str(DATA),
                "--npu",
                "neural-art",
                "--dry-run",
                "--out",
                str(out_dir),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "stedgeai generate --model npu_prefix.tflite --target stm32n6 --st-neural-art "
        "default@user_neuralart.json --name network --output st_ai_output --workspace st_ai_ws"
    )
    assert lines[2].startswith("arm-none-eabi-gcc -mcpu=cortex-m55 ") and lines[2].endswith("-c st_ai_output/network.c")
    assert "-DLL_ATON_PLATFORM=LL_ATON_PLAT_STM32N6" in lines[2]
    assert (
        "arm-none-eabi-objcopy -I binary -O ihex --change-addresses 0x34350000 "
        "st_ai_output/network_atonbuf.AXISRAM6.raw build/PREFIX_npu_AXISRAM6.hex"
    ) in lines
    assert lines[-1] == f"make -C {out_dir}  # zoflash's sources and the glue, then the link"
    assert sorted(p.name for p in out_dir.iterdir()) == ["user_neuralart.json", "zoflash.mpool"]
    # the build itself then writes its bundle there (the profile files are its own)
    stedgeai, runtime = _fake_tools(tmp_path)
    bundle = api.generate(
        MODEL, "stm32n6", out_dir, data_path=DATA, npu=neuralart.NpuRequest("neural-art", str(stedgeai), str(runtime))
    )
    assert (bundle.path / "zoflash.mpool").read_text() == neuralart.profile_files(boards.load_board("stm32n6570-dk"))[
        "zoflash.mpool"
    ]


def test_the_plan_keeps_the_cpu_out_of_the_npu_s_pools():
    request = neuralart.NpuRequest()
    plan = api.plan_memory(MODEL, "stm32n6570-dk", DATA, npu=request)
    by_name = {u.region.name: u for u in plan.regions}
    axi = by_name["AXISRAM3_6"]
    assert axi.used == 4 * 0x70000 == axi.region.size  # all four AXISRAMs are the NPU's
    assert {u.label for u in axi.items} == {f"NPU activations pool AXISRAM{i}" for i in range(3, 7)}
    assert [u.label for u in by_name["NPU_CACHE_RAM"].items] == ["NPU cache pool CACHEAXI"]
    place = plan.board.placement
    assert not {place[k] for k in boards.PLACEMENT_KEYS} & {"AXISRAM3_6", "NPU_CACHE_RAM"}
    flash = api.plan_memory(MODEL, "stm32n6570-dk", DATA, npu=request, boot="flash")
    assert any(u.label == "NPU constants pool xSPI2" for r in flash.regions for u in r.items)


FAKE_STEDGEAI = '''#!{python}
"""Test stand-in for stedgeai: checks its arguments and writes the files the real one does."""
import json, pathlib, sys
args = sys.argv[1:]
assert args[:2] == ["generate", "--model"], args
profile = json.loads(pathlib.Path("user_neuralart.json").read_text())["Profiles"]["default"]
pools = json.loads(pathlib.Path(profile["memory_pool"]).read_text())["memory"]["mempools"]
out = pathlib.Path(args[args.index("--output") + 1])
out.mkdir()
(out / "network.c").write_text("int zo_fake_network;\\n")
const = next(p["name"] for p in pools if p["prop"]["constantsPreferred"])
(out / f"network_atonbuf.{{const}}.raw").write_bytes(bytes(range(16)))
'''


def _fake_tools(tmp_path: Path) -> tuple[Path, Path]:
    stedgeai = tmp_path / "stedgeai"
    stedgeai.write_text(FAKE_STEDGEAI.format(python=sys.executable))
    stedgeai.chmod(stedgeai.stat().st_mode | stat.S_IEXEC)
    ll_aton = tmp_path / "st" / "Middlewares" / "ST" / "AI" / "Npu" / "ll_aton"
    ll_aton.mkdir(parents=True)
    for name in ("ll_aton_runtime.c", "ll_aton.c", "ll_aton_osal_freertos.c"):
        (ll_aton / name).write_text("")
    (ll_aton / "ll_aton_runtime.h").write_text((STANDIN / "ll_aton_runtime.h").read_text())
    return stedgeai, tmp_path / "st"


@pytest.mark.cross
@pytest.mark.parametrize("board_id", N6_BOARDS)
def test_the_glue_compiles_for_the_m55_against_the_standin(board_id, tmp_path):
    stedgeai, runtime = _fake_tools(tmp_path)
    bundle = api.generate(
        MODEL,
        board_id,
        tmp_path / "b",
        data_path=DATA,
        npu=neuralart.NpuRequest("neural-art", str(stedgeai), str(runtime)),
    )
    npu = bundle.manifest["training"]["npu"]
    assert npu["executed"] is False and npu["constants_pool"] == "AXISRAM6"
    assert [p["blob"] for p in npu["pools"] if p["blob"]] == ["network_atonbuf.AXISRAM6.raw"]
    makefile = (bundle.path / "Makefile").read_text()
    ll_aton = runtime / "Middlewares" / "ST" / "AI" / "Npu" / "ll_aton"
    # stedgeai's network.c and ll_aton (no RTOS adaptation), built with the vendor's flags
    assert f"NPU_SOURCES := network.c {ll_aton}/ll_aton.c {ll_aton}/ll_aton_runtime.c\n" in makefile
    assert "--change-addresses 0x34350000 $< $@" in makefile
    # the start-up code turns on the NPU's RAMs: the port's switches AXISRAM3..6 and CACHEAXIRAM (port.toml)
    assert "__zo_enable_memories = 0x0000001F;" in (bundle.path / "link.ld").read_text()
    # the bundle's own compile lines (its Makefile: -Wall -Wextra -Werror), the stand-in first on the path
    objects = ["build/obj/digits_cnn_npu.o", "build/obj/zo_neuralart.o", "build/obj/npu/network.o"]
    subprocess.run(
        ["make", "-C", str(bundle.path), *objects, f"EXTRA_CFLAGS=-I{STANDIN}"], check=True, capture_output=True
    )
    assert all((bundle.path / o).is_file() for o in objects)


def test_flash_boot_puts_the_constants_in_the_nor_and_maps_it(tmp_path):
    stedgeai, runtime = _fake_tools(tmp_path)
    bundle = api.generate(
        MODEL,
        "nucleo-n657x0-q",
        tmp_path / "b",
        data_path=DATA,
        boot="flash",
        npu=neuralart.NpuRequest("neural-art", str(stedgeai), str(runtime)),
    )
    npu = bundle.manifest["training"]["npu"]
    assert npu["constants_pool"] == "xSPI2"
    # the last 16 MiB of the NUCLEO's XSPI2_NOR (0x70100000 + 59 MiB, below the 4 MiB checkpoint store)
    assert "--change-addresses 0x72C00000 $< $@" in (bundle.path / "Makefile").read_text()
    # AXISRAM3..6, CACHEAXIRAM and XSPI2 (the NOR mapped for the NPU's weights)
    assert "__zo_enable_memories = 0x0000003F;" in (bundle.path / "link.ld").read_text()
