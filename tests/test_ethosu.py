"""`zoflash build --npu ethos-u*`: the board's [npu] data, Vela on the frozen prefix, the glue.

No NPU runs here: Vela runs (the vela tier, the npu extra), and the firmware with the glue is
compiled and linked against Arm's Ethos-U core driver only where $ZOFLASH_ETHOSU_DRIVER names a
checkout (never in CI: the driver is on no package registry)."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
import tflite
from conftest import FIXTURES, PUBLIC

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError, BuildError, ToolMissingError
from zoflash.targets import boards, ethosu
from zoflash.training.options import make_options
from zoflash.workflows.training import compile_for_training

BOARD = (boards._board_files()["mps3-an547"]).read_text()
MODEL, DATA = FIXTURES / "digits_cnn.tflite", FIXTURES / "digits_shift.npz"


def test_the_an547_board_has_its_ethos_u55():
    npu = boards.load_board("mps3-an547").npu
    assert (npu["type"], npu["base"], npu["irq"], npu["verified"]) == ("ethos-u55", 0x48102000, 56, False)
    assert "ethos-u55-128" in npu["configs"]
    assert "npu        ethos-u55 at 0x48102000, IRQ 56 (unverified)" in boards.describe(boards.load_board("mps3-an547"))


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('regions = ["ISRAM", "DDR"]', 'regions = ["NOWHERE"]', "'regions' names 'NOWHERE'"),
        ('configs = ["ethos-u55-128", "ethos-u55-256"]', 'configs = ["ethos-u65-256"]', "not of type 'ethos-u55'"),
        ("irq = 56\n", "", "irq"),
    ],
)
def test_a_bad_npu_section_is_refused(old, new, message):
    assert old in BOARD
    with pytest.raises(BoardError, match=message):
        boards.parse_board(BOARD.replace(old, new), "board file mps3-an547.toml")


@pytest.mark.parametrize(
    "board, config, message",
    [
        ("host", "ethos-u55-128", "board 'host' has no NPU"),
        ("mps3-an547", "ethos-u55-999", "not an Ethos-U configuration"),
        ("mps3-an547", "ethos-u65-256", "board 'mps3-an547' has ethos-u55-128, ethos-u55-256"),
    ],
)
def test_npu_configurations_are_checked_against_the_board(board, config, message):
    with pytest.raises(BoardError, match=message):
        ethosu.check_accelerator(boards.load_board(board), config)


def test_missing_driver_and_vela_are_named_in_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv(ethosu.DRIVER_ENV, raising=False)
    with pytest.raises(ToolMissingError, match="--ethosu-driver PATH or set ZOFLASH_ETHOSU_DRIVER") as info:
        ethosu.find_driver(None)
    assert "\n" not in str(info.value)
    with pytest.raises(ToolMissingError, match="include/ethosu_driver.h, src/ethosu_driver.c missing"):
        ethosu.find_driver(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ethosu.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ToolMissingError, match="pip install ethos-u-vela"):
        ethosu.find_vela()


def test_dry_run_prints_the_commands_and_npu_needs_data(capsys, tmp_path):
    assert (
        main(
            [
                "build",
                "--board",
                "mps3-an547",
                "--model",
                str(MODEL),
                "--data",
                str(DATA),
                "--npu",
                "ethos-u55-128",
                "--dry-run",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "vela npu_prefix.tflite --accelerator-config ethos-u55-128 --output-format raw "
        "--verbose-performance --output-dir ."
    )
    assert out[2] == f"make -C {tmp_path / 'b'}"
    assert not (tmp_path / "b").exists()
    with pytest.raises(BuildError, match="needs --data"):
        api.generate(MODEL, "mps3-an547", tmp_path / "c", npu=ethosu.NpuRequest("ethos-u55-128"))


def _boundary_bytes(prefix: bytes) -> int:
    """The prefix's output size, read from the file Vela compiled (not from zoflash's plan)."""
    sub = tflite.Model.GetRootAs(prefix, 0).Subgraphs(0)
    shape = sub.Tensors(sub.Outputs(0)).ShapeAsNumpy()
    return int(shape.prod())


@pytest.mark.vela
@pytest.mark.parametrize("model", ["digits_cnn.tflite", "kws_dscnn.tflite"])
def test_vela_compiles_the_training_prefix_to_the_npu(model, tmp_path):
    parts = api.split_model(FIXTURES / model, tmp_path)
    command = ethosu.vela_command(ethosu.find_vela(), parts.prefix_path, "ethos-u55-128", tmp_path / "out")
    ethosu.run_vela(command)
    out = ethosu.read_vela(tmp_path / "out", "prefix")
    assert out.cmd[:4] == b"COP1" and len(out.cmd) % 4 == 0  # what ethosu_invoke_v3 checks
    assert out.output_bytes == _boundary_bytes(parts.prefix_path.read_bytes())
    assert out.input_offset + out.input_bytes <= out.scratch_bytes
    assert out.output_offset + out.output_bytes <= out.scratch_bytes
    e = out.estimates
    assert e["cpu_ops"] == 0 and e["npu_ops"] >= len(parts.prefix_ops)
    assert e["cycles_total"] >= e["cycles_npu"] > 0 and e["macs"] > 0
    assert e["accelerator"] == "Ethos_U55_128"


@pytest.mark.vela
@pytest.mark.cross
def test_the_npu_firmware_links_against_the_driver(tmp_path):
    """Needs a checkout of Arm's Ethos-U core driver in $ZOFLASH_ETHOSU_DRIVER (on no registry)."""
    driver = os.environ.get(ethosu.DRIVER_ENV)
    if not driver:
        pytest.skip(f"set {ethosu.DRIVER_ENV} to a checkout of Arm's Ethos-U core driver to build against it")
    prep = compile_for_training(MODEL, DATA, make_options())
    result = api.build(
        MODEL,
        "mps3-an547",
        tmp_path / "b",
        data_path=DATA,
        options=prep.training.options,
        npu=ethosu.NpuRequest("ethos-u55-128", driver),
    )
    npu = result.bundle.manifest["training"]["npu"]
    assert npu["executed"] is False and npu["estimates"]["cpu_ops"] == 0
    elf = next(p for p in result.outputs if p.suffix == ".elf")
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    table = {line.split()[-1]: int(line.split()[0], 16) for line in symbols.splitlines() if len(line.split()) == 3}
    isram = boards.load_board("mps3-an547").region("ISRAM")
    for name in ("digits_cnn_npu_cmd", "digits_cnn_npu_weights", "digits_cnn_npu_scratch"):
        assert isram.origin <= table[name] < isram.end, name  # where the NPU reaches, not the TCMs
    assert "ethosu_invoke_v3" in table and "zo_ethosu_irq" in table
    train_c = (result.bundle.path / "digits_cnn_train.c").read_text()
    assert ".run_steps = digits_cnn_npu_run_steps," in train_c


