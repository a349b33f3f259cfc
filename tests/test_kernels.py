"""The static C int8 kernels against the NumPy reference, bit for bit, on many random cases.

Every C kernel is compiled with the host compiler (-O2 -Wall -Wextra -Werror) into a shared
library and called through ctypes with params from the op families' params builders
(zoflash.compiler.ops.<family>_params); the result must equal the reference kernels
(zoflash.reference.ops.<family>) exactly.  Also: builders emit exactly the C struct fields, reject
what TFLM would not run, and the sources cross-compile for the Cortex-M55.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash.compiler import quant  # noqa: E402
from zoflash.compiler.ops import (  # noqa: E402
    KERNELS,  # noqa: E402
    activation_params,
    binary_params,
    convolution_params,
    data_movement_params,
    fully_connected_params,
    pooling_params,
    reduction_params,
)
from zoflash.reference.ops import activation as ref_activation  # noqa: E402
from zoflash.reference.ops import binary as ref_binary  # noqa: E402
from zoflash.reference.ops import convolution as ref_convolution  # noqa: E402
from zoflash.reference.ops import data_movement as ref_data_movement  # noqa: E402
from zoflash.reference.ops import fully_connected as ref_fully_connected  # noqa: E402
from zoflash.reference.ops import pooling as ref_pooling  # noqa: E402
from zoflash.reference.ops import reduction as ref_reduction  # noqa: E402

ACTS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def f32(x):
    return float(np.float32(x))


def rand_i8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


def rand_zp(rng):
    return int(rng.choice([-128, 127, 0, int(rng.integers(-128, 128))]))


def run(K, name, params, *arrays):
    info = KERNELS.get(name)
    K.call(info.function, info.struct, params, *arrays)


def assert_same(got, want, what):
    got = np.asarray(got)
    want = np.asarray(want).reshape(got.shape)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        i = bad[0]
        raise AssertionError(
            f"{what}: {bad.size} of {got.size} differ; first at {i}: "
            f"C {got.reshape(-1)[i]} vs reference {want.reshape(-1)[i]}"
        )


# --------------------------------------------------------------------------- struct contract

SAMPLE_ARGS = {
    "conv2d": dict(
        input_hwc=(5, 5, 4),
        output_hwc=(3, 3, 6),
        filter_ohwi=(6, 3, 3, 4),
        stride_hw=(2, 2),
        dilation_hw=(1, 1),
        padding="SAME",
        input_scale=0.05,
        input_zp=-3,
        filter_scales=[0.01],
        output_scale=0.1,
        output_zp=2,
        activation="RELU",
    ),
    "depthwise_conv2d": dict(
        input_hwc=(5, 5, 4),
        output_hwc=(5, 5, 8),
        filter_1hwo=(1, 3, 3, 8),
        stride_hw=(1, 1),
        dilation_hw=(1, 1),
        padding="SAME",
        depth_multiplier=2,
        input_scale=0.05,
        input_zp=0,
        filter_scales=[0.01] * 8,
        output_scale=0.1,
        output_zp=0,
        activation="RELU6",
    ),
    "fully_connected": dict(
        input_elements=16,
        weights_shape=(3, 16),
        input_scale=0.05,
        input_zp=1,
        filter_scales=[0.01],
        output_scale=0.1,
        output_zp=-1,
        activation="NONE",
    ),
    "avg_pool": dict(
        input_hwc=(4, 4, 2),
        output_hwc=(2, 2, 2),
        filter_hw=(2, 2),
        stride_hw=(2, 2),
        padding="VALID",
        output_scale=0.1,
        output_zp=0,
        activation="NONE",
    ),
    "max_pool": dict(
        input_hwc=(4, 4, 2),
        output_hwc=(2, 2, 2),
        filter_hw=(2, 2),
        stride_hw=(2, 2),
        padding="VALID",
        output_scale=0.1,
        output_zp=0,
        activation="NONE",
    ),
    "add": dict(
        input1_shape=(1, 2, 3),
        input2_shape=(3,),
        output_shape=(1, 2, 3),
        input1_scale=0.1,
        input1_zp=0,
        input2_scale=0.2,
        input2_zp=1,
        output_scale=0.3,
        output_zp=-2,
        activation="NONE",
    ),
    "mul": dict(
        input1_shape=(1, 2, 3),
        input2_shape=(3,),
        output_shape=(1, 2, 3),
        input1_scale=0.1,
        input1_zp=0,
        input2_scale=0.2,
        input2_zp=1,
        output_scale=0.3,
        output_zp=-2,
        activation="NONE",
    ),
    "pad": dict(input_shape=(1, 2, 3, 4), paddings=((0, 0), (1, 1), (2, 0), (0, 0)), pad_value=-5),
    "concat": dict(input_shapes=[(1, 2, 3), (1, 2, 5)], axis=2),
    "mean": dict(input_shape=(1, 4, 4, 8), axes=(1, 2), input_scale=0.1, input_zp=3, output_scale=0.05, output_zp=-4),
    "softmax": dict(outer=2, depth=10, beta=1.0, input_scale=0.1, input_zp=0, output_scale=1 / 256, output_zp=-128),
    "log_softmax": dict(outer=2, depth=10, input_scale=0.1, input_zp=0, output_scale=16 / 256, output_zp=127),
    "logistic": dict(size=10, input_scale=0.1, input_zp=0, output_scale=1 / 256, output_zp=-128),
    "requantize": dict(size=10, input_scale=0.1, input_zp=0, output_scale=0.2, output_zp=5),
    "dequantize": dict(size=10, scale=0.1, zp=3),
}


def test_every_kernel_has_a_sample():
    assert set(SAMPLE_ARGS) == set(KERNELS)


@pytest.mark.parametrize("name", sorted(SAMPLE_ARGS))
def test_builder_keys_are_exactly_the_struct_fields(name):
    info = KERNELS.get(name)
    structs = cbuild.parse_structs()
    assert info.struct in structs
    header = cbuild.header_text()
    assert f"void {info.function}(const {info.struct} *p" in header
    params = info.build(**SAMPLE_ARGS[name])
    fields = dict(structs[info.struct])
    assert list(params) == list(fields), "dict keys must be the struct fields, in order"
    for key, value in params.items():
        if fields[key].endswith("*") and key == "folded_bias":  # set by the lowering (constant weights)
            assert value is None, key
        elif fields[key].endswith("*"):  # int32_t*, int16_t* (LUTs), int64_t*
            assert isinstance(value, np.ndarray) and value.dtype == fields[key][:-3], key
        elif fields[key] == "float":
            assert isinstance(value, float) and value == f32(value), key
        else:
            assert isinstance(value, int) and not isinstance(value, bool), key
            assert -(1 << 31) <= value < (1 << 31), key


@pytest.mark.parametrize("name", sorted(SAMPLE_ARGS))
def test_builders_are_keyword_only(name):
    with pytest.raises(TypeError):
        KERNELS.get(name).build(*SAMPLE_ARGS[name].values())


def test_builders_reject_what_tflm_cannot_run():
    bad = [
        ("conv2d", dict(output_hwc=(2, 2, 6))),  # wrong output size for SAME / stride 2
        ("conv2d", dict(filter_scales=[0.01, 0.02])),  # 2 scales for 6 channels
        ("conv2d", dict(padding="FULL")),
        ("conv2d", dict(activation="TANH")),
        ("conv2d", dict(input_zp=200)),
        ("depthwise_conv2d", dict(depth_multiplier=3)),
        ("fully_connected", dict(input_elements=17)),
        ("add", dict(output_scale=1e-9)),  # TFLM's output multiplier must be < 1
        ("add", dict(input2_shape=(4,))),
        ("mean", dict(input_shape=(2, 4, 3, 8), axes=(0, 2))),  # not contiguous
        ("softmax", dict(output_scale=1 / 255)),
        ("softmax", dict(output_zp=0)),
        ("logistic", dict(output_zp=0)),
        ("pad", dict(input_shape=(1, 1, 2, 3, 4, 1), paddings=((0, 0),) * 6)),
        ("concat", dict(input_shapes=[(1, 2, 3), (1, 3, 5)])),
        ("requantize", dict(output_scale=1e-12)),  # left shift > 30
    ]
    for name, change in bad:
        with pytest.raises(ValueError):
            KERNELS.get(name).build(**{**SAMPLE_ARGS[name], **change})


def test_geometry_matches_tflm_padding():
    p = convolution_params.conv2d_params(**SAMPLE_ARGS["conv2d"])  # 5x5, k3, s2, SAME: total pad 2 -> 1 before
    assert (p["pad_h"], p["pad_w"]) == (1, 1)
    p = pooling_params.pool_params(
        input_hwc=(4, 4, 1),
        output_hwc=(2, 2, 1),
        filter_hw=(3, 3),
        stride_hw=(2, 2),
        padding="SAME",
        output_scale=0.1,
        output_zp=0,
        activation="NONE",
    )
    assert (p["pad_h"], p["pad_w"]) == (0, 0)  # total pad 1: 0 before, 1 after


def test_fully_connected_per_tensor_multiplier_is_the_double_product():
    """The tflite-micro wheel multiplies the widened scales (per tensor as per channel); older TFLM
    rounded the per-tensor product to float32. The two differ for some scales, and then outputs
    differ by 1 LSB now and then: tests/test_public_models.py checks the MLPerf Tiny AD model,
    whose last layer shows it, against the interpreter itself."""
    rng = np.random.default_rng(7)
    differs = 0
    for _ in range(2000):
        si, sw, so = (f32(v) for v in rng.uniform(1e-3, 1e-1, 3))
        p = fully_connected_params.fully_connected_params(
            input_elements=4,
            weights_shape=(3, 4),
            input_scale=si,
            input_zp=0,
            filter_scales=[sw],
            output_scale=so,
            output_zp=0,
            activation="NONE",
        )
        want = quant.quantize_multiplier(si * sw / so)
        assert [(int(m), int(s)) for m, s in zip(p["multiplier"], p["shift"])] == [want] * 3
        differs += want != quant.quantize_multiplier(float(np.float32(si) * np.float32(sw)) / so)
    assert differs > 0  # the two formulas really differ sometimes, so the choice matters


# ------------------------------------------------------------------------------- convolutions


def conv_scales(rng, k, per_channel, oc):
    in_s = f32(rng.uniform(0.005, 0.1))
    fs = [f32(v) for v in rng.uniform(0.002, 0.05, oc if per_channel else 1)]
    # Aim the output scale at the accumulator's spread so outputs cover the int8 range and clip.
    typical = in_s * float(np.mean(fs)) * 64.0 * math.sqrt(k) * 64.0
    out_s = f32(typical / 128.0 * rng.uniform(0.3, 3.0))
    if rng.random() < 0.1:
        # Output scale below input * filter scale: multipliers > 1, i.e. left shifts in the requant.
        out_s = f32(in_s * float(np.min(fs)) * rng.uniform(0.05, 0.9))
    return in_s, fs, out_s


def random_conv_case(rng, pointwise=False, big=False):
    for _ in range(100):
        if big:
            h, w, c = int(rng.integers(2, 5)), int(rng.integers(2, 5)), int(rng.choice([240, 256]))
            kh = kw = 3
        else:
            h, w = int(rng.integers(1, 13)), int(rng.integers(1, 13))
            c = int(rng.choice([1, 2, 3, 4, 8, 16, int(rng.integers(1, 40))]))
            kh, kw = (1, 1) if pointwise else (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        groups = 1
        if not big and not pointwise and rng.random() < 0.15:
            for g in (2, 3, 4):
                if c % g == 0 and c > g:
                    groups = g
                    break
        fc = c // groups
        oc = groups * int(rng.choice([1, 3, 4, 8, int(rng.integers(1, 24)), 70 // groups]))
        sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dh, dw = (1, 1) if pointwise or rng.random() < 0.6 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        padding = str(rng.choice(["SAME", "VALID"]))
        (oh, ow), _ = quant.compute_padding_hw((sh, sw), (dh, dw), (h, w), (kh, kw), padding)
        if oh >= 1 and ow >= 1:
            return dict(
                h=h, w=w, c=c, fc=fc, oc=oc, kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, padding=padding, oh=oh, ow=ow
            )
    raise AssertionError("no valid case")


def conv_geometry(c: dict) -> dict:
    """The params builders' geometry arguments of a random_conv_case layer."""
    return dict(
        input_hwc=(c["h"], c["w"], c["c"]),
        output_hwc=(c["oh"], c["ow"], c["oc"]),
        filter_ohwi=(c["oc"], c["kh"], c["kw"], c["fc"]),
        stride_hw=(c["sh"], c["sw"]),
        dilation_hw=(c["dh"], c["dw"]),
        padding=c["padding"],
    )


