"""Reference kernels of the binary element-wise family: ADD, SUB, MUL, SQUARED_DIFFERENCE,
MINIMUM, MAXIMUM, PRELU (int8; ADD, SUB, MUL, MINIMUM, MAXIMUM on int16) (conventions: reference/ops/fixedpoint.py)."""

from __future__ import annotations

import numpy as np

from zoflash.reference.ops.fixedpoint import mbqm, wrap_int32


def add_s8(p, a, b) -> np.ndarray:
    """a, b: int8 arrays with their own (broadcastable) shapes; result has the broadcast shape."""
    a = np.asarray(a).astype(np.int64) - p["input1_zp"]
    b = np.asarray(b).astype(np.int64) - p["input2_zp"]
    a, b = np.broadcast_arrays(a, b)
    sa = a * (1 << p["left_shift"])
    sb = b * (1 << p["left_shift"])
    ra = mbqm(sa, p["input1_multiplier"], p["input1_shift"])
    rb = mbqm(sb, p["input2_multiplier"], p["input2_shift"])
    out = mbqm(wrap_int32(ra + rb), p["output_multiplier"], p["output_shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def mul_s8(p, a, b) -> np.ndarray:
    a = np.asarray(a).astype(np.int64) - p["input1_zp"]
    b = np.asarray(b).astype(np.int64) - p["input2_zp"]
    out = mbqm(a * b, p["output_multiplier"], p["output_shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def _offsets(p, a, b, zp1="input1_zp", zp2="input2_zp"):
    a = np.asarray(a).astype(np.int64) - p[zp1]
    b = np.asarray(b).astype(np.int64) - p[zp2]
    return np.broadcast_arrays(a, b)


def _rescaled_pair(p, a, b):
    """ADD/SUB/SQUARED_DIFFERENCE: both offset inputs on a common scale, 2^left_shift finer."""
    a, b = _offsets(p, a, b)
    ra = mbqm(a << p["left_shift"], p["input1_multiplier"], p["input1_shift"])
    rb = mbqm(b << p["left_shift"], p["input2_multiplier"], p["input2_shift"])
    return ra, rb


def sub_s8(p, a, b) -> np.ndarray:
    ra, rb = _rescaled_pair(p, a, b)
    out = mbqm(ra - rb, p["output_multiplier"], p["output_shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def squared_difference_s8(p, a, b) -> np.ndarray:
    ra, rb = _rescaled_pair(p, a, b)
    out = mbqm((ra - rb) ** 2, p["output_multiplier"], p["output_shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def maximum_s8(p, a, b) -> np.ndarray:
    return np.maximum(np.asarray(a), np.asarray(b)).astype(np.int8)


def minimum_s8(p, a, b) -> np.ndarray:
    return np.minimum(np.asarray(a), np.asarray(b)).astype(np.int8)


def prelu_s8(p, x, alpha) -> np.ndarray:
    v, al = _offsets(p, x, alpha, "input_zp", "alpha_zp")
    pos = mbqm(np.maximum(v, 0), p["identity_multiplier"], p["identity_shift"])
    neg = mbqm(np.minimum(v, 0) * al, p["alpha_multiplier"], p["alpha_shift"])
    return np.clip(np.where(v >= 0, pos, neg) + p["output_zp"], -128, 127).astype(np.int8)


def _rescaled(p, a, b):
    """Both inputs shifted left by left_shift and brought to twice the larger scale (MBQM < 1)."""
    a = (np.asarray(a).astype(np.int64) - p["input1_zp"]) << p["left_shift"]
    b = (np.asarray(b).astype(np.int64) - p["input2_zp"]) << p["left_shift"]
    return (mbqm(a, p["input1_multiplier"], p["input1_shift"]), mbqm(b, p["input2_multiplier"], p["input2_shift"]))


def _out16(p, raw, multiplier, shift):
    return np.clip(mbqm(raw, multiplier, shift) + p["output_zp"], p["act_min"], p["act_max"]).astype(np.int16)


def add_s16(p, a, b) -> np.ndarray:
    r1, r2 = _rescaled(p, a, b)
    return _out16(p, wrap_int32(r1 + r2), p["output_multiplier"], p["output_shift"])


def sub_s16(p, a, b) -> np.ndarray:
    r1, r2 = _rescaled(p, a, b)
    return _out16(p, wrap_int32(r1 - r2), p["output_multiplier"], p["output_shift"])


def mul_s16(p, a, b) -> np.ndarray:
    prod = np.asarray(a).astype(np.int64) * np.asarray(b).astype(np.int64)
    return _out16(p, prod, p["output_multiplier"], p["output_shift"])


def maximum_s16(p, a, b) -> np.ndarray:
    return np.maximum(np.asarray(a), np.asarray(b)).astype(np.int16)


def minimum_s16(p, a, b) -> np.ndarray:
    return np.minimum(np.asarray(a), np.asarray(b)).astype(np.int16)
