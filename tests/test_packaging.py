"""A plain (non-editable) install carries the templates, the static C runtime and the boards."""
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_wheel_contains_package_data(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("zoflash-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("zoflash/firmware_templates/model.c.j2", "zoflash/firmware_templates/runtime/zo_kernels.h",
                     "zoflash/firmware_templates/ports/host/Makefile.j2",
                     "zoflash/firmware_templates/ports/host/zo_host_main.c", "zoflash/board_files/host.toml",
                     "zoflash/firmware_templates/ports/host/port.toml",
                     "zoflash/firmware_templates/ports/cortex-m/link.ld.j2",
                     "zoflash/firmware_templates/ports/cortex-m/zo_port_cortex_m.c",
                     "zoflash/firmware_templates/ports/stm32n6/port.toml",
                     "zoflash/firmware_templates/ports/mps3-an547/zo_port_mps3_an547.c",
                     "zoflash/board_files/stm32n6570-dk.toml", "zoflash/board_files/mps3-an547.toml",
                     "zoflash/cli.py"):
        assert required in names, required
    runtime = {p.name for p in (ROOT / "firmware_templates" / "runtime").iterdir() if p.suffix in (".c", ".h")}
    assert {f"zoflash/firmware_templates/runtime/{n}" for n in runtime} <= names