# The driver as the glue sees it, faked on the host: the "command stream" is three words (input
# offset, output offset, bytes) and the "NPU" writes input ^ 0x5A at the output.
FAKE_DRIVER_H = """
#include <stddef.h>
#include <stdint.h>
struct ethosu_driver { int inited; };
int ethosu_init(struct ethosu_driver *drv, void *const base, const void *fast, const size_t fast_size,
                uint32_t secure, uint32_t privileged);
struct ethosu_driver *ethosu_reserve_driver(void);
void ethosu_release_driver(struct ethosu_driver *drv);
int ethosu_invoke_v3(struct ethosu_driver *drv, const void *cmd, const int cmd_size, uint64_t *const base_addr,
                     const size_t *base_addr_size, const int num_base_addr, void *user_arg);
void ethosu_irq_handler(struct ethosu_driver *drv);
"""
FAKE_DRIVER_AND_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "ethosu_driver.h"
#include "zo_ethosu.h"
static struct ethosu_driver *the_drv; static int inits, reserved, calls_cpu[8][2], n_cpu;
static const uint8_t *weights_seen;
int ethosu_init(struct ethosu_driver *drv, void *const base, const void *fast, const size_t fast_size,
                uint32_t secure, uint32_t privileged)
{ (void)fast; (void)fast_size; (void)secure; (void)privileged; the_drv = drv; inits++;
  return base == (void *)0x48102000u ? 0 : -1; }
