"""A plain (non-editable) install carries the templates, the static C runtime and the boards."""

import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

# What a fresh checkout gives the build: a build/ folder left in the working tree would be reused by
# setuptools and hide a file that the package-data globs miss.
SOURCE_TREE = ("pyproject.toml", "README.md", "host", "firmware_templates", "boards")


@pytest.mark.slow
def test_wheel_contains_package_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCE_TREE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("zoflash-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "zoflash/firmware_templates/model.c.j2",
        "zoflash/firmware_templates/runtime/inference/zo_kernels.h",
        "zoflash/firmware_templates/runtime/CMakeLists.txt",
        "zoflash/firmware_templates/ports/host/Makefile.j2",
        "zoflash/firmware_templates/ports/host/zo_host_main.c",
        "zoflash/board_files/host.toml",
        "zoflash/firmware_templates/ports/host/port.toml",
        "zoflash/firmware_templates/ports/cortex-m/link.ld.j2",
        "zoflash/firmware_templates/ports/cortex-m/zo_port_cortex_m.c",
        "zoflash/firmware_templates/ports/stm32n6/port.toml",
        "zoflash/firmware_templates/ports/mps3-an547/zo_port_mps3_an547.c",
        "zoflash/board_files/stm32n6570-dk.toml",
        "zoflash/board_files/mps3-an547.toml",
        "zoflash/cli/__init__.py",
        "zoflash/cli/main.py",
        "zoflash/workflows/generate.py",
        "zoflash/spec/wire.py",
    ):
        assert required in names, required
    runtime = ROOT / "firmware_templates" / "runtime"
    static_c = {p.relative_to(runtime).as_posix() for p in runtime.rglob("*") if p.suffix in (".c", ".h")}
    assert {
        "inference/zo_kernels_conv.c",
        "zo_math/zo_train_math.c",
        "training/zo_trainer.c",
        "port/zo_port.h",
    } <= static_c
    assert {f"zoflash/firmware_templates/runtime/{n}" for n in static_c} <= names
