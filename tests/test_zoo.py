"""What the model-zoo survey needed: `api.validate` compares every output of a model (SSD-like
detectors have several), and benchmarks/zoo_survey.py reports a verdict per model."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil

import pytest
from conftest import FIXTURES, ROOT

from zoflash import api
from zoflash.targets.host_runner import HostModel

TWO_OUTPUTS = FIXTURES / "ops" / "two_outputs.tflite"


def _inputs(path, n=100):
    x = api.random_inputs(api.load_model(path), n, seed=3)
    x[0], x[1] = -128, 127
    return x


def test_fixture_index_matches_the_files():
    for entry in json.loads((FIXTURES / "ops" / "zoo.json").read_text()):
        data = (FIXTURES / "ops" / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert sorted({op.type for op in api.load_model(FIXTURES / "ops" / entry["file"]).graph.ops}) == entry["ops"]


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_compares_every_output():
    g = api.load_model(TWO_OUTPUTS).graph
    report = api.validate(TWO_OUTPUTS, _inputs(TWO_OUTPUTS))
    assert [o.name for o in report.outputs] == [g.tensors[i].name for i in g.outputs]
    assert [o.elements for o in report.outputs] == [100 * g.tensors[i].num_elements for i in g.outputs]
    assert report.ok, report


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_catches_a_difference_in_the_second_output_only(monkeypatch):
    run_outputs = HostModel.run_outputs

    def one_value_off(self, x):
        ys = run_outputs(self, x)
        ys[1][7].flat[3] ^= 1
        return ys

    monkeypatch.setattr(HostModel, "run_outputs", one_value_off)
    report = api.validate(TWO_OUTPUTS, _inputs(TWO_OUTPUTS, 10))
    assert not report.ok
    assert [o.mismatches for o in report.outputs] == [0, 1]


def _survey():
    spec = importlib.util.spec_from_file_location("zoo_survey", ROOT / "benchmarks" / "zoo_survey.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.cc
@pytest.mark.tflm
def test_survey_rows(tmp_path):
    shutil.copy(TWO_OUTPUTS, tmp_path)
    shutil.copy(FIXTURES / "ops" / "s16_mlp.tflite", tmp_path)  # int16 TANH: TFLM runs it, zoflash refuses it
    survey = _survey()
    results = {p.name: survey.survey_one(p, 100, 300) for p in sorted(tmp_path.glob("*.tflite"))}
    assert results["two_outputs.tflite"]["verdict"] == "bit-exact", results
    assert results["two_outputs.tflite"]["ops"] == ["CONV_2D", "LOGISTIC", "RESHAPE"]
    s16 = results["s16_mlp.tflite"]
    assert s16["verdict"] == "refused" and s16["tflm"] is True and "TANH: " in survey.short_reason(s16["reason"]), s16
    table = survey.table(results).splitlines()
    assert table[0].startswith("| model | ops | TFLM runs? |") and len(table) == 4
    assert any("| two_outputs.tflite | CONV_2D, LOGISTIC, RESHAPE | yes | bit-exact |" in row for row in table)
