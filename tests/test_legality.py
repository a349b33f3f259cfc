"""Bad models get one clear error listing every problem; damaged files never crash the tool."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import FIXTURES, negative_fixtures

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.ir import Quantization, Tensor
from zoflash.compiler.lowering import lower_graph
from zoflash.compiler.pipeline import compile_graph
from zoflash.compiler.tflite_import import parse_tflite
from zoflash.errors import InternalError, ModelFormatError, UnsupportedModelError, ZoflashError

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
    """Any damage gives a ZoflashError (or, rarely, a still-valid model), never another exception,
    and never an InternalError: what the importer lets through meets the verifier's invariants."""
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
            compile_graph(parse_tflite(data, "m"))
        except InternalError:
            raise
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
    fcs[-1].type = "DIV"
    with pytest.raises(UnsupportedModelError) as info:
        lower_graph(graph)
    problems = info.value.problems
    assert any("TANH" in p and f"op {fcs[0].index} FULLY_CONNECTED" in p for p in problems)
    assert any(f"op {fcs[-1].index} DIV" in p and "not supported" in p for p in problems)


# ---- hand-made invalid models: each was accepted once and produced wrong or dangerous code


def fixture_graph(name: str):
    return api.load_model(FIXTURES / name).graph


def first_op(graph, op_type: str):
    return next(op for op in graph.ops if op.type == op_type)


def problems_of(graph) -> list[str]:
    with pytest.raises(UnsupportedModelError) as info:
        compile_graph(graph)
    return info.value.problems


def assert_reported(problems: list[str], op, words: str) -> None:
    prefix = f"op {op.index} {op.type} ("
    assert any(p.startswith(prefix) and words in p for p in problems), problems


def test_pad_paddings_must_give_the_output_shape():
    """The generated C wrote past the arena (ASan global-buffer-overflow) for this model."""
    graph = fixture_graph("branchy.tflite")
    pad = first_op(graph, "PAD")
    paddings = graph.tensors[pad.inputs[1]]
    paddings.data = paddings.data.copy()
    paddings.data[1] = (3, 2)  # input 8 + 5 = 13 rows, but the output declares 12
    problems = problems_of(graph)
    assert_reported(problems, pad, "the output must be the input plus the paddings")
    assert any("[1, 13, 12, 1]; the output is [1, 12, 12, 1]" in p for p in problems), problems


@pytest.mark.parametrize("value", [2**31 - 1, -1])
def test_pad_paddings_must_be_small_and_non_negative(value):
    """INT32_MAX paddings overflowed signed int32 arithmetic in zo_pad_s8."""
    graph = fixture_graph("branchy.tflite")
    pad = first_op(graph, "PAD")
    paddings = graph.tensors[pad.inputs[1]]
    paddings.data = paddings.data.copy()
    paddings.data[2, 1] = value
    assert_reported(problems_of(graph), pad, "paddings must be >= 0, and every padded size must fit in int32")


@pytest.mark.parametrize(
    "axes, words",
    [
        ([1, 4], "each in [-rank, rank)"),
        ([1, -5], "each in [-rank, rank)"),
        ([1, 1], "the axes must be distinct"),
        ([2, -2], "the axes must be distinct"),
    ],
)
def test_mean_axes_in_range_and_distinct(axes, words):
    """Out-of-range axes used to wrap around, repeated ones to be merged: 49 of 50 outputs differed from TFLM."""
    graph = fixture_graph("mbv2_block.tflite")
    mean = first_op(graph, "MEAN")
    graph.tensors[mean.inputs[1]].data = np.array(axes, dtype=np.int32)
    assert_reported(problems_of(graph), mean, words)


def test_mean_output_shape_must_follow_the_axes():
    graph = fixture_graph("mbv2_block.tflite")
    mean = first_op(graph, "MEAN")
    mean.options["keep_dims"] = True  # the output stays [1, 24], but keep_dims makes it [1, 1, 1, 24]
    assert_reported(problems_of(graph), mean, "[1, 1, 1, 24], the output is [1, 24]")


def test_constant_model_output_is_a_problem_not_a_traceback(tmp_path):
    graph = fixture_graph("mlp.tflite")
    weights = next(t for t in graph.tensors if t.is_constant)
    graph.outputs = (weights.index,)
    problems = problems_of(graph)
    assert any(f"model output '{weights.name}'" in p and "constant tensor" in p for p in problems), problems


