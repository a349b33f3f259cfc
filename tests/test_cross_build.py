"""Cross builds for the ARM boards: the digits training firmware compiles with -Werror for every
board into ELF, BIN and HEX; the size report is what arm-none-eabi-size says; plans that do not
fit fail before compiling, with the sizes; a missing cross compiler is a one-line error. And the
key result: the mps3-an547 firmware under QEMU (Cortex-M55) trains bit for bit like the host
simulation.
"""

from __future__ import annotations

import re
import shlex
import subprocess

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC

from zoflash import api
from zoflash.cli import main
from zoflash.errors import ToolMissingError
from zoflash.monitor.session import comparable
from zoflash.monitor.telemetry import Decoder
from zoflash.targets import boards
from zoflash.targets import host_build as build_mod
from zoflash.targets.budget import BudgetError, section_sizes, size_report
from zoflash.training.options import make_options
from zoflash.workflows.simulate import simulate

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
ARM_BOARDS = ("mps3-an547", "stm32n6570-dk", "nucleo-n657x0-q")
OPTIONS = dict(steps=20)  # lr auto: 8 calibration steps at q = 8, then plateau; evaluations at 0 and 20
QEMU = ["qemu-system-arm", "-M", "mps3-an547", "-nographic", "-semihosting", "-icount", "shift=0", "-kernel"]


@pytest.fixture(scope="module")
def firmware(tmp_path_factory):
    """The digits training firmware for every ARM board, built once through the CLI."""
    out = {}
    for board in ARM_BOARDS:
        path = tmp_path_factory.mktemp(board) / "bundle"
        code = main(
            [
                "build",
                "--board",
                board,
                "--model",
                str(DIGITS),
                "--data",
                str(SHIFT),
                "--steps",
                "20",
                "--out",
                str(path),
            ]
        )
        assert code == 0
        out[board] = path
    return out


def _sections(elf) -> list[tuple[str, int, int]]:
    text = subprocess.run(["arm-none-eabi-size", "-A", str(elf)], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in text.splitlines()]
    return [(r[0], int(r[1]), int(r[2])) for r in rows if len(r) == 3 and r[1].isdigit() and r[2].isdigit()]


@pytest.mark.cross
@pytest.mark.parametrize("board_id", ARM_BOARDS)
def test_training_firmware_builds_with_werror(firmware, board_id):
    path = firmware[board_id]
    make = (path / "Makefile").read_text()
    assert "-Wall -Wextra -Werror" in make and "-std=c11 -ffp-contract=off" in make
    assert "-mcpu=cortex-m55 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16 -O2" in make
    for suffix in (".elf", ".bin", ".hex"):
        assert (path / "build" / f"digits_cnn{suffix}").stat().st_size > 0
    assert (path / "build" / "digits_cnn.hex").read_text().startswith(":")
    board = boards.load_board(board_id)
    elf = (path / "build" / "digits_cnn.elf").read_bytes()
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == 40  # EM_ARM
    link = (path / "link.ld").read_text()
    for r in board.memory:
        assert f"{r.name} (" in link and f"0x{r.origin:08X}" in link


@pytest.mark.cross
@pytest.mark.parametrize("board_id", ARM_BOARDS)
def test_size_report_agrees_with_arm_none_eabi_size(firmware, board_id):
    board = boards.load_board(board_id)
    path = firmware[board_id]
    elf = path / "build" / "digits_cnn.elf"
    report = {u.region.name: u for u in size_report(board, section_sizes("arm-none-eabi-size", elf))}
    # independently: every loaded section of `size -A` by the region its address is in, plus the
    # initial values of .data stored after the code
    expected: dict[str, int] = {}
    for name, size, addr in _sections(elf):
        if name.startswith((".debug", ".comment", ".ARM.attributes")) or size == 0:
            continue
        region = next(r for r in board.memory if r.origin <= addr < r.end)
        expected[region.name] = expected.get(region.name, 0) + size
        if name == ".data":
            code = board.region_of("code").name
            expected[code] = expected.get(code, 0) + size
    assert {k: u.used for k, u in report.items()} == expected
    for u in report.values():
        assert 0 < u.used <= u.region.size
    image = report[board.region_of("code").name]
    assert image.used <= (path / "build" / "digits_cnn.bin").stat().st_size < image.used + 128
    data = next(x.bytes for x in report[board.region_of("train_data").name].items if x.label == "training data")
    assert data >= 98802  # the embedded digits (manifest: training.data.bytes)