def folded(w, b, input_zp):
    """bias - input_zp * sum(weights row), int32 wrapping: the generator's precomputed folded bias."""
    s = np.asarray(w, np.int64).reshape(len(w), -1).sum(axis=1)
    v = (0 if b is None else np.asarray(b, np.int64)) - input_zp * s
    return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def check_conv(K, rng, case, per_channel, act, with_bias):
    c = case
    k = c["kh"] * c["kw"] * c["fc"]
    in_s, fs, out_s = conv_scales(rng, k, per_channel, c["oc"])
    params = convolution_params.conv2d_params(
        **conv_geometry(c),
        input_scale=in_s,
        input_zp=rand_zp(rng),
        filter_scales=fs,
        output_scale=out_s,
        output_zp=rand_zp(rng),
        activation=act,
    )
    x = rand_i8(rng, (c["h"], c["w"], c["c"]))
    wt = rand_i8(rng, (c["oc"], c["kh"], c["kw"], c["fc"]))
    b = rng.integers(-30000, 30000, c["oc"]).astype(np.int32) if with_bias else None
    out = np.zeros((c["oh"], c["ow"], c["oc"]), np.int8)
    run(K, "conv2d", params, x, wt, b, out)
    want = ref_convolution.conv2d_s8(params, x, wt, b)
    assert_same(out, want, f"conv2d {case}")
    with_folded = np.zeros_like(out)
    run(K, "conv2d", dict(params, folded_bias=folded(wt, b, params["input_zp"])), x, wt, b, with_folded)
    assert_same(with_folded, want, f"conv2d {case}, folded bias precomputed")
    return out


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(24))
def test_conv2d_random(K, seed):
    rng = np.random.default_rng(1000 + seed)
    for i in range(8):
        case = random_conv_case(rng, pointwise=(i % 4 == 0))
        check_conv(K, rng, case, per_channel=bool(i % 2), act=ACTS[(seed + i) % 4], with_bias=(i % 3 != 2))


