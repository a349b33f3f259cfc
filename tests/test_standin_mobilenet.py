"""The MobileNetV2 0.35/128 stand-in (tests/fixtures/make_standin_mobilenetv2.py: Keras'
architecture with random weights, not a public model) matches the tflite-micro interpreter bit
for bit, as the public models do (tests/test_public_models.py)."""

from __future__ import annotations

import hashlib

import pytest
from conftest import FIXTURES

from zoflash import api

STANDIN = FIXTURES / "standin_mobilenet_v2_0.35_128.tflite"


def test_the_standin_is_the_file_described():
    model = api.load_model(STANDIN)
    t = model.graph.tensors[model.graph.inputs[0]]
    assert (t.shape, t.dtype) == ((1, 128, 128, 3), "int8")
    ops = [op.type for op in model.graph.ops]
    assert (ops.count("CONV_2D"), ops.count("DEPTHWISE_CONV_2D"), ops.count("ADD")) == (35, 17, 10)
    assert hashlib.sha256(STANDIN.read_bytes()).hexdigest().startswith("5985e9db")


@pytest.mark.cc
@pytest.mark.tflm
def test_the_standin_is_bit_exact_with_tflm():
    model = api.load_model(STANDIN)
    x = api.random_inputs(model, 100, seed=1)
    x[0], x[1] = -128, 127  # the extremes too
    report = api.validate(STANDIN, x)
    assert report.samples == 100 and report.ok, [(o.name, o.mismatches) for o in report.outputs]
