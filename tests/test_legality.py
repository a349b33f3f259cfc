"""Bad models get one clear error listing every problem; damaged files never crash the tool."""
from __future__ import annotations

import random

import pytest
from conftest import FIXTURES, negative_fixtures
from zoflash import api
from zoflash.cli import main
from zoflash.compiler.lowering import lower_graph
from zoflash.compiler.tflite_import import parse_tflite
from zoflash.errors import ModelFormatError, UnsupportedModelError, ZoflashError

NEGATIVE = negative_fixtures()


@pytest.mark.parametrize("fixture", NEGATIVE, ids=[f["file"] for f in NEGATIVE])
def test_negative_fixture_is_rejected_with_reason(fixture):
    model = api.load_model(FIXTURES / fixture["file"])
    with pytest.raises(UnsupportedModelError) as info:
        lower_graph(model.graph)
    text = str(info.value)
    kind = fixture["expected_problem"]
    expected_words = {"float": "float32", "int16": "int16", "dynamic": "dynamic"}
    if kind.startswith("unsupported_op:"):
        op = kind.split(":", 1)[1]
        assert f"{op} is not supported" in text
        assert "op " in text  # names the op index
    else:
        assert expected_words[kind] in text, text


def test_float_model_lists_every_op():
    model = api.load_model(FIXTURES / "float_mlp.tflite")
    with pytest.raises(UnsupportedModelError) as info:
        lower_graph(model.graph)
    n_ops = len(model.graph.ops)
    listed = {p.split(":")[0] for p in info.value.problems if p.startswith("op ")}
    assert len(listed) == n_ops, info.value.problems


@pytest.mark.parametrize("fixture", NEGATIVE, ids=[f["file"] for f in NEGATIVE])
def test_cli_reports_without_traceback(fixture, capsys):
    code = main(["build", "--model", str(FIXTURES / fixture["file"]), "--no-compile", "--out", "/nonexistent/x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "Traceback" not in err


def test_wrong_magic_and_short_files():
    raw = (FIXTURES / "mlp.tflite").read_bytes()
    with pytest.raises(ModelFormatError, match="TFL3"):
        parse_tflite(raw[:4] + b"XXXX" + raw[8:], "m")
    for n in (0, 3, 7):
        with pytest.raises(ModelFormatError, match="too short"):
            parse_tflite(raw[:n], "m")
    with pytest.raises(ModelFormatError, match="cannot read"):
        api.load_model(FIXTURES / "does-not-exist.tflite")


@pytest.mark.parametrize("model_file", ["mlp.tflite", "digits_cnn.tflite"])
def test_truncated_and_corrupted_files_fail_cleanly(model_file):
    """Any damage gives a ZoflashError (or, rarely, a still-valid model), never another exception."""
    raw = (FIXTURES / model_file).read_bytes()
    rng = random.Random(1)
    variants = [raw[:n] for n in sorted({rng.randrange(8, len(raw)) for _ in range(60)})]
    for _ in range(120):
        data = bytearray(raw)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(8, len(data))] = rng.randrange(256)
        variants.append(bytes(data))
    for data in variants:
        try:
            graph = parse_tflite(data, "m")
            lower_graph(graph)
        except ZoflashError:
            pass


def test_truncated_file_via_cli(tmp_path, capsys):
    raw = (FIXTURES / "mlp.tflite").read_bytes()
    bad = tmp_path / "truncated.tflite"
    bad.write_bytes(raw[: len(raw) // 3])
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "truncated.tflite" in err and "Traceback" not in err


def test_all_problems_reported_at_once():
    """Two independent defects in one model: both appear in the same error."""
    graph = api.load_model(FIXTURES / "mlp.tflite").graph
    fcs = [op for op in graph.ops if op.type == "FULLY_CONNECTED"]
    fcs[0].options["fused_activation_function"] = "TANH"
    fcs[-1].type = "SUB"
    with pytest.raises(UnsupportedModelError) as info:
        lower_graph(graph)
    problems = info.value.problems
    assert any("TANH" in p and f"op {fcs[0].index} FULLY_CONNECTED" in p for p in problems)
    assert any(f"op {fcs[-1].index} SUB" in p and "not supported" in p for p in problems)