@pytest.mark.cc
def test_conv2d_large_patch_uses_direct_path(K):
    rng = np.random.default_rng(5)
    for _i in range(3):  # 3x3x240/256 patches exceed ZO_CONV_PATCH_MAX (2048)
        case = random_conv_case(rng, big=True)
        check_conv(K, rng, case, per_channel=True, act="NONE", with_bias=True)


@pytest.mark.cc
def test_conv2d_typical_layer_and_spread(K):
    """A 32x32x16 -> 32 3x3 SAME layer: exercises every border case and produces a real spread."""
    rng = np.random.default_rng(11)
    case = dict(h=32, w=32, c=16, fc=16, oc=32, kh=3, kw=3, sh=1, sw=1, dh=1, dw=1, padding="SAME", oh=32, ow=32)
    out = check_conv(K, rng, case, per_channel=True, act="NONE", with_bias=True)
    assert len(np.unique(out)) > 100


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(20))
def test_depthwise_conv2d_random(K, seed):
    rng = np.random.default_rng(2000 + seed)
    for i in range(8):
        while True:
            h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
            c = int(rng.choice([1, 3, 8, 16, 24, int(rng.integers(1, 80))]))
            dm = int(rng.choice([1, 1, 1, 2, 3]))
            kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
            sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            dh, dw = (1, 1) if rng.random() < 0.6 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
            padding = str(rng.choice(["SAME", "VALID"]))
            (oh, ow), _ = quant.compute_padding_hw((sh, sw), (dh, dw), (h, w), (kh, kw), padding)
            if oh >= 1 and ow >= 1:
                break
        oc = c * dm
        in_s, fs, out_s = conv_scales(rng, kh * kw, bool(i % 2), oc)
        params = convolution_params.depthwise_conv2d_params(
            input_hwc=(h, w, c),
            output_hwc=(oh, ow, oc),
            filter_1hwo=(1, kh, kw, oc),
            stride_hw=(sh, sw),
            dilation_hw=(dh, dw),
            padding=padding,
            depth_multiplier=dm,
            input_scale=in_s,
            input_zp=rand_zp(rng),
            filter_scales=fs,
            output_scale=out_s,
            output_zp=rand_zp(rng),
            activation=ACTS[(seed + i) % 4],
        )
        x = rand_i8(rng, (h, w, c))
        wt = rand_i8(rng, (1, kh, kw, oc))
        b = rng.integers(-20000, 20000, oc).astype(np.int32) if i % 3 else None
        out = np.zeros((oh, ow, oc), np.int8)
        run(K, "depthwise_conv2d", params, x, wt, b, out)
        assert_same(out, ref_convolution.depthwise_conv2d_s8(params, x, wt, b), f"depthwise seed {seed} case {i}")


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(10))
def test_fully_connected_random(K, seed):
    rng = np.random.default_rng(3000 + seed)
    for i in range(8):
        rows = int(rng.choice([1, 1, 2, 5]))
        depth = int(rng.choice([1, 7, 16, 64, 250, int(rng.integers(1, 400))]))
        units = int(rng.choice([1, 4, 10, 65, 130, int(rng.integers(1, 100))]))
        per_channel = bool(i % 2) and units > 1
        in_s, fs, out_s = conv_scales(rng, depth, per_channel, units)
        params = fully_connected_params.fully_connected_params(
            input_elements=rows * depth,
            weights_shape=(units, depth),
            input_scale=in_s,
            input_zp=rand_zp(rng),
            filter_scales=fs,
            output_scale=out_s,
            output_zp=rand_zp(rng),
            activation=ACTS[i % 4],
        )
        x = rand_i8(rng, rows * depth)
        wt = rand_i8(rng, (units, depth))
        b = rng.integers(-50000, 50000, units).astype(np.int32) if i % 3 else None
        out = np.zeros((rows, units), np.int8)
        if i % 2:
            params["folded_bias"] = folded(wt, b, params["input_zp"])
        run(K, "fully_connected", params, x, wt, b, out)
        assert_same(
            out, ref_fully_connected.fully_connected_s8(params, x, wt, b), f"fully_connected seed {seed} case {i}"
        )


