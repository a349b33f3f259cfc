"""The statistics of --mode continual in Python, independent of the C (zo_drift.c, zo_paired.c,
zo_slots.c): Page-Hinkley on the quantized serving loss and the one-sided sign test on paired
correctness, with the same integer arithmetic, so tests/test_continual_c.py can compare them
with the C alarm for alarm and verdict for verdict.  Imports only the standard library."""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

PH_FRAC = 8
PAIRED_EXACT_MAX = 60
ALPHA_LOG2_MAX = 10


def quantize(loss: float, clip: int) -> int:
    """zo_ph_quantize: the loss in units of 2^-8, rounded half up in float32, clipped to [0, clip]."""
    f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]  # noqa: E731 - the C's float32 steps
    scaled = f32(f32(loss) * (1 << PH_FRAC))
    if math.isnan(scaled):
        return clip
    if scaled < 0:
        return 0
    if scaled >= clip:
        return clip
    return int(f32(scaled + 0.5))


def _c_div(a: int, b: int) -> int:
    """C's integer division (truncation towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


@dataclass
class PageHinkley:
    """zo_ph_t with its config (two-sided); `update` returns True on an alarm."""

    delta: int
    lam: int
    clip: int
    min_sd: int
    warmup: int
    total: int = 0
    sq: int = 0
    threshold: int = 0
    up: int = 0
    up_min: int = 0
    down: int = 0
    down_max: int = 0
    n: int = 0

    def reset(self) -> None:
        self.total = self.sq = self.threshold = self.up = self.up_min = self.down = self.down_max = self.n = 0

    def update(self, x: int) -> bool:
        self.n += 1
        self.total += x
        self.sq += x * x
        mean = self.total // self.n  # total >= 0: C's truncation is the floor
        var = self.sq // self.n - mean * mean
        sd = max(self.min_sd, math.isqrt(var) if var > 0 else 0)
        k = _c_div(self.delta * sd, 256)
        self.threshold = _c_div(self.lam * sd, 256)
        self.up += x - mean - k
        self.up_min = min(self.up_min, self.up)
        self.down += x - mean + k
        self.down_max = max(self.down_max, self.down)
        return self.n >= self.warmup and self.statistic > self.threshold

    @property
    def statistic(self) -> int:
        return max(self.up - self.up_min, self.down_max - self.down)


def normal_z2_e4(alpha_log2: int) -> int:
    """z^2 * 10^4 of the one-sided normal quantile at 2^-alpha_log2 (the C's table, rounded up)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - 2.0**-alpha_log2)
    return math.ceil(z * z * 10_000)


def sign_test_better(better: int, worse: int, alpha_log2: int) -> bool:
    """zo_paired_better: P(X >= better | n = better + worse, p = 1/2) <= 2^-alpha_log2."""
    n = better + worse
    if not 1 <= alpha_log2 <= ALPHA_LOG2_MAX or better <= worse:
        return False
    if n <= PAIRED_EXACT_MAX:
        tail = sum(math.comb(n, k) for k in range(better, n + 1))
        return n >= alpha_log2 and tail <= 2 ** (n - alpha_log2)
    d = 2 * better - n - 1
    return d * d * 10_000 >= normal_z2_e4(alpha_log2) * n


SLOT_MAGIC = 0x534C4F5A


def slot_image(payload: bytes, generation: int) -> bytes:
    """One valid A/B slot (zo_slots.h): the header, then the payload."""
    return struct.pack("<IIII", SLOT_MAGIC, generation, len(payload), zlib.crc32(payload)) + payload
