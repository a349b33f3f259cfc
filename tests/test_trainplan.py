"""The training plan (zoflash.training.plan.plan_training) against the rules of docs/training.md,
"Model split", recomputed here from the graph (ops, tensors, quantization) and the program's
step order: trainable tensors and streams, split, logits, boundary, bias eps, clamping, the
layer selections and the memory training needs beyond inference."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import FIXTURES, positive_fixtures

from zoflash.compiler.pipeline import compile_graph
from zoflash.compiler.tflite_import import load_tflite
from zoflash.errors import ZoflashError
from zoflash.training.options import OptionsError, make_options
from zoflash.training.plan import plan_training

WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
HEAD = ("SOFTMAX", "DEQUANTIZE", "RESHAPE")
POSITIVE = positive_fixtures()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # make_options() would read a ./zoflash.toml


@functools.cache
def model(name: str):
    return compile_graph(load_tflite(FIXTURES / name)[0])


def fresh(name: str):
    """A model of our own (its weights may be edited)."""
    return compile_graph(load_tflite(FIXTURES / name)[0])


def opts(**kw):
    return make_options(**kw)


# ------------------------------------------------------------------ the rules, recomputed here


def weighted_steps(m) -> list[int]:
    return [s for s, st in enumerate(m.program.steps) if st.op.type in WEIGHTED]


def layer_tensors(m, s) -> tuple[int, int | None]:
    """(weight root, bias root or None) from the op's own inputs."""
    op = m.program.steps[s].op
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
    return m.root[op.inputs[1]], (m.root[bias] if bias is not None else None)


def expected_tensors(m, steps, biases_only=False) -> list[tuple[int, bool]]:
    out = []
    for s in steps:
        w, b = layer_tensors(m, s)
        if not biases_only:
            out.append((w, False))
        if b is not None:
            out.append((b, True))
    return out


def expected_split(m, roots) -> int:
    for s, st in enumerate(m.program.steps):
        if any(i >= 0 and m.root[i] in roots for i in st.op.inputs):
            return s
    raise AssertionError("no step reads a trainable tensor")


def expected_logits(m) -> tuple[int, int]:
    """(root of the logits, index of its step): walk back from output 0 over the graph's ops."""
    g = m.graph
    producer = {t: op for op in g.ops for t in op.outputs}
    t = g.outputs[0]
    while producer[t].type in HEAD:
        t = producer[t].inputs[0]
    op = producer[t]
    step = next(s for s, st in enumerate(m.program.steps) if st.op.index == op.index)
    return m.root[t], step


def expected_boundary(m, split, end) -> set[tuple[int, int, int]]:
    """(root, arena offset, bytes) of every activation written before `split` (or a model input)
    and read by a step in [split, end)."""
    g = m.graph
    written = {m.root[i] for i in g.inputs}
    for st in m.program.steps[:split]:
        written |= {m.root[o] for o in st.op.outputs}
    read = set()
    for st in m.program.steps[split:end]:
        read |= {m.root[i] for i in st.op.inputs if i >= 0 and not g.tensors[m.root[i]].is_constant}
    return {(r, m.arena_offset[r], g.tensors[r].nbytes) for r in written & read}


def expected_eps(m, s) -> list[int]:
    """eps_b[k] = max(1, round_half_away(0.5 * s_out / (s_in * s_w[k]))), exactly."""
    g = m.graph
    op = m.program.steps[s].op
    s_in = Fraction(g.tensors[op.inputs[0]].quant.scales[0])
    s_out = Fraction(g.tensors[op.outputs[0]].quant.scales[0])
    n = g.tensors[op.inputs[2]].num_elements
    scales = g.tensors[op.inputs[1]].quant.scales
    assert len(scales) in (1, n)
    out = []
    for k in range(n):
        v = Fraction(1, 2) * s_out / (s_in * Fraction(scales[k if len(scales) > 1 else 0]))
        out.append(max(1, math.floor(v + Fraction(1, 2))))  # v > 0
    return out


def statistics_bytes(batch, q_buffer) -> int:
    # lp, lm, l0: float[batch]; labels: uint16[batch]; settled: uint8[batch]; delta, c: float[q_buffer]
    return 3 * 4 * batch + 3 * batch + 2 * 4 * q_buffer


