"""Golden generated files: any change to templates, lowering, kernel parameters, the training code
generation or a board's firmware files shows up here as a reviewable diff.

Cases (tests/golden/<case>/):
  mlp                       host inference bundle of the MLP fixture
  mlp-train-host            host training bundle of the MLP on a tiny dataset this test makes
  mlp-train-mps3-an547      the same for the Cortex-M55 boards: their firmware files (Makefile,
  mlp-train-stm32n6570-dk   linker script, board header, manifest)

Each case is generated twice, into different directories: the two must be byte-identical (the
output is deterministic), and equal to the golden files. A mismatch shows the unified diff of the
first differing file. Regenerate after an intended change, then review `git diff tests/golden`:
    ZOFLASH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

import difflib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, ROOT

from zoflash import api
from zoflash.training.options import TrainOptions, validate

GOLDEN = ROOT / "tests" / "golden"
FIRMWARE_FILES = ("Makefile", "link.ld", "zo_bundle.h", "manifest.json")
CASES = {  # case -> (board, training?, golden files)
    "mlp": ("host", False, ("mlp.c", "mlp.h", "mlp_weights.c", "zo_bundle.h", "Makefile", "manifest.json")),
    "mlp-train-host": ("host", True, ("mlp_train.c", "mlp_data.c", "zo_bundle.h", "Makefile", "manifest.json")),
    "mlp-train-mps3-an547": ("mps3-an547", True, FIRMWARE_FILES),
    "mlp-train-stm32n6570-dk": ("stm32n6570-dk", True, FIRMWARE_FILES),
}


def tiny_dataset(path: Path) -> Path:
    """8 training and 4 test samples for the MLP's 64 inputs, from integer arithmetic only (no
    random generator whose stream could change)."""
    n = 12
    x = (np.arange(n * 64).reshape(n, 64) * 37 % 17 / 16).astype(np.float32)
    y = np.arange(n) % 10
    np.savez(path, x_train=x[:8], y_train=y[:8], x_test=x[8:], y_test=y[8:])
    return path


def generate(case: str, out: Path) -> Path:
    board, training, _ = CASES[case]
    out.mkdir(parents=True)
    if training:  # explicit options: the defaults, whatever zoflash.toml the working directory holds
        api.generate(
            FIXTURES / "mlp.tflite",
            board,
            out / "bundle",
            data_path=tiny_dataset(out / "tiny.npz"),
            options=validate(TrainOptions()),
        )
    else:
        api.generate(FIXTURES / "mlp.tflite", board, out / "bundle")
    return out / "bundle"


def first_difference(expected_dir: Path, got_dir: Path, names) -> str | None:
    """The unified diff of the first file that differs (or is missing), None if all are equal."""
    for name in names:
        expected, got = expected_dir / name, got_dir / name
        if not expected.exists() or not got.exists():
            return f"{name}: missing in {expected_dir if not expected.exists() else got_dir}"
        if expected.read_bytes() != got.read_bytes():
            diff = difflib.unified_diff(
                expected.read_text().splitlines(keepends=True),
                got.read_text().splitlines(keepends=True),
                fromfile=str(expected),
                tofile=str(got),
            )
            return "".join(diff) or f"{name}: the bytes differ (line endings or encoding)"
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_generated_files_match_golden(tmp_path, case):
    names = CASES[case][2]
    first, second = generate(case, tmp_path / "first"), generate(case, tmp_path / "second")
    every_file = sorted(p.name for p in first.iterdir())
    assert every_file == sorted(p.name for p in second.iterdir())
    assert first_difference(first, second, every_file) is None, "two generations differ: output not deterministic"
    golden = GOLDEN / case
    if os.environ.get("ZOFLASH_UPDATE_GOLDEN") == "1":
        shutil.rmtree(golden, ignore_errors=True)
        golden.mkdir(parents=True)
        for name in names:
            shutil.copyfile(first / name, golden / name)
        pytest.skip(f"golden files of {case} updated")
    diff = first_difference(golden, first, names)
    assert diff is None, f"generated files differ from tests/golden/{case}/ (see the module docstring):\n{diff}"
