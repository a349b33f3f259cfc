"""The headroom report's measured half: how re-quantizing the trainable layers (training.headroom)
moved the model's outputs on the test set, measured on the generated C built for the host."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.pipeline import compile_graph
from zoflash.targets.boards import load_board
from zoflash.targets.host_build import run_make
from zoflash.targets.host_runner import HostModel
from zoflash.targets.project import generate_bundle
from zoflash.training.compiled import CompiledTraining


def measure(prep: CompiledTraining) -> None:
    """Add the outputs' change to the headroom report of a model compiled with --headroom."""
    report, before = prep.training.headroom, prep.before_headroom
    if report is None or before is None:
        return
    plan, data = prep.training.plan, prep.training.data
    report["outputs"] = output_change(before, prep.model, plan.logits, data.x_test, data.y_test, plan.loss)


def c_logits(model: CompiledModel, logits: int, x: np.ndarray) -> np.ndarray:
    """The generated C's int8 logits (root tensor `logits`) on every sample of x: the graph is
    compiled again with the logits as its first output (so the arena keeps them; the model's own
    outputs stay, since a DEQUANTIZE is only supported as a model output), built for the host and
    run."""
    outputs = (logits,) + tuple(o for o in model.graph.outputs if o != logits)
    compiled = compile_graph(replace(model.graph, outputs=outputs))
    with tempfile.TemporaryDirectory(prefix="zoflash-headroom-") as tmp:
        bundle = generate_bundle(compiled, load_board("host"), Path(tmp), "logits", "0" * 64, prefix="logits")
        run_make(bundle, f"build/lib{bundle.prefix}.so")  # the library only: no programs
        return HostModel(bundle).run(x).reshape(len(x), -1)


def output_change(
    before: CompiledModel,
    after: CompiledModel,
    logits: int,
    x_test: np.ndarray,
    y_test: np.ndarray,
    loss: str = "softmax-ce",
) -> dict:
    """How re-quantization moved the int8 logits (root tensor `logits` of both models) on the
    test set, run by the generated C: accuracies and the fraction of changed predictions (argmax;
    sigmoid-bce: logit above its zero point; none for mse), logit changes in LSB."""
    if not len(x_test):
        return {"n_test": 0}
    la = c_logits(before, logits, x_test).astype(np.int32)
    lb = c_logits(after, logits, x_test).astype(np.int32)
    y = np.asarray(y_test).astype(np.int64)
    diff = np.abs(la - lb)
    out = {"n_test": len(y), "max_abs_logit_change": int(diff.max()), "mean_abs_logit_change": float(diff.mean())}
    if loss == "mse":
        return out
    if loss == "sigmoid-bce":
        quant = before.storage(logits).quant
        assert quant is not None  # the training plan's logits are quantized int8 (plan._logits)
        zp = quant.zero_point
        pa, pb = (la[:, 0] > zp).astype(np.int64), (lb[:, 0] > zp).astype(np.int64)
    else:
        pa, pb = la.argmax(axis=1), lb.argmax(axis=1)
    return {
        **out,
        "accuracy_before": float(np.mean(pa == y)),
        "accuracy_after": float(np.mean(pb == y)),
        "changed_predictions": float(np.mean(pa != pb)),
    }
