"""The first-order ceiling of an experiment task: the same trainable set (a FULLY_CONNECTED head
and its bias) trained in float by backpropagation on the int8 model's frozen features.

The features are the int8 boundary activations the frozen prefix computes (the reference
kernels, bit-exact with TFLM), dequantized; the head starts from the dequantized int8 weights.
Full-batch Adam on the training split, one run per learning rate in LRS; the validation split
(the same carve as the ZO runs) picks the learning rate and the iteration, and the test split
reports. What ZO cannot beat without noise, quantization or a forward-pass budget: the ceiling the
issue asks for. Other suffixes (a block before the head) return None with the reason.
"""
from __future__ import annotations

import numpy as np

LRS = (1e-3, 3e-3, 1e-2, 3e-2)
ITERATIONS = 3000
CHECK_EVERY = 20


def _features(prep) -> tuple[dict, np.ndarray, np.ndarray] | str:
    """Per split the dequantized head input, and the float head (W [out, in], b [out])."""
    from zoflash.reference.forward import ReferenceForward
    plan, model = prep.training.plan, prep.model
    g = model.graph
    if len(plan.layers) != 1 or g.ops[plan.layers[0]].type != "FULLY_CONNECTED":
        return "the trainable set is not one FULLY_CONNECTED head"
    op = g.ops[plan.layers[0]]
    x_t, w_t = g.tensors[op.inputs[0]], g.tensors[op.inputs[1]]
    if op.options.get("fused_activation_function", "NONE") not in ("NONE", 0):
        return "the head has a fused activation"
    w_scales = np.asarray(w_t.quant.scales, np.float64)
    w = w_t.data.astype(np.float64) * (w_scales[:, None] if w_scales.size > 1 else w_scales[0])
    b = np.zeros(w.shape[0])
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b = g.tensors[op.inputs[2]].data.astype(np.float64) * x_t.quant.scale * w_scales
    fwd = ReferenceForward(model)
    root = model.root[op.inputs[0]]
    data, feats = prep.training.data, {}
    for split in ("train", "val", "test"):
        x = getattr(data, f"x_{split}")
        env = fwd.run({g.inputs[0]: x.reshape(len(x), -1)}, 0, plan.split)
        q = env[root].reshape(len(x), -1).astype(np.float64)
        feats[split] = (x_t.quant.scale * (q - x_t.quant.zero_point), getattr(data, f"y_{split}").astype(np.int64))
    return feats, w, b


def _loss_grad(x, y, w, b):
    z = x @ w.T + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.mean(np.log(p[np.arange(len(y)), y] + 1e-300))
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return loss, p.T @ x, p.sum(axis=0)


def first_order_ceiling(model: str, data: str, train: str) -> dict:
    """{"accuracy", "lr", "iteration", "start_accuracy"} on the test split, or {"skipped": why}."""
    from zoflash.training.options import make_options
    from zoflash.training.pipeline import compile_training
    prep = compile_training(model, data, make_options(train=train))
    got = _features(prep)
    if isinstance(got, str):
        return {"skipped": got}
    feats, w0, b0 = got
    (xtr, ytr), (xva, yva), (xte, yte) = feats["train"], feats["val"], feats["test"]

    def accuracy(w, b, x, y):
        return float(np.mean(np.argmax(x @ w.T + b, axis=1) == y))

    best = (np.inf, None)
    for lr in LRS:
        w, b = w0.copy(), b0.copy()
        mw, vw, mb, vb = (np.zeros_like(w), np.zeros_like(w), np.zeros_like(b), np.zeros_like(b))
        for it in range(1, ITERATIONS + 1):
            _, gw, gb = _loss_grad(xtr, ytr, w, b)
            mw, vw = 0.9 * mw + 0.1 * gw, 0.999 * vw + 0.001 * gw * gw
            mb, vb = 0.9 * mb + 0.1 * gb, 0.999 * vb + 0.001 * gb * gb
            c1, c2 = 1 - 0.9 ** it, 1 - 0.999 ** it
            w -= lr * (mw / c1) / (np.sqrt(vw / c2) + 1e-8)
            b -= lr * (mb / c1) / (np.sqrt(vb / c2) + 1e-8)
            if it % CHECK_EVERY == 0:
                val_loss = _loss_grad(xva, yva, w, b)[0]
                if val_loss < best[0]:
                    best = (val_loss, dict(accuracy=accuracy(w, b, xte, yte), lr=lr, iteration=it))
    return dict(best[1], start_accuracy=accuracy(w0, b0, xte, yte))


if __name__ == "__main__":
    import sys
    print(first_order_ceiling(*sys.argv[1:4]))
