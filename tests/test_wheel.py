"""The installed product: the wheel built from a fresh copy of the tree, installed with its base dependencies
into a new virtualenv of the lowest Python the metadata claims, run from a folder outside the repo."""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from conftest import FIXTURES, ROOT, _missing

pytestmark = [pytest.mark.wheel, pytest.mark.slow]

# What a fresh checkout gives the build: a build/ folder left in the working tree would be reused by
# setuptools and hide a file that the package-data globs miss.
SOURCE_TREE = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "NOTICE", "host", "firmware_templates", "boards")
# Where each data package comes from in the tree.
DATA_PACKAGES = {"zoflash/firmware_templates": ROOT / "firmware_templates", "zoflash/board_files": ROOT / "boards"}
# Extras the fresh environment does not get: every module must still import (their imports are lazy).
OPTIONAL = ("tensorflow", "tflite_micro", "matplotlib", "pyocd", "ethosu", "sklearn", "dask")
MODEL = ROOT / "examples" / "digits_cnn.tflite"
DATA = ROOT / "examples" / "digits_shift.npz"
# The quick start's commands (README, `make demo`), small.
HOST_BUILD = ("build", "--board", "host", "--model", str(FIXTURES / "mlp.tflite"), "--out", "host-mlp")
M55_BUILD = ("build", "--board", "mps3-an547", "--model", str(MODEL), "--data", str(DATA), "--out", "m55")
SIMULATE = (
    "-q",
    "simulate",
    "--model",
    str(MODEL),
    "--data",
    str(DATA),
    "--budget",
    "20000",
    "--eval-every",
    "20",
    "--log",
    "sim.jsonl",
    "--no-plot",
)
PROJECT_FILE = '[build]\nboot = "dev"\n\n[train]\nseed = 2\n'


def _tree_files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCE_TREE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(tmp.glob("zoflash-*.whl"))


def _metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def _lowest_version(wheel: Path) -> str:
    """The lowest Python version the wheel's Requires-Python allows, as 3.N."""
    requires = _metadata(wheel)["Requires-Python"]
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", requires.strip())
    assert m, f"Requires-Python {requires!r} is not a plain lower bound"
    return f"{m[1]}.{m[2]}"