struct ethosu_driver *ethosu_reserve_driver(void) { reserved++; return the_drv; }
void ethosu_release_driver(struct ethosu_driver *drv) { (void)drv; reserved--; }
void ethosu_irq_handler(struct ethosu_driver *drv) { (void)drv; }
int ethosu_invoke_v3(struct ethosu_driver *drv, const void *cmd, const int cmd_size, uint64_t *const base_addr,
                     const size_t *base_addr_size, const int num_base_addr, void *user_arg)
{
    (void)drv; (void)cmd_size; (void)user_arg; (void)base_addr_size;
    uint32_t w[3]; memcpy(w, cmd, sizeof w);
    uint8_t *scratch = (uint8_t *)(uintptr_t)base_addr[1];
    weights_seen = (const uint8_t *)(uintptr_t)base_addr[0];
    for (uint32_t i = 0; i < w[2]; ++i) scratch[w[1] + i] = (uint8_t)(scratch[w[0] + i] ^ 0x5Au);
    return num_base_addr == 3 ? 0 : -1;
}
static void cpu(int32_t first, int32_t end) { calls_cpu[n_cpu][0] = first; calls_cpu[n_cpu][1] = end; n_cpu++; }
int main(void)
{
    static const uint32_t cmd[3] = {8u, 40u, 6u};
    static const uint8_t weights[16] = {1};
    static uint8_t scratch[64];
    static int8_t arena[32];
    for (int i = 0; i < 32; ++i) arena[i] = (int8_t)(i * 3);
    zo_ethosu_prefix_t p = {
        .base = 0x48102000u, .cmd = (const uint8_t *)cmd, .cmd_bytes = sizeof cmd, .weights = weights,
        .weights_bytes = sizeof weights, .scratch = scratch, .scratch_bytes = sizeof scratch,
        .fast_scratch = NULL, .fast_scratch_bytes = 0u, .weights_region = 0, .scratch_region = 1,
        .fast_scratch_region = 0, .input_offset = 8u, .input_bytes = 6u, .output_offset = 40u,
        .output_bytes = 6u, .input = &arena[2], .boundary = &arena[20], .split = 3, .cpu_run_steps = cpu };
    zo_ethosu_run_steps(&p, 0, 3);   /* the prefix alone: NPU only */
    zo_ethosu_run_steps(&p, 0, 7);   /* a whole pass: NPU, then kernel calls [3, 7) on the CPU */
    zo_ethosu_run_steps(&p, 3, 7);   /* the suffix: CPU only */
    printf("inits %d reserved %d errors %u weights %d cpu", inits, reserved, (unsigned)zo_ethosu_errors,
           weights_seen == weights);
    for (int k = 0; k < n_cpu; ++k) printf(" [%d,%d)", calls_cpu[k][0], calls_cpu[k][1]);
    printf(" boundary");
    for (int i = 0; i < 8; ++i) printf(" %d", arena[19 + i]);
    printf("\n");
    return 0;
}
"""


@pytest.mark.cc
def test_the_glue_runs_the_prefix_on_the_npu_and_the_rest_on_the_cpu(tmp_path):
    import ccompile

    (tmp_path / "ethosu_driver.h").write_text(FAKE_DRIVER_H)
    (tmp_path / "main.c").write_text(FAKE_DRIVER_AND_MAIN)
    exe = tmp_path / "glue"
    npu = ccompile.RUNTIME / "npu"
    subprocess.run(
        [
            ccompile.compiler(),
            *ccompile.STRICT_FLAGS,
            f"-I{tmp_path}",
            f"-I{npu}",
            "-o",
            str(exe),
            str(npu / "zo_ethosu.c"),
            str(tmp_path / "main.c"),
        ],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    arena = [i * 3 for i in range(32)]
    npu_out = [arena[2 + i] ^ 0x5A for i in range(6)]  # the fake NPU on the model input
    expected = (
        f"inits 1 reserved 0 errors 0 weights 1 cpu [3,7) [3,7) boundary {arena[19]} "
        + " ".join(map(str, npu_out))
        + f" {arena[26]}"
    ).split()
    assert out == expected


@pytest.mark.vela
@pytest.mark.cross
def test_the_generated_glue_compiles_for_the_m55(tmp_path):
    """The bundle's NPU sources with Vela's real output, compiled for the Cortex-M55 against the
    driver's API as declared above (CI has no driver checkout; the link test uses a real one)."""
    fake = tmp_path / "driver"
    (fake / "include").mkdir(parents=True)
    (fake / "src").mkdir()
    (fake / "include" / "ethosu_driver.h").write_text(FAKE_DRIVER_H)
    (fake / "src" / "ethosu_driver.c").write_text("")
    bundle = api.generate(
        MODEL, "mps3-an547", tmp_path / "b", data_path=DATA, npu=ethosu.NpuRequest("ethos-u55-128", str(fake))
    )
    npu = bundle.manifest["training"]["npu"]
    assert npu["commands"] == [
        "vela npu_prefix.tflite --accelerator-config ethos-u55-128 --output-format raw "
        "--verbose-performance --output-dir ."
    ]
    assert npu["base"] == 0x48102000 and npu["irq"] == 56 and npu["executed"] is False
    makefile = (bundle.path / "Makefile").read_text()
    assert "-DZO_NPU_IRQ=56u" in makefile and f"{fake}/src/ethosu_driver.c" in makefile
    assert "> ISRAM" in (bundle.path / "link.ld").read_text()
    flags = [
        "-mcpu=cortex-m55",
        "-mthumb",
        "-mfloat-abi=hard",
        "-O2",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        f"-I{fake / 'include'}",
        "-I.",
    ]
    for source in ("digits_cnn_npu.c", "zo_ethosu.c"):
        subprocess.run(
            ["arm-none-eabi-gcc", *flags, "-c", source, "-o", str(tmp_path / f"{source}.o")],
            cwd=bundle.path,
            check=True,
        )


