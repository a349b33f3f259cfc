"""The static C of --mode continual (firmware_templates/runtime/continual/): the Page-Hinkley
detector, the paired sign test and the A/B slots, against the independent Python mirror
(zoflash.reference.continual) bit for bit, and their properties: a stationary stream rarely
alarms, a rise of the loss does; the sign test's level holds; a promotion cut short by a reset
leaves the deployed slot intact."""

from __future__ import annotations

import ctypes
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from ccompile import M55_FLAGS, RUNTIME, STRICT_FLAGS, build_shared, compile_object

from zoflash.reference import continual as R
from zoflash.spec import wire
from zoflash.training import continual as C

pytestmark = pytest.mark.cc

CONTINUAL = RUNTIME / "continual"
SOURCES = [CONTINUAL / "zo_drift.c", CONTINUAL / "zo_paired.c", CONTINUAL / "zo_slots.c"]

SHIM = r"""
#include <string.h>
#include "zo_drift.h"
#include "zo_paired.h"
#include "zo_slots.h"

/* Page-Hinkley over n float losses: alarms[i] = 1 where it alarmed (then reset), stats[i] its statistic. */
void run_ph(const float *loss, int n, int32_t delta, int32_t lambda, int32_t clip, int32_t min_sd, uint32_t warmup,
            uint8_t *alarms, int64_t *stats, int32_t *xq) {
    zo_ph_config_t cfg = { delta, lambda, clip, min_sd, warmup };
    zo_ph_t d;
    zo_ph_reset(&d);
    for (int i = 0; i < n; ++i) {
        xq[i] = zo_ph_quantize(loss[i], clip);
        alarms[i] = (uint8_t)zo_ph_update(&d, &cfg, xq[i]);
        stats[i] = zo_ph_statistic(&d);
        if (alarms[i]) {
            zo_ph_reset(&d);
        }
    }
}

int paired(uint32_t better, uint32_t worse, uint32_t alpha_log2) {
    zo_paired_t p;
    zo_paired_reset(&p);
    for (uint32_t i = 0; i < better; ++i) zo_paired_add(&p, 1, 0);
    for (uint32_t i = 0; i < worse; ++i) zo_paired_add(&p, 0, 1);
    zo_paired_add(&p, 1, 1);
    return zo_paired_better(&p, alpha_log2);
}

/* The slots over two caller buffers; fail_after: the medium fails from that write on (-1 never). */
static int g_writes, g_fail_after;
static int medium(uint8_t *dst, const uint8_t *src, uint32_t n) {
    if (g_fail_after >= 0 && g_writes >= g_fail_after) return 1;
    ++g_writes;
    memcpy(dst, src, n);
    return 0;
}
int slots_promote(uint8_t *a, uint8_t *b, uint32_t bytes, const uint8_t *payload, int fail_after) {
    zo_slots_t s = { { a, b }, bytes, medium };
    g_writes = 0;
    g_fail_after = fail_after;
    return zo_slots_promote(&s, payload);
}
int slots_deployed(uint8_t *a, uint8_t *b, uint32_t bytes, uint32_t *generation) {
    zo_slots_t s = { { a, b }, bytes, NULL };
    int d = zo_slots_deployed(&s);
    *generation = d < 0 ? 0u : zo_slots_generation(&s, d);
    return d;
}
uint32_t slots_crc(const uint8_t *p, uint32_t n) { return zo_slots_crc32(0u, p, n); }
uint32_t isqrt64(uint64_t v) { return zo_isqrt64(v); }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = build_shared(
        SOURCES,
        tmp_path_factory.mktemp("continual"),
        "continual",
        {"shim.c": SHIM},
        flags=[*STRICT_FLAGS, f"-I{CONTINUAL}"],
    )
    so.paired.restype = ctypes.c_int
    so.slots_crc.restype = ctypes.c_uint32
    so.isqrt64.restype = ctypes.c_uint32
    so.isqrt64.argtypes = [ctypes.c_uint64]
    return so


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def run_c(lib, losses, delta, lam, clip, min_sd, warmup):
    x = np.ascontiguousarray(losses, dtype=np.float32)
    n = len(x)
    alarms, stats, xq = np.zeros(n, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.int32)
    lib.run_ph(_ptr(x), n, delta, lam, clip, min_sd, ctypes.c_uint32(warmup), _ptr(alarms), _ptr(stats), _ptr(xq))
    return alarms, stats, xq


def run_py(losses, delta, lam, clip, min_sd, warmup):
    ph = R.PageHinkley(delta, lam, clip, min_sd, warmup)
    alarms, stats, xq = [], [], []
    for v in np.asarray(losses, dtype=np.float32):
        q = R.quantize(float(v), clip)
        a = ph.update(q)
        alarms.append(int(a))
        stats.append(ph.statistic)
        xq.append(q)
        if a:
            ph.reset()
    return np.array(alarms), np.array(stats), np.array(xq)


def _stream(rng, n_before, n_after, rise, p0=0.1):
    """Cross-entropy-like losses: mostly small, a heavy tail (a share p0 of mistakes); the share of
    mistakes changes by `rise` after n_before."""
    p = np.r_[np.full(n_before, p0), np.full(n_after, p0 + rise)]
    wrong = rng.random(len(p)) < p
    return np.where(wrong, rng.exponential(2.5, len(p)) + 0.7, rng.exponential(0.08, len(p))).astype(np.float32)


# the build's settings (training/continual.py)
CFG = dict(delta=C.PH_DELTA, lam=C.PH_LAMBDA, clip=C.PH_CLIP, min_sd=C.PH_MIN_SD, warmup=C.PH_WARMUP)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_detector_matches_the_mirror_bit_for_bit(lib, seed):
    rng = np.random.default_rng(seed)
    losses = _stream(rng, 3000, 3000, 0.3)
    losses[::97] = np.nan  # a NaN loss counts as the clip on both sides
    losses[::89] = -1.0
    c = run_c(lib, losses, **CFG)
    p = run_py(losses, **CFG)
    for got, want in zip(c, p):
        np.testing.assert_array_equal(got, want)
    assert c[0].sum() >= 1  # the rise alarmed


@pytest.mark.parametrize("p0", [0.03, 0.2, 0.6])  # an accurate model, a fair one, a struggling one
def test_detector_alarms_on_a_change_either_way_and_rarely_without(lib, p0):
    rng = np.random.default_rng(7)
    quiet = _stream(rng, 100_000, 0, 0.0, p0)
    alarms, _, _ = run_c(lib, quiet, **CFG)
    assert alarms.sum() <= 1  # stated: at most 1 per 10k samples; 100k samples here
    for rise in (0.25, -0.15) if p0 >= 0.2 else (0.25,):  # more mistakes, or fewer
        delays = []
        for k in range(10):
            s = _stream(np.random.default_rng(100 + k), 2000, 3000, rise, p0)
            a, _, _ = run_c(lib, s, **CFG)
            hits = np.flatnonzero(a)
            assert len(hits) and hits[0] >= 2000, f"p0 {p0}, change {rise:+}, stream {k}: no alarm after it, or before"
            delays.append(hits[0] - 2000)
        assert np.median(delays) < 300, (p0, rise, delays)


def test_isqrt_is_exact(lib):
    for v in [0, 1, 2, 3, 4, 15, 16, 17, 10**6, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1, 2**64 - 1]:
        assert lib.isqrt64(v) == math.isqrt(v)


def test_quantize_rounds_and_clips(lib):
    losses = np.array([0.0, 1 / 512, 1.0, 3.999, 4.0, 100.0, -0.5, np.inf, np.nan], np.float32)
    _, _, xq = run_c(lib, losses, delta=0, lam=1 << 30, clip=1024, min_sd=1, warmup=10**6)
    assert list(xq) == [0, 1, 256, 1024, 1024, 1024, 0, 1024, 1024]


def test_sign_test_matches_the_mirror_and_its_level(lib):
    for alpha in (1, 3, 5, 8, 10):
        for n in list(range(0, 80)) + [100, 200, 500]:
            for better in range(0, n + 1, max(1, n // 40)):
                want = R.sign_test_better(better, n - better, alpha)
                assert lib.paired(better, n - better, alpha) == want, (better, n - better, alpha)
                if want and n <= R.PAIRED_EXACT_MAX:  # the exact tail is at most the level
                    tail = sum(math.comb(n, k) for k in range(better, n + 1)) / 2**n
                    assert tail <= 2.0**-alpha
    assert lib.paired(13, 3, 5) == 1  # P(X >= 13 | 16) = 0.0106 <= 1/32
    assert lib.paired(11, 5, 5) == 0  # P(X >= 11 | 16) = 0.105
    assert lib.paired(5, 5, 1) == 0 and lib.paired(0, 0, 5) == 0
    assert lib.paired(10, 0, 0) == 0 and lib.paired(10, 0, 11) == 0  # levels outside 1..10: never


def test_normal_table_is_the_quantiles():
    src = (CONTINUAL / "zo_paired.c").read_text()
    table = src.split("Z2_E4[ZO_PAIRED_ALPHA_LOG2_MAX + 1u] = {")[1].split("}")[0]
    values = [int(v.strip().rstrip("u")) for v in table.split(",") if v.strip()]
    assert values[2:] == [R.normal_z2_e4(k) for k in range(2, R.ALPHA_LOG2_MAX + 1)]


def _slots(bytes_):
    return np.full(16 + bytes_, 0, np.uint8), np.full(16 + bytes_, 0, np.uint8)


def test_slots_promote_alternates_and_survives_an_interrupted_write(lib):
    n = 40
    a, b = _slots(n)
    gen = ctypes.c_uint32()
    assert lib.slots_deployed(_ptr(a), _ptr(b), n, ctypes.byref(gen)) == -1
    payloads = [np.arange(n, dtype=np.uint8) + k for k in range(4)]
    for k, p in enumerate(payloads[:3]):
        assert lib.slots_promote(_ptr(a), _ptr(b), n, _ptr(p), -1) == k % 2
        assert lib.slots_deployed(_ptr(a), _ptr(b), n, ctypes.byref(gen)) == k % 2 and gen.value == k + 1
    assert bytes(a) == R.slot_image(payloads[2].tobytes(), 3)  # the layout the mirror writes
    assert lib.slots_crc(_ptr(payloads[0]), n) == zlib.crc32(payloads[0].tobytes())
    # a damaged deployed slot: the other one (generation 2) serves
    damaged = a.copy()
    damaged[20] ^= 1
    assert lib.slots_deployed(_ptr(damaged), _ptr(b), n, ctypes.byref(gen)) == 1 and gen.value == 2
    # a reset after the erase (1 write) or after the payload (2 writes): slot 0 stays deployed
    for fail_after in (1, 2):
        assert lib.slots_promote(_ptr(a), _ptr(b), n, _ptr(payloads[3]), fail_after) == -1
        assert lib.slots_deployed(_ptr(a), _ptr(b), n, ctypes.byref(gen)) == 0 and gen.value == 3
        assert bytes(a[16:]) == payloads[2].tobytes()
        assert bytes(b[:16]) == b"\xff" * 16  # the erased header: the mark of an interrupted promotion


def test_event_kinds_match_the_wire_table():
    text = (CONTINUAL / "zo_continual.h").read_text()
    for i, kind in enumerate(wire.CONTINUAL_DECISIONS):
        assert f"#define ZO_CL_EV_{kind.upper()}" in text
        line = next(ln for ln in text.splitlines() if ln.startswith(f"#define ZO_CL_EV_{kind.upper()} "))
        assert line.split()[2] == f"{i}u"


@pytest.mark.parametrize("source", SOURCES + [CONTINUAL / "zo_continual.c"], ids=lambda p: Path(p).name)
def test_compiles_for_the_m55_without_warnings(source):
    import shutil

    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc not installed")
    inc = [f"-I{CONTINUAL}", f"-I{RUNTIME / 'inference'}"]
    res = compile_object(cc, Path(source), [*STRICT_FLAGS, *M55_FLAGS, *inc])
    assert res.returncode == 0, res.stderr