def check_plan(m, plan, steps, o):
    """Everything the rules fix for trained layers `steps` (step indices) and options `o`."""
    g = m.graph
    want = expected_tensors(m, steps, o.biases_only)
    assert [(t.index, t.is_bias) for t in plan.tensors] == want
    assert [t.stream for t in plan.tensors] == list(range(len(want)))  # model op order, weight then bias
    assert plan.layers == [m.program.steps[s].op.index for s in steps]
    clamped = 0
    for t in plan.tensors:
        data = g.tensors[t.index].data
        assert t.name == g.tensors[t.index].name
        assert t.values.shape == data.shape
        if t.is_bias:
            assert t.values.dtype == np.int32
            np.testing.assert_array_equal(t.values, data)
        else:
            assert t.values.dtype == np.int8 and t.eps_b is None
            w_max = 127 - getattr(o, "eps", 1)  # [-126, 126] for +-1 LSB perturbations
            np.testing.assert_array_equal(t.values, np.clip(data.astype(np.int32), -w_max, w_max))
            clamped += int(np.count_nonzero((data < -w_max) | (data > w_max)))
    assert plan.clamped == clamped
    for s in steps:
        _, b = layer_tensors(m, s)
        if b is not None:
            t = next(t for t in plan.tensors if t.index == b)
            eps = expected_eps(m, s)
            assert t.eps_b.tolist() == eps
            assert t.max_step == o.bias_bound * max(eps)
    roots = {t.index for t in plan.tensors}
    split = expected_split(m, roots)
    logits, logits_step = expected_logits(m)
    assert plan.split == split
    assert (plan.logits, plan.logits_end) == (logits, logits_step + 1)
    lt = g.tensors[logits]
    assert (plan.classes, plan.logits_scale, plan.logits_zp) == (
        lt.num_elements,
        lt.quant.scales[0],
        lt.quant.zero_points[0],
    )
    spans = [(b.index, b.offset, b.nbytes) for b in plan.boundary]
    assert len(spans) == len(set(spans))
    assert set(spans) == expected_boundary(m, split, logits_step + 1)
    assert plan.boundary_bytes == sum(n for _, _, n in spans)
    n_w = sum(g.tensors[r].num_elements for r, bias in want if not bias)
    n_b = sum(g.tensors[r].num_elements for r, bias in want if bias)
    mem = plan.memory()
    q_buffer = max(o.q_max, o.calib_q) if o.lr_auto else o.q_max
    assert mem == {
        "trainable_bytes_in_ram": n_w + 4 * n_b,
        "residual_bytes": n_w,  # one int8 residual per trainable weight
        "feature_cache_bytes": o.batch * plan.boundary_bytes,
        "statistics_bytes": statistics_bytes(o.batch, q_buffer),
        "snapshot_bytes": n_w + 4 * n_b + n_w,  # weights, biases and residuals
        "eps_bytes": 4 * n_b,
    }
    assert plan.training_ram_bytes() == (
        mem["residual_bytes"]
        + mem["feature_cache_bytes"]
        + mem["statistics_bytes"]
        + mem["snapshot_bytes"]
        + mem["trainable_bytes_in_ram"]
    )
    assert plan.params == n_w + n_b


# ------------------------------------------------------------------------- every fixture


@pytest.mark.parametrize("name", POSITIVE)
def test_default_plan_trains_the_last_weighted_layer(name):
    m = model(name)
    o = opts()
    plan = plan_training(m, o)
    last = weighted_steps(m)[-1]
    check_plan(m, plan, [last], o)
    assert len(plan.tensors) == 2 and plan.tensors[1].is_bias  # every fixture's last layer has a bias
    assert plan.dropped_layers == []
    assert (plan.batch, plan.q_buffer) == (16, 64)
    assert plan.logits_end < len(m.program.steps)  # the softmax (and dequantize) do not run in training


@pytest.mark.parametrize("name", POSITIVE)
def test_last_two_and_all(name):
    m = model(name)
    w = weighted_steps(m)
    assert len(w) >= 2
    for spec, steps in (("last:2", w[-2:]), ("all", w), (f"last:{len(w)}", w)):
        o = opts(train=spec, batch=4)
        check_plan(m, plan_training(m, o), steps, o)
    with pytest.raises(OptionsError, match=f"only {len(w)} layer"):
        plan_training(m, opts(train=f"last:{len(w) + 1}"))


