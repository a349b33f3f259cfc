"""The static maths of a ZO step (zo_rng.c, zo_train_math.c) against the NumPy mirror
(zoflash.reference.zo_math): bit for bit on the host, and on the emulated Cortex-M55."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from ccompile import M55_FLAGS, RUNTIME_INCLUDES, STRICT_FLAGS, ZO_MATH, build_shared, compile_object

from zoflash.reference import zo_math as zm
from zoflash.spec import training as spec

F32 = np.float32
HERE = Path(__file__).resolve().parent
SOURCES = [ZO_MATH / "zo_rng.c", ZO_MATH / "zo_train_math.c"]

# Batch entry points so the comparisons do not pay one ctypes call per element.
SHIM = r"""
#include <stdint.h>
#include "zo_rng.h"
#include "zo_train_math.h"

void t_hash(const uint32_t *a, int32_t n, uint32_t *out) {
    for (int32_t k = 0; k < n; ++k)
        out[k] = zo_hash(a[5*k], a[5*k+1], a[5*k+2], a[5*k+3], a[5*k+4]);
}
void t_dirvals(const zo_dir_t *d, int32_t n, int8_t *out) {
    for (int32_t k = 0; k < n; ++k) out[k] = (int8_t)zo_direction_value(d, (uint32_t)k);
}
void t_sample(uint32_t seed, uint32_t step, int32_t m, uint32_t n, uint32_t *out) {
    for (int32_t j = 0; j < m; ++j) out[j] = zo_sample_index(seed, step, (uint32_t)j, n);
}
void t_expf(const float *x, int32_t n, float *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_expf(x[k]); }
void t_logf(const float *x, int32_t n, float *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_logf(x[k]); }
void t_round(const float *x, int32_t n, int32_t *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_round_f32(x[k]); }
void t_floor(const float *x, int32_t n, int32_t *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_floor_f32(x[k]); }
void t_f16(const float *x, int32_t n, uint16_t *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_f16_from_f32(x[k]); }
void t_f32(const uint16_t *h, int32_t n, float *out) { for (int32_t k = 0; k < n; ++k) out[k] = zo_f32_from_f16(h[k]); }
void t_ce(const int8_t *lg, int32_t ns, int32_t classes, const float *scale, const int32_t *zp,
          const int32_t *label, float *out, int32_t *amax) {
    for (int32_t k = 0; k < ns; ++k) {
        out[k] = zo_cross_entropy_s8(lg + k * classes, classes, scale[k], zp[k], label[k]);
        amax[k] = zo_argmax_s8(lg + k * classes, classes);
    }
}
"""


class ZoDir(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint32) for f in ("seed", "step", "direction", "stream", "density_log2")]


# zo_update_s8(w, residual, n, c, q, d0, mode, w_max)
UPDATE_S8_ARGTYPES = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_int32,
    ctypes.POINTER(ZoDir),
    ctypes.c_int,
    ctypes.c_int32,
]
# Weight bounds w_max = 127 - eps exercised against the mirror (eps = 1, 2, 7, 63, 126).
W_MAX_CASES = [126, 125, 120, 64, 1]


def _p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = build_shared(SOURCES, tmp_path_factory.mktemp("zo_math_c"), "zo_math", {"shim.c": SHIM})
    lib.zo_hash.restype = ctypes.c_uint32
    lib.zo_hash.argtypes = [ctypes.c_uint32] * 5
    lib.zo_cross_entropy_s8.restype = ctypes.c_float
    lib.zo_cross_entropy_s8.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_float, ctypes.c_int32, ctypes.c_int32]
    lib.zo_perturb_s8.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ZoDir)]
    lib.zo_perturb_s32.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.POINTER(ZoDir),
    ]
    lib.zo_perturb_s64.argtypes = lib.zo_perturb_s32.argtypes
    lib.zo_update_s8.argtypes = UPDATE_S8_ARGTYPES
    lib.zo_update_s32.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.POINTER(ZoDir),
    ]
    lib.zo_update_s64.argtypes = lib.zo_update_s32.argtypes
    lib.zo_argmax_s8.restype = lib.zo_argmax_s16.restype = ctypes.c_int32
    for name in ("zo_cross_entropy_s16", "zo_mse_s16", "zo_mse_s8"):
        getattr(lib, name).restype = ctypes.c_float
    lib.zo_cross_entropy_s16.argtypes = lib.zo_cross_entropy_s8.argtypes
    lib.zo_mse_s16.argtypes = lib.zo_mse_s8.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_int32,
        ctypes.c_void_p,
    ]
    lib.t_sample.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint32, ctypes.c_void_p]
    return lib


def c_hash(lib, args: np.ndarray) -> np.ndarray:
    args = np.ascontiguousarray(args, dtype=np.uint32)
    out = np.zeros(len(args), np.uint32)
    lib.t_hash(_p(args), len(args), _p(out))
    return out


def c_apply(lib, name: str, x: np.ndarray, out_dtype) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=F32)
    out = np.zeros(x.size, out_dtype)
    getattr(lib, name)(_p(x), x.size, _p(out))
    return out


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=F32).view(np.uint32)


def rand_u32(rng, shape) -> np.ndarray:
    return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)


# Known answers: accidental changes to the hash, the direction layout or the loss must show up.
KAT_HASH = [
    ((0, 0, 0, 0, 0), 0xB589F284),
    ((1, 2, 3, 4, 0), 0x484CA972),
    ((1, 2, 3, 4, 3), 0x4A0C2264),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), 0xFB4BEB6F),
    ((12345, 7, 63, 0x80000000, 15), 0xA7382592),
    ((42, 1000, 5, 0x40000002, 123456), 0xEF11796B),
]
KAT_DIR = (1, 2, 3, 4, 40)  # seed, step, direction, stream, n
KAT_DIR_DENSE = "+-++---+-++-+-+-++--++-++++-++-+++----+-"
KAT_DIR_QUARTER = ".........++-.-+-....+.....+......+....+."


# ---------------------------------------------------------------------------- pure Python


def test_known_answers_mirror():
    for args, want in KAT_HASH:
        assert zm.zo_hash(*args) == want, args
    z = zm.directions(*KAT_DIR, density_log2=0)
    assert "".join("+" if v > 0 else "-" for v in z) == KAT_DIR_DENSE
    z = zm.directions(*KAT_DIR, density_log2=2)
    assert "".join({1: "+", -1: "-", 0: "."}[int(v)] for v in z) == KAT_DIR_QUARTER


def test_hash_quality():
    """Bit balance and avalanche of every input word (a weak hash fails these)."""
    rng = np.random.default_rng(1)
    n = 20000
    args = rand_u32(rng, (5, n))
    h = zm.zo_hash(*args)
    ones = ((h[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 0.02), ones
    # sequential counters (how directions use it): balance too
    hs = zm.zo_hash(7, 3, 1, 0, np.arange(n, dtype=np.uint32))
    ones = ((hs[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
    assert np.all(np.abs(ones - 0.5) < 0.02)
    for word in range(5):
        for bit in (0, 7, 16, 31):
            a2 = args.copy()
            a2[word] ^= np.uint32(1 << bit)
            diff = zm.zo_hash(*args) ^ zm.zo_hash(*a2)
            flips = ((diff[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(axis=0)
            assert np.all(np.abs(flips - 0.5) < 0.03), (word, bit, flips)


def test_direction_statistics():
    n = 32 * 2000 + 17
    for dl2 in range(0, 5):
        z = zm.directions(11, 5, 2, 3, n, dl2).astype(np.float64)
        p = 2.0**-dl2
        nz = np.count_nonzero(z) / n
        assert abs(nz - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-12, (dl2, nz)
        assert abs(z.mean()) < 4 * np.sqrt(p / n), (dl2, z.mean())
        assert set(np.unique(z)) <= {-1.0, 0.0, 1.0}
    dense = zm.directions(11, 5, 2, 3, n, 0)
    sparse = zm.directions(11, 5, 2, 3, n, 3)
    assert np.all(sparse[sparse != 0] == dense[sparse != 0]), "sparse = dense masked"
    # different directions, steps, streams: uncorrelated
    others = [
        zm.directions(11, 5, 3, 3, n),
        zm.directions(11, 6, 2, 3, n),
        zm.directions(11, 5, 2, 4, n),
        zm.directions(12, 5, 2, 3, n),
    ]
    for o in others:
        corr = float(np.mean(dense.astype(np.float64) * o))
        assert abs(corr) < 4 / np.sqrt(n)


def test_sample_index_statistics():
    n = 10
    idx = zm.sample_index(3, np.arange(5000, dtype=np.uint32)[:, None], np.arange(16, dtype=np.uint32)[None, :], n)
    counts = np.bincount(idx.ravel(), minlength=n)
    expected = idx.size / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 40, counts  # 9 dof: p ~ 5e-6
    assert idx.min() >= 0 and idx.max() < n
    assert zm.sample_index(3, 0, 0, 1) == 0


def test_rounding_rules_mirror():
    x = F32(
        [
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999997,
            -0.49999997,
            0.0,
            -0.0,
            1e-45,
            8388607.5,
            1e10,
            -1e10,
            np.inf,
            -np.inf,
            np.nan,
        ]
    )
    assert zm.round_f32(x).tolist() == [
        1,
        -1,
        2,
        -2,
        3,
        -3,
        0,
        0,
        0,
        0,
        0,
        8388608,
        2**30,
        -(2**30),
        2**30,
        -(2**30),
        0,
    ]
    assert zm.floor_f32(x).tolist() == [
        0,
        -1,
        1,
        -2,
        2,
        -3,
        0,
        -1,
        0,
        0,
        0,
        8388607,
        2**30,
        -(2**30),
        2**30,
        -(2**30),
        0,
    ]


def test_split16_properties():
    rng = np.random.default_rng(5)
    n = 4000
    w = rng.integers(-126, 127, n).astype(np.int8)
    r = rng.integers(-128, 128, n).astype(np.int8)
    c = (rng.standard_normal(8) * 0.7).astype(F32)
    w2, r2 = zm.update_s8(w, r, c, 1, 2, 3, 0, "split16")
    u = zm.accumulate_u(n, c, 1, 2, 3, 0)
    m = 256 * w.astype(np.int64) + r - zm.round_f32(F32(256) * u)
    free = (m + 128) // 256 == np.clip((m + 128) // 256, -126, 126)
    assert np.all(256 * w2[free].astype(np.int64) + r2[free] == m[free]), "master value preserved"
    assert np.all(np.abs(w2) <= 126)
    # sub-LSB updates accumulate: 40 steps of -0.1 LSB (u = +0.1) move w by about -4
    w, r = np.zeros(64, np.int8), np.zeros(64, np.int8)
    for t in range(40):  # q = 1, c = 0.1: u_k = 0.1 * z_k, a walk of +-0.1 LSB steps
        w, r = zm.update_s8(w, r, F32([0.1]), 9, t, 1, 0, "split16")
    walk = np.zeros(64, np.float64)
    for t in range(40):
        walk -= 0.1 * zm.directions(9, t, 0, 1, 64)
    assert np.all(np.abs(w + r / 256.0 - walk) <= 0.5 / 256 * 40 + 1e-9)
    # nearest rounding stalls on the same sub-LSB updates
    wn = np.zeros(64, np.int8)
    for t in range(40):
        wn, _ = zm.update_s8(wn, None, F32([0.1]), 9, t, 1, 0, "nearest")
    assert np.all(wn == 0)


def _ulp_err(got32: np.ndarray, exact64: np.ndarray) -> np.ndarray:
    ulp = np.spacing(np.abs(exact64).astype(F32)).astype(np.float64)
    return np.abs(got32.astype(np.float64) - exact64) / ulp


def test_expf_logf_accuracy():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-87, 88, 200000), rng.uniform(-1, 1, 50000), [0.0, -87, 88]]).astype(F32)
    e = _ulp_err(zm.expf(x), np.exp(x.astype(np.float64)))
    assert e.max() <= 1.0, e.max()  # measured: 0.97 ulp
    assert zm.expf(F32(0))[0] == F32(1)
    # logf on the loss range [1, classes] and beyond, including just above 1
    y = np.concatenate(
        [rng.uniform(1, 1000, 200000), 1 + rng.uniform(0, 1e-3, 20000), np.exp(rng.uniform(-80, 80, 50000))]
    ).astype(F32)
    y = y[y != 1]
    e = _ulp_err(zm.logf(y), np.log(y.astype(np.float64)))
    assert e.max() <= 1.0, e.max()  # measured: 0.76 ulp
    assert zm.logf(F32(1))[0] == 0
    # clamps: never NaN, never inf, never subnormal
    special = F32([np.nan, np.inf, -np.inf, -1000, 1000, 0, -0.0, 1e-45])
    for v in (zm.expf(special), zm.logf(special)):
        assert np.all(np.isfinite(v))
    assert np.all(zm.expf(special) >= np.finfo(F32).tiny)


# ------------------------------------------------------------------------------- compiled


@pytest.mark.cc
def test_known_answers_c(lib):
    for args, want in KAT_HASH:
        got = lib.zo_hash(*args)
        assert got == want, args


@pytest.mark.cc
def test_hash_bit_identical(lib):
    rng = np.random.default_rng(3)
    args = rand_u32(rng, (50000, 5))
    args[:1000, :4] = rng.integers(0, 4, (1000, 4))  # small values too
    args[1000:2000, 4] = np.arange(1000)
    assert np.array_equal(c_hash(lib, args), zm.zo_hash(*args.T))


@pytest.mark.cc
@pytest.mark.parametrize("dl2", [0, 1, 2, 3, 4, 6])
def test_directions_bit_identical(lib, dl2):
    rng = np.random.default_rng(10 + dl2)
    for n in (1, 31, 32, 33, 100, 1000, 4099):
        seed, step, direction, stream = (int(v) for v in rand_u32(rng, 4))
        stream &= zm.STREAM_TENSOR_MAX
        want = zm.directions(seed, step, direction, stream, n, dl2)
        d = ZoDir(seed, step, direction, stream, dl2)
        # the perturbation loop itself: 0 + z
        w = np.zeros(n, np.int8)
        lib.zo_perturb_s8(_p(w), n, 1, ctypes.byref(d))
        assert np.array_equal(w, want), (n, dl2)
        vals = np.zeros(n, np.int8)
        lib.t_dirvals(ctypes.byref(d), n, _p(vals))
        assert np.array_equal(vals, want)


@pytest.mark.cc
def test_sample_index_bit_identical(lib):
    for seed, step, n in [(0, 0, 1), (1, 2, 10), (7, 99, 1797), (0xFFFFFFFF, 12345, 60000), (5, 5, 2**32 - 1)]:
        out = np.zeros(500, np.uint32)
        lib.t_sample(seed, step, 500, n, _p(out))
        want = zm.sample_index(seed, step, np.arange(500, dtype=np.uint32), n)
        assert np.array_equal(out.astype(np.int64), want)
        assert out.max() < n


@pytest.mark.cc
def test_rounding_bit_identical(lib):
    rng = np.random.default_rng(4)
    x = np.concatenate(
        [
            rng.uniform(-5, 5, 20000).astype(F32),
            rng.uniform(-3e9, 3e9, 2000).astype(F32),
            (np.arange(-2000, 2000) * 0.25).astype(F32),
            (np.arange(-100, 100) + 0.5).astype(F32),
            rand_u32(rng, 20000).view(F32),  # every kind of float, NaN and inf too
            F32([0.49999997, -0.49999997, 0.5, -0.5, 1e-45, -1e-45, np.inf, -np.inf, np.nan, 2**30, -(2**30)]),
        ]
    )
    assert np.array_equal(c_apply(lib, "t_round", x, np.int32), zm.round_f32(x))
    assert np.array_equal(c_apply(lib, "t_floor", x, np.int32), zm.floor_f32(x))


@pytest.mark.cc
def test_expf_logf_bit_identical(lib):
    rng = np.random.default_rng(6)
    x = np.concatenate(
        [
            rng.uniform(-100, 100, 50000).astype(F32),
            rng.uniform(-1, 1, 20000).astype(F32),
            rand_u32(rng, 20000).view(F32),
        ]
    )
    assert np.array_equal(bits(c_apply(lib, "t_expf", x, F32)), bits(zm.expf(x)))
    y = np.concatenate(
        [rng.uniform(0, 100, 50000).astype(F32), np.abs(rand_u32(rng, 20000).view(F32)), rand_u32(rng, 5000).view(F32)]
    )
    assert np.array_equal(bits(c_apply(lib, "t_logf", y, F32)), bits(zm.logf(y)))


@pytest.mark.cc
@pytest.mark.parametrize("dl2", [0, 2])
def test_perturb_roundtrip(lib, dl2):
    rng = np.random.default_rng(20 + dl2)
    for n in (5, 64, 777):
        w0 = rng.integers(-126, 127, n).astype(np.int8)
        b0 = rng.integers(-(2**31), 2**31, n).astype(np.int32)
        b0[:3] = [2**31 - 1, -(2**31), 2**31 - 2]  # wraps, and must still restore
        eps = rng.integers(1, 5000, n).astype(np.int32)
        seed, step, direction = (int(v) for v in rand_u32(rng, 3))
        d = ZoDir(seed, step, direction, 9, dl2)
        w, b = w0.copy(), b0.copy()
        ww, bb = w0, b0
        for pas, sign in enumerate((1, -2, 1)):
            lib.zo_perturb_s8(_p(w), n, sign, ctypes.byref(d))
            lib.zo_perturb_s32(_p(b), n, sign, _p(eps), ctypes.byref(d))
            ww = zm.perturb_s8(ww, sign, seed, step, direction, 9, dl2)
            bb = zm.perturb_s32(bb, sign, eps, seed, step, direction, 9, dl2)
            assert np.array_equal(w, ww) and np.array_equal(b, bb), sign
            if pas == 0:
                assert (
                    np.count_nonzero(w != w0) == np.count_nonzero(zm.directions(seed, step, direction, 9, n, dl2)) > 0
                )
        assert np.array_equal(w, w0) and np.array_equal(b, b0)


def _c_values(rng, q: int, kind: int | None = None) -> np.ndarray:
    kind = int(rng.integers(0, 8)) if kind is None else kind
    if kind >= 6:  # exact ties: 256*u (split16) or u (nearest) lands on k + 1/2
        c = (rng.integers(-8, 9, q) * (2.0**-9 if kind == 6 else 0.5)).astype(F32)
    else:
        with np.errstate(over="ignore"):  # 1e38 scale: some values overflow to inf on purpose
            c = (rng.standard_normal(q) * [1e-30, 1e-3, 0.3, 4.0, 1e3, 1e38][kind]).astype(F32)
    c[rng.random(q) < 0.1] = 0.0
    c[rng.random(q) < 0.05] = -0.0
    if q > 2:
        c[0] = F32(1e-40)  # subnormal
        c[1] = -c[2]  # cancellation
    if kind == 5 and q >= 8:
        c[3:8] = F32([3e38, 3e38, np.inf, -np.inf, -3e38])  # u overflows to inf; inf - inf = NaN
    return c


@pytest.mark.cc
@pytest.mark.parametrize("w_max", W_MAX_CASES + ["random"])
@pytest.mark.parametrize("mode", ["split16", "nearest", "stochastic"])
def test_update_s8_bit_identical(lib, mode, w_max):
    """C == mirror for every rounding mode and weight bound ("random": a fresh w_max in [1, 126]
    per case).  Input weights span [-126, 126], so a smaller bound also clamps weights in."""
    rng = np.random.default_rng(
        [{"split16": 30, "nearest": 31, "stochastic": 32}[mode], 0 if w_max == "random" else w_max]
    )
    cases = [(q, dl2) for q in (1, 2, 3, 6, 7, 8, 16, 64, 100) for dl2 in (0, 1, 4)]  # q <= 6 dense: table path
    for q, dl2 in cases:
        wm = int(rng.integers(1, 127)) if w_max == "random" else w_max
        n = int(rng.integers(1, 600))
        w0 = rng.integers(-126, 127, n).astype(np.int8)
        w0[:4] = [126, -126, wm, -wm][: min(n, 4)]
        r0 = rng.integers(-128, 128, n).astype(np.int8)
        c = _c_values(rng, q)
        seed, step = (int(v) for v in rand_u32(rng, 2))
        stream = int(rng.integers(0, 1000))
        d = ZoDir(seed, step, 12345, stream, dl2)  # direction is ignored by the update
        w, r = w0.copy(), r0.copy()
        lib.zo_update_s8(_p(w), _p(r), n, _p(c), q, ctypes.byref(d), spec.ROUNDING_IDS[mode], wm)
        ww, rr = zm.update_s8(w0, r0, c, seed, step, stream, dl2, mode, w_max=wm)
        assert np.array_equal(w, ww), (q, dl2, n, wm)
        assert np.array_equal(r, rr), (q, dl2, n, wm)
        assert np.all(np.abs(w.astype(int)) <= wm)
        if mode != "split16":
            assert np.array_equal(r, r0)


@pytest.mark.cc
@pytest.mark.parametrize("mode", ["split16", "nearest", "stochastic"])
def test_update_s8_stays_in_bound(lib, mode):
    """Property: whatever the input (any int8 weight and residual, updates up to overflow), the
    updated weights lie in [-w_max, w_max], so the +eps, -2eps, +eps perturbations with
    eps = 127 - w_max never wrap and restore exactly; split16 keeps the master value 256w + r
    wherever w' was not clamped."""
    rng = np.random.default_rng([33, spec.ROUNDING_IDS[mode]])
    for trial in range(60):
        eps = int(rng.choice([1, 2, 7, 63, 126])) if trial % 2 else int(rng.integers(1, 127))
        w_max = 127 - eps
        n = int(rng.integers(1, 300))
        q = int(rng.choice([1, 4, 16]))
        w0 = rng.integers(-128, 128, n).astype(np.int8)
        r0 = rng.integers(-128, 128, n).astype(np.int8)
        c = _c_values(rng, q)
        seed, step = (int(v) for v in rand_u32(rng, 2))
        d = ZoDir(seed, step, 0, 5, trial % 3)
        w, r = w0.copy(), r0.copy()
        lib.zo_update_s8(_p(w), _p(r), n, _p(c), q, ctypes.byref(d), spec.ROUNDING_IDS[mode], w_max)
        ww, rr = zm.update_s8(w0, r0, c, seed, step, 5, trial % 3, mode, w_max=w_max)
        assert np.array_equal(w, ww) and np.array_equal(r, rr), (trial, w_max)
        assert -w_max <= int(w.min()) and int(w.max()) <= w_max, (trial, w_max)
        if mode == "split16":
            u = zm.accumulate_u(n, c, seed, step, 5, trial % 3)
            with np.errstate(over="ignore"):
                m = 256 * w0.astype(np.int64) + r0 - zm.round_f32(F32(256) * u)
            free = np.abs((m + 128) // 256) <= w_max
            assert np.all(256 * w[free].astype(np.int64) + r[free] == m[free]), (trial, w_max)
        z = zm.directions(seed, step, 1, 5, n, trial % 3).astype(np.int64)
        wp = w.copy()
        pd = ZoDir(seed, step, 1, 5, trial % 3)
        for total, sign in ((eps, eps), (-eps, -2 * eps), (0, eps)):
            lib.zo_perturb_s8(_p(wp), n, sign, ctypes.byref(pd))
            assert np.array_equal(wp.astype(np.int64), w.astype(np.int64) + total * z), (trial, sign)
        assert np.array_equal(wp, w)


def test_update_s8_rejects_bad_bound():
    for w_max in (0, -1, 127, 128):
        with pytest.raises(ValueError):
            zm.update_s8(np.zeros(4, np.int8), None, F32([0.1]), 1, 2, 3, w_max=w_max)
    # the default is the eps = 1 bound
    w = np.full(40, 126, np.int8)
    w2, _ = zm.update_s8(w, None, F32([-5.0]), 1, 2, 3, mode="nearest")
    assert np.array_equal(w2, zm.update_s8(w, None, F32([-5.0]), 1, 2, 3, mode="nearest", w_max=126)[0])
    assert w2.max() == 126


@pytest.mark.cc
def test_update_s8_moves_against_u(lib):
    """With c = +1 for one direction, w -= z (the update descends along +delta)."""
    n = 300
    w = np.zeros(n, np.int8)
    r = np.zeros(n, np.int8)
    d = ZoDir(1, 2, 0, 3, 0)
    lib.zo_update_s8(_p(w), _p(r), n, _p(F32([1.0])), 1, ctypes.byref(d), 0, zm.W_MAX)
    assert np.array_equal(w, -zm.directions(1, 2, 0, 3, n))
    assert not r.any()


@pytest.mark.cc
def test_update_s32_bit_identical(lib):
    rng = np.random.default_rng(40)
    for trial in range(40):
        q = int(rng.choice([1, 4, 16, 64]))
        n = int(rng.integers(2, 300))
        dl2 = int(rng.integers(0, 3))
        b0 = rng.integers(-(2**31), 2**31, n).astype(np.int32)
        b0[:2] = [2**31 - 5, -(2**31) + 5]
        eps = rng.integers(1, 100000, n).astype(np.int32)
        c = _c_values(rng, q)
        max_step = int(rng.choice([0, 1, 50, 10**6, 2**31 - 1]))
        seed, step = (int(v) for v in rand_u32(rng, 2))
        d = ZoDir(seed, step, 0, 77, dl2)
        b = b0.copy()
        lib.zo_update_s32(_p(b), n, _p(c), q, _p(eps), max_step, ctypes.byref(d))
        want = zm.update_s32(b0, c, eps, max_step, seed, step, 77, dl2)
        assert np.array_equal(b, want), trial
        assert np.all(np.abs(b.astype(np.int64) - b0) <= max_step)


@pytest.mark.cc
@pytest.mark.parametrize("dl2", [0, 2])
def test_int64_bias_perturb_roundtrip_and_update_bit_identical(lib, dl2):
    """The int64 biases of 16x8 layers: the perturbation wraps modulo 2^64 and restores exactly, the
    update saturates at the int64 range; C and the mirror agree bit for bit."""
    rng = np.random.default_rng(45 + dl2)
    big = np.iinfo(np.int64)
    for trial in range(30):
        n = int(rng.integers(6, 300))
        q = int(rng.choice([1, 4, 16]))
        b0 = rng.integers(-(2**40), 2**40, n).astype(np.int64)
        b0[:4] = [big.max, big.min, big.max - 3, big.min + 3]  # wrap in the perturbation, saturate in the update
        eps = rng.integers(1, 100000, n).astype(np.int32)
        seed, step, direction = (int(v) for v in rand_u32(rng, 3))
        d = ZoDir(seed, step, direction, 21, dl2)
        b, bb = b0.copy(), b0
        for sign in (3, -6, 3):
            lib.zo_perturb_s64(_p(b), n, sign, _p(eps), ctypes.byref(d))
            bb = zm.perturb_s64(bb, sign, eps, seed, step, direction, 21, dl2)
            assert np.array_equal(b, bb), (trial, sign)
        assert np.array_equal(b, b0)
        c = _c_values(rng, q)
        max_step = int(rng.choice([0, 1, 50, 10**6, 2**31 - 1]))
        d = ZoDir(seed, step, 0, 21, dl2)
        lib.zo_update_s64(_p(b), n, _p(c), q, _p(eps), max_step, ctypes.byref(d))
        want = zm.update_s64(b0, c, eps, max_step, seed, step, 21, dl2)
        assert np.array_equal(b, want), trial
        moved = np.abs(b.astype(object) - b0.astype(object))
        assert all(m <= max_step for m in moved)
        # away from the extremes both widths take the same steps
        mid = rng.integers(-(2**30), 2**30, n)
        assert np.array_equal(
            zm.update_s64(mid.astype(np.int64), c, eps, max_step, seed, step, 21, dl2) - mid,
            zm.update_s32(mid.astype(np.int32), c, eps, max_step, seed, step, 21, dl2).astype(np.int64) - mid,
        )


@pytest.mark.cc
@pytest.mark.parametrize("classes", [2, 10, 100])
def test_int16_losses_bit_identical(lib, classes):
    """The losses over int16 outputs (16x8 models): C, the mirror, and the int8 path on int8 values."""
    rng = np.random.default_rng(60 + classes)
    for k in range(200):
        lg = rng.integers(-32768, 32768, classes).astype(np.int16)
        if k % 10 == 0:
            lg[: classes // 2] = 32767  # saturated ties
        scale, zp, label = F32(np.exp(rng.uniform(np.log(1e-5), np.log(0.1)))), 0, int(rng.integers(0, classes))
        target = rng.normal(0, 50, classes).astype(F32)
        ce = lib.zo_cross_entropy_s16(_p(lg), classes, float(scale), zp, label)
        assert bits(ce) == bits(zm.cross_entropy(lg, scale, zp, label))
        se = lib.zo_mse_s16(_p(lg), classes, float(scale), zp, _p(target))
        assert bits(se) == bits(zm.mse(lg[None], scale, zp, target[None])[0])
        assert lib.zo_argmax_s16(_p(lg), classes) == zm.argmax(lg) == int(np.argmax(lg))
        small = rng.integers(-128, 128, classes).astype(np.int8)
        wide = small.astype(np.int16)
        assert bits(lib.zo_cross_entropy_s16(_p(wide), classes, float(scale), 3, label)) == bits(
            lib.zo_cross_entropy_s8(_p(small), classes, float(scale), 3, label)
        )
        assert bits(lib.zo_mse_s16(_p(wide), classes, float(scale), 3, _p(target))) == bits(
            lib.zo_mse_s8(_p(small), classes, float(scale), 3, _p(target))
        )


def _ce_cases(rng, ns: int, classes: int):
    lg = rng.integers(-128, 128, (ns, classes)).astype(np.int8)
    lg[: ns // 10] = rng.integers(-128, -120, (ns // 10, classes))  # saturated logits, ties
    scale = np.exp(rng.uniform(np.log(1e-3), np.log(2.0), ns)).astype(F32)
    scale[:5] = [2.0**-4, 1.0, 0.5, 1e-6, 3.0]
    zp = rng.integers(-128, 128, ns).astype(np.int32)
    label = rng.integers(0, classes, ns).astype(np.int32)
    return lg, scale, zp, label


@pytest.mark.cc
@pytest.mark.parametrize("classes", [2, 3, 10, 17, 100])
def test_cross_entropy_bit_identical(lib, classes):
    rng = np.random.default_rng(50 + classes)
    ns = 3000
    lg, scale, zp, label = _ce_cases(rng, ns, classes)
    out = np.zeros(ns, F32)
    amax = np.zeros(ns, np.int32)
    lib.t_ce(_p(lg), ns, classes, _p(scale), _p(zp), _p(label), _p(out), _p(amax))
    want = zm.cross_entropy(lg, scale, zp, label)
    assert np.array_equal(bits(out), bits(want))
    assert np.array_equal(amax, zm.argmax(lg))
    assert np.array_equal(amax, np.argmax(lg, axis=1))
    # one direct call through the real entry point
    k = 7
    one = lib.zo_cross_entropy_s8(_p(np.ascontiguousarray(lg[k])), classes, float(scale[k]), int(zp[k]), int(label[k]))
    assert bits(one) == bits(want[k])
    # float64 reference on the same dequantized float32 logits
    x = scale[:, None].astype(np.float64) * (lg.astype(np.int64) - zp[:, None]).astype(np.float64)
    x = x.astype(F32).astype(np.float64)
    mx = x.max(axis=1)
    ref = np.log(np.exp(x - mx[:, None]).sum(axis=1)) - (x[np.arange(ns), label] - mx)
    # exp underflows only beyond the clamp at -87 (< 1e-37 relative to the max term)
    err = np.abs(out.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1.0)
    assert err.max() < 1e-6, err.max()
    assert np.all(np.isfinite(out)) and np.all(out >= 0)


@pytest.mark.cc
@pytest.mark.parametrize("opt", [["-O0"], ["-Os"], ["-O3", "-march=native"]])
def test_other_optimisation_levels_bit_identical(tmp_path_factory, opt):
    """Bit-identity must not depend on the optimisation level or the host CPU's FMA units."""
    flags = [f for f in STRICT_FLAGS if f != "-O2"] + opt
    other = build_shared(SOURCES, tmp_path_factory.mktemp("zo_math_opt"), "zo_math_opt", {"shim.c": SHIM}, flags=flags)
    other.zo_update_s8.argtypes = UPDATE_S8_ARGTYPES
    rng = np.random.default_rng(60)
    x = rng.uniform(-90, 90, 20000).astype(F32)
    assert np.array_equal(bits(c_apply(other, "t_expf", x, F32)), bits(zm.expf(x)))
    assert np.array_equal(bits(c_apply(other, "t_logf", np.abs(x), F32)), bits(zm.logf(np.abs(x))))
    lg, scale, zp, label = _ce_cases(rng, 2000, 10)
    out, amax = np.zeros(2000, F32), np.zeros(2000, np.int32)
    other.t_ce(_p(lg), 2000, 10, _p(scale), _p(zp), _p(label), _p(out), _p(amax))
    assert np.array_equal(bits(out), bits(zm.cross_entropy(lg, scale, zp, label)))
    for mode, w_max in (("split16", 126), ("stochastic", 126), ("split16", 100), ("nearest", 120)):
        n, q = 1000, 16
        w0 = rng.integers(-126, 127, n).astype(np.int8)
        r0 = rng.integers(-128, 128, n).astype(np.int8)
        c = _c_values(rng, q)
        w, r = w0.copy(), r0.copy()
        other.zo_update_s8(
            _p(w), _p(r), n, _p(c), q, ctypes.byref(ZoDir(3, 4, 0, 5, 1)), spec.ROUNDING_IDS[mode], w_max
        )
        ww, rr = zm.update_s8(w0, r0, c, 3, 4, 5, 1, mode, w_max=w_max)
        assert np.array_equal(w, ww) and np.array_equal(r, rr), (mode, w_max)


# ------------------------------------------------------------------------------ cross / qemu


@pytest.mark.cross
def test_cross_compiles_for_m55(tmp_path):
    for src in SOURCES:
        res = compile_object("arm-none-eabi-gcc", src, STRICT_FLAGS + M55_FLAGS)
        assert res.returncode == 0, res.stderr
    # no libm (or anything else) behind our back: only memset/memcpy may be referenced
    nm = shutil.which("arm-none-eabi-nm")
    if nm:
        for src in SOURCES:
            obj = tmp_path / (src.stem + ".o")
            res = subprocess.run(
                ["arm-none-eabi-gcc", *STRICT_FLAGS, *M55_FLAGS, *RUNTIME_INCLUDES, "-c", str(src), "-o", str(obj)],
                capture_output=True,
                text=True,
            )
            assert res.returncode == 0, res.stderr
            out = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True)
            undefined = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
            assert undefined <= {"memset", "memcpy"}, undefined


# ---- binary16 coefficients (docs/zo-math.md "Coefficients as binary16") ----------------------------


def f16_cases(rng) -> np.ndarray:
    """float32 values around every binary16 boundary: random bit patterns, the normal range's and
    the subnormal range's exact halves and ties, the smallest values, overflow, infinities, NaN."""
    halves = np.arange(0x7C00, dtype=np.uint32).astype(np.uint16)
    exact = zm.f32_from_f16(halves).astype(np.float64)
    nxt = np.append(exact[1:], 65520.0)
    ties = ((exact + nxt) / 2).astype(F32)  # exact in float32: the midpoints of binary16 neighbours
    near = np.concatenate([ties, np.nextafter(ties, F32(0)), np.nextafter(ties, F32(np.inf))]).astype(F32)
    special = F32([0.0, 2.0**-25, 2.0**-26, 2.0**-24, 3 * 2.0**-25, 2.0**-14, 65504, 65519.996, 65520, 1e30])
    special = np.concatenate([special, -special, F32([np.inf, -np.inf, np.nan, 1e-45, -1e-45])]).astype(F32)
    rnd = rand_u32(rng, 4000).view(F32)
    return np.concatenate([near[:: max(1, len(near) // 6000)], special, rnd, exact.astype(F32)[::7]]).astype(F32)


def test_f16_mirror_rules():
    """The mirror is IEEE round-to-nearest-even (NumPy's float16) inside the range, saturates
    beyond it and maps NaN to +0; every binary16 value converts back exactly and round-trips."""
    x = f16_cases(np.random.default_rng(5))
    got = zm.f16_from_f32(x)
    inside = np.isfinite(x) & (np.abs(x) < F32(65520))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[inside], x[inside].astype(np.float16).view(np.uint16))
    assert set(got[np.isinf(x) | (np.abs(x) >= F32(65520))].tolist()) == {0x7BFF, 0xFBFF}
    assert (got[np.isnan(x)] == 0).all()
    assert zm.f16_from_f32(F32(2.0**-25))[0] == 0 and zm.f16_from_f32(F32(3 * 2.0**-25))[0] == 2  # ties to even
    every = np.arange(0x7C00, dtype=np.uint32).astype(np.uint16)
    back = zm.f32_from_f16(every)
    np.testing.assert_array_equal(back, every.view(np.float16).astype(F32))
    np.testing.assert_array_equal(zm.f16_from_f32(back), every)
    np.testing.assert_array_equal(zm.f16_from_f32(-back), every | np.uint16(0x8000))


def test_f16_bit_identical(lib):
    x = np.ascontiguousarray(f16_cases(np.random.default_rng(6)))
    out = np.zeros(x.size, np.uint16)
    lib.t_f16(_p(x), x.size, _p(out))
    np.testing.assert_array_equal(out, zm.f16_from_f32(x))
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    back = np.zeros(every.size, F32)
    lib.t_f32(_p(every), every.size, _p(back))
    np.testing.assert_array_equal(bits(back), bits(zm.f32_from_f16(every)))


def _fnv(words) -> int:
    h = 2166136261
    for v in np.asarray(words, dtype=np.int64).ravel().tolist():
        h = ((h ^ (v & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    return h


def _c_array(ctype: str, name: str, values, per_line: int = 16) -> str:
    vals = [str(int(v)) for v in np.asarray(values).ravel()]
    lines = [", ".join(vals[i : i + per_line]) for i in range(0, len(vals), per_line)]
    return f"static const {ctype} {name}[] = {{\n  " + ",\n  ".join(lines) + "\n};\n"


def _m55_inputs():
    """Inputs (deterministic) and the section hashes the mirror expects."""
    rng = np.random.default_rng(2024)
    expected = {}
    # hash + sampler
    hargs = rand_u32(rng, (1000, 5))
    hargs[:100, 4] = np.arange(100)
    expected["hash"] = _fnv(zm.zo_hash(*hargs.T))
    smp = [zm.sample_index(int(a[0]), int(a[1]), int(a[4]), 1 + (int(a[3]) & 0xFFFF)) for a in hargs]
    expected["sample"] = _fnv(smp)
    # exp / log / round / floor
    ex = np.concatenate([rng.uniform(-100, 100, 1500), rng.uniform(-1, 1, 500)]).astype(F32)
    lx = np.concatenate([rng.uniform(1, 200, 1500), np.abs(rand_u32(rng, 500).view(F32))]).astype(F32)
    ex[:4] = [0.0, -87.5, 0.5, -2.5]
    words = np.stack(
        [bits(zm.expf(ex)), bits(zm.logf(lx)), zm.round_f32(ex).view(np.uint32), zm.floor_f32(ex).view(np.uint32)],
        axis=1,
    )
    expected["explog"] = _fnv(words.astype(np.int64))
    # cross-entropy + argmax, mixed class counts
    ce = []
    for _ in range(1500):
        classes = int(rng.integers(2, 20))
        lg, scale, zp, label = _ce_cases(rng, 10, classes)
        ce.append((lg[int(rng.integers(0, 10))], scale[9], zp[9], label[9]))
    losses = [zm.cross_entropy(l, s, z, y) for l, s, z, y in ce]
    expected["ce"] = _fnv(bits(F32(losses)))
    expected["argmax"] = _fnv([zm.argmax(l) for l, *_ in ce])
    # the other losses on the same logits (their own generator: the inputs above stay as they were)
    offsets = np.cumsum([0] + [len(l) for l, *_ in ce])[:-1]
    mse_t = np.random.default_rng(2025).normal(0, 5, int(sum(len(l) for l, *_ in ce))).astype(F32)
    expected["bce"] = _fnv(bits(F32([zm.sigmoid_bce(l[0], s, z, y & 1) for l, s, z, y in ce])))
    expected["mse"] = _fnv(
        bits(F32([zm.mse(l[None], s, z, mse_t[o : o + len(l)])[0] for (l, s, z, _), o in zip(ce, offsets)]))
    )
    # perturb + update configurations
    n_max = 700
    w0 = rng.integers(-126, 127, n_max).astype(np.int8)
    r0 = rng.integers(-128, 128, n_max).astype(np.int8)
    b0 = rng.integers(-(2**31), 2**31, n_max).astype(np.int32)
    b0[:2] = [-(2**31), 2**31 - 1]
    eps = rng.integers(1, 3000, n_max).astype(np.int32)
    cfgs, cvals = [], []
    hp, hu = [], []
    for k in range(18):
        mode = k % 3
        q = [1, 4, 16, 64, 3, 32][k % 6]
        dl2 = [0, 0, 2, 1, 4, 0][(k // 3) % 6]
        n = int(rng.integers(1, n_max + 1))
        seed, step = (int(v) & 0x7FFFFFFF for v in rand_u32(rng, 2))
        stream = k
        max_step = [2**31 - 1, 100, 1][k % 3]
        kind = 5 if k in (3, 5, 15) else 6 if k in (0, 6, 12) else 7 if k in (1, 7, 13) else None
        # every mode meets every bound (k // 3 runs over 0..5 for each mode)
        w_max = (W_MAX_CASES + [int(rng.integers(1, 127))])[(k // 3 + 2 * mode) % 6]
        c = _c_values(rng, q, kind)
        cfgs.append([seed, step, stream, dl2, mode, q, n, max_step, w_max])
        cvals.append(np.pad(bits(c), (0, 64 - q)))
        direction = q - 1
        w, b = w0[:n], b0[:n]
        for sign in (1, -2):
            w = zm.perturb_s8(w, sign, seed, step, direction, stream, dl2)
            b = zm.perturb_s32(b, sign, eps[:n], seed, step, direction, stream, dl2)
            hp.append(np.stack([w.astype(np.int64), b.astype(np.int64)], axis=1).ravel())
        w2, r2 = zm.update_s8(w0[:n], r0[:n], c, seed, step, stream, dl2, mode, w_max=w_max)
        b2 = zm.update_s32(b0[:n], c, eps[:n], max_step, seed, step, stream, dl2)
        hu.append(np.stack([w2.astype(np.int64), r2.astype(np.int64), b2.astype(np.int64)], axis=1).ravel())
    # q = 1 with dense directions (the Helium integer path): both deterministic modes, every c
    # kind (ties, huge, inf, NaN), the bounds (1 clamps most weights in), whole blocks and tails
    rng1 = np.random.default_rng(2026)
    for k in range(24):
        mode = k % 2  # split16, nearest
        n = [n_max, 32, 64, 33, 1, int(rng1.integers(1, n_max + 1))][k % 6]
        seed, step = (int(v) & 0x7FFFFFFF for v in rand_u32(rng1, 2))
        w_max = (W_MAX_CASES + [int(rng1.integers(1, 127))])[k % 6]
        c = _c_values(rng1, 1, (k // 2) % 8)
        if k in (22, 23):
            c[0] = F32(np.nan)
        cfgs.append([seed, step, 100 + k, 0, mode, 1, n, 2**31 - 1, w_max])
        cvals.append(np.pad(bits(c), (0, 63)))
        w, b = w0[:n], b0[:n]
        for sign in (1, -2):
            w = zm.perturb_s8(w, sign, seed, step, 0, 100 + k, 0)
            b = zm.perturb_s32(b, sign, eps[:n], seed, step, 0, 100 + k, 0)
            hp.append(np.stack([w.astype(np.int64), b.astype(np.int64)], axis=1).ravel())
        w2, r2 = zm.update_s8(w0[:n], r0[:n], c, seed, step, 100 + k, 0, mode, w_max=w_max)
        b2 = zm.update_s32(b0[:n], c, eps[:n], 2**31 - 1, seed, step, 100 + k, 0)
        hu.append(np.stack([w2.astype(np.int64), r2.astype(np.int64), b2.astype(np.int64)], axis=1).ravel())
    expected["perturb"] = _fnv(np.concatenate(hp))
    expected["update"] = _fnv(np.concatenate(hu))
    expected["restored"] = 1
    # binary16 coefficients: both directions, subnormals, ties, overflow, NaN (f16_cases)
    fx = f16_cases(rng)
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    expected["f16"] = _fnv(np.concatenate([zm.f16_from_f32(fx).astype(np.int64), bits(zm.f32_from_f16(every))]))

    hdr = [
        "/* generated by tests/test_train_math.py */",
        "#include <stdint.h>",
        f"#define HASH_N {len(hargs)}",
        f"#define EXP_N {len(ex)}",
        f"#define CE_N {len(ce)}",
        f"#define UPD_N {n_max}",
        f"#define UPD_CFG {len(cfgs)}",
    ]
    src = "\n".join(hdr) + "\n"
    src += (
        "static const uint32_t hash_args[][5] = {\n"
        + ",\n".join("  {" + ", ".join(f"{int(v)}u" for v in a) + "}" for a in hargs)
        + "\n};\n"
    )
    src += _c_array("uint32_t", "exp_x", bits(ex))
    src += _c_array("uint32_t", "log_x", bits(lx))
    src += _c_array("int8_t", "ce_logits", np.concatenate([l for l, *_ in ce]))
    src += _c_array("int32_t", "ce_offset", offsets)
    src += _c_array("int32_t", "ce_classes", [len(l) for l, *_ in ce])
    src += _c_array("uint32_t", "ce_scale", bits(F32([s for _, s, _, _ in ce])))
    src += _c_array("int32_t", "ce_zp", [z for _, _, z, _ in ce])
    src += _c_array("int32_t", "ce_label", [y for *_, y in ce])
    src += _c_array("uint32_t", "mse_t", bits(mse_t))
    src += f"#define F16_N {len(fx)}\n" + _c_array("uint32_t", "f16_x", bits(fx))
    src += _c_array("int8_t", "upd_w0", w0)
    src += _c_array("int8_t", "upd_r0", r0)
    src += _c_array("int32_t", "upd_b0", b0)
    src += _c_array("int32_t", "upd_eps", eps)
    src += (
        "static const int32_t upd_cfg[][9] = {\n"
        + ",\n".join("  {" + ", ".join(str(v) for v in cf) + "}" for cf in cfgs)
        + "\n};\n"
    )
    src += (
        "static const uint32_t upd_c[][64] = {\n"
        + ",\n".join("  {" + ", ".join(f"{int(v)}u" for v in cv) + "}" for cv in cvals)
        + "\n};\n"
    )
    return src, expected


@pytest.fixture(scope="module")
def m55_inputs():
    return _m55_inputs()


@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.parametrize(
    "opt", [["-O2"], ["-Os"], ["-O3"], ["-O2", "-DZO_NO_MVE"]], ids=["O2-mve", "Os-mve", "O3-mve", "O2-portable"]
)
def test_m55_qemu_matches_mirror(tmp_path, m55_inputs, opt):
    """Cross-compiled for Cortex-M55 (Helium intrinsics, or the portable loops with ZO_NO_MVE;
    compiler auto-vectorisation allowed), run under QEMU mps3-an547: per-section FNV-1a hashes of
    every result equal the NumPy mirror's."""
    src, expected = m55_inputs
    (tmp_path / "inputs.h").write_text(src)
    elf = tmp_path / "app.elf"
    m55 = HERE / "m55_math"
    flags = [f for f in STRICT_FLAGS if f != "-O2"] + opt
    cmd = [
        "arm-none-eabi-gcc",
        *flags,
        *M55_FLAGS,
        "-ffreestanding",
        "-nostdlib",
        "-nostartfiles",
        *RUNTIME_INCLUDES,
        f"-I{tmp_path}",
        "-T",
        str(m55 / "link.ld"),
        str(m55 / "startup.c"),
        str(m55 / "main.c"),
        *map(str, SOURCES),
        "-lgcc",
        "-o",
        str(elf),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    run = subprocess.run(
        ["timeout", "20", "qemu-system-arm", "-M", "mps3-an547", "-nographic", "-semihosting", "-kernel", str(elf)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    got = {}
    for line in (run.stdout + run.stderr).splitlines():  # QEMU writes semihosting output to stderr
        parts = line.split()
        if len(parts) == 2:
            got[parts[0]] = int(parts[1], 16)
    assert got == expected, {k: (hex(got.get(k, -1)), hex(v)) for k, v in expected.items()}
