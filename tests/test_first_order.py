"""benchmarks/first_order.py, the float ceiling of the experiments: its backpropagation agrees with
finite differences of the loss, for the head and for a 1x1-convolution block before it, and it
builds the block's float model from the vision task's int8 one."""

from __future__ import annotations

import importlib.util

import numpy as np
from conftest import FIXTURES, ROOT

_spec = importlib.util.spec_from_file_location("first_order", ROOT / "benchmarks" / "first_order.py")
first_order = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first_order)


def _numeric_grads(net, x, y, params, h=1e-6):
    out = []
    for k, p in enumerate(params):
        g = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            moved = [q.copy() for q in params]
            moved[k][i] += h
            up = first_order.loss_and_dlogits(net.logits(x, moved), y)[0]
            moved[k][i] -= 2 * h
            down = first_order.loss_and_dlogits(net.logits(x, moved), y)[0]
            g[i] = (up - down) / (2 * h)
        out.append(g)
    return out


def _check(net, x, y):
    analytic = net.grads(x, first_order.loss_and_dlogits(net.logits(x), y)[1])
    for a, n in zip(analytic, _numeric_grads(net, x, y, net.params)):
        assert a.shape == n.shape
        np.testing.assert_allclose(a, n, rtol=1e-5, atol=1e-8)


def test_head_gradients_match_finite_differences():
    r = np.random.default_rng(1)
    _check(first_order.Head(r.normal(size=(4, 6)), r.normal(size=4)), r.normal(size=(5, 6)), r.integers(0, 4, 5))


def test_block_gradients_match_finite_differences():
    r = np.random.default_rng(2)
    for act in ("NONE", "RELU", "RELU6"):  # pre-activations spread over 0 and 6: every branch of relu6
        net = first_order.Block(
            3 * r.normal(size=(7, 3)), r.normal(size=7), act, r.normal(size=(4, 7)), r.normal(size=4)
        )
        _check(net, r.normal(size=(5, 2, 3, 3)), r.integers(0, 4, 5))


def test_the_vision_blocks_float_model_is_the_int8_one_dequantized():
    from zoflash.training.options import make_options
    from zoflash.workflows.training import compile_for_training

    prep = compile_for_training(
        str(FIXTURES / "fmnist_mbv2.tflite"), str(FIXTURES / "fmnist_shift.npz"), make_options(train="last:2")
    )
    net, conv = first_order._suffix(prep)
    assert isinstance(net, first_order.Block) and conv.type == "CONV_2D"
    w1, b1, w2, b2 = net.params
    assert w1.shape == (1280, 112) and b1.shape == (1280,) and w2.shape == (10, 1280) and b2.shape == (10,)
    g = prep.model.graph
    wq = g.tensors[conv.inputs[1]]
    np.testing.assert_allclose(w1[5], wq.data[5].reshape(-1) * wq.quant.scales[5])
    assert first_order._activation(conv) == "RELU6"
