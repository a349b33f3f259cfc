"""TFLM-equivalent quantization helpers (zoflash.compiler.quant) and the C fixed-point primitives.

Expected values come from exact rational arithmetic (fractions.Fraction) and from TFLM's
documented semantics: QuantizeMultiplier = frexp + round half away from zero with the
2^31 renormalisation and the shift < -31 flush; SaturatingRoundingDoublingHighMul rounds ties
toward +infinity (gemmlowp's nudge-and-truncate); RoundingDivideByPOT rounds ties away from zero.
"""

from __future__ import annotations

import math
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash.compiler import quant  # noqa: E402
from zoflash.reference.ops import fixedpoint as ref_fixedpoint  # noqa: E402

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
EDGE_INTS = [
    I32_MIN,
    I32_MIN + 1,
    -(1 << 30) - 1,
    -(1 << 30),
    -(1 << 30) + 1,
    -65536,
    -256,
    -3,
    -2,
    -1,
    0,
    1,
    2,
    3,
    255,
    65535,
    (1 << 30) - 1,
    1 << 30,
    (1 << 30) + 1,
    I32_MAX - 1,
    I32_MAX,
]


def exact_srdhm(a: int, b: int) -> int:
    if a == b == I32_MIN:
        return I32_MAX
    return math.floor(Fraction(a * b, 1 << 31) + Fraction(1, 2))


def exact_rdbpot(x: int, e: int) -> int:
    v = Fraction(x, 1 << e)
    r = math.floor(abs(v) + Fraction(1, 2))
    return r if v >= 0 else -r


# ----------------------------------------------------------------------------- rounding basics


def test_round_half_away_matches_std_round():
    assert quant.round_half_away(2.5) == 3.0
    assert quant.round_half_away(-2.5) == -3.0
    assert quant.round_half_away(0.49999999999999994) == 0.0  # floor(x + 0.5) would say 1
    assert quant.round_half_away(-0.5) == -1.0
    assert quant.round_half_away(1e300) == 1e300
    assert float(quant.round_half_away_f32(np.float32(2.5))) == 3.0
    assert float(quant.round_half_away_f32(np.float32(-0.5))) == -1.0
    assert float(quant.round_half_away_f32(np.float32(0.49999997))) == 0.0


def test_round_half_away_array_matches_the_scalar():
    x = np.array(
        [
            2.5,
            -2.5,
            0.5,
            -0.5,
            0.49999999999999994,
            -0.49999999999999994,
            1.5,
            7.0,
            -7.25,
            0.0,
            -0.0,
            4503599627370495.5,
            1e300,
            -1e300,
        ]
    )
    got = quant.round_half_away_array(x)
    assert [float(v) for v in got] == [quant.round_half_away(float(v)) for v in x]
    assert np.signbit(got[10])  # -0.0 stays -0.0, as std::round


def test_wrap32():
    assert quant.wrap32(1 << 31) == I32_MIN
    assert quant.wrap32(-(1 << 31) - 1) == I32_MAX
    assert quant.wrap32(5 * (1 << 32) + 7) == 7


# ------------------------------------------------------------------------- QuantizeMultiplier


@pytest.mark.parametrize(
    "real,expected",
    [
        (0.0, (0, 0)),
        (1.0, (1 << 30, 1)),
        (0.5, (1 << 30, 0)),
        (0.75, (3 << 29, 0)),
        (2.0**-31, (1 << 30, -30)),
        (2.0**-32, (1 << 30, -31)),  # smallest shift kept
        (2.0**-33, (0, 0)),  # shift -32: flushed to zero like TFLM
        (2.0**-32 * (1 - 2.0**-40), (1 << 30, -31)),  # rounds up to 2^31, renormalised, then kept
        (1.0 - 2.0**-40, (1 << 30, 1)),  # q rounds to 2^31 -> halved, shift + 1
        (2.0**40, (1 << 30, 41)),
        (1.0 / 3.0, (1431655765, -1)),
        (float((1 << 31) - 1), ((1 << 31) - 1, 31)),
    ],
)
def test_quantize_multiplier_edge_cases(real, expected):
    assert quant.quantize_multiplier(real) == expected