def test_model_output_not_computed_by_any_op():
    graph = fixture_graph("mlp.tflite")
    out = graph.tensors[graph.outputs[0]]
    graph.tensors.append(
        Tensor(index=len(graph.tensors), name="orphan", shape=out.shape, dtype="int8", quant=out.quant)
    )
    graph.outputs = (len(graph.tensors) - 1,)
    assert any("'orphan'" in p and "not computed by any operator" in p for p in problems_of(graph))


def test_op_writing_a_constant_is_rejected():
    graph = fixture_graph("mlp.tflite")
    fc = graph.ops[0]
    graph.tensors[fc.outputs[0]].data = np.zeros(graph.tensors[fc.outputs[0]].shape, np.int8)
    assert_reported(problems_of(graph), fc, "an op's output must not be a constant tensor")


def _with_tensor_buffer(raw: bytes, tensor: int, buffer: int) -> bytes:
    """The flatbuffer with tensor `tensor` of subgraph 0 pointing at buffer `buffer`."""
    import struct

    import tflite

    t = tflite.Model.GetRootAs(raw, 0).Subgraphs(0).Tensors(tensor)
    field = t._tab.Offset(8)  # Tensor.buffer, a uint32 (tflite's generated accessor reads it there)
    assert field, "the tensor has no buffer field to change"
    data = bytearray(raw)
    struct.pack_into("<I", data, t._tab.Pos + field, buffer)
    return bytes(data)


def test_tensor_buffer_index_out_of_range_is_reported_as_such():
    raw = (FIXTURES / "mlp.tflite").read_bytes()
    graph = parse_tflite(raw, "m")
    weights = next(t for t in graph.tensors if t.is_constant)
    with pytest.raises(
        ModelFormatError,
        match=rf"tensor {weights.index} '.*' refers to buffer 100000, but the "
        r"model has only \d+ buffers",
    ):
        parse_tflite(_with_tensor_buffer(raw, weights.index, 100000), "m")


def test_every_failing_constraint_of_an_op_is_listed():
    graph = fixture_graph("branchy.tflite")
    concat = first_op(graph, "CONCATENATION")
    concat.options["fused_activation_function"] = "RELU"
    graph.tensors[concat.inputs[0]].quant = Quantization(scales=(0.5,), zero_points=(3,))
    problems = problems_of(graph)
    assert_reported(problems, concat, "fused_activation_function is 'RELU' (supported: NONE)")
    assert_reported(problems, concat, "every input must have the output's scale and zero point")


def test_constant_model_output_via_cli(tmp_path, capsys):
    """`inspect` called this model supported and `build` ended in a traceback."""
    import struct

    import tflite

    raw = (FIXTURES / "mlp.tflite").read_bytes()
    weights = next(t for t in parse_tflite(raw, "m").tensors if t.is_constant)
    sub = tflite.Model.GetRootAs(raw, 0).Subgraphs(0)
    data = bytearray(raw)
    struct.pack_into("<i", data, sub._tab.Vector(sub._tab.Offset(8)), weights.index)  # SubGraph.outputs[0]
    bad = tmp_path / "const_out.tflite"
    bad.write_bytes(bytes(data))
    assert main(["inspect", str(bad)]) == 2
    assert "legality: NOT SUPPORTED" in capsys.readouterr().out
    assert main(["build", "--model", str(bad), "--no-compile", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "is a constant tensor" in err and "Traceback" not in err


def test_dynamic_batch_compiles_as_batch_one_but_other_dynamic_dimensions_do_not():
    from dataclasses import replace

    from zoflash.compiler.pipeline import compile_graph

    graph = api.load_model(FIXTURES / "dynamic_batch.tflite").graph
    assert any(t.dynamic_batch for t in graph.tensors)
    compile_graph(graph)  # a dynamic leading batch alone is batch 1
    i = graph.inputs[0]
    graph.tensors[i] = replace(graph.tensors[i], shape_signature=(-1, -1))
    with pytest.raises(UnsupportedModelError, match=r"dynamic shape \[-1, -1\] \(dimension 1 besides the batch\)"):
        compile_graph(graph)
