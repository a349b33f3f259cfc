"""NumPy reference of the int16-activation kernels (16x8 quantization), read from TFLM's reference
kernels independently of the C in zo_kernels_int16.c; each takes the kernel's params dict."""

from __future__ import annotations

import numpy as np

from zoflash.reference.kernels import (
    _pool_taps,
    _shifted_taps,
    exp_on_negative_values,
    mbqm,
    one_over_one_plus_x_for_x_in_0_1,
    rounding_divide_by_pot,
    srdhm,
    wrap_int32,
)

_LIMITS = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def lut_lookup_s16(value, lut) -> np.ndarray:
    """TFLM LUTLookup(int16): entry value // 128 + 256, plus the slope to the next entry (an int16
    in TFLM) times value mod 128, rounded."""
    v = np.asarray(value, np.int64)
    lut = np.asarray(lut, np.int64)
    index = 256 + (v >> 7)
    slope = (lut[index + 1] - lut[index]).astype(np.int16).astype(np.int64)
    return (lut[index] + ((slope * (v & 0x7F) + 64) >> 7)).astype(np.int16)


def softmax_s8_s16(p, x) -> np.ndarray:
    """TFLM's Softmax<int8, int16>: the int8 arithmetic, exponent 31 - 16 + bits over unit."""
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= p["diff_min"]
    e = exp_on_negative_values(mbqm(np.where(used, diff, 0), p["input_multiplier"], p["input_left_shift"]), 5)
    out = np.empty_like(x)
    for r in range(len(x)):
        s = int(wrap_int32(np.where(used[r], rounding_divide_by_pot(e[r], 12), 0).sum())) & 0xFFFFFFFF
        clz = 32 - s.bit_length()
        scale = one_over_one_plus_x_for_x_in_0_1(int(wrap_int32(((s << clz) & 0xFFFFFFFF) - (1 << 31))))
        y = rounding_divide_by_pot(srdhm(scale, e[r]), 12 - clz + 31 - 16) - 32768
        out[r] = np.where(used[r], np.clip(y, -32768, 32767), -32768)
    return out.astype(np.int16)


def softmax_s16(p, x) -> np.ndarray:
    """TFLM's SoftmaxInt16: exp from the LUT of the difference to the row maximum mapped onto
    [-65535, 0] and recentred by 32767; 1 / sum from the reciprocal LUT of the normalised sum."""
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    scaled = mbqm(x - x.max(axis=1, keepdims=True), p["input_multiplier"], p["input_left_shift"])
    e = lut_lookup_s16(np.clip(scaled + 32767, -32768, 32767), p["exp_lut"]).astype(np.int64)
    out = np.empty_like(x)
    for r in range(len(x)):
        total = int(e[r].sum())
        headroom_plus_one = 32 - total.bit_length()
        shifted = ((total << (headroom_plus_one - 1)) + (1 << 13)) >> 14
        reciprocal = int(
            lut_lookup_s16(np.clip(shifted - (1 << 15) - (1 << 16), -32768, 32767), p["one_over_one_plus_x_lut"])
        )
        right = 31 - headroom_plus_one
        out[r] = np.clip((e[r] * reciprocal + (1 << (right - 1))) >> right, 0, 32767)
    return out.astype(np.int16)


def requantize(p, x, output_dtype: str) -> np.ndarray:
    """TFLM's Requantize between integer types."""
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, *_LIMITS[output_dtype]).astype(output_dtype)


def dequantize_s16(p, x) -> np.ndarray:
    """(float)((double)scale * (q - zp))."""
    return (np.float64(p["scale"]) * (np.asarray(x).astype(np.float64) - p["zero_point"])).astype(np.float32)


