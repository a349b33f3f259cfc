"""`zoflash split`: the prefix then the suffix compute what the whole model computes.

The oracle is the tflite-micro interpreter on the original file; zoflash's compiled parts are
compared with zoflash on the whole. Cut points: the training plan's default and two others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tflite
from conftest import FIXTURES, PUBLIC, ZOO, positive_fixtures, zoo_param
from test_public_models import EXPECTED

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.tflite_split import split_tflite, tensor_names
from zoflash.errors import SplitError, UnsupportedModelError
from zoflash.training.options import OptionsError

MODELS = [FIXTURES / f for f in positive_fixtures()] + [
    PUBLIC / f for f, v in sorted(EXPECTED.items()) if v == "bit-exact"
]
# Without the zoo its models cannot be read: they stay listed, and skip.
SPLITTABLE = [
    m
    for m in MODELS
    if (m.parent == PUBLIC and not ZOO) or tflite.Model.GetRootAs(m.read_bytes(), 0).SubgraphsLength() == 1
]


def _params(paths):
    return [zoo_param(m) if m.parent == PUBLIC else m for m in paths]


# zoflash's own build of every part on every model is slow; these small ones run always
FAST_BUILDS = {"mlp.tflite", "digits_cnn.tflite", "branchy.tflite", "kws_dscnn.tflite", "micro_speech.tflite"}


def cut_near(path: Path, fraction: float) -> str:
    """The op output nearest after (else before) `fraction` of the way through the model that is a cut."""
    raw = path.read_bytes()
    names = tensor_names(raw)
    ops = [op for op in api.load_model(path).graph.ops if op.outputs]
    k = int(fraction * len(ops))
    for op in ops[k:] + ops[:k][::-1]:
        try:
            split_tflite(raw, names[op.outputs[0]])
        except SplitError:
            continue
        return names[op.outputs[0]]
    raise AssertionError(f"{path.name}: no op output is a cut")


def cuts(path: Path) -> list[str]:
    """The training plan's cut (if the model trains with the defaults) and cuts near 1/3 and 2/3."""
    chosen = []
    try:
        chosen.append(api.training_cut(path))
    except (SplitError, OptionsError, UnsupportedModelError):
        pass
    chosen += [cut_near(path, 1 / 3), cut_near(path, 2 / 3)]
    return list(dict.fromkeys(chosen))


def inputs(path: Path) -> np.ndarray:
    return api.random_inputs(api.load_model(path), 6, seed=3)


@pytest.mark.tflm
@pytest.mark.parametrize("path", _params(SPLITTABLE), ids=lambda p: p.name)
def test_tflm_on_prefix_then_suffix_equals_tflm_on_the_whole(path, tmp_path):
    from zoflash.reference.tflm import TflmInterpreter

    x = inputs(path)
    whole = TflmInterpreter(path.read_bytes()).run_batch(x)
    for tensor in cuts(path):
        parts = api.split_model(path, tmp_path / "p", tensor)
        middle = TflmInterpreter(parts.prefix_path.read_bytes()).run_batch(x)
        out = TflmInterpreter(parts.suffix_path.read_bytes()).run_batch(middle)
        assert out.dtype == whole.dtype
        assert np.array_equal(out.reshape(whole.shape), whole), f"cut at '{tensor}'"


def _zoflash_builds(path, tmp_path):
    from zoflash.targets.host_runner import HostModel

    x = inputs(path)
    whole = HostModel(api.build(path, "host", tmp_path / "whole").bundle).run(x)
    parts = api.split_model(path, tmp_path / "p", cuts(path)[0])
    middle = HostModel(api.build(parts.prefix_path, "host", tmp_path / "prefix").bundle).run(x)
    out = HostModel(api.build(parts.suffix_path, "host", tmp_path / "suffix").bundle).run(middle)
    assert np.array_equal(out.reshape(whole.shape), whole)


@pytest.mark.cc
@pytest.mark.parametrize("path", _params(m for m in SPLITTABLE if m.name in FAST_BUILDS), ids=lambda p: p.name)
def test_zoflash_on_the_parts_equals_zoflash_on_the_whole(path, tmp_path):
    _zoflash_builds(path, tmp_path)