def test_qemu_refuses_an_npu_firmware(tmp_path, capsys):
    """QEMU emulates no Ethos-U: an --npu firmware would wait for the NPU forever."""
    bundle = api.generate(MODEL, "mps3-an547", tmp_path / "b", data_path=DATA)
    manifest = bundle.path / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"training": {', '"training": {"npu": {"type": "ethos-u55"}, ', 1))
    (bundle.path / "build").mkdir()
    (bundle.path / "build" / "digits_cnn.elf").write_bytes(b"\x7fELF")  # never loaded: refused before
    assert main(["flash", "--bundle", str(bundle.path), "--method", "qemu"]) == 2
    assert "which QEMU does not emulate" in capsys.readouterr().err


@pytest.mark.vela
@pytest.mark.zoo
def test_without_the_driver_the_build_says_velas_estimates_then_stops(monkeypatch, tmp_path, capsys):
    """A public model's prefix through Vela before the missing driver stops the build: its NPU
    cycles, SRAM and flash bytes and where its ops run, then the one-line missing-driver error."""

    monkeypatch.delenv(ethosu.DRIVER_ENV, raising=False)
    model = PUBLIC / "mlperf_kws_dscnn.tflite"
    m = api.load_model(model)
    shape = m.graph.tensors[m.graph.inputs[0]].shape[1:]
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (48, *shape), dtype=np.int8)
    np.savez(
        tmp_path / "d.npz",
        x_train=x[:32],
        y_train=rng.integers(0, 12, 32),
        x_test=x[32:],
        y_test=rng.integers(0, 12, 16),
    )
    args = ["build", "--board", "mps3-an547", "--model", str(model), "--data", str(tmp_path / "d.npz")]
    assert main([*args, "--npu", "ethos-u55-128", "--out", str(tmp_path / "b")]) != 0
    captured = capsys.readouterr()
    lines = [line for line in captured.out.splitlines() if line.startswith("vela    ")]
    cycles = re.search(
        r"Ethos_U55_128 estimates for the prefix \(up to '.+'\): (\d+) NPU cycles, (\d+) in all", lines[0]
    )
    assert cycles and 0 < int(cycles.group(1)) <= int(cycles.group(2))
    memory = re.search(
        r"SRAM (\d+) bytes, off-chip flash (\d+) bytes .*ops: (\d+) on the NPU, (\d+) on the CPU", lines[1]
    )
    assert memory and int(memory.group(1)) > 0 and int(memory.group(2)) > 0 and int(memory.group(3)) > 0
    assert "'Arm Ethos-U core driver' is not available" in captured.err and "--ethosu-driver PATH" in captured.err
    assert not (tmp_path / "b").exists()  # nothing written
