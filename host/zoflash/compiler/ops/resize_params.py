"""The resize family's params (RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR): what TFLM computes at
prepare time (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

import numpy as np

from zoflash.compiler.ops.params_common import checked_dims


def _resize_geometry(what, input_hwc, output_hwc, align_corners, half_pixel_centers):
    h, w, c = checked_dims("input_hwc", input_hwc, 3)
    oh, ow, oc = checked_dims("output_hwc", output_hwc, 3)
    if oc != c:
        raise ValueError(f"{what}: output has {oc} channels, input has {c}")
    if align_corners and half_pixel_centers:
        raise ValueError(f"{what}: align_corners and half_pixel_centers cannot both be set (TFLM)")
    return h, w, c, oh, ow


def _scale_10(in_size: int, out_size: int, align_corners: bool) -> int:
    """TFLM's 1/1024-unit scale, rounded to nearest."""
    if align_corners and out_size > 1:
        return ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    return ((1 << 10) * in_size + out_size // 2) // out_size


def resize_bilinear_params(*, input_hwc, output_hwc, align_corners, half_pixel_centers) -> dict:
    """RESIZE_BILINEAR int8, TFLM's integer path (ResizeBilinearInteger).  Input and output share
    the quantization: TFLM interpolates the int8 values without requantizing."""
    h, w, c, oh, ow = _resize_geometry("resize_bilinear", input_hwc, output_hwc, align_corners, half_pixel_centers)
    sh, sw = _scale_10(h, oh, align_corners), _scale_10(w, ow, align_corners)
    for size, out, s in ((h, oh, sh), (w, ow, sw)):
        # The last row's (column's) position, and the lower neighbour TFLM reads there.
        last = (out - 1) * s + (s // 2 - (1 << 9) if half_pixel_centers else 0)
        if last >= (1 << 30) or last // (1 << 10) > size - 1:
            raise ValueError(
                f"resize_bilinear: resizing {size} to {out} makes TFLM read outside the input "
                "(its 1/1024 scale rounds up too far)"
            )
    return dict(
        input_h=h,
        input_w=w,
        channels=c,
        output_h=oh,
        output_w=ow,
        height_scale_10=sh,
        width_scale_10=sw,
        half_pixel_centers=int(bool(half_pixel_centers)),
    )


def _nearest_index(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """TFLM GetNearestNeighbor for every output position, in float32 as TFLM computes it."""
    f = np.float32
    if align_corners and out_size > 1:
        scale = f(in_size - 1) / f(out_size - 1)
    else:
        scale = f(in_size) / f(out_size)
    pos = (np.arange(out_size, dtype=np.float32) + f(0.5 if half_pixel_centers else 0.0)) * scale
    if align_corners:  # TfLiteRound: halves away from zero (positions are >= 0)
        index = np.floor(pos + f(0.5))
    else:
        index = np.floor(pos)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    if half_pixel_centers:
        index = np.maximum(index, 0)
    return index.astype(np.int32)


def resize_nearest_params(*, input_hwc, output_hwc, align_corners, half_pixel_centers) -> dict:
    """RESIZE_NEAREST_NEIGHBOR int8: the source row and column tables (TFLM copies int8 values, so
    input and output share the quantization)."""
    h, w, c, oh, ow = _resize_geometry("resize_nearest", input_hwc, output_hwc, align_corners, half_pixel_centers)
    return dict(
        input_h=h,
        input_w=w,
        channels=c,
        output_h=oh,
        output_w=ow,
        y_index=_nearest_index(h, oh, align_corners, half_pixel_centers),
        x_index=_nearest_index(w, ow, align_corners, half_pixel_centers),
    )