@pytest.mark.cc
@pytest.mark.slow
@pytest.mark.parametrize("path", _params(m for m in SPLITTABLE if m.name not in FAST_BUILDS), ids=lambda p: p.name)
def test_zoflash_on_the_parts_equals_zoflash_on_the_whole_all_models(path, tmp_path):
    _zoflash_builds(path, tmp_path)


def _reader(raw: bytes):
    sub = tflite.Model.GetRootAs(raw, 0).Subgraphs(0)
    return sub, [sub.Tensors(i) for i in range(sub.TensorsLength())]


def test_the_cut_tensor_keeps_its_quantization_and_each_part_only_its_own_data():
    path = FIXTURES / "digits_cnn.tflite"
    raw = path.read_bytes()
    tensor = api.training_cut(path)
    parts = split_tflite(raw, tensor)
    _, whole_tensors = _reader(raw)
    original = next(t for t in whole_tensors if t.Name().decode() == tensor)
    psub, ptensors = _reader(parts.prefix)
    ssub, stensors = _reader(parts.suffix)
    out, inp = ptensors[psub.Outputs(0)], stensors[ssub.Inputs(0)]
    assert psub.OutputsLength() == ssub.InputsLength() == 1
    for t in (out, inp):
        assert t.Name().decode() == tensor and t.Type() == original.Type()
        assert list(t.ShapeAsNumpy()) == list(original.ShapeAsNumpy())
        assert list(t.Quantization().ScaleAsNumpy()) == list(original.Quantization().ScaleAsNumpy())
        assert list(t.Quantization().ZeroPointAsNumpy()) == list(original.Quantization().ZeroPointAsNumpy())
    # every constant lands in exactly one part: the parts' tensors are the whole's, none twice
    assert len(ptensors) + len(stensors) - 1 == len(whole_tensors)
    model = tflite.Model.GetRootAs(raw, 0)
    used = {t.Buffer() for t in whole_tensors} - {0}
    data = sum(model.Buffers(b).DataLength() for b in used)
    part_data = sum(
        tflite.Model.GetRootAs(p, 0).Buffers(b).DataLength()
        for p in (parts.prefix, parts.suffix)
        for b in range(tflite.Model.GetRootAs(p, 0).BuffersLength())
    )
    assert part_data == data
    assert len(parts.prefix_ops) + len(parts.suffix_ops) == model.Subgraphs(0).OperatorsLength()
    assert split_tflite(raw, tensor).prefix == parts.prefix  # deterministic


@pytest.mark.parametrize(
    "model, tensor, message",
    [
        ("branchy.tflite", "branchy_1/max_pooling2d_2_1/MaxPool2d", "is not a cut: op 2, in the suffix, also reads"),
        ("mlp.tflite", "no_such_tensor", "no tensor named 'no_such_tensor'"),
        ("mlp.tflite", "serving_default_keras_tensor_4:0", "not computed by any op"),
        ("mlp.tflite", "StatefulPartitionedCall_1:0", "the suffix would be empty"),
    ],
)
def test_bad_cuts_are_refused_in_one_line(model, tensor, message):
    with pytest.raises(SplitError, match=message) as info:
        split_tflite((FIXTURES / model).read_bytes(), tensor)
    assert "\n" not in str(info.value)


@pytest.mark.zoo
def test_a_model_with_subgraphs_is_refused():
    path = PUBLIC / "microwakeword_hey_mycroft.tflite"
    with pytest.raises(SplitError, match="2 subgraphs"):
        split_tflite(path.read_bytes(), tensor_names(path.read_bytes())[-1])


def test_cli_writes_both_parts_and_refuses_bad_input(tmp_path, capsys):
    model = str(FIXTURES / "mlp.tflite")
    assert main(["split", "--model", model, "--out", str(tmp_path)]) == 0
    assert api.load_model(tmp_path / "prefix.tflite").graph.ops and api.load_model(tmp_path / "suffix.tflite")
    assert "cut     at '" in capsys.readouterr().out
    assert main(["split", "--model", model, "--at", "nope", "--out", str(tmp_path)]) == 2
    assert main(["split", "--model", model, "--train", "all", "--out", str(tmp_path)]) == 2
    assert "frozen prefix is empty" in capsys.readouterr().err
    assert main(["split", "--model", model, "--at", "x", "--train", "all", "--out", str(tmp_path)]) == 2