def test_quantize_multiplier_ties_round_away_from_zero():
    # q * 2^31 = 2^30 + 0.5 exactly: the tie goes up.
    real = (2**30 + 0.5) / 2**31
    assert quant.quantize_multiplier(real) == ((1 << 30) + 1, 0)


def test_quantize_multiplier_is_the_nearest_q31_value():
    rng = np.random.default_rng(0)
    for real in np.exp(rng.uniform(math.log(2.0**-31), math.log(2.0**40), 3000)):
        real = float(real)
        q, s = quant.quantize_multiplier(real)
        assert (1 << 30) <= q < (1 << 31)
        exact = Fraction(real) * (Fraction(2) ** (31 - s))
        assert q == math.floor(exact + Fraction(1, 2)) or (q == 1 << 30 and exact * 2 >= (1 << 31) - Fraction(1, 2))


def test_quantize_multiplier_rejects_negative_and_nan():
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            quant.quantize_multiplier(bad)


def test_smaller_and_greater_than_one_checks():
    assert quant.quantize_multiplier_smaller_than_one_exp(0.25) == (1 << 30, -1)
    assert quant.quantize_multiplier_greater_than_one(3.0) == (3 << 29, 2)
    for bad in (0.0, 1.0, 1.5, -0.5):
        with pytest.raises(ValueError):
            quant.quantize_multiplier_smaller_than_one_exp(bad)
    for bad in (1.0, 0.5):
        with pytest.raises(ValueError):
            quant.quantize_multiplier_greater_than_one(bad)
    # Just below 1, the multiplier rounds up to 2^31 and renormalises to a left shift: TFLM CHECK-fails.
    with pytest.raises(ValueError):
        quant.quantize_multiplier_smaller_than_one_exp(1.0 - 2.0**-40)


# --------------------------------------------------------------------- fixed-point primitives


def test_srdhm_and_rdbpot_scalar_against_exact_rationals():
    rng = np.random.default_rng(1)
    vals = EDGE_INTS + [int(v) for v in rng.integers(I32_MIN, I32_MAX, 300, endpoint=True)]
    for a in vals:
        for b in vals[::7] + [I32_MIN, 1 << 30, I32_MAX]:
            assert quant.saturating_rounding_doubling_high_mul(a, b) == exact_srdhm(a, b), (a, b)
    for x in vals:
        for e in (0, 1, 2, 5, 12, 23, 30, 31):
            assert quant.rounding_divide_by_pot(x, e) == exact_rdbpot(x, e), (x, e)


def test_numpy_reference_primitives_agree_with_scalar_ones():
    rng = np.random.default_rng(2)
    a = np.array(EDGE_INTS + [int(v) for v in rng.integers(I32_MIN, I32_MAX, 2000, endpoint=True)], dtype=np.int64)
    b = np.roll(a, 3)
    got = ref_fixedpoint.srdhm(a, b)
    want = [quant.saturating_rounding_doubling_high_mul(int(x), int(y)) for x, y in zip(a, b)]
    assert got.tolist() == want
    for e in (0, 1, 7, 31):
        assert ref_fixedpoint.rounding_divide_by_pot(a, e).tolist() == [
            quant.rounding_divide_by_pot(int(x), e) for x in a
        ]
    m = rng.integers(1 << 30, 1 << 31, a.size)
    for shift in (-31, -12, -1, 0, 1, 5, 20):
        x = a >> max(shift, 0)
        got = ref_fixedpoint.mbqm(x, m, shift)
        want = [quant.multiply_by_quantized_multiplier(int(v), int(mm), shift) for v, mm in zip(x, m)]
        assert got.tolist() == want


def test_mbqm_rounds_twice_like_the_default_tflm_build():
    # Without TFLITE_SINGLE_ROUNDING, TFLM rounds after the high multiply and again in the shift.
    # 5 * 0.5 = 2.5 -> 3 (tie up), then 3 / 2 = 1.5 -> 2; a single rounding of 1.25 would give 1.
    assert quant.multiply_by_quantized_multiplier(5, 1 << 30, -1) == 2
    # 10 * 0.75 = 7.5 -> 8, then 8 / 16 = 0.5 -> 1 (ties away); single rounding of 0.46875 gives 0.
    assert quant.multiply_by_quantized_multiplier(10, 3 << 29, -4) == 1
    assert quant.multiply_by_quantized_multiplier(-10, 3 << 29, -4) == 0  # -7.5 -> -7 (tie toward +inf)
    assert quant.multiply_by_quantized_multiplier(-11, 3 << 29, -4) == -1  # -8.25 -> -8 -> -0.5 -> -1
    # Left shifts happen before the multiply and wrap like C++ int32 arithmetic.
    assert quant.multiply_by_quantized_multiplier(3, 1 << 30, 2) == 6
    assert quant.multiply_by_quantized_multiplier(1 << 29, 1 << 30, 2) == quant.saturating_rounding_doubling_high_mul(
        I32_MIN, 1 << 30
    )


