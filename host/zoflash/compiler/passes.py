"""Graph passes run before legality: they rewrite the IR into a simpler, equivalent one.

`fold_shape_arithmetic`: Keras exports with a dynamic batch compute reshape targets at run time
(SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE). With the batch fixed to 1 every such value is known
at compile time, so the small integer ops that compute it are evaluated here and their outputs
become constants; the ops disappear from the graph. Only integer tensors are folded (never
activations), and only ops whose semantics are fully reproduced below; anything else is left for
legality to report.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from zoflash.compiler.ir import Graph, Op

_INT_TYPES = ("int32", "int64")


class _CannotFold(Exception):
    """The op's semantics here are not reproduced (an unusual mask or type): keep the op."""


def _shape(graph: Graph, op: Op, values: list) -> np.ndarray:
    t = graph.tensors[op.inputs[0]]
    out_type = op.options.get("out_type", 2)  # TensorType INT32 = 2, INT64 = 4
    return np.array(t.shape, dtype=np.int64 if out_type == 4 else np.int32)


def _strided_slice(graph: Graph, op: Op, values: list) -> np.ndarray:
    x, begin, end, strides = values[:4]
    o = op.options
    if o.get("ellipsis_mask", 0) or o.get("new_axis_mask", 0) or o.get("offset", False):
        raise _CannotFold
    if x.ndim != len(begin) or len(begin) != len(end) or len(end) != len(strides):
        raise _CannotFold
    index = []
    for k in range(x.ndim):
        b, e, s = int(begin[k]), int(end[k]), int(strides[k])
        if s == 0:
            raise _CannotFold
        if o.get("shrink_axis_mask", 0) >> k & 1:
            b = b + x.shape[k] if b < 0 else b
            if not 0 <= b < x.shape[k]:
                raise _CannotFold
            index.append(b)
            continue
        index.append(
            slice(None if o.get("begin_mask", 0) >> k & 1 else b, None if o.get("end_mask", 0) >> k & 1 else e, s)
        )
    return np.asarray(x[tuple(index)])


def _pack(graph: Graph, op: Op, values: list) -> np.ndarray:
    return np.stack(values, axis=int(op.options.get("axis", 0)))


def _concatenation(graph: Graph, op: Op, values: list) -> np.ndarray:
    if op.options.get("fused_activation_function", "NONE") != "NONE":
        raise _CannotFold
    return np.concatenate(values, axis=int(op.options.get("axis", 0)))


def _gather(graph: Graph, op: Op, values: list) -> np.ndarray:
    x, idx = values[:2]
    if op.options.get("batch_dims", 0):
        raise _CannotFold
    axis = int(op.options.get("axis", 0))
    if np.any(idx < 0) or np.any(idx >= x.shape[axis]):
        raise _CannotFold
    return np.take(x, idx, axis=axis)


def _reshape(graph: Graph, op: Op, values: list) -> np.ndarray:
    return values[0].reshape(graph.tensors[op.outputs[0]].shape)


def _elementwise(fn):
    def fold(graph: Graph, op: Op, values: list) -> np.ndarray:
        if op.options.get("fused_activation_function", "NONE") != "NONE":
            raise _CannotFold
        with np.errstate(over="raise"):
            try:
                return fn(values[0].astype(np.int64), values[1].astype(np.int64))
            except FloatingPointError:
                raise _CannotFold from None

    return fold


def _cast(graph: Graph, op: Op, values: list) -> np.ndarray:
    return values[0]


_FOLDERS = {
    "SHAPE": _shape,
    "STRIDED_SLICE": _strided_slice,
    "PACK": _pack,
    "CONCATENATION": _concatenation,
    "GATHER": _gather,
    "RESHAPE": _reshape,
    "SQUEEZE": _reshape,
    "EXPAND_DIMS": _reshape,
    "CAST": _cast,
    "ADD": _elementwise(np.add),
    "SUB": _elementwise(np.subtract),
    "MUL": _elementwise(np.multiply),
}


def _foldable_inputs(graph: Graph, op: Op, known: dict[int, np.ndarray]) -> list | None:
    """The input values when all are known integer constants (SHAPE needs only a static shape)."""
    if op.type == "SHAPE":
        t = graph.tensors[op.inputs[0]]
        return [] if all(d >= 0 for d in t.shape) else None
    values = []
    for i in op.inputs:
        if i < 0:
            continue
        t = graph.tensors[i]
        if t.dtype not in _INT_TYPES or i not in known:
            return None
        values.append(known[i])
    return values


def fold_shape_arithmetic(graph: Graph) -> tuple[Graph, list[Op]]:
    """The graph with compile-time integer ops evaluated, and the ops that were folded."""
    known = {t.index: t.data for t in graph.tensors if t.is_constant and t.dtype in _INT_TYPES}
    tensors = list(graph.tensors)
    kept, folded = [], []
    for op in graph.ops:
        fold = _FOLDERS.get(op.type)
        outs = [graph.tensors[o] for o in op.outputs]
        values = _foldable_inputs(graph, op, known) if fold and len(outs) == 1 else None
        if values is None or outs[0].dtype not in _INT_TYPES or op.outputs[0] in graph.outputs:
            kept.append(op)
            continue
        try:
            value = np.asarray(fold(graph, op, values))
        except (_CannotFold, ValueError, IndexError):
            kept.append(op)
            continue
        out = outs[0]
        if value.size != out.num_elements and out.shape:
            kept.append(op)  # the declared shape disagrees: legality reports the op as it is
            continue
        value = value.astype(np.int64 if out.dtype == "int64" else np.int32).reshape(out.shape)
        tensors[out.index] = replace(out, data=value, shape_signature=None)
        known[out.index] = value
        folded.append(op)
    if not folded:
        return graph, []
    return replace(graph, tensors=tensors, ops=kept), folded
