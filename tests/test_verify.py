"""The verifier between compiler stages: a compiled program or plan corrupted the way a compiler
bug would corrupt it is refused with an InternalError naming the op, before any code exists."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, positive_fixtures

from zoflash import api
from zoflash.compiler.pipeline import compile_graph
from zoflash.compiler.verify import verify_graph, verify_plan, verify_program
from zoflash.errors import InternalError, ZoflashError


def compiled(name: str = "mlp.tflite"):
    return compile_graph(api.load_model(FIXTURES / name).graph)


@pytest.mark.parametrize("model_file", positive_fixtures())
def test_every_fixture_verifies(model_file):
    model = compiled(model_file)
    verify_graph(model.graph)
    verify_program(model.program)
    verify_plan(model)


def test_internal_error_says_it_is_a_bug():
    err = InternalError("lowering", "op 3 ADD: something")
    assert isinstance(err, ZoflashError)
    assert "zoflash bug" in str(err) and "op 3 ADD" in str(err)


def test_params_larger_than_the_tensor():
    model = compiled()
    step = model.program.steps[1]
    step.params["rows"] += 1  # the kernel would read one row past the input and write one past the output
    with pytest.raises(InternalError, match=rf"op {step.op.index} FULLY_CONNECTED .*argument 0 touches"):
        verify_program(model.program)


def test_pad_params_larger_than_the_output():
    model = compiled("branchy.tflite")
    step = next(s for s in model.program.steps if s.kernel == "pad")
    step.params["after2"] += 1
    with pytest.raises(InternalError, match=rf"op {step.op.index} PAD .*argument 1 touches"):
        verify_program(model.program)


def test_concat_params_larger_than_an_input():
    model = compiled("branchy.tflite")
    step = next(s for s in model.program.steps if s.kernel == "concat")
    step.params["chunk"] = step.params["chunk"].copy()
    step.params["chunk"][0] += 1
    with pytest.raises(InternalError, match=rf"op {step.op.index} CONCATENATION .*argument 0 touches"):
        verify_program(model.program)


def test_broadcast_stride_past_the_input():
    model = compiled("mbv2_block.tflite")
    step = next(s for s in model.program.steps if s.kernel == "add")
    step.params["in2_s3"] += 1
    with pytest.raises(InternalError, match=rf"op {step.op.index} ADD .*argument 1 touches"):
        verify_program(model.program)


def test_argument_of_the_wrong_dtype():
    model = compiled()
    step = model.program.steps[0]
    step.args[0] = step.args[2]  # the int32 bias where the int8 input goes
    with pytest.raises(InternalError, match="argument 0 .* is int32, the kernel takes int8"):
        verify_program(model.program)


def test_missing_tensor_and_wrong_argument_count():
    model = compiled()
    step = model.program.steps[0]
    step.args[-1] = len(model.graph.tensors)
    with pytest.raises(InternalError, match="does not exist"):
        verify_program(model.program)
    step.args.pop()
    with pytest.raises(InternalError, match="3 arguments, the kernel takes 4"):
        verify_program(model.program)


def test_kernel_writing_a_constant():
    model = compiled()
    step = model.program.steps[0]
    step.args[-1] = step.args[1]  # the weights, where the output goes
    with pytest.raises(InternalError, match=f"op {step.op.index} FULLY_CONNECTED .*writes the constant tensor"):
        verify_program(model.program)


def test_alias_of_another_size():
    model = compiled("digits_cnn.tflite")
    alias = model.program.aliases[0]
    alias.source = model.program.steps[0].args[0]  # the 28x28 input, not the flattened feature map
    with pytest.raises(InternalError, match=f"op {alias.op.index} RESHAPE"):
        verify_program(model.program)


def test_arena_offset_past_the_end():
    model = compiled()
    out = model.root[model.graph.outputs[0]]
    model.arena_offset[out] = model.arena_size
    with pytest.raises(InternalError, match=r"memory planning: tensor .* \(written by op 3 SOFTMAX\) is placed at"):
        verify_plan(model)


def test_unplaced_input():
    model = compiled()
    del model.arena_offset[model.root[model.graph.inputs[0]]]
    with pytest.raises(InternalError, match=r"\(written by the caller\) has no place in the arena"):
        verify_plan(model)


def test_alias_root_of_another_size():
    model = compiled("digits_cnn.tflite")
    alias = model.program.aliases[0]
    model.root[alias.target] = model.root[model.graph.inputs[0]]
    with pytest.raises(InternalError, match="is stored in tensor"):
        verify_plan(model)


def test_constant_data_of_the_wrong_size_after_import():
    graph = api.load_model(FIXTURES / "mlp.tflite").graph
    weights = next(t for t in graph.tensors if t.is_constant and t.dtype == "int8")
    weights.shape = (weights.shape[0] + 1,) + weights.shape[1:]
    with pytest.raises(InternalError, match=rf"import: tensor {weights.index} .* holds"):
        compile_graph(graph)


def test_negative_dimension_after_import():
    graph = api.load_model(FIXTURES / "mlp.tflite").graph
    graph.tensors[graph.inputs[0]].shape = (1, -64)
    with pytest.raises(InternalError, match="import: tensor"):
        verify_graph(graph)
