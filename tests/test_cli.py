"""The command line: exact commands from the docs, exit codes, outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash import __version__
from zoflash.cli import main


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("build", "infer", "validate", "inspect", "boards"):
        assert cmd in out


def test_boards(capsys):
    assert main(["boards"]) == 0
    assert "host" in capsys.readouterr().out


def test_unknown_board(capsys):
    assert main(["build", "--board", "nope", "--model", str(FIXTURES / "mlp.tflite")]) == 2
    assert "unknown board 'nope'" in capsys.readouterr().err


def test_inspect(capsys):
    assert main(["inspect", str(FIXTURES / "mbv2_block.tflite")]) == 0
    out = capsys.readouterr().out
    assert "DEPTHWISE_CONV_2D" in out and "memory plan" in out and "legality: supported" in out


@pytest.mark.cc
def test_build_infer(tmp_path, capsys):
    out_dir = tmp_path / "bundle"
    assert main(["build", "--board", "host", "--model", str(FIXTURES / "mlp.tflite"), "--out", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert "arena" in text and "constant weights" in text and "code" in text
    assert (out_dir / "manifest.json").exists() and (out_dir / "build" / "libmlp.so").exists()
    x = np.random.default_rng(0).integers(-128, 128, size=(7, 64), dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(
            [
                "infer",
                "--model",
                str(FIXTURES / "mlp.tflite"),
                "--inputs",
                str(tmp_path / "x.npy"),
                "--out",
                str(tmp_path / "y.npy"),
            ]
        )
        == 0
    )
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.int8 and y.shape[0] == 7
    # the file named, exactly (not y.out.npy)
    infer = ["infer", "--model", str(FIXTURES / "mlp.tflite"), "--inputs", str(tmp_path / "x.npy")]
    assert main([*infer, "--out", str(tmp_path / "y.out")]) == 0
    assert not (tmp_path / "y.out.npy").exists() and np.array_equal(np.load(tmp_path / "y.out"), y)


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_random(capsys):
    assert main(["validate", "--model", str(FIXTURES / "digits_cnn.tflite"), "--random", "20"]) == 0
    assert "OK" in capsys.readouterr().out


def test_validate_needs_exactly_one_source(capsys):
    assert main(["validate", "--model", str(FIXTURES / "mlp.tflite")]) == 2


def test_bad_inputs_file(tmp_path, capsys):
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    assert (
        main(
            [
                "infer",
                "--model",
                str(FIXTURES / "mlp.tflite"),
                "--inputs",
                str(tmp_path / "x.npy"),
                "--out",
                str(tmp_path / "y.npy"),
            ]
        )
        == 2
    )
    assert "cannot read" in capsys.readouterr().err


def test_simulate_without_an_evaluation_says_why(tmp_path, capsys, monkeypatch):
    """A training program that stops before its first evaluation (its log frame says why) is an
    error message, not a traceback."""
    from types import SimpleNamespace

    def stopped(*args, **kwargs):
        return SimpleNamespace(
            headroom=None,
            interrupted=False,
            evals=[],
            log_path=tmp_path / "run.jsonl",
            records=[{"type": "log", "text": "batch and the three data splits must be non-empty"}],
        )

    monkeypatch.setattr("zoflash.api.simulate", stopped)
    code = main(
        ["simulate", "--model", str(FIXTURES / "mlp.tflite"), "--data", str(FIXTURES / "digits_shift.npz"), "--no-plot"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "ended without an evaluation: batch and the three data splits" in err


def test_runtime_command_gives_what_a_build_needs(capsys):
    from zoflash.compiler.runtime import include_dirs, runtime_root, sources

    assert main(["runtime", "training", "--cflags"]) == 0
    assert capsys.readouterr().out.split() == [f"-I{d}" for d in include_dirs(["training"])]
    assert main(["runtime", "inference", "--sources"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == [str(p) for p in sources(["inference"])] and all(p.endswith(".c") for p in listed)
    assert main(["runtime", "--cmake-dir"]) == 0
    assert (Path(capsys.readouterr().out.strip()) / "CMakeLists.txt") == runtime_root() / "CMakeLists.txt"
    assert main(["runtime"]) == 0
    assert "training" in capsys.readouterr().out
    assert main(["runtime", "nonsense"]) == 2
    assert main(["runtime", "--cflags", "--sources"]) == 2
