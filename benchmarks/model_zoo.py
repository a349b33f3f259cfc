"""Where the benchmarks find the public models (not in the repository; the tests' twin is
tests/conftest.py, public_models()): $ZOFLASH_MODEL_ZOO when set, else ../shared/models/public
beside the repository."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIABLE = "ZOFLASH_MODEL_ZOO"
MISSING = (
    f"public models not found: set {VARIABLE} to a folder of the public models (manifest.json), "
    "see tests/fixtures/README.md"
)


def public_models() -> Path:
    """The zoo folder; exits with one line when there is none (set but missing is not found)."""
    named = os.environ.get(VARIABLE)
    folder = Path(named) if named else ROOT.parent / "shared" / "models" / "public"
    if not (folder / "manifest.json").is_file():
        sys.exit(MISSING)
    return folder
