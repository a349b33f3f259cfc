"""Reference kernels of the movement family: the strided copy (TRANSPOSE, SLICE, STRIDED_SLICE,
PACK), SPLIT, GATHER (int8 and int16), DEPTH_TO_SPACE and SPACE_TO_DEPTH (int8) (conventions:
reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np


def strided_copy_s8(p, x) -> np.ndarray:
    """output[i] = x.flat[offset + sum(i_k * in_s_k)] over the 6-D output shape."""
    flat = np.ascontiguousarray(x, dtype=np.int8).reshape(-1)
    dims = [p[f"out_d{k}"] for k in range(6)]
    index = np.full(dims, p["offset"], dtype=np.int64)
    for k, d in enumerate(dims):
        index += (np.arange(d) * p[f"in_s{k}"]).reshape([-1 if j == k else 1 for j in range(6)])
    return flat[index]


def split_s8(p, x) -> list[np.ndarray]:
    """x viewed as [outer, sum(chunk)] -> one [outer, chunk[i]] array per output."""
    rows = np.asarray(x, dtype=np.int8).reshape(p["outer"], -1)
    return np.split(rows, np.cumsum(p["chunk"])[:-1], axis=1)


def gather_s8(p, x) -> np.ndarray:
    """x viewed as [outer, axis_size, inner] -> [outer, num_indices, inner]."""
    return np.asarray(x, dtype=np.int8).reshape(p["outer"], p["axis_size"], p["inner"])[:, p["indices"], :]


def depth_to_space_s8(p, x) -> np.ndarray:
    """[H, W, b * b * D] -> [H * b, W * b, D]: the channels read as a b x b block of pixels."""
    h, w, b, d = p["height"], p["width"], p["block"], p["depth"]
    blocks = np.asarray(x, dtype=np.int8).reshape(h, w, b, b, d)
    return blocks.transpose(0, 2, 1, 3, 4).reshape(h * b, w * b, d)


def space_to_depth_s8(p, x) -> np.ndarray:
    """[H * b, W * b, D] -> [H, W, b * b * D]: each b x b block of pixels becomes the channels."""
    h, w, b, d = p["height"], p["width"], p["block"], p["depth"]
    image = np.asarray(x, dtype=np.int8).reshape(h, b, w, b, d)
    return image.transpose(0, 2, 1, 3, 4).reshape(h, w, b * b * d)


def strided_slice_op(x, begin, end, strides, begin_mask, end_mask, shrink_axis_mask) -> np.ndarray:
    """STRIDED_SLICE as Python indexing states it (its clamping is TFLite's). A shrunk axis takes
    one element: begin's, or the first when begin_mask also names the axis (TFLM lets the mask win)."""
    index = []
    for k in range(np.ndim(x)):
        if shrink_axis_mask >> k & 1:
            index.append(0 if begin_mask >> k & 1 else begin[k])
        else:
            index.append(
                slice(None if begin_mask >> k & 1 else begin[k], None if end_mask >> k & 1 else end[k], strides[k])
            )
    return np.asarray(x)[tuple(index)]


def strided_copy_s16(p, x) -> np.ndarray:
    """output[i] = x.flat[offset + sum(i_k * in_s_k)] over the 6-D output shape."""
    flat = np.ascontiguousarray(x, dtype=np.int16).reshape(-1)
    dims = [p[f"out_d{k}"] for k in range(6)]
    index = np.full(dims, p["offset"], dtype=np.int64)
    for k, d in enumerate(dims):
        index += (np.arange(d) * p[f"in_s{k}"]).reshape([-1 if j == k else 1 for j in range(6)])
    return flat[index]


def split_s16(p, x) -> list[np.ndarray]:
    """x viewed as [outer, sum(chunk)] -> one [outer, chunk[i]] array per output."""
    rows = np.asarray(x, dtype=np.int16).reshape(p["outer"], -1)
    return np.split(rows, np.cumsum(p["chunk"])[:-1], axis=1)
