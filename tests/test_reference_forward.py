"""The batched NumPy executor (zoflash.reference.forward) against the generated C, bit for bit,
on every supported fixture; plus partial runs, weight overrides and batch independence."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, positive_fixtures

from zoflash import api
from zoflash.compiler import quant
from zoflash.compiler.ops import KERNELS
from zoflash.compiler.pipeline import compile_graph
from zoflash.reference.forward import DISPATCH, ReferenceForward

FIXTURE_MODELS = positive_fixtures()
N = 64


def forward_for(model_file: str) -> ReferenceForward:
    return ReferenceForward(compile_graph(api.load_model(FIXTURES / model_file).graph))


def int8_inputs(rf: ReferenceForward, n: int, seed: int = 0) -> np.ndarray:
    shape = rf.graph.tensors[rf.graph.inputs[0]].shape
    x = np.random.default_rng(seed).integers(-128, 128, size=(n,) + shape, dtype=np.int8)
    x[0], x[1], x[2] = -128, 127, 0  # saturation paths
    return x


def bits(y: np.ndarray) -> np.ndarray:
    """Float outputs are compared as their bit patterns."""
    return y.view(np.uint32) if y.dtype == np.float32 else y


def test_dispatch_covers_every_kernel():
    assert set(DISPATCH) == set(KERNELS)


@pytest.mark.cc
@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_matches_generated_c(model_file):
    rf = forward_for(model_file)
    t = rf.graph.tensors[rf.graph.inputs[0]]
    # data of the input's type (a float input: api.random_inputs' float32 samples)
    x = int8_inputs(rf, N) if t.dtype == "int8" else api.random_inputs(api.load_model(FIXTURES / model_file), N)
    # float data in real units (quantized by as_samples on both sides), reaching past the int8 range
    rng = np.random.default_rng(1)
    q = api.input_quantization(rf.graph)
    real = ((rng.uniform(-140, 140, size=x.shape) - q.zero_point) * q.scale).astype(np.float32)
    with api.host_model(FIXTURES / model_file) as c_model:
        for data in (x, real):
            want = c_model.run(data)
            got = rf.forward(data)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_batch_equals_single_samples(model_file):
    """Every intermediate value of a batched run equals the run of each sample alone."""
    rf = forward_for(model_file)
    x = int8_inputs(rf, 8, seed=2)
    batch = rf.run({rf.graph.inputs[0]: x})
    singles = [rf.run({rf.graph.inputs[0]: x[i : i + 1]}) for i in range(len(x))]
    for r, value in batch.items():
        np.testing.assert_array_equal(bits(value), bits(np.concatenate([s[r] for s in singles])), err_msg=f"tensor {r}")


@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_partial_runs_compose(model_file):
    rf = forward_for(model_file)
    x = int8_inputs(rf, 16, seed=3)
    inputs = {rf.graph.inputs[0]: x}
    full = rf.output(rf.run(inputs))
    for k in range(len(rf.steps) + 1):
        head = rf.run(inputs, 0, k)
        keys = set(head)
        tail = rf.run({}, k, env=head)
        np.testing.assert_array_equal(bits(rf.output(tail)), bits(full), err_msg=f"split at step {k}")
        assert set(head) == keys  # the caller's env is not modified


@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_override_with_own_constants_changes_nothing(model_file):
    rf = forward_for(model_file)
    x = int8_inputs(rf, 16, seed=4)
    inputs = {rf.graph.inputs[0]: x}
    plain = rf.run(inputs)
    same = {r: rf.graph.tensors[r].data.copy() for r in rf.model.constants}
    overridden = rf.run(inputs, weights=same)
    assert plain.keys() == overridden.keys()
    for r in plain:
        np.testing.assert_array_equal(bits(overridden[r]), bits(plain[r]))


def last_fc(rf: ReferenceForward) -> int | None:
    ks = [k for k, s in enumerate(rf.steps) if s.kernel == "fully_connected"]
    return ks[-1] if ks else None


@pytest.mark.parametrize("model_file", [f for f in FIXTURE_MODELS if last_fc(forward_for(f)) is not None])
def test_fc_override_matches_a_manual_layer(model_file):
    """Perturbed weights and bias of the last FC: the layer equals a plain integer computation
    (scalar quant helpers, not the reference kernels), and the rest of the model follows it."""
    rf = forward_for(model_file)
    k = last_fc(rf)
    step = rf.steps[k]
    x_t, w_t, b_t, y_t = step.args
    p = step.params
    w0, b0 = rf.graph.tensors[w_t].data, rf.graph.tensors[b_t].data
    rng = np.random.default_rng(5)
    w = np.clip(w0.astype(np.int64) + rng.integers(-3, 4, size=w0.shape), -127, 127).astype(np.int8)
    b = (b0.astype(np.int64) + rng.integers(-500, 501, size=b0.shape)).astype(np.int32)
    before = w0.copy()

    x = int8_inputs(rf, 16, seed=6)
    prefix = rf.run({rf.graph.inputs[0]: x}, 0, k)
    env = rf.run({}, k, env=prefix, weights={w_t: w, b_t: b})
    assert np.array_equal(w0, before)  # the model's data is untouched

    feats = prefix[rf.root[x_t]].reshape(-1, p["depth"]).astype(np.int64) - p["input_zp"]
    acc = feats @ w.astype(np.int64).T + b
    manual = (
        np.array(
            [
                [
                    quant.multiply_by_quantized_multiplier(int(a), int(p["multiplier"][u]), int(p["shift"][u]))
                    for u, a in enumerate(row)
                ]
                for row in acc
            ]
        )
        + p["output_zp"]
    )
    manual = np.clip(manual, p["act_min"], p["act_max"]).astype(np.int8).reshape(len(x), -1)
    y = env[rf.root[y_t]]
    np.testing.assert_array_equal(y, manual)
    assert not np.array_equal(y, rf.run({}, k, k + 1, env=prefix)[rf.root[y_t]])  # the override mattered
    rest = rf.run({}, k + 1, env={**prefix, rf.root[y_t]: manual})
    np.testing.assert_array_equal(bits(rf.output(rest)), bits(rf.output(env)))


def test_bad_override_is_rejected():
    rf = forward_for("mlp.tflite")
    w_t = rf.steps[0].args[1]
    x = {rf.graph.inputs[0]: int8_inputs(rf, 4)}
    with pytest.raises(ValueError, match="does not replace"):
        rf.run(x, weights={w_t: rf.graph.tensors[w_t].data.astype(np.int32)})
    with pytest.raises(ValueError, match="does not replace"):
        rf.run(x, weights={w_t: rf.graph.tensors[w_t].data[:1]})
    with pytest.raises(KeyError, match="has no value"):
        rf.run({}, 1, env={0: x[rf.graph.inputs[0]]})


@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_logits_are_output_zero_before_softmax(model_file):
    rf = forward_for(model_file)
    producer = rf.steps[rf.logits_end - 1]
    assert rf.root[producer.args[-1]] == rf.logits_index
    assert rf.graph.tensors[rf.logits_index].dtype == "int8"
    assert all(s.kernel in ("softmax", "dequantize") for s in rf.steps[rf.logits_end :])
    x = int8_inputs(rf, 8, seed=7)
    env = rf.run({rf.graph.inputs[0]: x})
    # env values may keep their shape: [B, *shape] is flattened like the inputs
    np.testing.assert_array_equal(rf.logits({rf.root[rf.graph.inputs[0]]: x}), env[rf.logits_index])