def quantize_f32_s16(p, x) -> np.ndarray:
    """TFLM's AffineQuantize to int16: round(x / scale) in float32, halves away from zero; NaN gives
    the zero point."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = (np.asarray(x, np.float32) / np.float32(p["scale"])).astype(np.float64)
    v = np.clip(np.nan_to_num(v, nan=0.0, posinf=65536.0, neginf=-65536.0), -65536, 65536)
    r = np.copysign(np.floor(np.abs(v) + 0.5), v)
    return np.clip(r + p["zero_point"], -32768, 32767).astype(np.int16)


# ------------------------------------------------------- CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED


def mbqm64(x, multiplier, shift) -> np.ndarray:
    """TFLM's MultiplyByQuantizedMultiplier(int64_t x, ...): the multiplier rounded to Q0.15, then
    one shift by 15 - shift, rounding half up; the int32 result wraps."""
    m = np.asarray(multiplier, np.int64)
    reduced = np.where(m < 0x7FFF0000, (m + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - np.asarray(shift, np.int64)
    return wrap_int32((np.asarray(x, np.int64) * reduced + (np.int64(1) << (total - 1))) >> total)


def _requant16(acc, p, b):
    if b is not None:
        acc = acc + np.asarray(b, np.int64)
    out = mbqm64(acc, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int16)


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
    return _requant16(acc, p, b)


def depthwise_conv2d_s16(p, x, w, b=None) -> np.ndarray:
    """x: (H, W, C) int16; w: (1, KH, KW, C * dm) int8; b: int64 or None -> (OH, OW, C * dm) int16."""
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["input_c"]).astype(np.int64)
    w = np.asarray(w).reshape(p["filter_h"], p["filter_w"], p["output_c"]).astype(np.int64)
    acc = np.zeros((p["output_h"], p["output_w"], p["output_c"]), np.int64)
    for ky, kx, view in _shifted_taps(x, p, p["filter_h"], p["filter_w"]):
        acc += np.repeat(view, p["depth_multiplier"], axis=-1) * w[ky, kx, :]
    return _requant16(acc, p, b)


def fully_connected_s16(p, x, w, b=None) -> np.ndarray:
    """x: rows * depth int16; w: (units, depth) int8; b: int64 or None -> (rows, units) int16."""
    x = np.asarray(x).reshape(p["rows"], p["depth"]).astype(np.int64)
    return _requant16(x @ np.asarray(w).reshape(p["units"], p["depth"]).astype(np.int64).T, p, b)


# ------------------------------------------------------------------ pooling, PAD, CONCATENATION


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


def pad_s16(p, x) -> np.ndarray:
    shape = tuple(p[f"in_d{k}"] for k in range(5))
    pads = [(p[f"before{k}"], p[f"after{k}"]) for k in range(5)]
    return np.pad(np.asarray(x, np.int16).reshape(shape), pads, constant_values=p["pad_value"])


# ---------------------------------------------------------------------------------- ADD, SUB, MUL


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


# ------------------------------------------------------------------ RELU, RELU6, LEAKY_RELU, MEAN


def relu_s16(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int16)


def relu6_s16(p, x) -> np.ndarray:
    return np.clip(np.asarray(x), p["lower"], p["upper"]).astype(np.int16)


def leaky_relu_s16(p, x) -> np.ndarray:
    """x >= 0 by the identity multiplier, below by alpha's (its magnitude, the sign applied after)."""
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    a = p["alpha_multiplier"]
    below = np.sign(a) * mbqm(v, abs(a), p["alpha_shift"])
    out = p["output_zp"] + np.where(v >= 0, mbqm(v, p["identity_multiplier"], p["identity_shift"]), below)
    return np.clip(out, -32768, 32767).astype(np.int16)


def mean_s16(p, x) -> np.ndarray:
    """x: [outer, reduce, inner]; the int32 sum less zp * count, rescaled with 1 / count folded in."""
    total = np.asarray(x).astype(np.int64).reshape(p["outer"], p["reduce"], p["inner"]).sum(axis=1)
    out = mbqm(wrap_int32(total - p["input_zp"] * p["reduce"]), p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -32768, 32767).astype(np.int16)


# ------------------------------------------------------------ TRANSPOSE, SLICE, STRIDED_SLICE, SPLIT


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


# ------------------------------------------------------- MAXIMUM, MINIMUM, RESIZE_NEAREST_NEIGHBOR


def maximum_s16(p, a, b) -> np.ndarray:
    return np.maximum(np.asarray(a), np.asarray(b)).astype(np.int16)


def minimum_s16(p, a, b) -> np.ndarray:
    return np.minimum(np.asarray(a), np.asarray(b)).astype(np.int16)


def resize_nearest_s16(p, x) -> np.ndarray:
    """(H, W, C) -> (OH, OW, C): rows p["y_index"], columns p["x_index"]."""
    x = np.asarray(x, np.int16).reshape(p["input_h"], p["input_w"], p["channels"])
    return x[np.asarray(p["y_index"])][:, np.asarray(p["x_index"])]
