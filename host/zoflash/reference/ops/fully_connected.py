"""Reference kernels of FULLY_CONNECTED (int8 and 16x8) (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import requant, requant16, wrap_int32


def fully_connected_s8(p, x, w, b=None) -> np.ndarray:
    """x: rows * depth int8; w: (units, depth) -> (rows, units) int8."""
    x = np.asarray(x).reshape(p["rows"], p["depth"]).astype(np.int64) - p["input_zp"]
    w = np.asarray(w).reshape(p["units"], p["depth"]).astype(np.int64)
    acc = wrap_int32(x @ w.T)
    if b is not None:
        acc = wrap_int32(acc + np.asarray(b, dtype=np.int64))
    return requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


def fully_connected_s16(p, x, w, b=None) -> np.ndarray:
    """x: rows * depth int16; w: (units, depth) int8; b: int64 or None -> (rows, units) int16."""
    x = np.asarray(x).reshape(p["rows"], p["depth"]).astype(np.int64)
    return requant16(x @ np.asarray(w).reshape(p["units"], p["depth"]).astype(np.int64).T, p, b)
