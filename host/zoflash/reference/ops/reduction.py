"""Reference kernels of the reduction family: MEAN, REDUCE_MAX, ARG_MAX (int8), MEAN on int16
(conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import mbqm, wrap_int32


def mean_s8(p, x, axes) -> np.ndarray:
    """x: int8 array with its real shape; axes: the reduced axes (kept dims dropped)."""
    x = np.asarray(x).astype(np.int64)
    total = wrap_int32(x.sum(axis=tuple(axes)))
    count = int(np.prod([x.shape[a] for a in axes]))
    shifted = wrap_int32(total - p["input_zp"] * count)
    out = mbqm(shifted, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def reduce_max_s8(p, x) -> np.ndarray:
    """x: int8 with any shape of p's size -> the maxima over the dimensions whose output stride is 0."""
    dims = tuple(int(d) for d in p["dims"])
    reduced = tuple(k for k, s in enumerate(p["out_stride"]) if s == 0)
    return np.asarray(x).reshape(dims).max(axis=reduced).astype(np.int8)


def arg_max_s8(p, x) -> np.ndarray:
    """x: int8 [outer, axis, inner] -> int32 [outer, inner], the first maximum's index."""
    x = np.asarray(x).reshape(p["outer"], p["axis"], p["inner"])
    return x.argmax(axis=1).astype(np.int32)


def mean_s16(p, x) -> np.ndarray:
    """x: [outer, reduce, inner]; the int32 sum less zp * count, rescaled with 1 / count folded in."""
    total = np.asarray(x).astype(np.int64).reshape(p["outer"], p["reduce"], p["inner"]).sum(axis=1)
    out = mbqm(wrap_int32(total - p["input_zp"] * p["reduce"]), p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -32768, 32767).astype(np.int16)