# --------------------------------------------------------------------------------- activations


def test_activation_ranges():
    assert quant.activation_range("NONE", 0.1, 5) == (-128, 127)
    assert quant.activation_range("RELU", 0.1, 5) == (5, 127)
    assert quant.activation_range("RELU", 0.1, -128) == (-128, 127)
    assert quant.activation_range("RELU6", 6 / 255, -128) == (-128, 127)
    assert quant.activation_range("RELU6", 0.01, -100) == (-100, 127)
    assert quant.activation_range("RELU6", 0.1, -100) == (-100, -40)
    assert quant.activation_range("RELU_N1_TO_1", 0.01, 0) == (-100, 100)
    assert quant.activation_range("RELU_N1_TO_1", 1 / 64, 3) == (-61, 67)
    for bad in ("TANH", "SIGN_BIT", "relu7"):
        with pytest.raises(ValueError):
            quant.activation_range(bad, 0.1, 0)


def test_activation_bound_divides_in_float32_like_tflm():
    # TFLM computes round(6.0f / scale) in float.  For this float32 scale 6/scale is 2.49999994 in
    # double but exactly 2.5 in float32, which rounds away to 3.
    s = float(np.float32(6.0 / 2.5))
    assert quant.round_half_away(6.0 / s) == 2.0
    assert quant.activation_range("RELU6", s, 0) == (0, 3)
    s = float(np.float32(1.0 / 1.5))
    assert quant.activation_range("RELU_N1_TO_1", s, 0) == (-2, 2)


# ------------------------------------------------------------------------------------ geometry


@pytest.mark.parametrize(
    "args,expected",
    [
        # (stride, dilation, in, filter, padding) -> (out, pad_before)
        ((2, 1, 5, 3, "SAME"), (3, 1)),
        ((2, 1, 4, 3, "SAME"), (2, 0)),  # total padding 1: 0 before, 1 after
        ((2, 1, 5, 3, "VALID"), (2, 0)),
        ((1, 2, 7, 3, "SAME"), (7, 2)),
        ((1, 3, 10, 3, "VALID"), (4, 0)),
        ((3, 1, 10, 1, "SAME"), (4, 0)),
        ((1, 1, 49, 10, "SAME"), (49, 4)),
        ((2, 1, 49, 10, "SAME"), (25, 4)),
    ],
)
def test_padding_like_tflm(args, expected):
    stride, dil, size, k, padding = args
    out = quant.compute_out_size(padding, size, k, stride, dil)
    pad, _ = quant.compute_padding_with_offset(stride, dil, size, k, out)
    assert (out, pad) == expected
    (oh, ow), (ph, pw) = quant.compute_padding_hw((stride, stride), (dil, dil), (size, size), (k, k), padding)
    assert (oh, ph) == expected and (ow, pw) == expected


# ---------------------------------------------------------------------- softmax and logistic


def test_softmax_preprocessing():
    # beta * scale * 2^26 = 2^22 -> multiplier 2^30, left shift 23; radius floor(31 * 2^26 / 2^23) = 248.
    mult, shift = quant.preprocess_softmax_scaling(1.0, 1 / 16, 5)
    assert (mult, shift) == (1 << 30, 23)
    assert quant.calculate_input_radius(5, shift, 31) == 248
    # Capped at 2^31 - 1 for large beta * scale: left shift 31 and radius 0 (only the max survives).
    mult, shift = quant.preprocess_softmax_scaling(1.0, 100.0, 5)
    assert (mult, shift) == (I32_MAX, 31)
    assert quant.calculate_input_radius(5, shift, 31) == 0
    with pytest.raises(ValueError):
        quant.preprocess_softmax_scaling(1.0, 2.0**-27, 5)


