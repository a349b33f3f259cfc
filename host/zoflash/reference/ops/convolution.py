"""Reference kernels of the convolution family: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV (int8)
and the 16x8 variants (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import requant, requant16, wrap_int32


def _shifted_taps(xs, p, kh, kw):
    """Yield (ky, kx, view) where view[oy, ox, :] = xs[iy, ix, :] for that filter tap, or 0
    where the tap falls outside the image.  xs is already offset by the zero point."""
    h, w = p["input_h"], p["input_w"]
    oh, ow = p["output_h"], p["output_w"]
    sh, sw, dh, dw = p["stride_h"], p["stride_w"], p["dilation_h"], p["dilation_w"]
    oy = np.arange(oh)[:, None]
    ox = np.arange(ow)[None, :]
    for ky in range(kh):
        iy = oy * sh - p["pad_h"] + ky * dh
        for kx in range(kw):
            ix = ox * sw - p["pad_w"] + kx * dw
            inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            view = xs[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1), :]
            yield ky, kx, np.where(inside[..., None], view, 0)


def conv2d_s8(p, x, w, b=None) -> np.ndarray:
    """x: (H, W, C) int8; w: (OC, KH, KW, FC) int8; b: (OC,) int32 or None -> (OH, OW, OC) int8."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["input_c"])
    w = np.asarray(w).reshape(p["output_c"], p["filter_h"], p["filter_w"], p["filter_c"]).astype(np.int64)
    fc = p["filter_c"]
    groups = p["input_c"] // fc
    ocg = p["output_c"] // groups
    xs = x.astype(np.int64) - p["input_zp"]
    acc = np.zeros((p["output_h"], p["output_w"], p["output_c"]), dtype=np.int64)
    for ky, kx, view in _shifted_taps(xs, p, p["filter_h"], p["filter_w"]):
        for g in range(groups):
            acc[..., g * ocg : (g + 1) * ocg] += (
                view[..., g * fc : (g + 1) * fc] @ w[g * ocg : (g + 1) * ocg, ky, kx, :].T
            )
    acc = wrap_int32(acc)
    if b is not None:
        acc = wrap_int32(acc + np.asarray(b, dtype=np.int64))
    return requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


def depthwise_conv2d_s8(p, x, w, b=None) -> np.ndarray:
    """x: (H, W, C); w: (1, KH, KW, C * dm); b: (C * dm,) or None -> (OH, OW, C * dm)."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["input_c"])
    w = np.asarray(w).reshape(p["filter_h"], p["filter_w"], p["output_c"]).astype(np.int64)
    dm = p["depth_multiplier"]
    xs = x.astype(np.int64) - p["input_zp"]
    acc = np.zeros((p["output_h"], p["output_w"], p["output_c"]), dtype=np.int64)
    for ky, kx, view in _shifted_taps(xs, p, p["filter_h"], p["filter_w"]):
        acc += np.repeat(view, dm, axis=-1) * w[ky, kx, :]
    acc = wrap_int32(acc)
    if b is not None:
        acc = wrap_int32(acc + np.asarray(b, dtype=np.int64))
    return requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


def transpose_conv_s8(p, x, w, b=None) -> np.ndarray:
    """x: int8 (H, W, IC); w: (OC, KH, KW, IC); b: (OC,) or None -> (OH, OW, OC).  TFLM's scatter:
    every input pixel adds (x - zp) * w into the outputs its window covers (int32 sums)."""
    h, wd, ic = p["input_h"], p["input_w"], p["input_c"]
    oh, ow, oc = p["output_h"], p["output_w"], p["output_c"]
    kh, kw, sh, sw = p["filter_h"], p["filter_w"], p["stride_h"], p["stride_w"]
    xs = np.asarray(x).reshape(h, wd, ic).astype(np.int64) - p["input_zp"]
    w = np.asarray(w).reshape(oc, kh, kw, ic).astype(np.int64)
    # The scatter on a canvas with the padding (and room for the whole window) around the output.
    canvas = np.zeros(
        (max((h - 1) * sh + kh, p["pad_h"] + oh), max((wd - 1) * sw + kw, p["pad_w"] + ow), oc), dtype=np.int64
    )
    for fy in range(kh):
        for fx in range(kw):
            canvas[fy : fy + (h - 1) * sh + 1 : sh, fx : fx + (wd - 1) * sw + 1 : sw] += xs @ w[:, fy, fx, :].T
    acc = wrap_int32(canvas[p["pad_h"] : p["pad_h"] + oh, p["pad_w"] : p["pad_w"] + ow])
    if b is not None:
        acc = wrap_int32(acc + np.asarray(b, dtype=np.int64))
    return requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


def conv2d_s16(p, x, w, b=None) -> np.ndarray:
    """x: (H, W, C) int16; w: (OC, KH, KW, FC) int8; b: (OC,) int64 or None -> (OH, OW, OC) int16.
    No zero points (TFLM's 16x8 convolution has none); padded taps add nothing."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["input_c"]).astype(np.int64)
    w = np.asarray(w).reshape(p["output_c"], p["filter_h"], p["filter_w"], p["filter_c"]).astype(np.int64)
    fc = p["filter_c"]
    groups, ocg = p["input_c"] // fc, p["output_c"] // (p["input_c"] // fc)
    acc = np.zeros((p["output_h"], p["output_w"], p["output_c"]), np.int64)
    for ky, kx, view in _shifted_taps(x, p, p["filter_h"], p["filter_w"]):
        for g in range(groups):
            acc[..., g * ocg : (g + 1) * ocg] += (
                view[..., g * fc : (g + 1) * fc] @ w[g * ocg : (g + 1) * ocg, ky, kx, :].T
            )
    return requant16(acc, p, b)


def depthwise_conv2d_s16(p, x, w, b=None) -> np.ndarray:
    """x: (H, W, C) int16; w: (1, KH, KW, C * dm) int8; b: int64 or None -> (OH, OW, C * dm) int16."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["input_c"]).astype(np.int64)
    w = np.asarray(w).reshape(p["filter_h"], p["filter_w"], p["output_c"]).astype(np.int64)
    acc = np.zeros((p["output_h"], p["output_w"], p["output_c"]), np.int64)
    for ky, kx, view in _shifted_taps(x, p, p["filter_h"], p["filter_w"]):
        acc += np.repeat(view, p["depth_multiplier"], axis=-1) * w[ky, kx, :]
    return requant16(acc, p, b)
