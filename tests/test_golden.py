"""Golden generated C: any change to templates, lowering or kernels parameters shows up here as a
reviewable diff. Regenerate after an intended change with:
    ZOFLASH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""
import os
import shutil

import pytest
from conftest import FIXTURES, ROOT
from zoflash import api

GOLDEN = ROOT / "tests" / "golden" / "mlp"
GENERATED = ("mlp.c", "mlp.h", "mlp_weights.c", "zo_bundle.h", "Makefile", "manifest.json")


def test_generated_files_match_golden(tmp_path):
    api.generate(FIXTURES / "mlp.tflite", "host", tmp_path / "b")
    if os.environ.get("ZOFLASH_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            shutil.copyfile(tmp_path / "b" / name, GOLDEN / name)
        pytest.skip("golden files updated")
    for name in GENERATED:
        expected = (GOLDEN / name).read_text()
        got = (tmp_path / "b" / name).read_text()
        assert got == expected, f"{name} differs from tests/golden/mlp/{name} (see the module docstring)"
