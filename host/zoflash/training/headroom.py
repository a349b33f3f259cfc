"""Headroom: re-quantize the trainable layers with h bits of room for the weights to grow.

A pretrained layer's scales are fitted to its current weights, so training can saturate them at
+-(127 - eps). With h bits of headroom each trainable int8 weight tensor gets scales x 2^h and
values w' = round_half_away(w / 2^h) (clipped to +-(127 - eps)); the int32 bias of every layer
reading it (scale s_in * s_w) gets scales x 2^h and b' = round_half_away(b / 2^h). The
requantization multipliers follow when the graph is compiled again (compiler/ops/*_params.py compute them
from the scales). A pure pass: the input graph is not modified.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import overload

import numpy as np

from zoflash.compiler.ir import Graph, Quantization
from zoflash.compiler.quant import round_half_away_array
from zoflash.spec.training import HEADROOM_AUTO_LSB, HEADROOM_MAX, INT8_WEIGHT_LIMIT

WEIGHTED_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def divide_by_pow2(values: np.ndarray, bits: int) -> np.ndarray:
    """values / 2^bits rounded half away from zero (exact: integers below 2^53 divide exactly)."""
    return round_half_away_array(np.asarray(values) / float(1 << bits))


@overload
def scaled(quant: Quantization, bits: int) -> Quantization: ...
@overload
def scaled(quant: None, bits: int) -> None: ...
def scaled(quant: Quantization | None, bits: int) -> Quantization | None:
    """The quantization with every scale x 2^bits (exact: a power of two)."""
    if quant is None:
        return None
    return Quantization(
        scales=tuple(float(s) * float(1 << bits) for s in quant.scales), zero_points=quant.zero_points, axis=quant.axis
    )


def requantized_tensors(
    graph: Graph, weights: Iterable[int], root: Mapping[int, int] | None = None
) -> tuple[list[int], list[int]]:
    """(weight tensors, bias tensors) the pass changes for these trainable weight tensors: the
    weights themselves and the int32 constant bias of every weighted op that reads them."""
    root = root or {}
    wset = {int(w) for w in weights}
    ws = sorted(wset)
    biases: list[int] = []
    for op in graph.ops:
        if op.type not in WEIGHTED_OPS or len(op.inputs) < 2 or op.inputs[1] < 0:
            continue
        if root.get(op.inputs[1], op.inputs[1]) not in wset:
            continue
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            b = root.get(op.inputs[2], op.inputs[2])
            t = graph.tensors[b]
            if t.is_constant and t.dtype == "int32" and b not in biases:
                biases.append(b)
    return ws, sorted(biases)


def auto_bits(graph: Graph, weights: Iterable[int], root: Mapping[int, int] | None = None) -> int:
    """--headroom auto: the most bits (0..HEADROOM_MAX) after which the RMS of the trainable int8
    weights is still at least HEADROOM_AUTO_LSB LSB. Why (docs/training.md "Headroom"): a layer
    adapted to a new domain may need weights several times its pretrained ones, which int8 at the
    pretrained scale cannot hold; each bit doubles the room and halves the resolution, and about 6
    LSB of RMS is the coarsest grid the three tasks of research/2026-11-29-scheduler-grid-digits-400k.md still train well on.
    0 when nothing can be re-quantized: no trainable weights (biases only), a weight tensor that is
    not a quantized constant int8, or one read by several layers (which may not all be trained)."""
    ws, _ = requantized_tensors(graph, weights, root)
    if not ws or any(
        not (graph.tensors[w].is_constant and graph.tensors[w].dtype == "int8" and graph.tensors[w].quant is not None)
        for w in ws
    ):
        return 0
    if _read_by_several_layers(graph, ws, root or {}):
        return 0
    arrays = [d for w in ws if (d := graph.tensors[w].data) is not None]  # all of them: constants (above)
    squares = sum(int(np.sum(np.square(d.astype(np.int64)))) for d in arrays)
    count = sum(int(d.size) for d in arrays)
    rms = float(np.sqrt(squares / count))
    bits = 0
    while bits < HEADROOM_MAX and rms / float(1 << (bits + 1)) >= HEADROOM_AUTO_LSB:
        bits += 1
    return bits


def _read_by_several_layers(graph: Graph, ws: list[int], root: Mapping[int, int]) -> bool:
    """Whether two weighted ops read one of these weight tensors. Conservative: auto does not know
    which layers are trained, and re-quantizing a shared tensor would change an untrained layer
    (an explicit --headroom reports that case as an error)."""
    readers = [
        root.get(op.inputs[1], op.inputs[1])
        for op in graph.ops
        if op.type in WEIGHTED_OPS and len(op.inputs) >= 2 and op.inputs[1] >= 0
    ]
    return any(readers.count(w) > 1 for w in ws)


def apply_headroom(
    graph: Graph, weights: Iterable[int], bits: int, eps: int = 1, root: Mapping[int, int] | None = None
) -> tuple[Graph, list[int]]:
    """A new graph with `bits` of headroom on the trainable int8 weight tensors `weights` (and the
    biases of the layers reading them). Returns (graph, indices of the changed tensors).
    bits = 0 returns an unchanged copy."""
    if not 0 <= bits <= HEADROOM_MAX:
        raise ValueError(f"headroom must be 0..{HEADROOM_MAX} bits, got {bits}")
    tensors = [copy.copy(t) for t in graph.tensors]
    ops = [replace(op, options=dict(op.options)) for op in graph.ops]
    new = replace(graph, tensors=tensors, ops=ops)
    if bits == 0:
        return new, []
    ws, bs = requantized_tensors(graph, weights, root)
    w_max = INT8_WEIGHT_LIMIT - eps
    for w in ws:
        t = graph.tensors[w]
        if t.data is None or t.dtype != "int8" or t.quant is None:
            raise ValueError(f"headroom: tensor {t.describe()} is not a quantized constant int8 weight tensor")
        data = np.clip(divide_by_pow2(t.data, bits), -w_max, w_max).astype(np.int8).reshape(t.data.shape)
        tensors[w] = replace(t, data=data, quant=scaled(t.quant, bits))
    for b in bs:
        t = graph.tensors[b]
        assert t.data is not None  # requantized_tensors returns constant biases only
        data = divide_by_pow2(t.data, bits).astype(t.data.dtype).reshape(t.data.shape)
        tensors[b] = replace(t, data=data, quant=scaled(t.quant, bits))
    return new, ws + bs


def describe(report: dict) -> str:
    """One line for `zoflash build` / `simulate`."""
    out = report["outputs"]
    text = f"headroom {report['bits']} bit(s) on {len(report['tensors'])} tensor(s)"
    if "accuracy_before" in out:
        text += (
            f": test accuracy {out['accuracy_before'] * 100:.1f}% -> {out['accuracy_after'] * 100:.1f}%, "
            f"{out['changed_predictions'] * 100:.1f}% of predictions changed, logits moved by at most "
            f"{out['max_abs_logit_change']} LSB (mean {out['mean_abs_logit_change']:.2f})"
        )
    elif out.get("n_test"):
        text += (
            f": outputs moved by at most {out['max_abs_logit_change']} LSB (mean {out['mean_abs_logit_change']:.2f})"
        )
    return text
