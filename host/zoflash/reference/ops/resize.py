"""Reference kernels of the resize family: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np


def _trunc_div(a, b: int) -> np.ndarray:
    """C integer division (towards zero)."""
    a = np.asarray(a, dtype=np.int64)
    return np.where(a >= 0, a // b, -((-a) // b))


def _bilinear_axis(n_out: int, scale_10: int, half_pixel: bool, n_in: int):
    """TFLM ComputeInterpolationValuesInteger for every output row (column): positions in 1/1024."""
    v = np.arange(n_out, dtype=np.int64) * scale_10
    if half_pixel:
        v = v + scale_10 // 2 - 512
    lo = np.maximum(_trunc_div(v, 1024), 0)
    hi = np.minimum(_trunc_div(v + 1023, 1024), n_in - 1)
    frac = v - 1024 * lo
    return lo, hi, frac


def resize_bilinear_s8(p, x) -> np.ndarray:
    """x: int8 (H, W, C) -> (OH, OW, C), TFLM's ResizeBilinearInteger (int64 sums, double rounding)."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    hp = bool(p["half_pixel_centers"])
    y0, y1, fy = _bilinear_axis(p["output_h"], p["height_scale_10"], hp, p["input_h"])
    x0, x1, fx = _bilinear_axis(p["output_w"], p["width_scale_10"], hp, p["input_w"])
    fy, fx = fy[:, None, None], fx[None, :, None]
    total = (
        x[y0][:, x0] * (1024 - fy) * (1024 - fx)
        + x[y1][:, x0] * fy * (1024 - fx)
        + x[y0][:, x1] * (1024 - fy) * fx
        + x[y1][:, x1] * fy * fx
    )
    return _trunc_div(total + np.where(total > 0, 1 << 19, -(1 << 19)), 1 << 20).astype(np.int8)


def nearest_index(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLM GetNearestNeighbor, one output position at a time, in float32 scalars."""
    f = np.float32
    scale = f(in_size - 1) / f(out_size - 1) if align_corners and out_size > 1 else f(in_size) / f(out_size)
    out = []
    for i in range(out_size):
        v = (f(i) + f(0.5 if half_pixel_centers else 0.0)) * scale
        j = int(np.floor(v + f(0.5))) if align_corners else int(np.floor(v))  # TfLiteRound, v >= 0
        j = min(j, in_size - 1)
        out.append(max(j, 0) if half_pixel_centers else j)
    return np.array(out, dtype=np.int32)


def resize_nearest_s8(p, x) -> np.ndarray:
    """x: int8 (H, W, C) -> (OH, OW, C): rows p["y_index"], columns p["x_index"]."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"])
    return x[np.asarray(p["y_index"])][:, np.asarray(p["x_index"])].astype(np.int8)


def resize_nearest_s16(p, x) -> np.ndarray:
    """(H, W, C) -> (OH, OW, C): rows p["y_index"], columns p["x_index"]."""
    x = np.asarray(x, np.int16).reshape(p["input_h"], p["input_w"], p["channels"])
    return x[np.asarray(p["y_index"])][:, np.asarray(p["x_index"])]