def _lowest_python(want: str) -> str:
    """An interpreter of Python `want`: pyenv's, else one on PATH."""
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    root = Path(root or Path.home() / ".pyenv")
    candidates = [str(p) for p in sorted((root / "versions").glob(f"{want}.*/bin/python{want}"), reverse=True)]
    if shutil.which(f"python{want}"):
        candidates.append(shutil.which(f"python{want}"))
    for exe in candidates:
        # A pyenv shim of a version not selected exits non-zero; the venv needs venv and ensurepip.
        proc = subprocess.run(
            [exe, "-c", "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0 and proc.stdout.strip() == want:
            return exe
    _missing(f"Python {want} (the lowest version Requires-Python allows)")


def _env(venv: Path) -> dict:
    """The fresh environment's programs first; nothing that points Python at the working tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    python = _lowest_python(_lowest_version(wheel))
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        env=_env(venv),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def _run(venv: Path, cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(venv / "bin" / "zoflash"), *args], cwd=cwd, env=_env(venv), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"zoflash {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _source_tree_run(cwd: Path, *args: str) -> None:
    """The same command with the zoflash the other tiers test (this interpreter's)."""
    proc = subprocess.run(
        [sys.executable, "-m", "zoflash", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _bundle(path: Path) -> dict[str, bytes]:
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in path.rglob("*")
        if p.is_file() and "build" not in p.relative_to(path).parts
    }


def test_wheel_contains_package_data(wheel):
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
    expected = {"inference/zo_kernels_conv.c", "zo_math/zo_train_math.c", "training/zo_trainer.c", "port/zo_port.h"}
    assert expected <= static_c
    assert {f"zoflash/firmware_templates/runtime/{n}" for n in static_c} <= names
    # Every file of the data packages and every module, at any depth: nothing left to a hand-kept list.
    for package, folder in DATA_PACKAGES.items():
        missing = {f"{package}/{n}" for n in _tree_files(folder)} - names
        assert not missing, sorted(missing)
    modules = {f"zoflash/{n}" for n in _tree_files(ROOT / "host" / "zoflash") if n.endswith(".py")}
    assert not modules - names, sorted(modules - names)
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]


def test_wheel_metadata(wheel):
    import zoflash

    meta = _metadata(wheel)
    assert meta["Version"] == zoflash.__version__ == "0.1.0"  # the generator the golden manifests name
    assert meta["Requires-Python"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    # tomllib is standard from 3.11: below that the tomli backport must come with the base install.
    assert any(r.startswith("tomli") and 'python_version < "3.11"' in r for r in meta.get_all("Requires-Dist"))
    with zipfile.ZipFile(wheel) as zf:
        entry_points = zf.read(next(n for n in zf.namelist() if n.endswith("entry_points.txt"))).decode()
    assert re.search(r"^zoflash = zoflash\.cli:main$", entry_points, re.M)


@pytest.mark.cc
@pytest.mark.cross
def test_quick_start_from_the_installed_wheel(wheel, venv, tmp_path):
    work = tmp_path / "work"  # outside the repo: nothing to pick the source tree up from
    work.mkdir()
    # A project file both runs read (the TOML parser is tomli below Python 3.11).
    (work / "zoflash.toml").write_text(PROJECT_FILE)
    code = "import sys, zoflash; print(zoflash.__file__); print('%d.%d' % sys.version_info[:2])"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], cwd=work, env=_env(venv), capture_output=True, text=True, check=True
    ).stdout.split()
    assert Path(where[0]).is_relative_to(venv), where
    assert where[1] == _lowest_version(wheel), where
    assert "Commands:" in _run(venv, work, "--help")
    assert _run(venv, work, "--version").strip() == "zoflash, version 0.1.0"
    ops = _run(venv, work, "ops")
    assert "CONV_2D" in ops and "FULLY_CONNECTED" in ops

    # Inference bundle for the host, training bundle cross-compiled for the emulated Cortex-M55.
    _run(venv, work, *HOST_BUILD)
    assert (work / "host-mlp" / "manifest.json").is_file()
    _run(venv, work, *M55_BUILD)
    assert list((work / "m55" / "build").glob("*.elf"))
    _run(venv, work, *SIMULATE)
    records = [json.loads(line) for line in (work / "sim.jsonl").read_text().splitlines()]
    assert records[-1]["type"] == "done" and records[-1]["steps"] > 0
    assert records[0]["seed"] == 2  # from zoflash.toml

    # The installed product generates and trains exactly as the source tree does.
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "zoflash.toml").write_text(PROJECT_FILE)
    for args in (HOST_BUILD + ("--no-compile",), M55_BUILD + ("--no-compile",), SIMULATE):
        _source_tree_run(ref, *args)
    for bundle in ("host-mlp", "m55"):
        assert _bundle(work / bundle) == _bundle(ref / bundle), bundle
    assert "IDENTICAL" in _run(venv, work, "compare", "sim.jsonl", str(ref / "sim.jsonl"))


def test_every_module_imports_with_the_base_dependencies(venv, tmp_path):
    script = f"""
import importlib, importlib.util, json, pkgutil, sys
import zoflash
failed, names = {{}}, []
def onerror(name):
    failed[name] = repr(sys.exc_info()[1])
for m in pkgutil.walk_packages(zoflash.__path__, "zoflash.", onerror=onerror):
    names.append(m.name)
    if m.name.endswith(".__main__"):  # runs the command line; `python -m zoflash` is checked instead
        continue
    try:
        importlib.import_module(m.name)
    except BaseException as exc:
        failed[m.name] = repr(exc)
extras = [n for n in {OPTIONAL!r} if importlib.util.find_spec(n) is not None]
print(json.dumps(dict(file=zoflash.__file__, names=names, failed=failed, extras=extras)))
"""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert Path(out["file"]).is_relative_to(venv)
    assert out["extras"] == [], "the fresh environment should hold only the base dependencies"
    assert out["failed"] == {}
    # Every module of the source tree, and the data packages, are there to import.
    source = {
        "zoflash." + n[:-3].replace("/", ".").removesuffix(".__init__")
        for n in _tree_files(ROOT / "host" / "zoflash")
        if n.endswith(".py") and n != "__init__.py"
    }
    assert source | {"zoflash.firmware_templates", "zoflash.board_files"} <= set(out["names"])
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "zoflash", "--version"],
        cwd=tmp_path,
        env=_env(venv),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "zoflash, version 0.1.0", proc.stderr