@pytest.mark.cross
def test_build_prints_the_report_per_region(tmp_path, capsys):
    assert (
        main(
            [
                "build",
                "--board",
                "stm32n6",
                "--model",
                str(DIGITS),
                "--data",
                str(SHIFT),
                "--steps",
                "5",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "board   stm32n6 -> stm32n6570-dk" in out
    assert "firmware build/digits_cnn.elf, build/digits_cnn.bin, build/digits_cnn.hex" in out
    assert "region  IMAGE (ram, 261120 bytes at 0x34180400)" in out and "region  RAM (ram, 262144 bytes" in out
    assert "training data" in out and "arena 640" in out and "stack 16384" in out


@pytest.mark.cross
def test_inference_only_build_is_a_library(tmp_path):
    result = api.build(DIGITS, "mps3-an547", tmp_path / "my bundle")  # a space in the path builds too
    assert [p.name for p in result.outputs] == ["libdigits_cnn.a"] and result.outputs[0].exists()
    regions = {u.region.name: u for u in result.regions}
    assert {x.label: x.bytes for x in regions["DTCM"].items} == {"arena": 640}
    assert any(x.label == "constant weights" and x.bytes == 3920 for x in regions["ITCM"].items)


def _big_dataset(path, n_train: int):
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.random((n_train, 8, 8, 1), dtype=np.float32) * 16,
        y_train=rng.integers(0, 10, n_train),
        x_test=rng.random((10, 8, 8, 1), dtype=np.float32) * 16,
        y_test=rng.integers(0, 10, 10),
    )


def _no_compiling(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the compiler ran")

    monkeypatch.setattr("zoflash.targets.firmware_build.run_make", refuse)


def test_too_big_dataset_fails_before_compiling(tmp_path, monkeypatch, capsys):
    """A DK variant whose NOR holds 64 KiB: 30000 x 64 bytes of images + labels fit no region."""
    from test_flash_boot import _shrunk_board

    _no_compiling(monkeypatch)
    _shrunk_board(monkeypatch, tmp_path, "size = 0x07B0_0000", "size = 0x0001_0000")
    data = tmp_path / "big.npz"
    _big_dataset(data, 30000)
    out = tmp_path / "bundle"
    assert (
        main(
            [
                "build",
                "--board",
                "small",
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
        == 2
    )
    err = capsys.readouterr().err
    assert "does not fit board 'small'" in err
    need = 30010 * (64 + 2)  # images and uint16 labels, train and test
    # placed where it misses by least: the largest region the data may use
    assert f"region AXISRAM3_6 (ram, 1835008 bytes at 0x34200000): {need} needed" in err
    assert f"training data {need}; {need - 1835008} bytes more than its 1835008" in err
    # counted in the file's training samples: the validation split is carved from them, embedded likewise
    fits = (1835008 - 10 * 66) // 66
    assert (
        f"At most {fits} of the 30000 training samples (66 bytes each, with the 10 test samples; the validation "
        "split is carved from them) fit"
    ) in err
    assert "fits: region RAM" in err and "fits: region IMAGE" in err
    assert not out.exists()


def test_the_plan_moves_what_does_not_fit_to_the_next_region(tmp_path, monkeypatch):
    """9000 samples overflow the mps3-an547's 512 KiB ITCM: the data goes to its 2 MiB SRAM, the
    rest stays in the TCMs; the link script and the manifest follow the plan."""
    _no_compiling(monkeypatch)
    data = tmp_path / "big.npz"
    _big_dataset(data, 9000)
    bundle = api.generate(DIGITS, "mps3-an547", tmp_path / "b", data_path=data, options=make_options(steps=5))
    place = bundle.manifest["placement"]
    assert (place["train_data"], place["weights"], place["code"], place["arena"]) == ("SRAM", "ITCM", "ITCM", "DTCM")
    link = (tmp_path / "b" / "link.ld").read_text()
    assert "} > SRAM" in link.split(".train_data :")[1].split(".rodata :")[0]
    assert "__zo_enable_memories = 0x00000000;" in link


def _tiny_board(monkeypatch, tmp_path):
    """An STM32N6 variant with 32 KiB of RAM: a board file only."""
    from test_boards import board_text

    root = tmp_path / "boards"
    root.mkdir()
    text = (
        board_text("stm32n6570-dk")
        .replace('id = "stm32n6570-dk"', 'id = "tiny"')
        .replace("reference = true", "reference = false")
        .replace("origin = 0x341C_0000\nsize = 0x0004_0000", "origin = 0x341C_0000\nsize = 0x0000_8000")
    )
    text = re.sub(r"^(data|bss|arena) = \[.*\]$", r'\1 = "RAM"', text, flags=re.M)  # RAM only
    (root / "tiny.toml").write_text(text)
    for bid in ("host", "stm32n6570-dk"):
        (root / f"{bid}.toml").write_text(board_text(bid))
    monkeypatch.setattr(boards, "_board_files", lambda: {p.stem: p for p in root.glob("*.toml")})


def test_too_big_training_state_fails_before_compiling(tmp_path, monkeypatch):
    _no_compiling(monkeypatch)
    _tiny_board(monkeypatch, tmp_path)
    with pytest.raises(BudgetError) as err:
        api.build(DIGITS, "tiny", tmp_path / "b", data_path=SHIFT, options=make_options(steps=5, batch=64))
    text = str(err.value)
    assert "region RAM (ram, 32768 bytes at 0x341C0000)" in text
    assert "feature cache 16384" in text and "stack 16384" in text and "arena 640" in text
    assert "fits: region IMAGE" in text and not (tmp_path / "b").exists()


def test_too_big_model_fails_before_compiling(tmp_path, monkeypatch):
    _no_compiling(monkeypatch)
    _tiny_board(monkeypatch, tmp_path)
    with pytest.raises(BudgetError) as err:  # inference only: the model as a library
        api.build(FIXTURES / "mbv2_block.tflite", "tiny", tmp_path / "b")
    text = str(err.value)
    assert text.startswith("the model does not fit board 'tiny'")
    assert "region RAM (ram, 32768 bytes at 0x341C0000): 36864 needed" in text and "arena 36864" in text
    assert "4096 bytes more than its 32768" in text and not (tmp_path / "b").exists()


def test_missing_cross_compiler_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    assert main(["build", "--board", "mps3-an547", "--model", str(DIGITS), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: 'arm-none-eabi-gcc' is not available: install it (Debian/Ubuntu: apt-get install "
        "gcc-arm-none-eabi libnewlib-arm-none-eabi)"
    )
    with pytest.raises(ToolMissingError):
        build_mod.require("arm-none-eabi-size")


def _run_qemu(elf, timeout: float = 120, stdin: bytes | None = None):
    return subprocess.run(
        QEMU + [str(elf)],
        capture_output=True,
        timeout=timeout,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )


def _assert_identical_to_host(stdout: bytes, options: dict, steps: int) -> list[dict]:
    dec = Decoder()
    records = dec.records(dec.feed(stdout) + dec.flush())
    stats = dec.stats()
    assert stats["crc_errors"] == stats["dropped_bytes"] == stats["truncated"] == stats["malformed"] == 0
    assert stats["seq_gaps"] == 0 and stats["text_bytes"] == 0
    kinds = [r["type"] for r in records]
    assert kinds[0] == "hello" and kinds.count("step") == steps and "done" in kinds
    assert all(r["time_s"] > 0 for r in records if r["type"] == "done")
    host = simulate(DIGITS, SHIFT, make_options(**options), None, engine="c", plot=False)
    device, expected = comparable(records), comparable(host.records)
    assert len(device) == len(expected)
    for k, (a, b) in enumerate(zip(device, expected)):
        assert a == b, f"record {k} differs:\nQEMU {a}\nhost {b}"
    return records


@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_training_is_bit_identical_to_the_host_simulation(firmware):
    """The key result: the training firmware on the emulated Cortex-M55 sends the same records
    (time aside) as the generated C on the host, which itself equals the Python reference."""
    proc = _run_qemu(firmware["mps3-an547"] / "build" / "digits_cnn.elf")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    records = _assert_identical_to_host(proc.stdout, OPTIONS, 20)
    evals = [r for r in records if r["type"] == "eval"]
    assert len(evals) == 2 and evals[-1]["loss"] < evals[0]["loss"]


@pytest.mark.cross
@pytest.mark.qemu
def test_qemu_critical_scheduler_is_bit_identical(tmp_path):
    """The critical scheduler adds centre passes, curvature and float EMAs: still bit for bit."""
    options = dict(steps=24, scheduler="critical", batch=8, eval_every=12)
    result = api.build(DIGITS, "mps3-an547", tmp_path / "b", data_path=SHIFT, options=make_options(**options))
    proc = _run_qemu(result.outputs[0])
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    records = _assert_identical_to_host(proc.stdout, options, 24)
    assert any(r["type"] == "step" and r["centre"] for r in records)


FAULT_MAIN = r"""
#include <stdint.h>
#include "zo_port.h"
volatile uint32_t sink;
__attribute__((unused)) static uint32_t deep(uint32_t n)
{
    volatile uint8_t buf[512];
    buf[0] = (uint8_t)n;
    return n ? deep(n - 1u) + buf[0] : 0u;
}
int main(void)
{
    zo_port_init();
    const uint64_t t0 = zo_port_time_us();
    for (volatile uint32_t i = 0; i < 3000000u; ++i) {
    }
    uint64_t d = zo_port_time_us() - t0;
    char text[24];
    int n = 0;
    do {
        text[sizeof(text) - 1 - n++] = (char)('0' + d % 10u);
        d /= 10u;
    } while (d);
    zo_port_write((const uint8_t *)"us ", 3u);
    zo_port_write((const uint8_t *)text + sizeof(text) - n, (uint32_t)n);
#ifndef OVERFLOW
    /* across a SysTick period boundary (2^24 ticks = 0.52 s at 32 MHz): never backwards */
    uint64_t prev = zo_port_time_us();
    const uint64_t first = prev;
    uint32_t back = 0;
    while (prev - first < 600000u) {
        for (volatile uint32_t i = 0; i < 2000u; ++i) { /* under -icount each timer read is slow */
        }
        const uint64_t now = zo_port_time_us();
        back += now < prev;
        prev = now;
    }
    zo_port_write((const uint8_t *)(back ? " backwards\n" : " monotonic\n"), 11u);
#endif
#ifdef OVERFLOW
    sink = deep(100u); /* 50 KiB of stack frames: more than the 16 KiB stack */
#else
    __asm volatile("udf #0");
#endif
    return 0;
}
"""


def _port_program(bundle, tmp_path, source: str, define: str):
    """A small program on the mps3-an547 port of a bundle: its flags, linker script and port."""
    (tmp_path / "main.c").write_text(source)
    line = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(bundle), "compile-line"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # the bundle's compiler and flags
    cc, *cflags = shlex.split(line)
    elf = tmp_path / "program.elf"
    subprocess.run(
        [
            cc,
            *cflags,
            f"-D{define}",
            f"-I{bundle}",
            "-T",
            str(bundle / "link.ld"),
            "-nostartfiles",
            "-Wl,--gc-sections",
            "-o",
            str(elf),
            str(tmp_path / "main.c"),
            str(bundle / "zo_port_cortex_m.c"),
            str(bundle / "zo_port_mps3_an547.c"),
            "-lm",
        ],
        check=True,
        capture_output=True,
    )
    return elf


@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.parametrize("variant, reason", [("UDF", "cfsr=00010000"), ("OVERFLOW", "cfsr=00100000")])
def test_port_time_and_fault_report_under_qemu(firmware, tmp_path, variant, reason):
    """The port's SysTick clock counts (deterministic virtual time under -icount) and never goes
    back across period boundaries; an undefined
    instruction and a stack overflow (MSPLIM) each print one fault line and exit with code 3."""
    elf = _port_program(firmware["mps3-an547"], tmp_path, FAULT_MAIN, variant)
    proc = _run_qemu(elf, timeout=30)
    out = proc.stdout.decode()
    assert proc.returncode == 3, out
    micros = int(out.split("us ")[1].split()[0])
    assert 3000 < micros < 100000  # about 6 instructions per iteration at 1 ns each
    assert variant == "OVERFLOW" or " monotonic" in out
    fault = next(line for line in out.splitlines() if line.startswith("zoflash: fault"))
    assert "(UsageFault)" in fault and reason in fault


RX_MAIN = r"""
#include <stdint.h>
#include "zo_port.h"
#include "zo_port_cortex_m.h"
static uint8_t got[RX_COUNT];
int main(void)
{
    zo_port_init();
    zo_port_write((const uint8_t *)"ready\n", 6u);
    uint32_t n = 0;
    const uint64_t w0 = zo_port_time_us();
    while (n == 0u && zo_port_time_us() - w0 < 5000000u) { /* the input has begun (however fast QEMU starts) */
        n += (uint32_t)zo_port_read_byte(&got[0]);
    }
    for (volatile uint32_t i = 0; i < 2000000u; ++i) { /* busy, as in a training step */
    }
    const uint32_t first = n;
    while (n < RX_COUNT && zo_port_read_byte(&got[n])) { /* what came in while busy */
        ++n;
    }
    uint8_t buffered[5]; /* n - first in 5 decimal digits */
    for (uint32_t k = 5u, v = n - first; k-- > 0u; v /= 10u) {
        buffered[k] = (uint8_t)('0' + v % 10u);
    }
    const uint64_t t0 = zo_port_time_us();
    while (n < RX_COUNT && zo_port_time_us() - t0 < 2000000u) { /* the rest, if the host was slow */
        n += (uint32_t)zo_port_read_byte(&got[n]);
    }
    zo_port_write((const uint8_t *)"buffered ", 9u);
    zo_port_write(buffered, 5u);
    zo_port_write((const uint8_t *)" got ", 5u);
    zo_port_write(got, n);
    zo_port_write((const uint8_t *)"\n", 1u);
    return zo_cm_rx_overruns() != 0u;
}
"""


@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.parametrize("count", [200, 6000])
def test_console_receive_is_buffered_by_interrupt(firmware, tmp_path, count):
    """Bytes that arrive while the firmware is busy wait in the port's receive buffer (the UART
    itself holds one): more than one is there when it reads, and all arrive in order.  Input
    longer than the buffer (512 bytes) waits in QEMU while the buffer is full, none is lost:
    before, a CI run under load lost 97 bytes of a 23 kB checkpoint line this way."""
    elf = _port_program(firmware["mps3-an547"], tmp_path, RX_MAIN, f"RX_COUNT={count}")
    sent = bytes(range(32, 127)) * (count // 95 + 1)
    proc = _run_qemu(elf, timeout=60, stdin=sent[:count] + b"!")
    assert proc.returncode == 0, proc.stdout[-500:]
    buffered, got = proc.stdout.split(b"buffered ", 1)[1].split(b" got ", 1)
    assert got == sent[:count] + b"\n"
    assert int(buffered) > 1  # more than the UART's one byte


@pytest.mark.zoo
@pytest.mark.slow
@pytest.mark.cross
@pytest.mark.qemu
def test_person_detect_trains_on_the_emulated_m55_from_ddr(tmp_path):
    """A real vision model with 1000 training images (9.4 MB, more than the TCMs and the SRAM):
    the plan puts the data in the DDR, the data is linked from binary files (no C array text),
    and the head training on QEMU sends the host simulation's records."""
    model = PUBLIC / "person_detect.tflite"
    rng = np.random.default_rng(3)
    x = rng.random((1000, 96, 96, 1), dtype=np.float32)
    data = tmp_path / "pd.npz"
    np.savez(data, x_train=x, y_train=rng.integers(0, 2, 1000), x_test=x[:16], y_test=rng.integers(0, 2, 16))
    options = dict(steps=3, eval_every=3, batch=8)
    result = api.build(model, "mps3-an547", tmp_path / "b", data_path=data, options=make_options(**options))
    place = result.bundle.manifest["placement"]
    assert place["train_data"] == "DDR" and place["weights"] == "ITCM" and place["arena"] == "DTCM"
    data_c = (tmp_path / "b" / "person_detect_data.c").read_text()
    # 100 of the 1000 images (0.1 of each class) became the validation split: its own file
    n_val = int(sum(np.floor(0.1 * np.bincount(np.load(data)["y_train"]) + 0.5)))
    assert len(data_c) < 4000 and (tmp_path / "b" / "person_detect_x_train.bin").stat().st_size == x.size - n_val * 9216
    assert (tmp_path / "b" / "person_detect_x_val.bin").stat().st_size == n_val * 9216
    ddr = next(u for u in result.regions if u.region.name == "DDR")
    # the x and y of the three splits as binary blobs, each 16-byte aligned (zo_incbin.h)
    blobs = [(1000 - n_val) * 9216, n_val * 9216, 16 * 9216, 2 * (1000 - n_val), 2 * n_val, 2 * 16]
    assert [(i.label, i.bytes) for i in ddr.items] == [("training data", sum(-(-b // 16) * 16 for b in blobs))]
    proc = _run_qemu(result.outputs[0], timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    dec = Decoder()
    device = comparable(dec.records(dec.feed(proc.stdout) + dec.flush()))
    host = comparable(simulate(model, data, make_options(**options), None, engine="c", plot=False).records)
    assert device == host and sum(r["type"] == "step" for r in device) == 3
