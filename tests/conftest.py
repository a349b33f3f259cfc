"""Shared test helpers: fixture paths and tier enforcement.

Tiers are pytest markers (cc, cross, qemu, tflm, tf, slow). A tier whose tool is missing is
skipped on a developer machine, but under `make test` / CI (ZOFLASH_REQUIRE_ALL=1 or CI=true)
a missing tool fails the run loudly instead of silently skipping a tier.

The public models (TFLM's examples, MLPerf Tiny, the zoos) are not in the repository: tests marked
`zoo` read them from the folder `public_models()` finds and skip, never fail, without it. Files cut
out of them (ops fixtures) are made at test time by `derived_op_fixture`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# training options of a run that ends worse than its best (the MLP on the flattened digits): a
# rate far too large, no decay, a lax validation guard: no evaluation beats the start
ENDS_WORSE_THAN_BEST = dict(
    scheduler="fixed", q=1, lr=1000.0, lr_decay="none", guard_loss=10.0, steps=80, eval_every=25
)
OPS_FIXTURES = FIXTURES / "ops"
REQUIRE_ALL = os.environ.get("ZOFLASH_REQUIRE_ALL") == "1" or os.environ.get("CI") == "true"
ZOO_VARIABLE = "ZOFLASH_MODEL_ZOO"
ZOO_MISSING = (
    f"public models not found: set {ZOO_VARIABLE} to a folder of the public models (manifest.json), "
    "see tests/fixtures/README.md"
)


def public_models() -> Path | None:
    """The folder of the public models: $ZOFLASH_MODEL_ZOO when set (set but without a manifest.json
    counts as not found, never as a fall-back), else ../shared/models/public beside the repository."""
    named = os.environ.get(ZOO_VARIABLE)
    folder = Path(named) if named else ROOT.parent / "shared" / "models" / "public"
    return folder if (folder / "manifest.json").is_file() else None


ZOO = public_models()
# Paths into the zoo are built at import (parametrize); without one they point nowhere and the
# tests marked `zoo` skip before reading them.
PUBLIC = ZOO or ROOT.parent / "shared" / "models" / "public"


def need_public_models() -> Path:
    """The zoo folder, or skip: a user's clone has none (not a tier: REQUIRE_ALL leaves it a skip)."""
    if ZOO is None:
        pytest.skip(ZOO_MISSING)
    return ZOO


def zoo_param(value):
    """A parametrize value that reads the public models: skipped with the others without them."""
    return pytest.param(value, marks=pytest.mark.zoo)


_DERIVED_DIR: list[Path] = []  # where derived_op_fixture writes: set once per session


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-count",
        type=int,
        default=None,
        help="mutants for each mutation fuzzer (test_bad_models.py: models, default 60; test_fuzz_inputs.py: "
        "datasets, telemetry, zoflash.toml, board files, command lines, each its own default), or ZOFLASH_FUZZ_COUNT",
    )


def pytest_configure(config):
    """One object cache per test session (shared by its builds, never the user's): set before any
    build runs; an explicit ZOFLASH_CACHE (a folder or off) is kept. The fixtures derived from the
    public models go to the pytest cache (kept across sessions, checked by sha256 on use)."""
    import tempfile

    if "ZOFLASH_CACHE" not in os.environ:
        os.environ["ZOFLASH_CACHE"] = tempfile.mkdtemp(prefix="zoflash-test-cache-")
    cache = getattr(config, "cache", None)
    _DERIVED_DIR[:] = [cache.mkdir("zoo-derived") if cache else Path(tempfile.mkdtemp(prefix="zoflash-zoo-derived-"))]


@contextmanager
def small_disk(tmp_path: Path, kib: int) -> Iterator[Path]:
    """A tmpfs of `kib` KiB (a full disk on demand; mounting needs root: the test skips without it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(disk)]
    if subprocess.run(mount, capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


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


# The ops fixtures cut out of public models: their index (in the repository) and the script that
# makes them (tests/fixtures/ops/<script>.py, its build(zoo) -> {file: bytes}).
DERIVED_INDEXES = {"lstm.json": "make_lstm", "sequence.json": "make_sequence"}


def derived_op_fixture(name: str) -> Path:
    """The ops fixture `name` (e.g. lstm_small.tflite), made from the zoo's copy of its public model
    on first use into the pytest cache; remade when missing or not the sha256 its index records
    (the index tests then tell a script that no longer makes the same bytes)."""
    zoo = need_public_models()
    script, entry = next(
        (script, e)
        for index, script in DERIVED_INDEXES.items()
        for e in json.loads((OPS_FIXTURES / index).read_text())
        if e["file"] == name
    )
    path = _DERIVED_DIR[0] / name
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
        need_module("tensorflow")  # the scripts write with its flatbuffer schema
        if str(OPS_FIXTURES) not in sys.path:
            sys.path.insert(0, str(OPS_FIXTURES))
        for file, data in importlib.import_module(script).build(zoo).items():
            # Atomic: pytest-xdist workers share the cache and may make the same file at once.
            partial = path.with_name(f"{file}.{os.getpid()}.partial")
            partial.write_bytes(data)
            os.replace(partial, path.with_name(file))
    return path


def derived_op_fixtures() -> list[str]:
    """The file names of every ops fixture derived_op_fixture makes."""
    return [e["file"] for index in DERIVED_INDEXES for e in json.loads((OPS_FIXTURES / index).read_text())]


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
    if request.node.get_closest_marker("zoo"):
        need_public_models()
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
    if request.node.get_closest_marker("fleet"):
        if not (shutil.which("mosquitto") or Path("/usr/sbin/mosquitto").exists()):
            _missing("program 'mosquitto'")
        need_module("paho")
        need_module("distributed")
    if request.node.get_closest_marker("vela"):  # the npu extra
        need_module("ethosu")