# ------------------------------------------------------------------------------------ pooling


@pytest.mark.cc
@pytest.mark.parametrize("kind", ["avg_pool", "max_pool"])
@pytest.mark.parametrize("seed", range(4))
def test_pool_random(K, kind, seed):
    rng = np.random.default_rng(4000 + seed + (100 if kind == "max_pool" else 0))
    for i in range(10):
        while True:
            h, w = int(rng.integers(1, 16)), int(rng.integers(1, 16))
            c = int(rng.choice([1, 3, 16, 70, int(rng.integers(1, 40))]))
            fh, fw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
            sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            padding = str(rng.choice(["SAME", "VALID"]))
            (oh, ow), _ = quant.compute_padding_hw((sh, sw), (1, 1), (h, w), (fh, fw), padding)
            if oh >= 1 and ow >= 1:
                break
        params = pooling_params.pool_params(
            input_hwc=(h, w, c),
            output_hwc=(oh, ow, c),
            filter_hw=(fh, fw),
            stride_hw=(sh, sw),
            padding=padding,
            output_scale=f32(rng.uniform(0.01, 0.1)),
            output_zp=rand_zp(rng),
            activation=ACTS[(seed + i) % 4],
        )
        x = rand_i8(rng, (h, w, c))
        out = np.zeros((oh, ow, c), np.int8)
        run(K, kind, params, x, out)
        want = (ref_pooling.avg_pool_s8 if kind == "avg_pool" else ref_pooling.max_pool_s8)(params, x)
        assert_same(out, want, f"{kind} seed {seed} case {i}")


@pytest.mark.cc
def test_avg_pool_rounds_half_away_from_zero(K):
    params = pooling_params.pool_params(
        input_hwc=(1, 2, 4),
        output_hwc=(1, 1, 4),
        filter_hw=(1, 2),
        stride_hw=(1, 1),
        padding="VALID",
        output_scale=0.1,
        output_zp=0,
        activation="NONE",
    )
    x = np.array([[[1, -1, 3, -128], [0, 0, 0, -127]]], np.int8)  # sums 1, -1, 3, -255 over 2
    out = np.zeros((1, 1, 4), np.int8)
    run(K, "avg_pool", params, x, out)
    assert out.reshape(-1).tolist() == [1, -1, 2, -128]


# -------------------------------------------------------------------------------- elementwise


def random_broadcast_shapes(rng):
    rank = int(rng.integers(0, 5))
    out = tuple(int(rng.choice([1, 2, 3, 5, 8])) for _ in range(rank))
    if rank and rng.random() < 0.3:
        out = out[:-1] + (int(rng.integers(1, 40)),)

    def operand():
        r = int(rng.integers(0, rank + 1))
        dims = out[rank - r :] if r else ()
        return tuple(d if rng.random() < 0.6 else 1 for d in dims)

    a, b = operand(), operand()
    if rng.random() < 0.3:
        a = out
    full = tuple(np.broadcast_shapes(a, b))
    return a, b, full


