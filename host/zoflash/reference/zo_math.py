"""NumPy mirror of the static ZO-step maths (firmware_templates/runtime/zo_math/).

Bit-identical to the C on IEEE-754 float32: every float operation here is a float32 NumPy
operation (no float64 intermediates), and every sum that C does in a loop (over directions, over
classes) is done here as a Python loop in the same order, vectorised only across independent
coordinates or samples.  The rules are documented in docs/zo-math.md.
"""

from __future__ import annotations

import numpy as np

from zoflash.spec import training as spec

F32 = np.float32
U32 = np.uint32

HASH_IV = 0x243F6A88
STREAM_TENSOR_MAX = 0x0FFFFFFF
STREAM_ROUNDING = 0x40000000
STREAM_SAMPLE = 0x80000000
STREAM_USER = 0xC0000000
LANE_SHIFT = 28
DENSITY_LOG2_MAX = 15
BLOCK = 32

# Bound of trainable int8 weights for eps = 1 LSB; in general w_max = 127 - eps.
W_MAX = 126

ROUND_SPLIT16, ROUND_NEAREST, ROUND_STOCHASTIC = (spec.ROUNDING_IDS[m] for m in ("split16", "nearest", "stochastic"))

_M1 = U32(0x7FEB352D)
_M2 = U32(0x846CA68B)


def _hexf(s: str) -> np.float32:
    """A float32 constant given exactly (hex literals are exact float32 values)."""
    v = F32(float.fromhex(s))
    assert float(v) == float.fromhex(s), s
    return v


# ------------------------------------------------------------------------------------ hash


def _u32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64).astype(U32) if not isinstance(x, np.ndarray) else x.astype(U32, copy=False)


def mix32(x) -> np.ndarray:
    """lowbias32 (xorshift-multiply), elementwise on uint32."""
    x = np.array(x, dtype=U32, copy=True, ndmin=1)
    with np.errstate(over="ignore"):
        x ^= x >> U32(16)
        x *= _M1
        x ^= x >> U32(15)
        x *= _M2
        x ^= x >> U32(16)
    return x


def hash_key(seed, step, direction, stream) -> np.ndarray:
    k = mix32(U32(HASH_IV) ^ _u32(seed))
    k = mix32(k ^ _u32(step))
    k = mix32(k ^ _u32(direction))
    return mix32(k ^ _u32(stream))


def hash_ctr(key, counter) -> np.ndarray:
    key = _u32(key)
    return mix32(mix32(key ^ _u32(counter)) ^ key)


def zo_hash(seed, step, direction, stream, counter):
    """zo_hash over broadcast uint32 arguments (returns uint32 array, or int if all scalars)."""
    out = hash_ctr(hash_key(seed, step, direction, stream), counter)
    shape = np.broadcast_shapes(*(np.shape(a) for a in (seed, step, direction, stream, counter)))
    out = out.reshape(shape) if shape else out
    return int(out[0]) if not shape else out


# ------------------------------------------------------------------------------ directions


def direction_words(seed, step, direction, stream, nblocks: int, density_log2: int = 0):
    """(sign words, nonzero masks) of blocks 0..nblocks-1 as uint32 arrays."""
    if not 0 <= density_log2 <= DENSITY_LOG2_MAX:
        raise ValueError(f"density_log2 must be in 0..{DENSITY_LOG2_MAX}")
    key = hash_key(seed, step, direction, stream)[0]
    blocks = np.arange(nblocks, dtype=U32)
    sign = hash_ctr(key, blocks)
    anyw = np.zeros(nblocks, dtype=U32)
    for j in range(1, density_log2 + 1):
        anyw |= hash_ctr(key, blocks | U32(j << LANE_SHIFT))
    return sign, ~anyw


def _bits(words: np.ndarray, n: int) -> np.ndarray:
    """Bit k % 32 of words[k // 32] for k < n, as uint8."""
    b = (words[:, None] >> np.arange(32, dtype=U32)[None, :]) & U32(1)
    return b.reshape(-1)[:n].astype(np.uint8)


