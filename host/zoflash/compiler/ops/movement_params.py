"""The movement family's params (TRANSPOSE, SLICE, STRIDED_SLICE, PACK, SPLIT, GATHER: one strided
copy kernel and its relatives; DEPTH_TO_SPACE, SPACE_TO_DEPTH; conventions:
compiler/ops/params_common.py)."""

from __future__ import annotations

import math

import numpy as np

from zoflash.compiler.ops.params_common import checked_dims, checked_int

_COPY_RANK = 6  # zo_strided_copy_params_t's dimensions


def _row_strides(shape) -> list[int]:
    """Element strides of a row-major array."""
    return [math.prod(shape[k + 1 :]) for k in range(len(shape))]


def _strided_copy(what: str, out_dims, in_strides, offset: int) -> dict:
    """output[i] = input[offset + sum(i_k * in_strides_k)], right-aligned to 6-D."""
    if len(out_dims) > _COPY_RANK:
        raise ValueError(f"{what}: {len(out_dims)}-D; at most {_COPY_RANK} dimensions")
    if 0 not in out_dims and offset + sum((d - 1) * s for d, s in zip(out_dims, in_strides) if s < 0) < 0:
        raise ValueError(f"{what}: reads before the start of the input")
    pad = _COPY_RANK - len(out_dims)
    dims, strides = [1] * pad + list(out_dims), [0] * pad + list(in_strides)
    return {
        **{f"out_d{k}": int(d) for k, d in enumerate(dims)},
        **{f"in_s{k}": int(s) for k, s in enumerate(strides)},
        "offset": int(offset),
    }


def strided_copy_extents(p: dict) -> tuple[int, int]:
    """Bytes zo_strided_copy_s8 reads (up to its highest index) and writes."""
    dims = [p[f"out_d{k}"] for k in range(_COPY_RANK)]
    if 0 in dims:
        return 0, 0
    top = p["offset"] + sum((d - 1) * p[f"in_s{k}"] for k, d in enumerate(dims) if p[f"in_s{k}"] > 0)
    return top + 1, math.prod(dims)


def transpose_params(*, input_shape, perm) -> dict:
    """TRANSPOSE: output dimension k is input dimension perm[k]."""
    shape = checked_dims("input_shape", input_shape)
    perm = [checked_int(f"perm[{k}]", a) for k, a in enumerate(perm)]
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"transpose: perm {perm} is not a permutation of the {len(shape)} input dimensions")
    strides = _row_strides(shape)
    return _strided_copy("transpose", [shape[a] for a in perm], [strides[a] for a in perm], 0)