@pytest.mark.cc
@pytest.mark.parametrize("kind", ["add", "mul"])
@pytest.mark.parametrize("seed", range(10))
def test_binary_broadcast_random(K, kind, seed):
    rng = np.random.default_rng(5000 + seed + (100 if kind == "mul" else 0))
    for i in range(12):
        s1, s2, so = random_broadcast_shapes(rng)
        if math.prod(so) == 0:
            continue
        a_s, b_s = f32(rng.uniform(0.01, 0.2)), f32(rng.uniform(0.01, 0.2) * (10 if i % 4 == 0 else 1))
        if kind == "add":
            o_s = f32(max(a_s, b_s) * rng.uniform(0.5, 3.0))
        else:
            o_s = f32(a_s * b_s * 128 * rng.uniform(0.05, 2.0) * (0.002 if i % 5 == 0 else 1.0))
        params = KERNELS.get(kind).build(
            input1_shape=s1,
            input2_shape=s2,
            output_shape=so,
            input1_scale=a_s,
            input1_zp=rand_zp(rng),
            input2_scale=b_s,
            input2_zp=rand_zp(rng),
            output_scale=o_s,
            output_zp=rand_zp(rng),
            activation=ACTS[(seed + i) % 4],
        )
        a, b = rand_i8(rng, s1), rand_i8(rng, s2)
        out = np.zeros(so, np.int8)
        run(K, kind, params, np.ascontiguousarray(a), np.ascontiguousarray(b), out)
        want = (ref_binary.add_s8 if kind == "add" else ref_binary.mul_s8)(params, a, b)
        assert_same(out, want, f"{kind} {s1} x {s2} -> {so}")


@pytest.mark.cc
def test_add_mobilenet_residual_same_shape(K):
    rng = np.random.default_rng(77)
    shape = (1, 8, 8, 24)
    params = binary_params.add_params(
        input1_shape=shape,
        input2_shape=shape,
        output_shape=shape,
        input1_scale=0.11,
        input1_zp=-7,
        input2_scale=0.042,
        input2_zp=12,
        output_scale=0.13,
        output_zp=-3,
        activation="NONE",
    )
    assert params["broadcast"] == 0
    a, b = rand_i8(rng, shape), rand_i8(rng, shape)
    out = np.zeros(shape, np.int8)
    run(K, "add", params, a, b, out)
    assert_same(out, ref_binary.add_s8(params, a, b), "residual add")


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(4))
def test_requantize_all_inputs(K, seed):
    rng = np.random.default_rng(6000 + seed)
    x = np.arange(-128, 128, dtype=np.int8)
    for _i in range(10):
        ratio = float(np.exp(rng.uniform(-6, 6)))
        in_s = f32(rng.uniform(0.01, 0.1))
        params = activation_params.requantize_params(
            size=256, input_scale=in_s, input_zp=rand_zp(rng), output_scale=f32(in_s / ratio), output_zp=rand_zp(rng)
        )
        out = np.zeros(256, np.int8)
        run(K, "requantize", params, x, out)
        assert_same(out, ref_activation.requantize_s8(params, x), f"requantize ratio {ratio}")


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(3))
def test_dequantize_all_inputs_bit_exact_float(K, seed):
    rng = np.random.default_rng(7000 + seed)
    x = np.arange(-128, 128, dtype=np.int8)
    scales = [f32(v) for v in np.exp(rng.uniform(-20, 5, 30))] + [f32(1 / 3), f32(0.1), 2.0**-7]
    for s in scales:
        params = activation_params.dequantize_params(size=256, scale=s, zp=rand_zp(rng))
        out = np.zeros(256, np.float32)
        run(K, "dequantize", params, x, out)
        want = ref_activation.dequantize_s8(params, x)
        assert_same(out.view(np.uint32), want.view(np.uint32), f"dequantize scale {s!r}")
        assert repr(float(np.float32(float(f"{params['scale']:.9g}")))) == repr(params["scale"])


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(4))
def test_logistic_all_inputs(K, seed):
    rng = np.random.default_rng(8000 + seed)
    x = np.arange(-128, 128, dtype=np.int8)
    scales = [f32(v) for v in np.exp(rng.uniform(-7, 1, 12))] + [1 / 16, 0.1, 1 / 256, 0.5]
    for s in scales:
        params = activation_params.logistic_params(
            size=256, input_scale=s, input_zp=rand_zp(rng), output_scale=1 / 256, output_zp=-128
        )
        out = np.zeros(256, np.int8)
        run(K, "logistic", params, x, out)
        assert_same(out, ref_activation.logistic_s8(params, x), f"logistic scale {s}")


def test_logistic_reference_tracks_the_float_sigmoid():
    """Guards the reference itself: within 1 LSB of the real sigmoid everywhere."""
    x = np.arange(-128, 128)
    for s, zp in ((0.1, 0), (1 / 16, 10), (0.03, -128), (0.5, 127)):
        p = activation_params.logistic_params(
            size=256, input_scale=s, input_zp=zp, output_scale=1 / 256, output_zp=-128
        )
        got = ref_activation.logistic_s8(p, x.astype(np.int8)).astype(int)
        real = np.clip(np.round(256 / (1 + np.exp(-(x - zp) * f32(s)))) - 128, -128, 127)
        assert np.max(np.abs(got - real)) <= 1


