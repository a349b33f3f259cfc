"""PAD and CONCATENATION's params (int8 and int16): what TFLM computes at prepare time
(conventions: compiler/ops/params_common.py)."""

from __future__ import annotations

import math

import numpy as np

from zoflash.compiler.ops.params_common import checked_dims, checked_int, checked_zp, checked_zp16


def pad_params(*, input_shape, paddings, pad_value) -> dict:
    """PAD / PADV2 with a constant value (up to 5-D, like TFLM)."""
    shape = checked_dims("input_shape", input_shape)
    if len(shape) > 5:
        raise ValueError(f"pad: {len(shape)}-D input; at most 5 dimensions are supported (as in TFLM)")
    pads = [tuple(p) for p in paddings]
    if len(pads) != len(shape) or any(len(p) != 2 for p in pads):
        raise ValueError(f"pad: need one (before, after) pair per input dimension, got {paddings!r}")
    pads = [(checked_int("padding", b, 0), checked_int("padding", a, 0)) for b, a in pads]
    value = checked_zp("pad_value", pad_value)
    extra = 5 - len(shape)
    shape5 = (1,) * extra + shape
    pads5 = [(0, 0)] * extra + pads
    d = {f"in_d{k}": shape5[k] for k in range(5)}
    d.update({f"before{k}": pads5[k][0] for k in range(5)})
    d.update({f"after{k}": pads5[k][1] for k in range(5)})
    d["pad_value"] = value
    return d


def concat_params(*, input_shapes, axis) -> dict:
    """CONCATENATION.  TFLM (int8) requires every input to have exactly the output's scale and zero
    point (it copies bytes); it also limits inputs to 10 and ranks to 6, which is enforced here."""
    shapes = [checked_dims(f"input_shapes[{i}]", s, allow_zero=True) for i, s in enumerate(input_shapes)]
    if not shapes:
        raise ValueError("concat: no inputs")
    if len(shapes) > 10:
        raise ValueError(f"concat: {len(shapes)} inputs; TFLM supports at most 10")
    rank = len(shapes[0])
    if rank > 6:
        raise ValueError(f"concat: {rank}-D inputs; TFLM supports at most 6 dimensions")
    ax = checked_int("axis", axis)
    ax = ax + rank if ax < 0 else ax
    if not 0 <= ax < rank:
        raise ValueError(f"concat: axis {axis} out of range for {rank}-D inputs")
    for i, s in enumerate(shapes):
        if len(s) != rank or any(s[k] != shapes[0][k] for k in range(rank) if k != ax):
            raise ValueError(f"concat: input {i} shape {s} does not match {shapes[0]} outside axis {ax}")
    outer = math.prod(shapes[0][:ax])
    inner = math.prod(shapes[0][ax + 1 :])
    chunk = np.array([s[ax] * inner for s in shapes], dtype=np.int32)
    return dict(num_inputs=len(shapes), outer=outer, chunk=chunk)


def pad_s16_params(*, input_shape, paddings, pad_value) -> dict:
    """PAD / PADV2 on int16: pad_params with an int16 pad value."""
    return dict(
        pad_params(input_shape=input_shape, paddings=paddings, pad_value=0),
        pad_value=checked_zp16("pad_value", pad_value),
    )
