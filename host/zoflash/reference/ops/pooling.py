"""Reference kernels of the pooling family: AVERAGE_POOL_2D, MAX_POOL_2D (int8 and int16)
(conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np


def _pool_taps(p, x, fill):
    q = dict(p, dilation_h=1, dilation_w=1, input_c=p["channels"])
    h, w = p["input_h"], p["input_w"]
    oy = np.arange(p["output_h"])[:, None]
    ox = np.arange(p["output_w"])[None, :]
    for ky in range(p["filter_h"]):
        iy = oy * q["stride_h"] - q["pad_h"] + ky
        for kx in range(p["filter_w"]):
            ix = ox * q["stride_w"] - q["pad_w"] + kx
            inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            view = x[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1), :]
            yield inside, np.where(inside[..., None], view, fill)


def avg_pool_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    total = np.zeros((p["output_h"], p["output_w"], p["channels"]), dtype=np.int64)
    count = np.zeros((p["output_h"], p["output_w"], 1), dtype=np.int64)
    for inside, view in _pool_taps(p, x, 0):
        total += view
        count += inside[..., None]
    half = count // 2
    # C division truncates toward zero.
    pos = (total + half) // count
    neg = -((-(total - half)) // count)
    avg = np.where(total > 0, pos, neg)
    return np.clip(avg, p["act_min"], p["act_max"]).astype(np.int8)


def max_pool_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    best = np.full((p["output_h"], p["output_w"], p["channels"]), -128, dtype=np.int64)
    for _, view in _pool_taps(p, x, -128):
        best = np.maximum(best, view)
    return np.clip(best, p["act_min"], p["act_max"]).astype(np.int8)


def avg_pool_s16(p, x) -> np.ndarray:
    """The sum of the taps inside the image over their count, rounded half away from zero."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    total = np.zeros((p["output_h"], p["output_w"], p["channels"]), np.int64)
    count = np.zeros((p["output_h"], p["output_w"], 1), np.int64)
    for inside, view in _pool_taps(p, x, 0):
        total += view
        count += inside[..., None]
    avg = np.sign(total) * ((np.abs(total) + count // 2) // count)
    return np.clip(avg, p["act_min"], p["act_max"]).astype(np.int16)


def max_pool_s16(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    best = np.full((p["output_h"], p["output_w"], p["channels"]), -32768, np.int64)
    for _, view in _pool_taps(p, x, -32768):
        best = np.maximum(best, view)
    return np.clip(best, p["act_min"], p["act_max"]).astype(np.int16)