# ---------------------------------------------------------------------------------- softmax


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(6))
def test_softmax_random(K, seed):
    rng = np.random.default_rng(9000 + seed)
    for _i in range(8):
        outer = int(rng.choice([1, 1, 3, 7]))
        depth = int(rng.choice([1, 2, 10, 12, 35, 100, int(rng.integers(1, 400))]))
        in_s = f32(np.exp(rng.uniform(-6, 1)))
        beta = f32(rng.choice([1.0, 1.0, 0.5, 2.0, float(rng.uniform(0.1, 3))]))
        params = activation_params.softmax_params(
            outer=outer,
            depth=depth,
            beta=beta,
            input_scale=in_s,
            input_zp=rand_zp(rng),
            output_scale=1 / 256,
            output_zp=-128,
        )
        spread = int(rng.choice([3, 30, 256]))
        x = np.clip(
            rng.integers(-128, -128 + spread, (outer, depth)) + int(rng.integers(0, 256 - spread + 1)), -128, 127
        ).astype(np.int8)
        out = np.zeros((outer, depth), np.int8)
        run(K, "softmax", params, x, out)
        assert_same(out, ref_activation.softmax_s8(params, x), f"softmax depth {depth} scale {in_s} beta {beta}")


def test_softmax_reference_tracks_the_float_softmax():
    rng = np.random.default_rng(3)
    for in_s in (0.05, 0.1, 0.25):
        p = activation_params.softmax_params(
            outer=4, depth=10, beta=1.0, input_scale=in_s, input_zp=0, output_scale=1 / 256, output_zp=-128
        )
        x = rng.integers(-128, 128, (4, 10)).astype(np.int8)
        got = ref_activation.softmax_s8(p, x).astype(int) + 128
        xi = x.astype(np.int64)
        e = np.exp((xi - xi.max(axis=1, keepdims=True)) * f32(in_s))
        real = e / e.sum(axis=1, keepdims=True) * 256
        assert np.max(np.abs(got - np.minimum(real, 255))) <= 1.5


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(6))
def test_log_softmax_random(K, seed):
    rng = np.random.default_rng(9100 + seed)
    for _i in range(8):
        outer = int(rng.choice([1, 1, 3, 7]))
        depth = int(rng.choice([1, 2, 10, 12, 35, 100, int(rng.integers(1, 400))]))
        in_s = f32(np.exp(rng.uniform(-6, 1)))
        params = activation_params.log_softmax_params(
            outer=outer, depth=depth, input_scale=in_s, input_zp=rand_zp(rng), output_scale=16 / 256, output_zp=127
        )
        spread = int(rng.choice([3, 30, 256]))
        x = np.clip(
            rng.integers(-128, -128 + spread, (outer, depth)) + int(rng.integers(0, 256 - spread + 1)), -128, 127
        ).astype(np.int8)
        out = np.zeros((outer, depth), np.int8)
        run(K, "log_softmax", params, x, out)
        assert_same(out, ref_activation.log_softmax_s8(params, x), f"log_softmax depth {depth} scale {in_s}")


def test_log_softmax_reference_tracks_the_float_log_softmax():
    rng = np.random.default_rng(4)
    for in_s in (0.05, 0.1, 0.25):
        p = activation_params.log_softmax_params(
            outer=4, depth=10, input_scale=in_s, input_zp=0, output_scale=16 / 256, output_zp=127
        )
        x = rng.integers(-128, 128, (4, 10)).astype(np.int8)
        got = (ref_activation.log_softmax_s8(p, x).astype(int) - 127) / 16
        z = (x.astype(np.int64) - x.max(axis=1, keepdims=True)) * f32(in_s)
        real = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        assert np.max(np.abs(got - np.maximum(real, -255 / 16))) <= 1.5 / 16


# ------------------------------------------------------------------------------ data movement


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(4))
def test_pad_random(K, seed):
    rng = np.random.default_rng(10000 + seed)
    for _i in range(10):
        rank = int(rng.integers(1, 6))
        shape = tuple(int(rng.integers(1, 6)) for _ in range(rank))
        pads = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(rank))
        params = data_movement_params.pad_params(input_shape=shape, paddings=pads, pad_value=rand_zp(rng))
        x = rand_i8(rng, shape)
        out = np.zeros(tuple(d + a + b for d, (a, b) in zip(shape, pads)), np.int8)
        run(K, "pad", params, x, out)
        assert_same(out, ref_data_movement.pad_s8(params, x), f"pad {shape} {pads}")


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(4))
def test_concat_random(K, seed):
    rng = np.random.default_rng(11000 + seed)
    for _i in range(10):
        rank = int(rng.integers(1, 6))
        base = [int(rng.integers(1, 5)) for _ in range(rank)]
        axis = int(rng.integers(-rank, rank))
        n = int(rng.integers(1, 6))
        shapes = []
        for _ in range(n):
            s = list(base)
            s[axis] = int(rng.integers(0 if n > 1 else 1, 5))
            shapes.append(tuple(s))
        params = data_movement_params.concat_params(input_shapes=shapes, axis=axis)
        xs = [rand_i8(rng, s) for s in shapes]
        want = ref_data_movement.concat_s8(params, xs, axis)
        out = np.zeros(want.shape, np.int8)
        run(K, "concat", params, xs, out)
        assert_same(out, want, f"concat {shapes} axis {axis}")