@pytest.mark.parametrize("name", POSITIVE)
def test_each_layer_alone_by_output_or_weight_name(name):
    m = model(name)
    g = m.graph
    for s in weighted_steps(m):
        op = m.program.steps[s].op
        o = opts(train=f"layers:{g.tensors[op.outputs[0]].name}", batch=3, lr=0.1, q_max=8)
        plan = plan_training(m, o)
        check_plan(m, plan, [s], o)
        by_weight = plan_training(m, opts(train=f"layers:{g.tensors[op.inputs[1]].name}", batch=3, lr=0.1, q_max=8))
        assert [(t.index, t.is_bias) for t in by_weight.tensors] == [(t.index, t.is_bias) for t in plan.tensors]
        assert by_weight.split == plan.split


@pytest.mark.parametrize("name", POSITIVE)
def test_biases_only(name):
    m = model(name)
    for spec, steps in (("last:1", weighted_steps(m)[-1:]), ("all", weighted_steps(m))):
        o = opts(train=spec, biases_only=True)
        plan = plan_training(m, o)
        check_plan(m, plan, steps, o)
        assert all(t.is_bias for t in plan.tensors) and plan.clamped == 0
        assert plan.memory()["residual_bytes"] == 0


# ----------------------------------------------------------------------------- selections


def test_layers_list_of_names_in_model_order():
    m = model("mlp.tflite")
    g = m.graph
    w = weighted_steps(m)
    names = [g.tensors[m.program.steps[s].op.inputs[1]].name for s in (w[2], w[0])]  # given out of order
    o = opts(train="layers:" + ",".join(names))
    check_plan(m, plan_training(m, o), [w[0], w[2]], o)
    # the same layer named twice (by output and by weight) trains once
    out0 = g.tensors[m.program.steps[w[0]].op.outputs[0]].name
    o = opts(train=f"layers:{out0},{names[1]}")
    check_plan(m, plan_training(m, o), [w[0]], o)


def test_unknown_layer_name_lists_the_known_ones():
    m = model("digits_cnn.tflite")
    g = m.graph
    with pytest.raises(OptionsError) as exc:
        plan_training(m, opts(train="layers:dense_99"))
    text = str(exc.value)
    assert "dense_99" in text
    for s in weighted_steps(m):
        assert g.tensors[m.program.steps[s].op.outputs[0]].name in text


def test_max_params_drops_the_earliest_layers():
    m = model("mlp.tflite")
    w = weighted_steps(m)
    g = m.graph

    def params(s):
        wt, b = layer_tensors(m, s)
        return g.tensors[wt].num_elements + g.tensors[b].num_elements

    total = sum(params(s) for s in w)
    assert total == 2778  # fixtures.json: mlp params
    o = opts(train="all", max_params=total)
    plan = plan_training(m, o)
    check_plan(m, plan, w, o)
    assert plan.dropped_layers == []
    o = opts(train="all", max_params=total - 1)
    plan = plan_training(m, o)
    check_plan(m, plan, w[1:], o)
    assert plan.dropped_layers == [m.program.steps[w[0]].op.index]
    o = opts(train="all", max_params=params(w[-1]))
    plan = plan_training(m, o)
    check_plan(m, plan, w[-1:], o)
    assert plan.dropped_layers == [m.program.steps[s].op.index for s in w[:-1]]
    assert plan.params == params(w[-1])
    with pytest.raises(OptionsError, match=f"{params(w[-1])} trainable parameters") as exc:
        plan_training(m, opts(train="all", max_params=params(w[-1]) - 1))
    assert "--max-params" in str(exc.value)


def test_max_params_counts_only_biases_when_biases_only():
    m = model("mlp.tflite")
    w = weighted_steps(m)
    n_bias = [m.graph.tensors[layer_tensors(m, s)[1]].num_elements for s in w]  # 32, 16, 10
    o = opts(train="all", biases_only=True, max_params=sum(n_bias[1:]))
    plan = plan_training(m, o)
    check_plan(m, plan, w[1:], o)
    assert plan.params == sum(n_bias[1:])


