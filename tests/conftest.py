"""Shared test helpers: fixture paths and tier enforcement.

Tiers are pytest markers (cc, cross, qemu, tflm, tf, slow). A tier whose tool is missing is
skipped on a developer machine, but under `make test` / CI (ZOFLASH_REQUIRE_ALL=1 or CI=true)
a missing tool fails the run loudly instead of silently skipping a tier.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
REQUIRE_ALL = os.environ.get("ZOFLASH_REQUIRE_ALL") == "1" or os.environ.get("CI") == "true"


def pytest_configure(config):
    """One object cache per test session (shared by its builds, never the user's): set before any
    build runs; an explicit ZOFLASH_CACHE (a folder or off) is kept."""
    if "ZOFLASH_CACHE" not in os.environ:
        import tempfile

        os.environ["ZOFLASH_CACHE"] = tempfile.mkdtemp(prefix="zoflash-test-cache-")


def _missing(what: str) -> None:
    if REQUIRE_ALL:
        pytest.fail(f"{what} is missing but this run requires every test tier (ZOFLASH_REQUIRE_ALL/CI)")
    pytest.skip(f"{what} is missing")


def need_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        _missing(f"program '{name}'")
    return path


def need_module(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        _missing(f"Python module '{name}'")


def fixture_index() -> list[dict]:
    return json.loads((FIXTURES / "fixtures.json").read_text())["fixtures"]


def positive_fixtures() -> list[str]:
    return [f["file"] for f in fixture_index() if f["kind"] == "positive"]


def negative_fixtures() -> list[dict]:
    return [f for f in fixture_index() if f["kind"] == "negative"]


@pytest.fixture(autouse=True)
def _python_sigint_handler():
    """Python's own SIGINT handler during every test: a shell starting the tests in the
    background starts them with SIGINT ignored, and then `_thread.interrupt_main` (the Ctrl-C
    tests' simulated Ctrl-C) does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def _tier_tools(request):
    """Markers imply tools: check them before the test body runs."""
    if request.node.get_closest_marker("cc"):
        need_program("cc")
        need_program("make")
    if request.node.get_closest_marker("cross"):
        need_program("arm-none-eabi-gcc")
    if request.node.get_closest_marker("qemu"):
        need_program("qemu-system-arm")
    if request.node.get_closest_marker("tflm"):
        need_module("tflite_micro")
    if request.node.get_closest_marker("tf"):
        need_module("tensorflow")
    if request.node.get_closest_marker("vela"):  # the npu extra
        need_module("ethosu")
