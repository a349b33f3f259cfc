"""Reference kernels of PAD and CONCATENATION (int8 and int16) (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np


def pad_s8(p, x) -> np.ndarray:
    shape = tuple(p[f"in_d{k}"] for k in range(5))
    pads = [(p[f"before{k}"], p[f"after{k}"]) for k in range(5)]
    return np.pad(np.asarray(x).reshape(shape), pads, constant_values=p["pad_value"]).astype(np.int8)


def concat_s8(p, inputs, axis: int) -> np.ndarray:
    """inputs: int8 arrays with their real shapes, joined along axis."""
    assert len(inputs) == p["num_inputs"]
    return np.concatenate([np.asarray(a) for a in inputs], axis=axis).astype(np.int8)


def pad_s16(p, x) -> np.ndarray:
    shape = tuple(p[f"in_d{k}"] for k in range(5))
    pads = [(p[f"before{k}"], p[f"after{k}"]) for k in range(5)]
    return np.pad(np.asarray(x, np.int16).reshape(shape), pads, constant_values=p["pad_value"])
