"""The first-order ceiling of an experiment task: the same trainable set (a FULLY_CONNECTED head
and its bias, or a 1x1 CONV_2D block, the mean over the image and the head) trained in float by
backpropagation on the int8 model's frozen features.

The features are the int8 boundary activations the frozen prefix computes (the reference
kernels, bit-exact with TFLM), dequantized; the head starts from the dequantized int8 weights.
Full-batch Adam on the training split, one run per learning rate in LRS; the validation split
(the same carve as the ZO runs) picks the learning rate and the iteration, and the test split
reports. What ZO cannot beat without noise, quantization or a forward-pass budget: the ceiling the
schedulers are compared with. Other trainable sets return {"skipped": reason}.
"""

from __future__ import annotations

import numpy as np

LRS = (1e-3, 3e-3, 1e-2, 3e-2)
ITERATIONS = 3000
CHECK_EVERY = 20


ACTIVATIONS = {
    "NONE": (lambda a: a, lambda a: np.ones_like(a)),
    "RELU": (lambda a: np.maximum(a, 0.0), lambda a: (a > 0).astype(a.dtype)),
    "RELU6": (lambda a: np.clip(a, 0.0, 6.0), lambda a: ((a > 0) & (a < 6)).astype(a.dtype)),
}


def _float_weights(g, op) -> tuple[np.ndarray, np.ndarray]:
    """The dequantized weights [out, in] (a 1x1 convolution's kernel flattened) and bias of a
    FULLY_CONNECTED or CONV_2D whose input is int8 with one scale."""
    x_t, w_t = g.tensors[op.inputs[0]], g.tensors[op.inputs[1]]
    w_scales = np.asarray(w_t.quant.scales, np.float64)
    wq = w_t.data.reshape(w_t.data.shape[0], -1).astype(np.float64)
    w = wq * (w_scales[:, None] if w_scales.size > 1 else w_scales[0])
    b = np.zeros(w.shape[0])
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b = g.tensors[op.inputs[2]].data.astype(np.float64) * x_t.quant.scale * w_scales
    return w, b


_FUSED = {0: "NONE", 1: "RELU", 3: "RELU6", "NONE": "NONE", "RELU": "RELU", "RELU6": "RELU6"}  # code or name


def _activation(op) -> str | None:
    """The fused activation's name if ACTIVATIONS models it, else None."""
    return _FUSED.get(op.options.get("fused_activation_function", "NONE"))


class Head:
    """logits = x W^T + b: a FULLY_CONNECTED head on flat features [N, C]."""

    def __init__(self, w, b):
        self.params = [w, b]

    def logits(self, x, params=None):
        w, b = params or self.params
        return x @ w.T + b

    def grads(self, x, dz, params=None):
        return [dz.T @ x, dz.sum(axis=0)]


class Block:
    """A 1x1 CONV_2D (stride 1, fused NONE/RELU/RELU6) on features [N, H, W, C], the mean over H
    and W, then a FULLY_CONNECTED head: the last block of a MobileNet-style network."""

    def __init__(self, w1, b1, act, w2, b2):
        self.params = [w1, b1, w2, b2]
        self.act, self.dact = ACTIVATIONS[act]

    def _hidden(self, x, w1, b1):
        a = (x.reshape(-1, x.shape[-1]) @ w1.T).reshape(*x.shape[:-1], -1) + b1  # the 1x1 convolution
        return a, self.act(a).mean(axis=(1, 2))

    def logits(self, x, params=None):
        w1, b1, w2, b2 = params or self.params
        return self._hidden(x, w1, b1)[1] @ w2.T + b2

    def grads(self, x, dz, params=None):
        w1, b1, w2, b2 = params or self.params
        a, h = self._hidden(x, w1, b1)
        da = (dz @ w2)[:, None, None, :] / (x.shape[1] * x.shape[2]) * self.dact(a)
        flat = da.reshape(-1, da.shape[-1])
        return [flat.T @ x.reshape(-1, x.shape[-1]), flat.sum(axis=0), dz.T @ h, dz.sum(axis=0)]


