"""Bad input from the command line is a one-line error with exit 2, never a traceback: outputs that
cannot be written (checked before any work), unknown port URLs, broken logs, options outside the
ranges of the C fields they become."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from zoflash.cli import main

MODEL = str(FIXTURES / "digits_cnn.tflite")
DATA = str(FIXTURES / "digits_shift.npz")


def _fails(capsys, argv, *expected):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--model", MODEL, "--no-compile", "--out", "{bad}/bundle"],
        ["simulate", "--model", MODEL, "--data", DATA, "--steps", "2", "--log", "{bad}/run.jsonl"],
        [
            "infer",
            "--model",
            MODEL,
            "--inputs",
            str(FIXTURES.parent.parent / "examples" / "digits_test_x.npy"),
            "--out",
            "{bad}/y.npy",
        ],
        ["monitor", "--port", "loop://", "--log", "{bad}/run.jsonl"],
        ["monitor", "--port", "loop://", "--csv", "{bad}/run.csv"],
        ["run", "--board", "mps3-an547", "--model", MODEL, "--data", DATA, "--log", "{bad}/run.jsonl"],
    ],
)
def test_an_output_that_cannot_be_written_fails_before_any_work(capsys, tmp_path, argv):
    """A path below a regular file cannot be created by anyone, root included."""
    (tmp_path / "file").write_text("x")
    _fails(capsys, [a.format(bad=tmp_path / "file") for a in argv], "cannot write there")


def test_an_unknown_port_scheme_is_refused_at_once(capsys):
    _fails(capsys, ["monitor", "--port", "bogus://x"], "'bogus://x'", "protocol 'bogus' not known")


def test_compare_names_the_broken_line(capsys, tmp_path):
    log = tmp_path / "broken.jsonl"
    log.write_text('{"type": "step", "step": 0}\nnot json\n')
    _fails(capsys, ["compare", str(log), str(log)], "line 2 is not JSON")
    log.write_text("[1, 2]\n")
    _fails(capsys, ["compare", str(log), str(log)], "line 1 is not a training record")


def test_validate_needs_at_least_one_random_input(capsys):
    assert main(["validate", "--model", MODEL, "--random", "-3"]) == 2
    assert "give at least 1 input" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--steps", "99999999999", "--steps (steps=) must be in 1..4294967295"),
        ("--eval-every", "4294967296", "--eval-every (eval_every=) must be in 1..4294967295"),
        ("--lr", "1e39", "does not fit a float32"),
        ("--bias-bound", "2000000000", "past int32; use at most"),
    ],
)
def test_options_are_range_checked_against_their_c_fields(capsys, tmp_path, flag, value, expected):
    _fails(
        capsys,
        ["build", "--model", MODEL, "--data", DATA, flag, value, "--no-compile", "--out", str(tmp_path / "b")],
        expected,
    )


def test_infer_refuses_nan_inputs(capsys, tmp_path):
    import numpy as np

    x = np.zeros((3, 8, 8, 1), np.float32)
    x[1, 2, 3, 0] = np.nan
    np.save(tmp_path / "x.npy", x)
    _fails(
        capsys,
        ["infer", "--model", MODEL, "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")],
        "1 NaN or infinite value(s)",
    )


def test_float_data_far_outside_the_input_range_warns(caplog):
    import numpy as np

    from zoflash.compiler.quant import as_samples

    pixels = np.arange(0, 256, dtype=np.float32).reshape(4, 64)  # 0..255 for a model of [0, 1]
    with caplog.at_level("WARNING", logger="zoflash"):
        as_samples(pixels, (1, 64), 1 / 255, -128)
    assert "fall outside the input's range [0, 1]" in caplog.text and "saturate" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoflash"):
        as_samples(pixels / 255, (1, 64), 1 / 255, -128)
    assert caplog.text == ""


def test_tiny_or_one_class_training_data_warns(caplog, tmp_path):
    import numpy as np

    from zoflash.training.options import make_options
    from zoflash.workflows.training import compile_for_training

    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "d.npz",
        x_train=rng.random((5, 8, 8, 1), np.float32),
        y_train=np.full(5, 3),
        x_test=rng.random((4, 8, 8, 1), np.float32),
        y_test=np.arange(4),
    )
    with caplog.at_level("WARNING", logger="zoflash"):
        compile_for_training(MODEL, tmp_path / "d.npz", make_options(batch=16))
    assert "3 training samples for a batch of 16" in caplog.text  # 2 of the 5 became the validation split
    assert "every training sample has label 3" in caplog.text


@pytest.mark.parametrize(
    "prefix, why",
    [
        ("a-b", "it has '-'"),
        ("1abc", "it starts with a digit"),
        ("naïve", "(not ASCII)"),
        ("_model", "it starts with '_'"),
        ("m" * 49, "it has 49 characters"),
        ("zo_trainer", "'zo_' starts the names of the runtime's own files"),
        ("ZO_Kernels", "'zo_' starts the names of the runtime's own files"),
        ("zo", "'zo_' starts the names"),
        ("", "it is empty"),
    ],
)
def test_a_prefix_that_cannot_name_c_files_is_refused_before_any_work(capsys, tmp_path, prefix, why):
    out = tmp_path / "b"
    for argv in (
        ["build", "--model", MODEL, "--prefix", prefix, "--out", str(out)],
        ["build", "--model", MODEL, "--data", DATA, "--prefix", prefix, "--no-compile", "--out", str(out)],
    ):
        _fails(capsys, argv, f"prefix '{prefix}' cannot name the model's C files", why, "A prefix is a C identifier")
    assert not out.exists()


def test_the_api_checks_the_prefix_as_the_cli_does(tmp_path):
    from zoflash import api
    from zoflash.errors import PrefixError
    from zoflash.training.options import make_options

    with pytest.raises(PrefixError, match="it has '-'"):
        api.generate(MODEL, "host", tmp_path / "a", prefix="a-b")
    with pytest.raises(PrefixError, match="starts with a digit"):
        api.build(MODEL, "host", tmp_path / "b", prefix="1abc")
    with pytest.raises(PrefixError, match="'zo_' starts the names"):
        api.simulate(MODEL, DATA, make_options(steps=2), bundle_dir=tmp_path / "c", prefix="zo_trainer")
    assert not any(tmp_path.iterdir())


def test_a_model_named_like_a_runtime_file_keeps_the_runtime_file(tmp_path):
    from zoflash import api
    from zoflash.compiler.runtime import runtime_root

    model = tmp_path / "zo_trainer.tflite"
    model.write_bytes((FIXTURES / "digits_cnn.tflite").read_bytes())
    bundle = api.generate(model, "host", tmp_path / "b", data_path=DATA)
    assert bundle.prefix == "m_zo_trainer"
    runtime_trainer = Path(runtime_root()) / "training" / "zo_trainer.c"
    assert (bundle.path / "zo_trainer.c").read_bytes() == runtime_trainer.read_bytes()
    assert (bundle.path / "m_zo_trainer.c").is_file()


def test_a_generated_file_never_takes_a_runtime_files_name(monkeypatch, tmp_path):
    """Whatever the runtime holds: a clash (in any letter case) is refused, naming the files."""
    from zoflash import api
    from zoflash.errors import PrefixError
    from zoflash.targets import project

    def with_a_net_header(*args, **kwargs):
        return {**runtime_sources(*args, **kwargs), "Net.h": b"/* a runtime header */\n"}

    runtime_sources = project.runtime_sources
    monkeypatch.setattr(project, "runtime_sources", with_a_net_header)
    with pytest.raises(PrefixError, match=r"net\.h \(the bundle's Net\.h\)"):
        api.generate(MODEL, "host", tmp_path / "b", prefix="net")
    assert not (tmp_path / "b").exists()
    api.generate(MODEL, "host", tmp_path / "b", prefix="other")  # no clash, no refusal