def directions(seed, step, direction, stream, n: int, density_log2: int = 0) -> np.ndarray:
    """z in {-1, 0, +1} (int8) of one direction of an n-element tensor."""
    nb = (n + BLOCK - 1) // BLOCK
    sign, nonzero = direction_words(seed, step, direction, stream, nb, density_log2)
    z = 1 - 2 * _bits(sign, n).astype(np.int8)
    return (z * _bits(nonzero, n).astype(np.int8)).astype(np.int8)


def sample_index(seed, step, j, n: int):
    """Index of sample j of step t's minibatch among n (uniform with replacement)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    r = np.asarray(zo_hash(seed, step, 0, STREAM_SAMPLE, j), dtype=np.uint64)
    idx = (r * np.uint64(n)) >> np.uint64(32)
    return int(idx) if idx.ndim == 0 else idx.astype(np.int64)


def u01_from_hash(h) -> np.ndarray:
    return (np.asarray(h, dtype=U32) >> U32(8)).astype(F32) * F32(1.0 / 16777216.0)


# ---------------------------------------------------------------------------- rounding

_ROUND_LIMIT = F32(1073741824.0)


def _prep(x) -> np.ndarray:
    x = np.array(x, dtype=F32, copy=True, ndmin=1)
    x[np.isnan(x)] = F32(0.0)
    return np.clip(x, -_ROUND_LIMIT, _ROUND_LIMIT)


def round_f32(x) -> np.ndarray:
    """float32 -> int32, nearest, ties away from zero (NaN -> 0, clamp to +-2^30)."""
    x = _prep(x)
    t = np.trunc(x)
    f = x - t  # exact
    ti = t.astype(np.int32)
    ti = ti + (f >= F32(0.5)).astype(np.int32) - (f <= F32(-0.5)).astype(np.int32)
    return ti


def floor_f32(x) -> np.ndarray:
    """float32 -> int32, floor (NaN -> 0, clamp to +-2^30)."""
    x = _prep(x)
    t = np.trunc(x)
    return t.astype(np.int32) - (t > x).astype(np.int32)


# ---------------------------------------------------------------------------- perturbation


def perturb_s8(w: np.ndarray, sign: int, seed, step, direction, stream, density_log2: int = 0) -> np.ndarray:
    """w + sign * z as int8 (wrapping store, like the C)."""
    w = np.asarray(w, dtype=np.int8)
    z = directions(seed, step, direction, stream, w.size, density_log2).astype(np.int64)
    return ((w.astype(np.int64) + int(sign) * z) & 0xFF).astype(np.uint8).view(np.int8)


def perturb_s32(
    b: np.ndarray, sign: int, eps_b: np.ndarray, seed, step, direction, stream, density_log2: int = 0
) -> np.ndarray:
    """b + sign * eps_b * z modulo 2^32 (as int32)."""
    b = np.asarray(b, dtype=np.int32)
    z = directions(seed, step, direction, stream, b.size, density_log2).astype(np.int64)
    d = int(sign) * np.asarray(eps_b, dtype=np.int64) * z
    return ((b.astype(np.int64) + d) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def perturb_s64(
    b: np.ndarray, sign: int, eps_b: np.ndarray, seed, step, direction, stream, density_log2: int = 0
) -> np.ndarray:
    """b + sign * eps_b * z modulo 2^64 (as int64): the int64 biases of 16x8 layers."""
    b = np.asarray(b, dtype=np.int64)
    z = directions(seed, step, direction, stream, b.size, density_log2).astype(np.int64)
    d = (int(sign) * np.asarray(eps_b, dtype=np.int64) * z).astype(np.uint64)
    return (b.astype(np.uint64) + d).view(np.int64)


def perturb_bias(b: np.ndarray, sign: int, eps_b: np.ndarray, seed, step, direction, stream, density_log2: int = 0):
    """perturb_s32 or perturb_s64, by the bias's type."""
    f = perturb_s64 if np.asarray(b).dtype == np.int64 else perturb_s32
    return f(b, sign, eps_b, seed, step, direction, stream, density_log2)


# ---------------------------------------------------------------------------- update


