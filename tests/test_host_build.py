"""The host build: the bundle's Makefile compiles each source once into build/obj/, links the
library and the programs from those objects, and the code size is measured on them."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.targets.host_build import code_size

pytestmark = pytest.mark.cc


def make_variable(bundle_dir, name: str) -> str:
    """A variable's value as the bundle's own Makefile defines it."""
    return subprocess.run(
        ["make", "-s", "-C", str(bundle_dir), "--eval", f"print-var: ; @echo $({name})", "print-var"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def text_bytes(objects) -> int:
    out = subprocess.run(["size", "-A", *map(str, objects)], capture_output=True, text=True, check=True).stdout
    return sum(int(p[1]) for p in map(str.split, out.splitlines()) if len(p) >= 2 and p[0].startswith(".text"))


def test_code_size_is_the_text_of_the_library_sources(tmp_path):
    """Reference: the Makefile's SOURCES compiled here, apart, with its CFLAGS."""
    result = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "b")
    bundle_dir = result.bundle.path
    cflags = make_variable(bundle_dir, "CFLAGS").split()
    sources = make_variable(bundle_dir, "SOURCES").split()
    assert "zo_host_main.c" not in sources
    objects = []
    for src in sources:
        obj = tmp_path / (src[:-2] + ".o")
        subprocess.run(["cc", *cflags, "-c", "-o", str(obj), src], check=True, cwd=bundle_dir)  # .incbin's files
        objects.append(obj)
    assert result.code_bytes == text_bytes(objects) > 0
    # objects left in build/obj/ that the bundle has no source for (an earlier generation) do not count
    shutil.copyfile(bundle_dir / "build" / "obj" / "zo_host_main.o", bundle_dir / "build" / "obj" / "old.o")
    assert code_size(result.bundle) == result.code_bytes


def test_training_build_counts_the_training_loop_not_the_host_port(tmp_path):
    data = tmp_path / "tiny.npz"
    x = np.linspace(0, 1, 12 * 64, dtype=np.float32).reshape(12, 64)
    np.savez(data, x_train=x[:8], y_train=np.arange(8) % 10, x_test=x[8:], y_test=np.arange(4))
    result = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "b", data_path=data)
    bundle_dir = result.bundle.path
    obj = bundle_dir / "build" / "obj"
    names = make_variable(bundle_dir, "SOURCES").split() + make_variable(bundle_dir, "TRAIN_SOURCES").split()
    assert "zo_trainer.c" in names and (obj / "zo_port_host.o").is_file()
    assert result.code_bytes == text_bytes(obj / (name[:-2] + ".o") for name in names)