def test_memory_numbers_follow_batch_q_max_and_the_lr():
    m = model("digits_cnn.tflite")
    last = weighted_steps(m)[-1]
    for kw, q_buffer in (
        (dict(batch=5, q=1, q_max=4), 8),  # lr auto: calibration at calib_q 8
        (dict(batch=5, q=1, q_max=4, lr=0.1), 4),
        (dict(batch=7, q_max=16, calib_q=32), 32),
        (dict(batch=1, q_max=64, calib_q=2), 64),
    ):
        o = opts(**kw)
        plan = plan_training(m, o)
        check_plan(m, plan, [last], o)
        assert plan.memory()["statistics_bytes"] == statistics_bytes(kw["batch"], q_buffer)
    # digits_cnn: the dense layer reads the 4x4x16 conv output (through a reshape): 256 bytes
    plan = plan_training(m, opts(batch=5))
    assert plan.boundary_bytes == 256 and plan.memory()["feature_cache_bytes"] == 5 * 256
    assert plan.memory()["residual_bytes"] == 2560 and plan.memory()["eps_bytes"] == 40


# ------------------------------------------------------------------------------- clamping


def test_clamped_counts_edited_weights():
    m = fresh("mlp.tflite")
    w, _ = layer_tensors(m, weighted_steps(m)[-1])
    t = m.graph.tensors[w]
    data = np.clip(t.data, -100, 100).astype(np.int8)  # nothing to clamp
    t.data = data
    plan = plan_training(m, opts())
    assert plan.clamped == 0
    np.testing.assert_array_equal(plan.tensors[0].values, data)
    edited = data.copy()
    edited.flat[[0, 7, 19, 33, 50, 51]] = [127, -127, -128, 126, -126, 127]
    t.data = edited
    plan = plan_training(m, opts())
    assert plan.clamped == 4
    values = plan.tensors[0].values
    assert values.flat[[0, 7, 19, 33, 50, 51]].tolist() == [126, -126, -126, 126, -126, 126]
    assert int(values.max()) <= 126 and int(values.min()) >= -126
    assert t.data.flat[0] == 127 and t.data.flat[19] == -128  # the model's own data is untouched


def test_clamped_counts_the_fixture_data():
    """Every per-channel fixture layer has a +-127 in each channel (symmetric int8 scaling)."""
    m = model("mlp.tflite")
    w = weighted_steps(m)
    plan = plan_training(m, opts(train="all"))
    want = 0
    for s in w:
        data = m.graph.tensors[layer_tensors(m, s)[0]].data.astype(int)
        want += int(((data > 126) | (data < -126)).sum())
    assert plan.clamped == want == 58


# ------------------------------------------------------------------- boundaries and logits


def _steps_named(m, text):
    return [s for s in weighted_steps(m) if text in m.graph.tensors[m.program.steps[s].op.inputs[1]].name]


def test_branchy_boundary_spans():
    """branchy: conv2d_4 feeds conv2d_5, conv2d_6 and a max pool, concatenated after them."""
    m = model("branchy.tflite")
    g = m.graph
    c4, c5, c6 = (_steps_named(m, f"conv2d_{k}_1/convolution")[0] for k in (4, 5, 6))
    out = {k: m.root[m.program.steps[s].op.outputs[0]] for k, s in ((4, c4), (5, c5), (6, c6))}
    # conv2d_6 trains: its prefix computes conv2d_4 and conv2d_5; conv2d_6 and the pool read
    # conv2d_4's output, the concatenation reads conv2d_5's: two spans, both live at once.
    plan = plan_training(m, opts(train="layers:" + g.tensors[m.program.steps[c6].op.inputs[1]].name))
    assert plan.split == c6
    spans = {b.index: b for b in plan.boundary}
    assert set(spans) == {out[4], out[5]}
    assert spans[out[4]].nbytes == 10 * 10 * 12 and spans[out[5]].nbytes == 10 * 10 * 8
    a, b = sorted(plan.boundary, key=lambda s: s.offset)
    assert a.offset + a.nbytes <= b.offset  # disjoint arena ranges
    assert [s.offset for s in plan.boundary] == sorted(s.offset for s in plan.boundary)
    # conv2d_5 trains: everything after conv2d_4 is recomputed: one span
    plan = plan_training(m, opts(train="layers:" + g.tensors[m.program.steps[c5].op.inputs[1]].name))
    assert [b.index for b in plan.boundary] == [out[4]]
    # conv2d_4 trains: the suffix starts at it and reads the padded input
    plan = plan_training(m, opts(train="layers:" + g.tensors[m.program.steps[c4].op.inputs[1]].name))
    pad = m.root[m.program.steps[c4].op.inputs[0]]
    assert [b.index for b in plan.boundary] == [pad] and plan.boundary[0].nbytes == 12 * 12 * 1