def _suffix(prep):
    """The float model of the trainable suffix, from the int8 one, or why there is none."""
    plan, model = prep.training.plan, prep.model
    g = model.graph
    layers = [g.ops[i] for i in plan.layers]
    if len(layers) == 1 and layers[0].type == "FULLY_CONNECTED":
        if _activation(layers[0]) != "NONE":
            return "the head has a fused activation"
        return Head(*_float_weights(g, layers[0])), layers[0]
    if [op.type for op in layers] != ["CONV_2D", "FULLY_CONNECTED"] or _activation(layers[1]) != "NONE":
        return "the trainable set is neither a FULLY_CONNECTED head nor a 1x1 CONV_2D block before one"
    conv, fc = layers
    between = [g.ops[i].type for i in range(plan.layers[0] + 1, plan.layers[1])]
    k = g.tensors[conv.inputs[1]].shape
    if (
        (k[1], k[2]) != (1, 1)
        or conv.options.get("stride_h", 1) != 1
        or conv.options.get("stride_w", 1) != 1
        or _activation(conv) is None
        or between not in (["MEAN"], ["RESHAPE"], [])
    ):
        return "the block is not a 1x1 CONV_2D (stride 1) with a mean over the image before the head"
    return Block(*_float_weights(g, conv), _activation(conv), *_float_weights(g, fc)), conv


def _features(prep) -> tuple[dict, object] | str:
    """Per split the dequantized input of the trainable suffix, and its float model."""
    from zoflash.reference.forward import ReferenceForward

    got = _suffix(prep)
    if isinstance(got, str):
        return got
    net, first = got
    model, g = prep.model, prep.model.graph
    x_t = g.tensors[first.inputs[0]]
    fwd = ReferenceForward(model)
    root = model.root[first.inputs[0]]
    data, feats = prep.training.data, {}
    shape = (-1,) if isinstance(net, Head) else tuple(x_t.shape[1:])
    end = next(k for k, step in enumerate(model.program.steps) if step.op.index == first.index)
    for split in ("train", "val", "test"):
        x = getattr(data, f"x_{split}")
        env = fwd.run({g.inputs[0]: x.reshape(len(x), -1)}, 0, end)
        q = env[root].reshape(len(x), *shape).astype(np.float64)
        feats[split] = (x_t.quant.scale * (q - x_t.quant.zero_point), getattr(data, f"y_{split}").astype(np.int64))
    return feats, net


def loss_and_dlogits(z, y):
    """Mean softmax cross-entropy and its gradient with respect to the logits."""
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.mean(np.log(p[np.arange(len(y)), y] + 1e-300))
    p[np.arange(len(y)), y] -= 1.0
    return loss, p / len(y)


def adam_step(params, grads, m, v, it, lr) -> None:
    """Adam iteration `it` (1-based) in place: params, first and second moments m and v."""
    c1, c2 = 1 - 0.9**it, 1 - 0.999**it
    for p, g, mk, vk in zip(params, grads, m, v):
        mk *= 0.9
        mk += 0.1 * g
        vk *= 0.999
        vk += 0.001 * g * g
        p -= lr * (mk / c1) / (np.sqrt(vk / c2) + 1e-8)


def first_order_ceiling(model: str, data: str, train: str, headroom: int = 0) -> dict:
    """{"accuracy", "lr", "iteration", "start_accuracy"} on the test split, or {"skipped": why}.
    With headroom the start is the re-quantized model the ZO runs start from."""
    from zoflash.training.options import make_options
    from zoflash.workflows.training import compile_for_training

    prep = compile_for_training(model, data, make_options(train=train, headroom=headroom))
    got = _features(prep)
    if isinstance(got, str):
        return {"skipped": got}
    feats, net = got
    (xtr, ytr), (xva, yva), (xte, yte) = feats["train"], feats["val"], feats["test"]
    start = [p.copy() for p in net.params]

    def accuracy(params, x, y):
        return float(np.mean(np.argmax(net.logits(x, params), axis=1) == y))

    best = (np.inf, None)
    for lr in LRS:
        params = [p.copy() for p in start]
        m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
        for it in range(1, ITERATIONS + 1):
            adam_step(params, net.grads(xtr, loss_and_dlogits(net.logits(xtr, params), ytr)[1], params), m, v, it, lr)
            if it % CHECK_EVERY == 0:
                val_loss = loss_and_dlogits(net.logits(xva, params), yva)[0]
                if val_loss < best[0]:
                    best = (val_loss, dict(accuracy=accuracy(params, xte, yte), lr=lr, iteration=it))
    return dict(best[1], start_accuracy=accuracy(start, xte, yte))


if __name__ == "__main__":
    import sys

    print(first_order_ceiling(*sys.argv[1:4]))