def slice_params(*, input_shape, begin, size) -> dict:
    """SLICE: size -1 runs to the end of the dimension, as TFLM's GetBeginAndSizeVectors."""
    shape = checked_dims("input_shape", input_shape)
    if len(begin) != len(shape) or len(size) != len(shape):
        raise ValueError(f"slice: begin {list(begin)} and size {list(size)} for a {len(shape)}-D input")
    begin = [checked_int(f"begin[{k}]", b) for k, b in enumerate(begin)]
    size = [
        d - b if int(s) == -1 else checked_int(f"size[{k}]", s) for k, (d, b, s) in enumerate(zip(shape, begin, size))
    ]
    if not all(b >= 0 and s >= 0 and b + s <= d for d, b, s in zip(shape, begin, size)):
        raise ValueError(f"slice: begin {begin} size {size} do not fit in the input {list(shape)}")
    strides = _row_strides(shape)
    return _strided_copy("slice", size, strides, sum(b * s for b, s in zip(begin, strides)))


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def strided_slice_axes(
    *, input_shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask
) -> list[tuple[int, int, int]]:
    """(start, count, stride) per input axis, as TFLM's StridedSliceStartForAxis and
    StridedSliceEndForAxis compute them (clamp to the axis, then the masks override)."""
    shape = checked_dims("input_shape", input_shape)
    if not len(begin) == len(end) == len(strides) == len(shape):
        raise ValueError(
            f"strided_slice: begin/end/strides of {len(begin)}/{len(end)}/{len(strides)} values "
            f"for a {len(shape)}-D input"
        )
    axes = []
    for k, d in enumerate(shape):
        b, e, s = (
            checked_int(f"begin[{k}]", begin[k]),
            checked_int(f"end[{k}]", end[k]),
            checked_int(f"strides[{k}]", strides[k]),
        )
        if s == 0:
            raise ValueError(f"strided_slice: stride {k} is 0")
        lo, hi = (0, d) if s > 0 else (-1, d - 1)
        start = _clamp(b + d if b < 0 else b, lo, hi)
        if begin_mask >> k & 1:
            start = 0 if s > 0 else d - 1
        if shrink_axis_mask >> k & 1:
            if not 0 <= start < d:  # TFLM would then write nothing into a 1-element output
                raise ValueError(f"strided_slice: begin {b} of shrunk axis {k} is outside [0, {d})")
            axes.append((start, 1, 1))
            continue
        stop = _clamp(e + d if e < 0 else e, lo, hi)
        if end_mask >> k & 1:
            stop = d if s > 0 else -1
        count = max(0, -(-(stop - start) // s)) if s > 0 else max(0, -(-(start - stop) // -s))
        axes.append((start, count, s))
    return axes


def strided_slice_params(*, input_shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask) -> dict:
    """STRIDED_SLICE (begin, end and strides constant; ellipsis and new-axis masks unsupported)."""
    axes = strided_slice_axes(
        input_shape=input_shape,
        begin=begin,
        end=end,
        strides=strides,
        begin_mask=begin_mask,
        end_mask=end_mask,
        shrink_axis_mask=shrink_axis_mask,
    )
    row = _row_strides(tuple(input_shape))
    return _strided_copy(
        "strided_slice",
        [c for _, c, _ in axes],
        [s * r for (_, _, s), r in zip(axes, row)],
        sum(start * r for (start, _, _), r in zip(axes, row)),
    )


def pack_params(*, input_shape, count, axis) -> dict:
    """PACK `count` inputs of one shape along a new axis (of the output), as zo_concat_s8 does."""
    shape = checked_dims("input_shape", input_shape)
    count = checked_int("count", count, 1)
    ax = checked_int("axis", axis)
    ax = ax + len(shape) + 1 if ax < 0 else ax
    if not 0 <= ax <= len(shape):
        raise ValueError(f"pack: axis {axis} out of range for a {len(shape) + 1}-D output")
    return dict(
        num_inputs=count, outer=math.prod(shape[:ax]), chunk=np.full(count, math.prod(shape[ax:]), dtype=np.int32)
    )


def split_params(*, input_shape, axis, sizes) -> dict:
    """UNPACK, SPLIT and SPLIT_V: output i takes sizes[i] along the axis, as TFLM's SplitImpl."""
    shape = checked_dims("input_shape", input_shape)
    ax = checked_int("axis", axis)
    ax = ax + len(shape) if ax < 0 else ax
    if not 0 <= ax < len(shape):
        raise ValueError(f"split: axis {axis} out of range for a {len(shape)}-D input")
    sizes = [checked_int(f"sizes[{i}]", s, 0) for i, s in enumerate(sizes)]
    if not sizes or sum(sizes) != shape[ax]:
        raise ValueError(f"split: sizes {sizes} do not add up to the input's {shape[ax]} along axis {ax}")
    inner = math.prod(shape[ax + 1 :])
    return dict(
        num_outputs=len(sizes), outer=math.prod(shape[:ax]), chunk=np.array([s * inner for s in sizes], dtype=np.int32)
    )


def gather_params(*, input_shape, axis, indices) -> dict:
    """GATHER with batch_dims 0: TFLM reads input[outer][index][inner]; it does not check indices at
    run time, so every index must be in [0, axis size)."""
    shape = checked_dims("input_shape", input_shape)
    ax = checked_int("axis", axis)
    ax = ax + len(shape) if ax < 0 else ax
    if not 0 <= ax < len(shape):
        raise ValueError(f"gather: axis {axis} out of range for a {len(shape)}-D input")
    idx = np.asarray(indices).reshape(-1)
    if idx.size == 0 or idx.min() < 0 or idx.max() >= shape[ax]:
        raise ValueError(f"gather: indices {idx.tolist()} outside [0, {shape[ax]})")
    return dict(
        outer=math.prod(shape[:ax]),
        axis_size=shape[ax],
        inner=math.prod(shape[ax + 1 :]),
        num_indices=int(idx.size),
        indices=idx.astype(np.int32),
    )


def _image(what: str, input_shape, block_size) -> tuple[int, int, int, int]:
    """(height, width, channels, block) of a [1, H, W, C] input."""
    n, h, w, c = checked_dims("input_shape", input_shape, 4)
    if n != 1:
        raise ValueError(f"{what}: batch {n}; the kernel runs batch 1")
    return h, w, c, checked_int("block_size", block_size, 1)


def depth_to_space_params(*, input_shape, block_size) -> dict:
    """DEPTH_TO_SPACE of a [1, H, W, C] input: [1, H * b, W * b, C / b^2], as TFLM (C a multiple of b^2)."""
    h, w, c, b = _image("depth_to_space", input_shape, block_size)
    if c % (b * b):
        raise ValueError(f"depth_to_space: {c} channels are not a multiple of block_size^2 = {b * b}")
    return dict(height=h, width=w, block=b, depth=c // (b * b))


def space_to_depth_params(*, input_shape, block_size) -> dict:
    """SPACE_TO_DEPTH of a [1, H, W, C] input: [1, H / b, W / b, C * b^2], as TFLM (H and W multiples of b)."""
    h, w, c, b = _image("space_to_depth", input_shape, block_size)
    if h % b or w % b:
        raise ValueError(f"space_to_depth: height {h} and width {w} must be multiples of block_size {b}")
    return dict(height=h // b, width=w // b, block=b, depth=c)


def depth_space_extents(p: dict) -> tuple[int, int]:
    """Both kernels read and write every element once."""
    n = p["height"] * p["width"] * p["block"] * p["block"] * p["depth"]
    return n, n