def test_logistic_preprocessing():
    # scale 1/16: 2^-4 * 2^27 = 2^23 = 0.5 * 2^24 -> multiplier 2^30, left shift 24, radius 15 * 2^27 / 2^24.
    assert quant.logistic_input_params(1 / 16) == (1 << 30, 24, 120)
    mult, shift, radius = quant.logistic_input_params(0.1)
    q, e = math.frexp(float(np.float32(0.1)) * 2**27)
    assert (mult, shift) == (round(q * 2**31), e)
    assert radius == math.floor(15 * 2**27 / 2**e)


# ------------------------------------------------------------------ the C primitives themselves

SHIM = textwrap.dedent("""
    #include "zo_fixedpoint.h"
    int32_t t_srdhm(int32_t a, int32_t b) { return zo_srdhm(a, b); }
    int32_t t_rdbpot(int32_t x, int32_t e) { return zo_rdbpot(x, e); }
    int32_t t_mbqm(int32_t x, int32_t m, int32_t s) { return zo_mbqm(x, m, s); }
    int32_t t_exp(int32_t a, int32_t ib) { return zo_exp_on_negative_values(a, ib); }
    int32_t t_recip(int32_t a) { return zo_one_over_one_plus_x_q0(a); }
""")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    import ctypes

    src = tmp_path_factory.mktemp("shim") / "zo_fixedpoint_shim.c"
    src.write_text(SHIM)
    lib = ctypes.CDLL(str(cbuild.build_shared([src], name="zo_fixedpoint_shim")))
    for f in ("t_srdhm", "t_rdbpot", "t_mbqm", "t_exp", "t_recip"):
        getattr(lib, f).restype = ctypes.c_int32
    lib.t_srdhm.argtypes = lib.t_rdbpot.argtypes = lib.t_exp.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.t_mbqm.argtypes = [ctypes.c_int32] * 3
    lib.t_recip.argtypes = [ctypes.c_int32]
    return lib


@pytest.mark.cc
def test_c_srdhm_rdbpot_mbqm_exact(shim):
    rng = np.random.default_rng(3)
    vals = EDGE_INTS + [int(v) for v in rng.integers(I32_MIN, I32_MAX, 400, endpoint=True)]
    for a in vals:
        for b in vals[::9] + [I32_MIN, I32_MAX, 1 << 30]:
            assert shim.t_srdhm(a, b) == exact_srdhm(a, b), (a, b)
        for e in (0, 1, 3, 8, 20, 31):
            assert shim.t_rdbpot(a, e) == exact_rdbpot(a, e), (a, e)
    for x in vals[::3]:
        for m in (0, 1 << 30, (1 << 31) - 1, int(rng.integers(1 << 30, 1 << 31))):
            for s in (-31, -20, -7, -1, 0, 1, 4, 15, 30):
                assert shim.t_mbqm(x, m, s) == quant.multiply_by_quantized_multiplier(x, m, s), (x, m, s)


@pytest.mark.cc
def test_c_exp_and_reciprocal_match_reference(shim):
    rng = np.random.default_rng(4)
    for ib in (4, 5):
        a = np.concatenate([[0, -1, I32_MIN, I32_MIN + 1, -(1 << (31 - ib))], -rng.integers(0, 1 << 31, 3000)]).astype(
            np.int64
        )
        want = ref_fixedpoint.exp_on_negative_values(a, ib)
        got = [shim.t_exp(int(v), ib) for v in a]
        assert got == want.tolist()
        # and the result is exp(a) to within a few Q0.31 ulps of 2^-20
        real = np.exp(a / 2.0 ** (31 - ib)) * 2.0**31
        assert np.max(np.abs(want - real)) < 2.0**11
    x = np.concatenate([[0, 1, I32_MAX - 1, I32_MAX], rng.integers(0, 1 << 31, 3000)]).astype(np.int64)
    want = ref_fixedpoint.one_over_one_plus_x_for_x_in_0_1(x)
    assert [shim.t_recip(int(v)) for v in x] == want.tolist()
    real = 1.0 / (1.0 + x / 2.0**31) * 2.0**31
    assert np.max(np.abs(want - real)) < 2.0**8