# ------------------------------------------------------------------------------------- mean

MEAN_CASES = [
    ((1, 7, 7, 32), (1, 2)),  # global average pool, NHWC
    ((1, 32, 32, 8), (1, 2)),  # 1024 elements per mean
    ((1, 5, 3, 70), (1, 2)),
    ((1, 49, 64), (1,)),  # 3-D, axis 1
    ((1, 12, 5), (-2,)),
    ((4, 6), (1,)),
    ((1, 3, 4, 5), (3,)),
    ((1, 3, 4, 5), (2, 3)),
    ((2, 3, 4), (0, 1)),
    ((1, 1, 10, 1), (0, 1, 2)),  # size-1 dimensions are ignored for contiguity
    ((1, 8, 1, 6), (1, 2)),
    ((3, 2, 5), (0, 1, 2)),
]


@pytest.mark.cc
@pytest.mark.parametrize("shape,axes", MEAN_CASES)
def test_mean(K, shape, axes):
    rng = np.random.default_rng(abs(hash((shape, axes))) % 2**32)
    for i in range(6):
        in_s = f32(rng.uniform(0.01, 0.2))
        out_s = f32(in_s * float(np.exp(rng.uniform(-3, 3))))
        params = reduction_params.mean_params(
            input_shape=shape,
            axes=axes,
            input_scale=in_s,
            input_zp=rand_zp(rng),
            output_scale=out_s,
            output_zp=rand_zp(rng),
        )
        x = rand_i8(rng, shape)
        if i == 0:
            x = np.clip(x.astype(int) + 100, -128, 127).astype(np.int8)  # biased mean
        want = ref_reduction.mean_s8(params, x, tuple(a % len(shape) for a in axes))
        out = np.zeros(want.shape, np.int8)
        run(K, "mean", params, x, out)
        assert_same(out, want, f"mean {shape} axes {axes}")


def test_mean_multiplier_folds_the_count_like_tflm():
    p = reduction_params.mean_params(
        input_shape=(1, 7, 7, 4), axes=(1, 2), input_scale=0.1, input_zp=0, output_scale=0.1, output_zp=0
    )
    m, s = quant.quantize_multiplier(f32(0.1) / f32(0.1))
    assert (m, s) == (1 << 30, 1)
    assert p["reduce"] == 49 and p["multiplier"] == (m << 5) // 49 and p["shift"] == s - 5


# ------------------------------------------------------------------------------ speed sanity


@pytest.mark.cc
def test_pointwise_conv_is_fast(K):
    """A 32x32x64 -> 64 1x1 conv (4M MACs) takes about 0.5 ms at -O2; 20 ms leaves room for slow CI."""
    rng = np.random.default_rng(1)
    params = convolution_params.conv2d_params(
        input_hwc=(32, 32, 64),
        output_hwc=(32, 32, 64),
        filter_ohwi=(64, 1, 1, 64),
        stride_hw=(1, 1),
        dilation_hw=(1, 1),
        padding="SAME",
        input_scale=0.05,
        input_zp=3,
        filter_scales=[0.01] * 64,
        output_scale=0.2,
        output_zp=-1,
        activation="RELU6",
    )
    x, w = rand_i8(rng, (32, 32, 64)), rand_i8(rng, (64, 1, 1, 64))
    b = rng.integers(-1000, 1000, 64).astype(np.int32)
    out = np.zeros((32, 32, 64), np.int8)
    best = min(_timed(lambda: run(K, "conv2d", params, x, w, b, out)) for _ in range(5))
    assert best < 0.02, f"{best * 1e3:.1f} ms"
    assert_same(out, ref_convolution.conv2d_s8(params, x, w, b), "pointwise")


def _timed(fn):
    import time

    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# ----------------------------------------------------------------------------- cross compile


