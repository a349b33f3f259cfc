"""The stm32n6 port's register facts against ST's stm32n657xx.h, and --device-headers.

Without the header (a fresh machine) the port's own numbers are checked against
tests/fixtures/stm32n657xx_facts.toml, values evaluated from the header (tests/n6regs.py);
with the cmsis-device-n6 mirror the header itself gives the same numbers, and the port built
against it (--device-headers) compiles to the same machine code as with its own numbers."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import FIXTURES
from n6regs import assert_source, extract_headers, port_dir, read_facts, regs_names

from zoflash.cli import main

DIGITS = FIXTURES / "digits_cnn.tflite"
SHIFT = FIXTURES / "digits_shift.npz"


def _syntax_check(tmp_path, source: str, *flags: str) -> subprocess.CompletedProcess:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no host C compiler")
    (tmp_path / "check.c").write_text(source)
    return subprocess.run(
        [cc, "-std=c11", "-fsyntax-only", *flags, f"-I{port_dir()}", str(tmp_path / "check.c")],
        capture_output=True,
        text=True,
    )


def _headers(tmp_path):
    found = extract_headers(tmp_path / "st")
    if found is None:
        pytest.skip("ST's cmsis-device-n6 is not mirrored on this machine: checked against the facts file only")
    return found


def test_every_register_fact_of_the_port_is_recorded():
    assert set(regs_names()) == set(read_facts())
    assert len(regs_names()) > 80


def test_the_ports_own_numbers_equal_the_headers(tmp_path):
    proc = _syntax_check(tmp_path, assert_source(read_facts()))
    assert proc.returncode == 0, proc.stderr


def test_a_wrong_number_is_caught(tmp_path):
    facts = read_facts()
    facts["ZO_XSPI2_BASE"] += 0x400
    proc = _syntax_check(tmp_path, assert_source(facts))
    assert proc.returncode != 0 and "ZO_XSPI2_BASE is not" in proc.stderr


def test_the_header_gives_the_recorded_numbers(tmp_path):
    st = _headers(tmp_path)
    proc = _syntax_check(
        tmp_path, assert_source(read_facts()), "-DZO_DEVICE_HEADERS", f"-I{st / 'Include'}", f"-I{st / 'core'}"
    )
    assert proc.returncode == 0, proc.stderr


PORT_OBJECTS = ("zo_port_stm32n6", "zo_port_stm32n6_xspi")


def _port_code(bundle) -> dict[str, str]:
    """The port's objects compiled by the bundle's Makefile, disassembled."""
    subprocess.run(
        ["make", "-s", "-C", str(bundle), *(f"build/obj/{o}.o" for o in PORT_OBJECTS)], check=True, capture_output=True
    )
    out = {}
    for obj in PORT_OBJECTS:
        text = subprocess.run(
            ["arm-none-eabi-objdump", "-d", "--no-show-raw-insn", str(bundle / "build" / "obj" / f"{obj}.o")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        out[obj] = text.split("Disassembly of section", 1)[1]
    return out


@pytest.mark.cross
def test_the_port_built_against_the_header_is_the_same_code(tmp_path):
    """--device-headers (cmsis-device-n6's Include/ and a CMSIS core folder): the Makefile defines
    ZO_DEVICE_HEADERS, the port takes ST's definitions, and its machine code is unchanged."""
    st = _headers(tmp_path)
    args = [
        "build",
        "--board",
        "stm32n6",
        "--boot",
        "flash",
        "--model",
        str(DIGITS),
        "--data",
        str(SHIFT),
        "--steps",
        "5",
        "--no-compile",
    ]
    assert main([*args, "--out", str(tmp_path / "own")]) == 0
    assert (
        main(
            [
                *args,
                "--out",
                str(tmp_path / "with_st"),
                "--device-headers",
                str(st),
                "--device-headers",
                str(st / "core"),
            ]
        )
        == 0
    )
    make = (tmp_path / "with_st" / "Makefile").read_text()
    assert (
        f'DEVICE_CFLAGS := -DZO_DEVICE_HEADERS "-I{(st / "Include").resolve()}" "-I{(st / "core").resolve()}"' in make
    )
    assert "ZO_DEVICE_HEADERS" not in (tmp_path / "own" / "Makefile").read_text()
    assert _port_code(tmp_path / "own") == _port_code(tmp_path / "with_st")


def test_device_headers_that_are_missing_are_named(tmp_path, capsys):
    st = tmp_path / "cmsis-device-n6" / "Include"
    st.mkdir(parents=True)
    (st / "stm32n657xx.h").write_text("/* empty */\n")
    args = ["build", "--board", "stm32n6", "--model", str(DIGITS), "--no-compile", "--out", str(tmp_path / "b")]
    assert main([*args, "--device-headers", str(tmp_path / "nowhere")]) == 2
    assert f"--device-headers '{tmp_path / 'nowhere'}': not a folder" in capsys.readouterr().err
    assert main([*args, "--device-headers", str(tmp_path / "cmsis-device-n6")]) == 2
    err = capsys.readouterr().err
    assert "core_cm55.h not found under" in err and "stm32n657xx.h not found" not in err
    assert "Arm's CMSIS core" in err
    assert main([*args, "--device-headers", str(tmp_path)]) == 2  # the checkout's parent: nothing where expected
    assert "stm32n657xx.h, core_cm55.h not found" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_device_headers_for_a_port_without_them(tmp_path, capsys):
    assert (
        main(
            [
                "build",
                "--board",
                "host",
                "--model",
                str(DIGITS),
                "--no-compile",
                "--out",
                str(tmp_path / "b"),
                "--device-headers",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "does not compile against vendor headers" in capsys.readouterr().err


def test_device_headers_from_the_project_file(tmp_path):
    """[build] device_headers are relative to the project file; the flag replaces them."""
    proj = tmp_path / "proj"
    for sub, header in (("cmsis-device-n6/Include", "stm32n657xx.h"), ("CMSIS_6/CMSIS/Core/Include", "core_cm55.h")):
        (proj / sub).mkdir(parents=True)
        (proj / sub / header).write_text("/* stand-in: only found, not compiled here */\n")
    (proj / "zoflash.toml").write_text('[build]\ndevice_headers = ["cmsis-device-n6", "CMSIS_6"]\n')
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
                "--no-compile",
                "--config",
                str(proj / "zoflash.toml"),
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    make = (tmp_path / "b" / "Makefile").read_text()
    assert (
        f'DEVICE_CFLAGS := -DZO_DEVICE_HEADERS "-I{(proj / "cmsis-device-n6/Include").resolve()}" '
        f'"-I{(proj / "CMSIS_6/CMSIS/Core/Include").resolve()}"'
    ) in make
