"""The reduction family's params (MEAN, REDUCE_MAX, ARG_MAX; MEAN on int16): what TFLM
computes at prepare time (conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

import math

import numpy as np

from zoflash.compiler import quant
from zoflash.compiler.ops.params_common import (
    check_shift,
    checked_dims,
    checked_int,
    checked_scale,
    checked_zp,
    checked_zp16,
)


def mean_params(*, input_shape, axes, input_scale, input_zp, output_scale, output_zp) -> dict:
    """MEAN (int8).  TFLM (reduce_common.cc) always takes reference_ops::QuantizedMeanOrSum for int8:
    int32 sum over the reduced elements, minus zp * count, then MultiplyByQuantizedMultiplier with
    the input/output multiplier adjusted for 1/count (shift = min(floor(log2 count), 32,
    31 + shift); multiplier = (multiplier << shift) // count), plus output zp, clamped to int8.
    keep_dims does not change the data.  Supported: the reduced axes (ignoring size-1 dimensions)
    form one contiguous run."""
    shape = checked_dims("input_shape", input_shape)
    rank = len(shape)
    ax = set()
    for a in axes:
        a = checked_int("axis", a)
        a2 = a + rank if a < 0 else a
        if not 0 <= a2 < rank:
            raise ValueError(f"mean: axis {a} out of range for a {rank}-D input")
        ax.add(a2)
    if not ax:
        raise ValueError("mean: no reduction axes")
    count = math.prod(shape[a] for a in ax)
    kept = [(shape[k], k in ax) for k in range(rank) if shape[k] != 1]
    red_pos = [i for i, (_, r) in enumerate(kept) if r]
    if red_pos and red_pos != list(range(red_pos[0], red_pos[-1] + 1)):
        raise ValueError(
            f"mean: reduced axes {sorted(ax)} of shape {shape} are not contiguous "
            "(only one contiguous run of reduced axes is supported)"
        )
    if red_pos:
        outer = math.prod(d for d, _ in kept[: red_pos[0]])
        inner = math.prod(d for d, _ in kept[red_pos[-1] + 1 :])
    else:
        outer, inner = 1, math.prod(shape)
    in_s, out_s = checked_scale("input_scale", input_scale), checked_scale("output_scale", output_scale)
    in_zp, out_zp = checked_zp("input_zp", input_zp), checked_zp("output_zp", output_zp)
    mult, shift = quant.quantize_multiplier(in_s / out_s)
    adj = min(count.bit_length() - 1, 32, 31 + shift)
    mult = (mult << adj) // count
    shift -= adj
    check_shift("mean", shift)
    return dict(
        outer=outer, reduce=count, inner=inner, input_zp=in_zp, output_zp=out_zp, multiplier=int(mult), shift=int(shift)
    )


_MAX_RANK = 6  # the C odometer of REDUCE_MAX (TFLM's RuntimeShape holds 6 dimensions too)


def reduce_max_params(*, input_shape, axes) -> dict:
    """REDUCE_MAX int8.  TFLM requires input and output to share scale and zero point (the caller
    checks), so the maximum needs no requantization.  Neighbouring dimensions that are both
    reduced or both kept merge; each input dimension gets its output stride (0 when reduced)."""
    shape = checked_dims("input_shape", input_shape)
    if not 1 <= len(shape) <= _MAX_RANK:
        raise ValueError(f"reduce_max: rank {len(shape)} (1 to {_MAX_RANK} supported)")
    reduced = set()
    for a in axes:
        a = checked_int("axis", a, -len(shape), len(shape) - 1)
        reduced.add(a % len(shape))
    if not reduced:
        raise ValueError("reduce_max: no axes")
    merged: list[list] = []  # [size, is reduced]
    for k, d in enumerate(shape):
        if merged and merged[-1][1] == (k in reduced):
            merged[-1][0] *= d
        else:
            merged.append([d, k in reduced])
    strides, step = [0] * len(merged), 1
    for k in range(len(merged) - 1, -1, -1):
        if not merged[k][1]:
            strides[k], step = step, step * merged[k][0]
    return dict(
        rank=len(merged),
        output_size=step,
        dims=np.array([m[0] for m in merged], dtype=np.int32),
        out_stride=np.array(strides, dtype=np.int32),
    )


def arg_max_params(*, input_shape, axis) -> dict:
    """ARG_MAX int8: the input as [outer][axis][inner]."""
    shape = checked_dims("input_shape", input_shape)
    a = checked_int("axis", axis, -len(shape), len(shape) - 1) % len(shape)
    return dict(
        outer=int(np.prod(shape[:a], dtype=np.int64)), axis=shape[a], inner=int(np.prod(shape[a + 1 :], dtype=np.int64))
    )


def mean_s16_params(*, input_shape, axes, input_scale, input_zp, output_scale, output_zp) -> dict:
    """MEAN on int16: mean_params' layout and multiplier folding 1 / count, int16 zero points."""
    return dict(
        mean_params(
            input_shape=input_shape,
            axes=axes,
            input_scale=input_scale,
            input_zp=0,
            output_scale=output_scale,
            output_zp=0,
        ),
        input_zp=checked_zp16("input_zp", input_zp),
        output_zp=checked_zp16("output_zp", output_zp),
    )