@pytest.mark.cross
def test_kernels_cross_compile_for_cortex_m55(tmp_path):
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc is not installed (apt-get install gcc-arm-none-eabi)")
    for src in cbuild.KERNEL_SOURCES:
        obj = tmp_path / (src.stem + ".o")
        res = subprocess.run([cc, *cbuild.CROSS_FLAGS, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert obj.stat().st_size > 0


@pytest.mark.cc
def test_kernels_compile_clean_with_pedantic_flags(tmp_path):
    cc = cbuild.host_cc()
    for src in cbuild.KERNEL_SOURCES:
        res = subprocess.run(
            [
                cc,
                *cbuild.HOST_FLAGS,
                "-Wpedantic",
                "-Wshadow",
                "-Wstrict-prototypes",
                "-c",
                str(src),
                "-o",
                str(tmp_path / "x.o"),
            ],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr


# ---- begin QUANTIZE at the model's edges (kernel tests in tests/test_io_types.py) ----
SAMPLE_ARGS.update(
    {
        "requantize_u8_s8": dict(
            size=10,
            input_scale=0.1,
            input_zp=128,
            output_scale=0.1,
            output_zp=0,
            input_dtype="uint8",
            output_dtype="int8",
        ),
        "requantize_s8_u8": dict(
            size=10,
            input_scale=0.1,
            input_zp=-3,
            output_scale=0.2,
            output_zp=250,
            input_dtype="int8",
            output_dtype="uint8",
        ),
        "quantize_f32_s8": dict(size=10, output_scale=0.1, output_zp=-128),
    }
)
# ---- end QUANTIZE at the model's edges ----

# ==================================================================== data movement (movement ops)
# Their tests are in tests/test_kernels_movement.py; the samples are its SAMPLES.
from test_kernels_movement import SAMPLES as _MOVEMENT_SAMPLES  # noqa: E402

SAMPLE_ARGS.update(_MOVEMENT_SAMPLES)
# ==================================================================== end of data movement

# ------------------------------------------- element-wise and activation ops --------------------
# Their samples and tests live in test_kernels_activation.py.
from test_kernels_activation import SAMPLES as _ACTIVATION_SAMPLES  # noqa: E402

SAMPLE_ARGS.update(_ACTIVATION_SAMPLES)
# ---------------------------------------------------- end of element-wise and activation ops ----------

# ==== reductions, resizing, transposed convolution (the kernels: tests/test_kernels_resize.py) ====

_RESIZE_FAMILY = {
    "reduce_max": dict(input_shape=(1, 4, 5, 3), axes=(1, -2)),
    "arg_max": dict(input_shape=(1, 4, 10), axis=-1),
    "resize_bilinear": dict(input_hwc=(3, 4, 2), output_hwc=(6, 8, 2), align_corners=False, half_pixel_centers=True),
    "resize_nearest": dict(input_hwc=(3, 4, 2), output_hwc=(6, 8, 2), align_corners=True, half_pixel_centers=False),
    "transpose_conv": dict(
        input_hwc=(3, 3, 4),
        output_hwc=(6, 6, 2),
        filter_ohwi=(2, 3, 3, 4),
        stride_hw=(2, 2),
        padding="SAME",
        input_scale=0.05,
        input_zp=-3,
        filter_scales=[0.01, 0.02],
        output_scale=0.1,
        output_zp=2,
        activation="NONE",
    ),
}
SAMPLE_ARGS.update(_RESIZE_FAMILY)


@pytest.mark.parametrize("name", sorted(_RESIZE_FAMILY))
def test_resize_family_builders_fill_their_structs(name):
    test_builder_keys_are_exactly_the_struct_fields(name)
    test_builders_are_keyword_only(name)


# ==== end of reductions, resizing, transposed convolution ========================================


# ==== sequence ops: SVDF (the kernels: tests/test_kernels_sequence.py) ===========================

_SVDF = dict(
    batches=1,
    input_size=8,
    num_filters=4,
    rank=2,
    memory_size=5,
    input_scale=0.05,
    input_zp=-3,
    feature_scale=0.01,
    state_scale=0.02,
    state_zp=3,
    time_scale=0.004,
    output_scale=0.1,
    output_zp=1,
)
_SEQUENCE_FAMILY = {
    "svdf_s8": dict(_SVDF, state_dtype="int8"),
    "svdf_s8_s16": dict(_SVDF, state_zp=0, state_dtype="int16"),
    "requantize_s16_s8": dict(size=10, input_scale=0.0005, input_zp=0, output_scale=0.05, output_zp=-4),
}
SAMPLE_ARGS.update(_SEQUENCE_FAMILY)


@pytest.mark.parametrize("name", sorted(_SEQUENCE_FAMILY))
def test_sequence_family_builders_fill_their_structs(name):
    test_builder_keys_are_exactly_the_struct_fields(name)
    test_builders_are_keyword_only(name)


# ==== end of sequence ops ========================================================================


# ==== UNIDIRECTIONAL_SEQUENCE_LSTM (the kernel: tests/test_kernels_lstm.py) ===============
from test_kernels_lstm import SAMPLES as _LSTM_SAMPLES  # noqa: E402

SAMPLE_ARGS.update(_LSTM_SAMPLES)


@pytest.mark.parametrize("name", sorted(_LSTM_SAMPLES))
def test_lstm_builder_fills_its_struct(name):
    test_builder_keys_are_exactly_the_struct_fields(name)
    test_builders_are_keyword_only(name)


# ==== end of UNIDIRECTIONAL_SEQUENCE_LSTM ========================================================
# ==== int16 activations (16x8 quantization; the kernels: tests/test_kernels_int16.py) ============
from test_kernels_int16 import SAMPLES as _INT16_SAMPLES  # noqa: E402

SAMPLE_ARGS.update(_INT16_SAMPLES)


@pytest.mark.parametrize("name", sorted(_INT16_SAMPLES))
def test_int16_builders_fill_their_structs(name):
    test_builder_keys_are_exactly_the_struct_fields(name)
    test_builders_are_keyword_only(name)


# ==== end of int16 activations ===================================================================


# ==== resource variables and CAST (the kernels: tests/test_resource_variables.py, tests/test_cast.py) ====
_VARIABLES_AND_CAST = {"copy_s8": dict(size=12)}
_VARIABLES_AND_CAST.update(
    {
        name: dict(size=7, input_dtype=k.arg_dtypes[0], output_dtype=k.arg_dtypes[1])
        for name, k in KERNELS.items()
        if name.startswith("cast_")
    }
)
SAMPLE_ARGS.update(_VARIABLES_AND_CAST)


@pytest.mark.parametrize("name", sorted(_VARIABLES_AND_CAST))
def test_variable_and_cast_builders_fill_their_structs(name):
    test_builder_keys_are_exactly_the_struct_fields(name)
    test_builders_are_keyword_only(name)


# ==== end of resource variables and CAST ===================================================================