def accumulate_u(n: int, c, seed, step, stream, density_log2: int = 0) -> np.ndarray:
    """u_k = sum_i c[i] z_ik in float32, sequential in i (zero z skipped).  Overflow to inf
    and inf - inf = NaN are allowed (the rounding maps them to +-2^30 and 0)."""
    c = np.asarray(c, dtype=F32)
    u = np.zeros(n, dtype=F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(c.size):
            z = directions(seed, step, i, stream, n, density_log2)
            ci = c[i]
            added = u + np.where(z < 0, -ci, ci).astype(F32)
            u = np.where(z != 0, added, u)
    return u


def update_s8(w, residual, c, seed, step, stream, density_log2: int = 0, mode="split16", w_max: int = W_MAX):
    """One update of an int8 tensor; returns (w', residual') (residual' is the input copy unless
    mode is split16).  w' is clamped to [-w_max, w_max], w_max = 127 - eps in [1, 126]."""
    w_max = int(w_max)
    if not 1 <= w_max <= W_MAX:
        raise ValueError(f"w_max must be in 1..{W_MAX}")
    mode = spec.ROUNDING_IDS.get(mode, mode)
    w = np.asarray(w, dtype=np.int8)
    n = w.size
    r = np.zeros(n, np.int8) if residual is None else np.asarray(residual, dtype=np.int8)
    u = accumulate_u(n, c, seed, step, stream, density_log2)
    wi = w.astype(np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_s8(wi, r, u, n, seed, step, stream, mode, w_max)


def _round_s8(wi, r, u, n, seed, step, stream, mode, w_max):
    if mode == ROUND_SPLIT16:
        m = 256 * wi + r.astype(np.int64) - round_f32(F32(256.0) * u).astype(np.int64)
        wn = np.clip((m + 128) // 256, -w_max, w_max)
        rn = np.clip(m - 256 * wn, -128, 127).astype(np.int8)
    elif mode == ROUND_NEAREST:
        wn = np.clip(wi - round_f32(u), -w_max, w_max)
        rn = r.copy()
    elif mode == ROUND_STOCHASTIC:
        h = zo_hash(seed, step, 0, int(stream) | STREAM_ROUNDING, np.arange(n, dtype=U32))
        xi = u01_from_hash(np.asarray(h).reshape(n))
        wn = np.clip(wi - floor_f32(u + xi), -w_max, w_max)
        rn = r.copy()
    else:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return wn.astype(np.int8), rn


def _bias_steps(n: int, c, eps_b, max_step: int, seed, step, stream, density_log2: int) -> np.ndarray:
    """clamp(round(eps_b[k] * u_k), -max_step, max_step) as int64: the bias updates' step."""
    u = accumulate_u(n, c, seed, step, stream, density_log2)
    e = np.asarray(eps_b, dtype=np.int32).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        eu = e * u
    return np.clip(round_f32(eu).astype(np.int64), -max_step, max_step)


def update_s32(b, c, eps_b, max_step: int, seed, step, stream, density_log2: int = 0):
    b = np.asarray(b, dtype=np.int32)
    st = _bias_steps(b.size, c, eps_b, max_step, seed, step, stream, density_log2)
    nb = np.clip(b.astype(np.int64) - st, -(2**31), 2**31 - 1)
    return nb.astype(np.int32)


def update_s64(b, c, eps_b, max_step: int, seed, step, stream, density_log2: int = 0):
    """update_s32 for the int64 biases of 16x8 layers, saturating at the int64 range."""
    b = np.asarray(b, dtype=np.int64)
    st = _bias_steps(b.size, c, eps_b, max_step, seed, step, stream, density_log2)
    hi, lo = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    up = (st < 0) & (b > hi + np.minimum(st, 0))
    down = (st > 0) & (b < lo + np.maximum(st, 0))
    with np.errstate(over="ignore"):
        nb = b - np.where(up | down, 0, st)
    return np.where(up, hi, np.where(down, lo, nb)).astype(np.int64)


def update_bias(b, c, eps_b, max_step: int, seed, step, stream, density_log2: int = 0):
    """update_s32 or update_s64, by the bias's type."""
    f = update_s64 if np.asarray(b).dtype == np.int64 else update_s32
    return f(b, c, eps_b, max_step, seed, step, stream, density_log2)


# ------------------------------------------------------------------------ coefficients

_F16_SAT_BITS = 0x477FF000  # 65520.0f: from here round-to-nearest would give infinity
_F16_MIN_NORMAL_BITS = 0x38800000  # 2^-14


def f16_from_f32(x) -> np.ndarray:
    """float32 -> IEEE binary16 bits (uint16), round to nearest, ties to even, subnormals kept;
    beyond 65504 it saturates (infinities too), NaN gives +0.  Integer arithmetic on the bits."""
    u = np.array(x, dtype=F32, copy=True, ndmin=1).view(U32).astype(np.int64)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    e = a >> 23
    normal = a >= _F16_MIN_NORMAL_BITS
    shift = np.where(normal, 13, np.clip(126 - e, 14, 40))
    m = np.where(normal, a, (a & 0x007FFFFF) | 0x00800000)
    h = np.where(normal, (a >> 13) - (112 << 10), m >> shift)
    rem = m & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    h = h + ((rem > half) | ((rem == half) & ((h & 1) != 0))).astype(np.int64)
    h = np.where(~normal & (e < 102), 0, h)
    h = np.where(a >= _F16_SAT_BITS, 0x7BFF, h)
    out = np.where(a > 0x7F800000, 0, sign | h)
    return out.astype(np.uint16)


def f32_from_f16(h) -> np.ndarray:
    """binary16 bits -> float32 (exact)."""
    h = np.array(h, dtype=np.uint16, ndmin=1).astype(U32)
    sign = (h & U32(0x8000)) << U32(16)
    e = (h >> U32(10)) & U32(0x1F)
    m = h & U32(0x3FF)
    sub = (m.astype(F32) * F32(2.0**-24)).astype(F32)
    sub = np.where(sign != 0, -sub, sub).astype(F32)
    bits = np.where(
        e == 31, sign | U32(0x7F800000) | (m << U32(13)), sign | ((e + U32(112)) << U32(23)) | (m << U32(13))
    )
    normal = bits.astype(U32).view(F32)
    return np.where(e == 0, sub, normal).astype(F32)


def coefficients(lr, delta, q: int) -> tuple[np.ndarray, np.ndarray]:
    """The applied update coefficients of a step: c_i = (lr * delta_i) / q in float32, as binary16
    (the bits the device logs) and back (the float32 values it applies)."""
    c = np.array([F32(F32(F32(lr) * F32(d)) / F32(q)) for d in delta], dtype=F32)
    bits = f16_from_f32(c) if c.size else np.zeros(0, np.uint16)
    return bits, f32_from_f16(bits) if c.size else np.zeros(0, F32)


# ------------------------------------------------------------------------ exp, log, loss

EXP_LO = F32(-87.0)
EXP_HI = F32(88.0)
LOG2E = _hexf("0x1.715476p+0")
LN2_HI = _hexf("0x1.63p-1")
LN2_LO = _hexf("-0x1.bd0106p-13")
_EXP_P = [
    _hexf(h) for h in ("0x1.a0d2cep-13", "0x1.6e879cp-10", "0x1.11121p-7", "0x1.555382p-5", "0x1.555554p-3", "0x1p-1")
]
SQRTHF = _hexf("0x1.6a09e6p-1")
_LOG_P = [
    _hexf(h)
    for h in (
        "0x1.204376p-4",
        "-0x1.d7a37p-4",
        "0x1.de4a34p-4",
        "-0x1.fcba9ep-4",
        "0x1.23d37ep-3",
        "-0x1.555cap-3",
        "0x1.999d58p-3",
        "-0x1.fffff8p-3",
        "0x1.555554p-2",
    )
]
FLT_MIN = np.array([0x00800000], dtype=U32).view(F32)[0]
FLT_MAX = np.array([0x7F7FFFFF], dtype=U32).view(F32)[0]


def expf(x) -> np.ndarray:
    x = np.array(x, dtype=F32, copy=True, ndmin=1)
    x = np.where(x >= EXP_LO, x, EXP_LO)  # NaN -> EXP_LO, like !(x >= lo)
    x = np.where(x > EXP_HI, EXP_HI, x).astype(F32)
    n = round_f32(x * LOG2E)
    fn = n.astype(F32)
    r = x - fn * LN2_HI
    r = r - fn * LN2_LO
    r2 = r * r
    p = np.full_like(r, _EXP_P[0])
    for coef in _EXP_P[1:]:
        p = p * r + coef
    p = p * r2 + r
    p = p + F32(1.0)
    scale = ((n + 127).astype(U32) << U32(23)).view(F32)
    return (p * scale).astype(F32)


def logf(x) -> np.ndarray:
    x = np.array(x, dtype=F32, copy=True, ndmin=1)
    x = np.where(x >= FLT_MIN, x, FLT_MIN)
    x = np.where(x > FLT_MAX, FLT_MAX, x).astype(F32)
    bits = x.view(U32)
    e = (bits >> U32(23)).astype(np.int32) - 126
    f = ((bits & U32(0x007FFFFF)) | U32(0x3F000000)).view(F32)
    small = f < SQRTHF
    e = e - small.astype(np.int32)
    g = np.where(small, (f + f) - F32(1.0), f - F32(1.0)).astype(F32)
    z = g * g
    y = np.full_like(g, _LOG_P[0])
    for coef in _LOG_P[1:]:
        y = y * g + coef
    y = y * g
    y = y * z
    fe = e.astype(F32)
    y = y + fe * LN2_LO
    y = y + F32(-0.5) * z
    r = g + y
    r = r + fe * LN2_HI
    return r.astype(F32)


def cross_entropy(logits, scale, zero_point, label):
    """Per-sample loss (float32).  logits: int8 [classes] or [samples, classes]; scale,
    zero_point, label: scalars or per-sample arrays.  The class sum is sequential in j."""
    logits = _quantized(logits)
    single = logits.ndim == 1
    q = logits.reshape(-1, logits.shape[-1])
    ns, classes = q.shape
    scale = np.broadcast_to(np.asarray(scale, dtype=F32), (ns,))
    zp = np.broadcast_to(np.asarray(zero_point, dtype=np.int32), (ns,))
    label = np.broadcast_to(np.asarray(label, dtype=np.int64), (ns,))
    x = scale[:, None] * (q.astype(np.int32) - zp[:, None]).astype(F32)
    m = x.max(axis=1)  # exact, order does not matter
    s = np.zeros(ns, dtype=F32)
    for j in range(classes):
        s = s + expf(x[:, j] - m)
    xl = x[np.arange(ns), label]
    loss = logf(s) - (xl - m)
    return loss[0] if single else loss.astype(F32)


def _quantized(x) -> np.ndarray:
    """An output as the losses read it: int16 (16x8 models) kept, anything else as int8."""
    x = np.asarray(x)
    return x if x.dtype == np.int16 else x.astype(np.int8)


def sigmoid_bce(logit, scale, zero_point, label):
    """Per-sample binary cross-entropy of sigmoid(x) (float32); logit: int8 scalar or [samples];
    scale, zero_point, label (0/1): scalars or per-sample arrays.
    ((x > 0 ? x : 0) - (label ? x : 0)) + logf(1 + expf(-|x|))."""
    q = _quantized(logit)
    scale, zp = np.asarray(scale, F32), np.asarray(zero_point, np.int32)
    x = (scale * (q.astype(np.int32) - zp).astype(F32)).astype(F32)
    tail = logf((F32(1.0) + expf(-np.abs(x))).astype(F32))
    loss = (np.where(x > 0, x, F32(0)) - np.where(np.asarray(label) != 0, x, F32(0))).astype(F32) + tail
    return loss.astype(F32)


def mse(out, scale, zero_point, target):
    """Per-sample mean squared error (float32) of the dequantized int8 outputs [samples, n]
    against float32 targets [samples, n]; the sum over j is sequential."""
    q = _quantized(out)
    q = q.reshape(-1, q.shape[-1])
    t = np.asarray(target, dtype=F32).reshape(q.shape)
    x = (F32(scale) * (q.astype(np.int32) - np.int32(zero_point)).astype(F32)).astype(F32)
    s = np.zeros(q.shape[0], dtype=F32)
    for j in range(q.shape[1]):
        d = (x[:, j] - t[:, j]).astype(F32)
        s = (s + (d * d).astype(F32)).astype(F32)
    return (s / F32(q.shape[1])).astype(F32)


def argmax(x) -> int | np.ndarray:
    """First maximum (along the last axis)."""
    return np.argmax(np.asarray(x), axis=-1)
