"""NumPy reference implementations of the int8 kernels (an independent oracle for the C code).

Each function takes the params dict built by zoflash.kernels and numpy arrays, and computes the
TFLite Micro reference arithmetic directly from its definition: int32 accumulation of
filter * (input - zero point), skipping taps outside the image, then
MultiplyByQuantizedMultiplier (saturating rounding doubling high multiply, then rounding
divide by a power of two).  Nothing here is shared with the C kernels except the params dict;
clarity wins over speed, but everything is vectorised over the output.
"""

from __future__ import annotations

import numpy as np

_I32_MIN = -(1 << 31)
_I32_MAX = (1 << 31) - 1


# ------------------------------------------------------------------------ fixed-point arithmetic


def wrap_int32(x) -> np.ndarray:
    """Two's-complement wrap of int64 values to int32 (C int32 arithmetic)."""
    x = np.asarray(x, dtype=np.int64)
    return (((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)).astype(np.int64)


def srdhm(a, b) -> np.ndarray:
    """Saturating rounding doubling high multiply of int32 values (round half away, truncation)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    num = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    q = np.where(num >= 0, num >> 31, -((-num) >> 31))  # divide by 2^31 toward zero
    return np.where((a == _I32_MIN) & (b == _I32_MIN), _I32_MAX, q).astype(np.int64)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """x / 2^exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def mbqm(x, multiplier, shift) -> np.ndarray:
    """MultiplyByQuantizedMultiplier for int32 x (wrapping left shift, as compiled C++ does)."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(srdhm(wrap_int32(x << left), multiplier), right)


def _requant(acc, p, mult, shift):
    out = mbqm(acc, mult, shift) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def _sat_shl(x, e: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT with a positive exponent."""
    x = np.asarray(x, dtype=np.int64)
    threshold = (1 << (31 - e)) - 1
    return np.where(x > threshold, _I32_MAX, np.where(x < -threshold, _I32_MIN, x << e))


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a):
    a = np.asarray(a, dtype=np.int64)
    constant_term = 1895147668  # exp(-1/8) in Q0.31
    constant_1_over_3 = 715827883
    x = wrap_int32(a + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    inner = wrap_int32(srdhm(wrap_int32(x4_over_4 + x3), constant_1_over_3) + x2)
    x4_over_24_plus_x3_over_6_plus_x2_over_2 = rounding_divide_by_pot(inner, 1)
    return wrap_int32(constant_term + srdhm(constant_term, wrap_int32(x + x4_over_24_plus_x3_over_6_plus_x2_over_2)))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values for FixedPoint<int32, integer_bits>; result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    a_mod = wrap_int32((a & (one_quarter - 1)) - one_quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(_sat_shl(a_mod, integer_bits))
    remainder = wrap_int32(a_mod - a)
    for exponent, multiplier in (
        (-2, 1672461947),
        (-1, 1302514674),
        (0, 790015084),
        (1, 290630308),
        (2, 39332535),
        (3, 720401),
        (4, 242),
    ):
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, _I32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp Newton-Raphson 1/(1+x) for Q0.31 x in [0, 1); result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    s = a + _I32_MAX
    half_denominator = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # round half away
    x = wrap_int32(1515870810 + srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 * d, Q2.29
    for _ in range(3):
        one_minus = wrap_int32((1 << 29) - srdhm(half_denominator, x))
        x = wrap_int32(x + _sat_shl(srdhm(x, one_minus), 2))
    return _sat_shl(x, 1)


def logistic_q4(a) -> np.ndarray:
    """gemmlowp logistic() of a Q4.27 value; result Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    abs_a = np.where(a > 0, a, -a)
    pos = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-abs_a, 4))
    neg = wrap_int32(_I32_MAX - pos)
    return np.where(a == 0, 1 << 30, np.where(a > 0, pos, neg))


# ------------------------------------------------------------------------------- convolutions


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
    return _requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


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
    return _requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


def fully_connected_s8(p, x, w, b=None) -> np.ndarray:
    """x: rows * depth int8; w: (units, depth) -> (rows, units) int8."""
    x = np.asarray(x).reshape(p["rows"], p["depth"]).astype(np.int64) - p["input_zp"]
    w = np.asarray(w).reshape(p["units"], p["depth"]).astype(np.int64)
    acc = wrap_int32(x @ w.T)
    if b is not None:
        acc = wrap_int32(acc + np.asarray(b, dtype=np.int64))
    return _requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


# ---------------------------------------------------------------------------------- pooling


def _pool_taps(p, x, fill):
    q = dict(p, dilation_h=1, dilation_w=1, input_c=p["channels"])
    h, w = p["input_h"], p["input_w"]
    oy = np.arange(p["output_h"])[:, None]
    ox = np.arange(p["output_w"])[None, :]
    for ky in range(p["filter_h"]):
        iy = oy * q["stride_h"] - q["pad_h"] + ky
        for kx in range(p["filter_w"]):
            ix = ox * q["stride_w"] - q["pad_w"] + kx
            inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            view = x[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1), :]
            yield inside, np.where(inside[..., None], view, fill)


def avg_pool_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    total = np.zeros((p["output_h"], p["output_w"], p["channels"]), dtype=np.int64)
    count = np.zeros((p["output_h"], p["output_w"], 1), dtype=np.int64)
    for inside, view in _pool_taps(p, x, 0):
        total += view
        count += inside[..., None]
    half = count // 2
    # C division truncates toward zero.
    pos = (total + half) // count
    neg = -((-(total - half)) // count)
    avg = np.where(total > 0, pos, neg)
    return np.clip(avg, p["act_min"], p["act_max"]).astype(np.int8)


def max_pool_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["input_h"], p["input_w"], p["channels"]).astype(np.int64)
    best = np.full((p["output_h"], p["output_w"], p["channels"]), -128, dtype=np.int64)
    for _, view in _pool_taps(p, x, -128):
        best = np.maximum(best, view)
    return np.clip(best, p["act_min"], p["act_max"]).astype(np.int8)


# ----------------------------------------------------------------------------- elementwise


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


def requantize_s8(p, x) -> np.ndarray:
    x = np.asarray(x).astype(np.int64) - p["input_zp"]
    out = mbqm(x, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def dequantize_s8(p, x) -> np.ndarray:
    """TFLM's formula literally: (float)((double)scale * (q - zp))."""
    x = np.asarray(x).astype(np.int64) - p["zero_point"]
    return (np.float64(p["scale"]) * x.astype(np.float64)).astype(np.float32)


def logistic_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    radius = p["input_range_radius"]
    inside = (v > -radius) & (v < radius)
    q4 = mbqm(np.where(inside, v, 0), p["input_multiplier"], p["input_left_shift"])
    y = rounding_divide_by_pot(logistic_q4(q4), 23) - 128
    y = np.clip(y, -128, 127)
    y = np.where(v <= -radius, -128, np.where(v >= radius, 127, y))
    return y.astype(np.int8)


def softmax_s8(p, x) -> np.ndarray:
    x = np.asarray(x).reshape(p["outer"], p["depth"]).astype(np.int64)
    diff = x - x.max(axis=1, keepdims=True)
    used = diff >= p["diff_min"]
    scaled = mbqm(np.where(used, diff, 0), p["input_multiplier"], p["input_left_shift"])
    e = exp_on_negative_values(scaled, 5)
    sum_of_exps = wrap_int32(np.where(used, rounding_divide_by_pot(e, 12), 0).sum(axis=1, keepdims=True))
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        s = int(sum_of_exps[r, 0]) & 0xFFFFFFFF
        clz = 32 - s.bit_length()
        num_bits_over_unit = 12 - clz
        shifted_sum_minus_one = int(wrap_int32(((s << clz) & 0xFFFFFFFF) - (1 << 31)))
        scale = one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
        exponent = num_bits_over_unit + 31 - 8
        y = rounding_divide_by_pot(srdhm(scale, e[r]), exponent) - 128
        out[r] = np.where(used[r], np.clip(y, -128, 127), -128)
    return out.astype(np.int8)


# ---------------------------------------------------------------------------- data movement


def pad_s8(p, x) -> np.ndarray:
    shape = tuple(p[f"in_d{k}"] for k in range(5))
    pads = [(p[f"before{k}"], p[f"after{k}"]) for k in range(5)]
    return np.pad(np.asarray(x).reshape(shape), pads, constant_values=p["pad_value"]).astype(np.int8)


def concat_s8(p, inputs, axis: int) -> np.ndarray:
    """inputs: int8 arrays with their real shapes, joined along axis."""
    assert len(inputs) == p["num_inputs"]
    return np.concatenate([np.asarray(a) for a in inputs], axis=axis).astype(np.int8)


def mean_s8(p, x, axes) -> np.ndarray:
    """x: int8 array with its real shape; axes: the reduced axes (kept dims dropped)."""
    x = np.asarray(x).astype(np.int64)
    total = wrap_int32(x.sum(axis=tuple(axes)))
    count = int(np.prod([x.shape[a] for a in axes]))
    shifted = wrap_int32(total - p["input_zp"] * count)
    out = mbqm(shifted, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


# ---- begin QUANTIZE at the model's edges (uint8 <-> int8, float32 -> int8) ----


def requantize_u8_s8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def requantize_s8_u8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, 0, 255).astype(np.uint8)


def quantize_f32_s8(p, x) -> np.ndarray:
    """TFLM's AffineQuantize: round(x / scale) in float32, halves away from zero, plus the zero
    point, saturated; NaN gives the zero point (TFLM's cast of it is undefined)."""
    with np.errstate(over="ignore"):  # overflows to infinity, which saturates
        v = (np.asarray(x, np.float32) / np.float32(p["scale"])).astype(np.float64)  # the float32 quotient
    v = np.nan_to_num(v, nan=0.0, posinf=1024.0, neginf=-1024.0)
    a = np.abs(v)
    r = np.copysign(np.floor(a + 0.5), v)  # in float64, exactly round half away for a float32 a
    return np.clip(np.clip(r, -1024, 1024) + p["zero_point"], -128, 127).astype(np.int8)


# ---- end QUANTIZE at the model's edges ----

# ==================================================================== data movement (movement ops)
# The kernels as the executor runs them (from their params), and the ops as NumPy states them
# (from the model's parameters), which the tests hold the C kernels and the builders to.


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


# ==================================================================== end of data movement

# ------------------------------------------- element-wise and activation ops --------------------


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


def relu_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    out = mbqm(v, p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, p["act_min"], p["act_max"]).astype(np.int8)


def relu6_s8(p, x) -> np.ndarray:
    return np.clip(np.asarray(x).astype(np.int64), p["lower"], p["upper"]).astype(np.int8)


def leaky_relu_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    identity = mbqm(v, p["identity_multiplier"], p["identity_shift"])
    alpha = np.sign(p["alpha_multiplier"]) * mbqm(v, abs(p["alpha_multiplier"]), p["alpha_shift"])
    return np.clip(np.where(v >= 0, identity, alpha) + p["output_zp"], -128, 127).astype(np.int8)


def tanh_q4(a) -> np.ndarray:
    """gemmlowp tanh() of a Q4.27 value; result Q0.31.  With e = exp(-2|a|) (the raw -|a| read as
    Q5.26), tanh|a| = (1 - e) / (1 + e) = 2 / (1 + e) - 1: Newton-Raphson for 1 / ((1 + e) / 2) in Q2.29,
    minus one, back to Q0.31."""
    a = np.asarray(a, dtype=np.int64)
    e = exp_on_negative_values(-np.abs(a), 5)
    s = e + _I32_MAX
    d = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # (1 + e) / 2, rounded half away
    x = wrap_int32(1515870810 + srdhm(d, -1010580540))
    for _ in range(3):
        x = wrap_int32(x + _sat_shl(srdhm(x, wrap_int32((1 << 29) - srdhm(d, x))), 2))
    t = _sat_shl(wrap_int32(x - (1 << 29)), 2)
    return np.where(a == 0, 0, np.where(a < 0, -t, t))


def tanh_s8(p, x) -> np.ndarray:
    v = np.asarray(x).astype(np.int64) - p["input_zp"]
    radius = p["input_range_radius"]
    q4 = mbqm(np.clip(v, -radius, radius), p["input_multiplier"], p["input_left_shift"])
    y = np.clip(rounding_divide_by_pot(tanh_q4(q4), 24), -128, 127)
    return np.where(v <= -radius, -128, np.where(v >= radius, 127, y)).astype(np.int8)


def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul for int16 (the -32768^2 case never occurs here)."""
    ab = np.asarray(a, dtype=np.int64) * b
    num = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    return np.where(num >= 0, num >> 15, -((-num) >> 15))


def hard_swish_s8(p, x) -> np.ndarray:
    """x * relu6(x + 3) / 6 in TFLM's int16 fixed point: the input at scale in/128, a 'reluish'
    factor in [0, 1] (Q0.15, -3..3 mapped onto it with saturation) times the input on the output scale."""
    hires = (np.asarray(x).astype(np.int64) - p["input_zp"]) * 128
    on_output = _srdhm16(hires, p["output_multiplier"])
    e = p["reluish_shift"]
    r = hires
    if e > 0:  # all but one bit of the left shift before the multiply, the last one after
        r = np.clip(r << (e - 1), -32768, 32767)
    r = _srdhm16(r, p["reluish_multiplier"])
    if e > 0:
        r = np.clip(r * 2, -32768, 32767)
    elif e < 0:
        r = rounding_divide_by_pot(r, -e)
    factor = (r + 32768) >> 1
    prod = factor * on_output
    prod = np.where(prod >= 0, prod >> 15, -((-prod) >> 15))  # doubling high mul, truncated
    out = rounding_divide_by_pot(prod, -p["output_shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


def _inv_sqrt(v: int) -> tuple[int, int]:
    """TFLM GetInvSqrtQuantizedMultiplierExp(v, -1) for v >= 2: (multiplier, left shift)."""
    shift, pairs = 11, 0
    while v << (2 * pairs) < (1 << 27):  # v * 4^pairs in [2^27, 2^29)
        pairs += 1
    shift -= pairs
    v <<= 2 * pairs
    half = int(rounding_divide_by_pot(v >> 1, 1))
    y = 1 << 28  # 1.0 in Q3.28
    for _ in range(5):
        y3 = int(_sat_shl(srdhm(srdhm(y, y), y), 6))
        y = int(_sat_shl(wrap_int32(srdhm(3 << 27, y) - srdhm(half, y3)), 3))
    y = int(srdhm(y, 1518500250))
    if shift < 0:
        y, shift = int(wrap_int32(y << -shift)), 0
    return y, -shift


def rsqrt_s8(p, x) -> np.ndarray:
    """1 / sqrt(x) per input value; the zero point (and, unlike TFLM, which stops, anything below) gives 127."""
    table = np.full(256, 127, dtype=np.int64)
    for q in range(-128, 128):
        v = q - p["input_zp"]
        if v > 0:
            m, s = _inv_sqrt(v) if v > 1 else (_I32_MAX, 0)
            data = mbqm(1, m, s + 20)
            table[q + 128] = np.clip(mbqm(data, p["multiplier"], p["shift"] - 20) + p["output_zp"], -128, 127)
    return table[np.asarray(x).astype(np.int64) + 128].astype(np.int8)


# ---------------------------------------------------- end of element-wise and activation ops ----------

# ==== reductions, resizing, transposed convolution ============================================


def reduce_max_s8(p, x) -> np.ndarray:
    """x: int8 with any shape of p's size -> the maxima over the dimensions whose output stride is 0."""
    dims = tuple(int(d) for d in p["dims"])
    reduced = tuple(k for k, s in enumerate(p["out_stride"]) if s == 0)
    return np.asarray(x).reshape(dims).max(axis=reduced).astype(np.int8)


def arg_max_s8(p, x) -> np.ndarray:
    """x: int8 [outer, axis, inner] -> int32 [outer, inner], the first maximum's index."""
    x = np.asarray(x).reshape(p["outer"], p["axis"], p["inner"])
    return x.argmax(axis=1).astype(np.int32)


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
    return _requant(acc, p, np.asarray(p["multiplier"], np.int64), np.asarray(p["shift"], np.int64))


# ==== end of reductions, resizing, transposed convolution =====================================


# ==== sequence ops: SVDF (stateful models) ===================================================


def svdf(p, x, wf, wt, b, state) -> np.ndarray:
    """SVDF on one input [batches * input_size]: updates `state` (int8 or int16, flat
    [batches, filters, memory]) in place, as TFLM does, and returns the int8 output."""
    nb, n_in, nf, mem = p["batches"], p["input_size"], p["num_filters"], p["memory_size"]
    dtype = state.dtype
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    s = state.astype(np.int64)
    s[:-1] = s[1:]  # the whole buffer moves one element left
    s = s.reshape(nb, nf, mem)
    xs = np.asarray(x, np.int64).reshape(nb, n_in) - p["input_zp"]
    feat = xs @ np.asarray(wf, np.int64).reshape(nf, n_in).T  # [batches, filters]
    feat = np.clip(mbqm(feat, p["multiplier_1"], p["shift_1"]), lo, hi) + p["state_zp"]
    s[:, :, -1] = feat.astype(dtype).astype(np.int64)  # narrowed as C does: wraps, no saturation
    state[:] = s.reshape(-1).astype(dtype)
    per_filter = ((s - p["state_zp"]) * np.asarray(wt, np.int64).reshape(nf, mem)).sum(axis=2)
    acc = per_filter.reshape(nb, p["num_units"], p["rank"]).sum(axis=2)
    if b is not None:
        acc = acc + np.asarray(b, np.int64).reshape(1, -1)
    y = mbqm(wrap_int32(acc), p["multiplier_2"], p["shift_2"]) + p["output_zp"]
    return np.clip(y, -128, 127).astype(np.int8).reshape(-1)


def requantize_s16_s8(p, x) -> np.ndarray:
    out = mbqm(np.asarray(x).astype(np.int64) - p["input_zp"], p["multiplier"], p["shift"]) + p["output_zp"]
    return np.clip(out, -128, 127).astype(np.int8)


# ==== end of sequence ops ====================================================================


# ==== CAST ==================================================================================

_CAST_DTYPES = (np.int8, np.int16, np.int32, np.float32)  # by the params' element type codes


def cast(p, x) -> np.ndarray:
    """C's conversion of each element: NumPy's astype wraps a narrowing integer cast to its low
    bits and rounds an integer to the nearest float32, as C does on two's-complement targets."""
    src, dst = _CAST_DTYPES[p["input_type"]], _CAST_DTYPES[p["output_type"]]
    return np.asarray(x, dtype=src).reshape(-1).astype(dst)


# ==== end of CAST ===========================================================================