def test_mbv2_skip_connection_is_in_the_boundary():
    m = model("mbv2_block.tflite")
    w = weighted_steps(m)
    dw = next(s for s in w if m.program.steps[s].op.type == "DEPTHWISE_CONV_2D")
    first = w[0]
    plan = plan_training(m, opts(train="layers:" + m.graph.tensors[m.program.steps[dw].op.inputs[1]].name))
    got = {b.index for b in plan.boundary}
    # the depthwise conv's input, and the first conv's output that the residual ADD reads later
    assert m.root[m.program.steps[first].op.outputs[0]] in got
    assert m.root[m.program.steps[dw].op.inputs[0]] in got
    assert len(got) == 2


def test_training_from_the_first_layer_caches_the_model_input():
    m = model("mlp.tflite")
    plan = plan_training(m, opts(train="all"))
    inp = m.root[m.graph.inputs[0]]
    assert plan.split == 0
    assert [(b.index, b.offset, b.nbytes) for b in plan.boundary] == [(inp, m.arena_offset[inp], 64)]


@pytest.mark.parametrize(
    "name, head",
    [("float_out.tflite", ["SOFTMAX", "DEQUANTIZE"]), ("mlp.tflite", ["SOFTMAX"]), ("digits_cnn.tflite", ["SOFTMAX"])],
)
def test_logits_before_softmax_and_dequantize(name, head):
    m = model(name)
    g = m.graph
    plan = plan_training(m, opts())
    steps = m.program.steps
    assert [st.op.type for st in steps[plan.logits_end :]] == head
    lt = g.tensors[plan.logits]
    assert lt.dtype == "int8" and lt.num_elements == plan.classes == 10
    # the logits are what the last FULLY_CONNECTED writes
    assert plan.logits == m.root[steps[plan.logits_end - 1].op.outputs[0]]
    assert steps[plan.logits_end - 1].op.type == "FULLY_CONNECTED"


def test_conv1d_ts_has_four_classes():
    plan = plan_training(model("conv1d_ts.tflite"), opts())
    assert plan.classes == 4


def test_fc_per_tensor_eps_is_one_value():
    m = model("fc_per_tensor.tflite")
    plan = plan_training(m, opts())
    eps = plan.tensors[1].eps_b
    assert len(set(eps.tolist())) == 1 and eps.tolist() == expected_eps(m, weighted_steps(m)[-1])


def test_errors_are_zoflash_errors():
    assert issubclass(OptionsError, ZoflashError)


def test_bias_eps_rounds_halves_away_from_zero_and_is_at_least_one():
    """Scales chosen so that 0.5 * s_out / (s_in * s_w[k]) is exact: 2.5 -> 3, 1.25 -> 1, 0.3125 -> 1."""
    import dataclasses

    m = fresh("mlp.tflite")
    g = m.graph
    s = weighted_steps(m)[-1]
    op = m.program.steps[s].op
    x, w, y = g.tensors[op.inputs[0]], g.tensors[op.inputs[1]], g.tensors[op.outputs[0]]
    x.quant = dataclasses.replace(x.quant, scales=(1.0,))
    y.quant = dataclasses.replace(y.quant, scales=(5.0,))
    w.quant = dataclasses.replace(w.quant, scales=(1.0, 0.5, 2.0, 4.0, 8.0, 0.0625, 0.25, 0.125, 1.0, 16.0))
    o = opts(bias_bound=3)
    plan = plan_training(m, o)
    bias = plan.tensors[1]
    assert bias.eps_b.dtype == np.int32
    assert bias.eps_b.tolist() == [3, 5, 1, 1, 1, 40, 10, 20, 3, 1] == expected_eps(m, s)
    assert bias.max_step == 3 * 40


@pytest.mark.parametrize("eps", [1, 4, 8])
def test_weights_are_kept_within_127_minus_eps(eps):
    """docs/training.md: trainable int8 weights in [-(127 - eps), 127 - eps], clamped at build time."""
    m = model("mbv2_block.tflite")
    o = opts(train="all", eps=eps)
    plan = plan_training(m, o)
    check_plan(m, plan, weighted_steps(m), o)
    w_max = 127 - eps
    want = sum(
        int(np.count_nonzero(np.abs(m.graph.tensors[t.index].data.astype(int)) > w_max))
        for t in plan.tensors
        if not t.is_bias
    )
    assert plan.clamped == want > 0
    assert all(int(np.abs(t.values.astype(int)).max()) == w_max for t in plan.tensors if not t.is_bias)
