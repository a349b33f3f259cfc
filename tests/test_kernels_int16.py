"""int16 activations (16x8 quantization): the C kernels of zo_kernels_int16.c against the NumPy
reference (the int16 kernels of reference/ops/<family>.py) on random shapes and parameters, the LUTs against the
functions they tabulate, the 16x8 fixture models (tests/fixtures/ops/int16.json) bit for bit against
the tflite-micro interpreter through the generated C and the reference forward pass, and what
legality refuses.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler import quant  # noqa: E402
from zoflash.compiler.ops import (  # noqa: E402
    KERNELS,  # noqa: E402
    activation_params,
    fully_connected_params,
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import activation as ref_activation  # noqa: E402
from zoflash.reference.ops import binary as ref_binary  # noqa: E402
from zoflash.reference.ops import convolution as ref_convolution  # noqa: E402
from zoflash.reference.ops import fully_connected as ref_fully_connected  # noqa: E402
from zoflash.reference.ops import movement as ref_movement  # noqa: E402
from zoflash.reference.ops import pooling as ref_pooling  # noqa: E402
from zoflash.reference.ops import reduction as ref_reduction  # noqa: E402
from zoflash.reference.ops import resize as ref_resize  # noqa: E402
from zoflash.targets.host_runner import HostModel  # noqa: E402

OPS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ops"
INDEX = json.loads((OPS_FIXTURES / "int16.json").read_text())
# Fixtures with an op zoflash has no int16 variant of: refused, with this phrase.
REFUSED = {"s16_mlp.tflite": "op 2 TANH"}
FILES = [f["file"] for f in INDEX if f["file"] not in REFUSED]

# Builder samples for tests/test_kernels.py's struct contract.
_BINARY = dict(
    input1_shape=(2, 3),
    input2_shape=(3,),
    output_shape=(2, 3),
    input1_scale=1e-4,
    input1_zp=0,
    input2_scale=2e-4,
    input2_zp=0,
    output_scale=3e-4,
    output_zp=0,
    activation="NONE",
)
_Q = dict(size=10, input_scale=0.0005, output_scale=0.05)
SAMPLES = {
    "softmax_s8_s16": dict(
        outer=2, depth=5, beta=1.0, input_scale=0.1, input_zp=3, output_scale=1 / 65536, output_zp=-32768
    ),
    "softmax_s16": dict(outer=2, depth=5, beta=1.0, input_scale=0.001, input_zp=0, output_scale=1 / 32768, output_zp=0),
    "requantize_s8_s16": dict(_Q, input_zp=-3, output_zp=100, input_dtype="int8", output_dtype="int16"),
    "requantize_s16_s16": dict(_Q, input_zp=0, output_zp=0, input_dtype="int16", output_dtype="int16"),
    "requantize_s16_s32": dict(_Q, input_zp=-300, output_zp=7, input_dtype="int16", output_dtype="int32"),
    "requantize_s8_s32": dict(_Q, input_zp=5, output_zp=0, input_dtype="int8", output_dtype="int32"),
    "dequantize_s16": dict(size=10, scale=0.0001, zp=0),
    "quantize_f32_s16": dict(size=10, output_scale=0.0001, output_zp=0),
    "conv2d_s16": dict(
        input_hwc=(5, 5, 4),
        output_hwc=(3, 3, 6),
        filter_ohwi=(6, 3, 3, 2),
        stride_hw=(2, 2),
        dilation_hw=(1, 1),
        padding="SAME",
        input_scale=0.0005,
        input_zp=0,
        filter_scales=[0.01] * 6,
        output_scale=0.001,
        output_zp=0,
        activation="RELU",
    ),
    "depthwise_conv2d_s16": dict(
        input_hwc=(5, 5, 4),
        output_hwc=(5, 5, 8),
        filter_1hwo=(1, 3, 3, 8),
        stride_hw=(1, 1),
        dilation_hw=(1, 1),
        padding="SAME",
        depth_multiplier=2,
        input_scale=0.0005,
        input_zp=0,
        filter_scales=[0.01],
        output_scale=0.001,
        output_zp=0,
        activation="NONE",
    ),
    "avg_pool_s16": dict(
        input_hwc=(4, 4, 3),
        output_hwc=(2, 2, 3),
        filter_hw=(2, 2),
        stride_hw=(2, 2),
        padding="VALID",
        output_scale=0.001,
        output_zp=0,
        activation="NONE",
    ),
    "max_pool_s16": dict(
        input_hwc=(4, 4, 3),
        output_hwc=(2, 2, 3),
        filter_hw=(2, 2),
        stride_hw=(2, 2),
        padding="VALID",
        output_scale=0.001,
        output_zp=0,
        activation="RELU",
    ),
    "pad_s16": dict(input_shape=(1, 3, 3, 2), paddings=[(0, 0), (1, 1), (0, 2), (0, 0)], pad_value=-5),
    "concat_s16": dict(input_shapes=[(1, 2, 3), (1, 2, 5)], axis=2),
    "add_s16": dict(_BINARY, input1_zp=3, output_zp=-2),
    "sub_s16": dict(_BINARY, input1_zp=3),
    "mul_s16": dict(_BINARY, output_scale=1e-6),
    "relu_s16": dict(size=10, input_scale=1e-4, input_zp=0, output_scale=2e-4, output_zp=0),
    "relu6_s16": dict(size=10, input_scale=1e-3, input_zp=0),
    "leaky_relu_s16": dict(size=10, alpha=0.2, input_scale=1e-4, input_zp=0, output_scale=1e-4, output_zp=0),
    "mean_s16": dict(
        input_shape=(1, 4, 4, 3), axes=(1, 2), input_scale=1e-4, input_zp=0, output_scale=1e-4, output_zp=0
    ),
    "transpose_s16": dict(input_shape=(1, 2, 3, 4), perm=(0, 3, 1, 2)),
    "slice_s16": dict(input_shape=(1, 4, 5), begin=(0, 1, 2), size=(1, 2, -1)),
    "strided_slice_s16": dict(
        input_shape=(1, 6, 4),
        begin=(0, 0, 1),
        end=(1, 6, 4),
        strides=(1, 2, 1),
        begin_mask=0,
        end_mask=0,
        shrink_axis_mask=0,
    ),
    "split_s16": dict(input_shape=(1, 6, 4), axis=1, sizes=(2, 4)),
    "pack_s16": dict(input_shape=(2, 3), count=3, axis=1),
    "maximum_s16": dict(input1_shape=(2, 3), input2_shape=(3,), output_shape=(2, 3)),
    "minimum_s16": dict(input1_shape=(2, 3), input2_shape=(2, 3), output_shape=(2, 3)),
    "resize_nearest_s16": dict(input_hwc=(3, 4, 2), output_hwc=(6, 8, 2), align_corners=False, half_pixel_centers=True),
    "fully_connected_s16": dict(
        input_elements=16,
        weights_shape=(3, 8),
        input_scale=0.0005,
        input_zp=0,
        filter_scales=[0.01, 0.02, 0.03],
        output_scale=0.001,
        output_zp=0,
        activation="NONE",
    ),
}


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want).reshape(np.shape(got))
    bad = np.flatnonzero(got.reshape(-1).view(np.uint8) != want.reshape(-1).astype(got.dtype).view(np.uint8))
    if bad.size:
        k = bad[0] // got.itemsize
        raise AssertionError(
            f"{what}: {bad.size} bytes of {got.nbytes} differ; first at element {k}: "
            f"C {got.reshape(-1)[k]} vs reference {want.reshape(-1)[k]}"
        )


def f32(v) -> float:
    return float(np.float32(v))


def int16_values(rng, n):
    """n int16 values, every third one small, the first ones -32768, 32767 and 0."""
    x = rng.integers(-32768, 32768, n)
    x[1::3] //= 200
    k = min(3, n)
    x[:k] = (-32768, 32767, 0)[:k]
    return x.astype(np.int16)


# ------------------------------------------------------------------------- C vs NumPy reference


def test_luts_tabulate_exp_and_the_reciprocal():
    """Each table entry is the function at its point to within 2 LSB (TFLM biases each entry by half
    the midpoint's interpolation error), and interpolating between entries stays within 8 LSB."""
    p = activation_params.softmax_s16_params(**SAMPLES["softmax_s16"])
    x = np.linspace(-10.0, 0.0, 513)
    assert np.abs(p["exp_lut"] - np.minimum(np.exp(x) * 32768, 32767)).max() <= 2
    u = np.linspace(0.0, 1.0, 513)
    assert np.abs(p["one_over_one_plus_x_lut"] - np.minimum(32768 / (1 + u), 32767)).max() <= 2
    v = np.arange(-32768, 32768, 37)
    got = ref_activation.lut_lookup_s16(v, p["exp_lut"]).astype(np.float64)
    assert np.abs(got - np.minimum(np.exp((v - 32767) * 10 / 65535) * 32768, 32767)).max() <= 8


@pytest.mark.cc
def test_softmax_s8_s16(K):
    rng = np.random.default_rng(31)
    kernel = KERNELS.get("softmax_s8_s16")
    for i in range(40):
        outer, depth = int(rng.integers(1, 4)), int(rng.integers(1, 40))
        p = kernel.build(
            outer=outer,
            depth=depth,
            beta=f32(rng.uniform(0.3, 2.0)),
            input_scale=f32(rng.uniform(0.01, 0.5)),
            input_zp=int(rng.integers(-128, 128)),
            output_scale=1 / 65536,
            output_zp=-32768,
        )
        x = rng.integers(-128, 128, outer * depth).astype(np.int8)
        x[: min(2, x.size)] = (-128, 127)[: min(2, x.size)]
        out = np.zeros(outer * depth, np.int16)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_activation.softmax_s8_s16(p, x), f"softmax_s8_s16 case {i} ({outer}x{depth})")
        if depth > 1:  # probabilities: each row sums to about 1
            assert np.allclose((out.reshape(outer, depth) + 32768.0).sum(axis=1) / 65536, 1.0, atol=0.01 * depth)


@pytest.mark.cc
def test_softmax_s16(K):
    rng = np.random.default_rng(32)
    kernel = KERNELS.get("softmax_s16")
    for i in range(40):
        outer, depth = int(rng.integers(1, 4)), int(rng.integers(1, 60))
        input_scale, beta = f32(10 ** rng.uniform(-5, -2.5)), f32(rng.uniform(0.3, 2.0))
        p = kernel.build(
            outer=outer,
            depth=depth,
            beta=beta,
            input_scale=input_scale,
            input_zp=0,
            output_scale=1 / 32768,
            output_zp=0,
        )
        x = int16_values(rng, outer * depth)
        out = np.zeros(outer * depth, np.int16)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_activation.softmax_s16(p, x), f"softmax_s16 case {i} ({outer}x{depth})")
        # The probabilities to within a few LSB, and exp(-10) (2 LSB), the table's floor, per entry.
        z = x.reshape(outer, depth) * (input_scale * beta)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        error = np.abs(out.reshape(outer, depth) / 32768 - e / e.sum(axis=1, keepdims=True)).max()
        assert error < 0.002 + depth * 2 / 32768, (i, error)


@pytest.mark.cc
@pytest.mark.parametrize("name", ["requantize_s8_s16", "requantize_s16_s16", "requantize_s16_s32", "requantize_s8_s32"])
def test_requantize(K, name):
    rng = np.random.default_rng(33)
    kernel = KERNELS.get(name)
    x_type, y_type = kernel.arg_dtypes
    lo, hi = np.iinfo(x_type).min, np.iinfo(x_type).max
    for i in range(40):
        small = y_type == "int32" or x_type == "int8"  # widening: the ratio may exceed 1
        ratio = 10 ** rng.uniform(-3, 3 if small else 0.5)
        in_s = f32(10 ** rng.uniform(-5, -1))
        out_zp = int(rng.integers(-300, 300)) if y_type != "int8" else int(rng.integers(-128, 128))
        p = kernel.build(
            size=64,
            input_scale=in_s,
            input_zp=int(rng.integers(lo // 2, hi // 2)) if x_type == "int16" else int(rng.integers(-128, 128)),
            output_scale=f32(in_s / ratio),
            output_zp=out_zp,
            input_dtype=x_type,
            output_dtype=y_type,
        )
        x = rng.integers(lo, hi + 1, 64).astype(x_type)
        x[:2] = lo, hi
        out = np.zeros(64, y_type)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_activation.requantize(p, x, y_type), f"{name} case {i}")


@pytest.mark.cc
def test_dequantize_and_quantize_float(K):
    rng = np.random.default_rng(34)
    deq, q = KERNELS.get("dequantize_s16"), KERNELS.get("quantize_f32_s16")
    for i in range(20):
        scale, zp = f32(10 ** rng.uniform(-6, -1)), int(rng.integers(-100, 100))
        x = int16_values(rng, 256)
        y = np.zeros(256, np.float32)
        p = deq.build(size=256, scale=scale, zp=zp)
        K.call(deq.function, deq.struct, p, x, y)
        assert_same(y, ref_activation.dequantize_s16(p, x), f"dequantize_s16 case {i}")
        v = np.concatenate(
            [
                y,
                rng.normal(0, scale * 40000, 250).astype(np.float32),
                np.float32([np.nan, np.inf, -np.inf, 1e30, -1e30, scale * 0.5]),
            ]
        )
        out = np.zeros(v.size, np.int16)
        pq = q.build(size=v.size, output_scale=scale, output_zp=zp)
        K.call(q.function, q.struct, pq, v, out)
        assert_same(out, ref_activation.quantize_f32_s16(pq, v), f"quantize_f32_s16 case {i}")
        assert_same(out[:256], np.clip(x.astype(np.int64) - zp + zp, -32768, 32767), "round trip")


def _bias64(rng, n, i):
    return None if i % 4 == 0 else rng.integers(-(1 << 40), 1 << 40, n).astype(np.int64)


@pytest.mark.cc
def test_conv2d_s16(K):
    rng = np.random.default_rng(35)
    kernel = KERNELS.get("conv2d_s16")
    for i in range(30):
        h, w, groups, fc = (
            int(v) for v in (rng.integers(1, 8), rng.integers(1, 8), rng.integers(1, 3), rng.integers(1, 6))
        )
        oc = groups * int(rng.integers(1, 4))
        kh, kw = int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))
        stride, padding = (int(rng.integers(1, 3)), int(rng.integers(1, 3))), ("SAME", "VALID")[i % 2]
        (oh, ow), _ = quant.compute_padding_hw(stride, (1, 1), (h, w), (kh, kw), padding)
        p = kernel.build(
            input_hwc=(h, w, groups * fc),
            output_hwc=(oh, ow, oc),
            filter_ohwi=(oc, kh, kw, fc),
            stride_hw=stride,
            dilation_hw=(1, 1),
            padding=padding,
            input_scale=f32(rng.uniform(1e-4, 1e-3)),
            input_zp=0,
            filter_scales=[f32(v) for v in rng.uniform(0.001, 0.02, oc)],
            output_scale=f32(rng.uniform(1e-3, 1e-2)),
            output_zp=0,
            activation=("NONE", "RELU", "RELU6", "RELU_N1_TO_1")[i % 4],
        )
        x = int16_values(rng, h * w * groups * fc)
        wt = rng.integers(-127, 128, oc * kh * kw * fc).astype(np.int8)
        b = _bias64(rng, oc, i)
        out = np.zeros(oh * ow * oc, np.int16)
        K.call(kernel.function, kernel.struct, p, x, wt, b, out)
        assert_same(out, ref_convolution.conv2d_s16(p, x, wt, b), f"conv2d_s16 case {i}")


@pytest.mark.cc
def test_depthwise_conv2d_s16(K):
    rng = np.random.default_rng(36)
    kernel = KERNELS.get("depthwise_conv2d_s16")
    for i in range(30):
        h, w, c, dm = int(rng.integers(1, 8)), int(rng.integers(1, 8)), int(rng.integers(1, 6)), int(rng.integers(1, 3))
        kh, kw = int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))
        dil = (int(rng.integers(1, 3)), 1) if h >= 2 * kh else (1, 1)
        stride, padding = (int(rng.integers(1, 3)), int(rng.integers(1, 3))), ("SAME", "VALID")[i % 2]
        (oh, ow), _ = quant.compute_padding_hw(stride, dil, (h, w), (kh, kw), padding)
        if oh < 1 or ow < 1:
            continue
        p = kernel.build(
            input_hwc=(h, w, c),
            output_hwc=(oh, ow, c * dm),
            filter_1hwo=(1, kh, kw, c * dm),
            stride_hw=stride,
            dilation_hw=dil,
            padding=padding,
            depth_multiplier=dm,
            input_scale=f32(rng.uniform(1e-4, 1e-3)),
            input_zp=0,
            filter_scales=[f32(v) for v in rng.uniform(0.001, 0.02, c * dm)],
            output_scale=f32(rng.uniform(1e-4, 1e-3)),
            output_zp=0,
            activation=("NONE", "RELU")[i % 2],
        )
        x = int16_values(rng, h * w * c)
        wt = rng.integers(-127, 128, kh * kw * c * dm).astype(np.int8)
        b = _bias64(rng, c * dm, i)
        out = np.zeros(oh * ow * c * dm, np.int16)
        K.call(kernel.function, kernel.struct, p, x, wt, b, out)
        assert_same(out, ref_convolution.depthwise_conv2d_s16(p, x, wt, b), f"depthwise_conv2d_s16 case {i}")


@pytest.mark.cc
def test_fully_connected_s16(K):
    rng = np.random.default_rng(37)
    kernel = KERNELS.get("fully_connected_s16")
    for i in range(30):
        rows, depth, units = int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 20))
        scales = rng.uniform(0.001, 0.02, units if i % 2 else 1)
        p = kernel.build(
            input_elements=rows * depth,
            weights_shape=(units, depth),
            input_scale=f32(rng.uniform(1e-4, 1e-3)),
            input_zp=0,
            filter_scales=[f32(v) for v in scales],
            output_scale=f32(10 ** rng.uniform(-3, -1)),
            output_zp=0,
            activation=("NONE", "RELU")[i % 2],
        )
        x = int16_values(rng, rows * depth)
        wt = rng.integers(-127, 128, units * depth).astype(np.int8)
        b = _bias64(rng, units, i)
        out = np.zeros(rows * units, np.int16)
        K.call(kernel.function, kernel.struct, p, x, wt, b, out)
        want = ref_fully_connected.fully_connected_s16(p, x, wt, b)
        assert_same(out, want, f"fully_connected_s16 case {i}")
        if b is None:  # the definition: round(x . w * scale ratio), to 1 LSB (the 16-bit multiplier)
            ratio = p["multiplier"].astype(np.float64) / 2**31 * 2.0 ** p["shift"]
            exact = x.reshape(rows, depth).astype(np.float64) @ wt.reshape(units, depth).T.astype(np.float64) * ratio
            lo = -32768 if i % 2 == 0 else 0
            error = np.abs(want.astype(np.float64) - np.clip(np.round(exact), lo, 32767)).max()
            assert error <= 1 + exact.max() / 2**15


@pytest.mark.cc
@pytest.mark.parametrize("name", ["avg_pool_s16", "max_pool_s16"])
def test_pool_s16(K, name):
    rng = np.random.default_rng(38)
    kernel, want = KERNELS.get(name), getattr(ref_pooling, name)
    for i in range(30):
        h, w, c = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 6))
        fh, fw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        stride, padding = (int(rng.integers(1, 3)), int(rng.integers(1, 3))), ("SAME", "VALID")[i % 2]
        (oh, ow), _ = quant.compute_padding_hw(stride, (1, 1), (h, w), (fh, fw), padding)
        p = kernel.build(
            input_hwc=(h, w, c),
            output_hwc=(oh, ow, c),
            filter_hw=(fh, fw),
            stride_hw=stride,
            padding=padding,
            output_scale=f32(rng.uniform(1e-4, 1e-3)),
            output_zp=0,
            activation=("NONE", "RELU", "RELU6")[i % 3],
        )
        x = int16_values(rng, h * w * c)
        out = np.zeros(oh * ow * c, np.int16)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, want(p, x), f"{name} case {i}")
    x = np.array([-32768, -32767, 32767, 32767], np.int16)  # halves away from zero, no overflow
    p = kernel.build(
        input_hwc=(2, 2, 1),
        output_hwc=(1, 1, 1),
        filter_hw=(2, 2),
        stride_hw=(1, 1),
        padding="VALID",
        output_scale=1e-4,
        output_zp=0,
        activation="NONE",
    )
    assert int(want(p, x)[0, 0, 0]) == (0 if name == "avg_pool_s16" else 32767)


@pytest.mark.cc
def test_pad_and_concat_s16(K):
    rng = np.random.default_rng(39)
    pad, concat = KERNELS.get("pad_s16"), KERNELS.get("concat_s16")
    for i in range(20):
        shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 6))))
        pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in shape]
        value = int(rng.integers(-32768, 32768))
        p = pad.build(input_shape=shape, paddings=pads, pad_value=value)
        x = int16_values(rng, int(np.prod(shape)))
        out = np.zeros(int(np.prod([d + b + a for d, (b, a) in zip(shape, pads)])), np.int16)
        K.call(pad.function, pad.struct, p, x, out)
        assert_same(out, np.pad(x.reshape(shape), pads, constant_values=value), f"pad_s16 case {i}")
        axis = int(rng.integers(0, len(shape)))
        parts = [int16_values(rng, int(np.prod(shape))).reshape(shape) for _ in range(int(rng.integers(1, 4)))]
        parts = [np.concatenate([q] * int(rng.integers(1, 3)), axis=axis) for q in parts]
        p = concat.build(input_shapes=[q.shape for q in parts], axis=axis)
        out = np.zeros(sum(q.size for q in parts), np.int16)
        K.call(concat.function, concat.struct, p, [np.ascontiguousarray(q) for q in parts], out)
        assert_same(out, np.concatenate(parts, axis=axis), f"concat_s16 case {i}")


@pytest.mark.cc
@pytest.mark.parametrize("name", ["add_s16", "sub_s16", "mul_s16"])
def test_binary_s16(K, name):
    rng = np.random.default_rng(40)
    kernel, want = KERNELS.get(name), getattr(ref_binary, name)
    shapes = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 5, 1, 3), (2, 1, 4, 1)), ((6,), ()), ((3, 1), (1, 7))]
    for i in range(40):
        s1, s2 = shapes[i % len(shapes)]
        out_shape = np.broadcast_shapes(s1, s2)
        zps = (0, 0, 0) if name == "mul_s16" else tuple(int(v) for v in rng.integers(-50, 50, 3))
        out_exp = rng.uniform(-8, -5) if name == "mul_s16" else rng.uniform(-4.5, -2.5)  # MUL: a product's scale
        p = kernel.build(
            input1_shape=s1 or (1,),
            input2_shape=s2 or (1,),
            output_shape=out_shape,
            input1_scale=f32(10 ** rng.uniform(-5, -3)),
            input1_zp=zps[0],
            input2_scale=f32(10 ** rng.uniform(-5, -3)),
            input2_zp=zps[1],
            output_scale=f32(10**out_exp),
            output_zp=zps[2],
            activation=("NONE", "RELU")[i % 2],
        )
        a, b = int16_values(rng, int(np.prod(s1))), int16_values(rng, int(np.prod(s2)))
        out = np.zeros(int(np.prod(out_shape)), np.int16)
        K.call(kernel.function, kernel.struct, p, a, b, out)
        ref_out = want(p, a.reshape(s1), b.reshape(s2))
        assert_same(out, np.broadcast_to(ref_out, out_shape), f"{name} case {i} ({s1}, {s2})")


@pytest.mark.cc
def test_relu_relu6_leaky_relu_mean_s16(K):
    rng = np.random.default_rng(41)
    for i in range(30):
        n = int(rng.integers(1, 200))
        x = int16_values(rng, n)
        in_s, out_s = f32(10 ** rng.uniform(-5, -3)), f32(10 ** rng.uniform(-5, -3))
        zps = dict(input_zp=int(rng.integers(-100, 100)), output_zp=int(rng.integers(-100, 100)))
        cases = [
            ("relu_s16", dict(size=n, input_scale=in_s, output_scale=out_s, **zps)),
            ("relu6_s16", dict(size=n, input_scale=f32(rng.uniform(3e-4, 1e-3)), input_zp=zps["input_zp"])),
            (
                "leaky_relu_s16",
                dict(size=n, alpha=f32(rng.uniform(-1, 1)), input_scale=in_s, output_scale=out_s, **zps),
            ),
        ]
        for name, kw in cases:
            kernel = KERNELS.get(name)
            p = kernel.build(**kw)
            out = np.zeros(n, np.int16)
            K.call(kernel.function, kernel.struct, p, x, out)
            assert_same(out, getattr(ref_activation, name)(p, x), f"{name} case {i}")
        shape = tuple(int(d) for d in rng.integers(1, 6, 3))
        kernel = KERNELS.get("mean_s16")
        p = kernel.build(input_shape=shape, axes=(1,) if i % 2 else (0, 1), input_scale=in_s, output_scale=out_s, **zps)
        x = int16_values(rng, int(np.prod(shape)))
        out = np.zeros(p["outer"] * p["inner"], np.int16)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_reduction.mean_s16(p, x), f"mean_s16 case {i}")


@pytest.mark.cc
def test_movement_s16(K):
    """TRANSPOSE (a strided copy) and SPLIT on int16 against the NumPy definitions."""
    rng = np.random.default_rng(42)
    copy, split = KERNELS.get("transpose_s16"), KERNELS.get("split_s16")
    for i in range(20):
        shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 6))))
        perm = [int(a) for a in rng.permutation(len(shape))]
        x = int16_values(rng, int(np.prod(shape)))
        p = copy.build(input_shape=shape, perm=perm)
        out = np.zeros(x.size, np.int16)
        K.call(copy.function, copy.struct, p, x, out)
        assert_same(out, np.transpose(x.reshape(shape), perm), f"transpose_s16 case {i}")
        assert_same(out, ref_movement.strided_copy_s16(p, x), f"transpose_s16 case {i} (reference)")
        axis = int(rng.integers(0, len(shape)))
        cut = int(rng.integers(0, shape[axis] + 1))
        p = split.build(input_shape=shape, axis=axis, sizes=[cut, shape[axis] - cut])
        outs = [np.zeros(int(np.prod(shape)) // shape[axis] * n, np.int16) for n in (cut, shape[axis] - cut)]
        K.call(split.function, split.struct, p, x, outs)
        for got, want in zip(outs, np.split(x.reshape(shape), [cut], axis=axis)):
            assert_same(got, want, f"split_s16 case {i}")


@pytest.mark.cc
def test_minmax_and_resize_nearest_s16(K):
    rng = np.random.default_rng(43)
    for i, (s1, s2) in enumerate([((2, 3, 4), (4,)), ((1, 5, 1, 3), (2, 1, 4, 1)), ((7,), (7,))]):
        out_shape = np.broadcast_shapes(s1, s2)
        a, b = int16_values(rng, int(np.prod(s1))), int16_values(rng, int(np.prod(s2)))
        for name, numpy_op in (("maximum_s16", np.maximum), ("minimum_s16", np.minimum)):
            kernel = KERNELS.get(name)
            p = kernel.build(input1_shape=s1, input2_shape=s2, output_shape=out_shape)
            out = np.zeros(int(np.prod(out_shape)), np.int16)
            K.call(kernel.function, kernel.struct, p, a, b, out)
            assert_same(out, numpy_op(a.reshape(s1), b.reshape(s2)), f"{name} case {i}")
    kernel = KERNELS.get("resize_nearest_s16")
    for i in range(10):
        h, w, c, oh, ow = (int(v) for v in rng.integers(1, 7, 5))
        p = kernel.build(
            input_hwc=(h, w, c), output_hwc=(oh, ow, c), align_corners=i % 3 == 1, half_pixel_centers=i % 3 == 2
        )
        x = int16_values(rng, h * w * c)
        out = np.zeros(oh * ow * c, np.int16)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_resize.resize_nearest_s16(p, x), f"resize_nearest_s16 case {i}")


def test_16x8_builders_refuse_what_tflm_does_not_run():
    kw = dict(
        input_elements=8,
        weights_shape=(2, 8),
        input_scale=0.001,
        input_zp=0,
        filter_scales=[0.01],
        output_scale=0.001,
        output_zp=0,
        activation="NONE",
    )
    with pytest.raises(ValueError, match="zero points must be 0"):
        fully_connected_params.fully_connected_s16_params(**dict(kw, input_zp=3))
    with pytest.raises(ValueError, match="at most 7"):
        fully_connected_params.fully_connected_s16_params(**dict(kw, output_scale=1e-8))
    assert fully_connected_params.fully_connected_s16_params(**dict(kw, activation="RELU"))["act_min"] == 0


def test_softmax_builders_refuse_what_tflm_does_not_run():
    with pytest.raises(ValueError, match="zero point -32768"):
        activation_params.softmax_s8_s16_params(**dict(SAMPLES["softmax_s8_s16"], output_zp=0))
    with pytest.raises(ValueError, match="scale 1/65536"):
        activation_params.softmax_s8_s16_params(**dict(SAMPLES["softmax_s8_s16"], output_scale=1 / 32768))
    with pytest.raises(ValueError, match="zero points must be 0"):
        activation_params.softmax_s16_params(**dict(SAMPLES["softmax_s16"], input_zp=4))
    with pytest.raises(ValueError, match="scale 1/32768"):
        activation_params.softmax_s16_params(**dict(SAMPLES["softmax_s16"], output_scale=1 / 65536))
    activation_params.softmax_s16_params(
        **dict(SAMPLES["softmax_s16"], output_scale=f32(1 / 32768 * 1.0009))
    )  # TFLM's 0.1%


# ------------------------------------------------------------------------- models against TFLM


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256((OPS_FIXTURES / f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]


def _inputs(model_file: str, n: int = 120) -> np.ndarray:
    x = api.random_inputs(api.load_model(OPS_FIXTURES / model_file), n, seed=5)
    if x.dtype.kind == "i":
        x[0], x[1], x[2] = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max, 0
    return x


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Every fixture generated for the host, all compiled with the kernels into one shared library
    that each bundle's HostModel loads (one compile instead of one make per model)."""
    root = tmp_path_factory.mktemp("int16")
    bundles = {f: api.generate(OPS_FIXTURES / f, "host", root / Path(f).stem, prefix=Path(f).stem) for f in FILES}
    models, asm_includes = cbuild.model_sources(bundles.values())
    lib = root / "libint16.so"
    cmd = [
        cbuild.host_cc(),
        *cbuild.HOST_FLAGS,
        *asm_includes,
        "-fPIC",
        "-shared",
        "-I",
        str(cbuild.INFERENCE),
        *map(str, models + cbuild.KERNEL_SOURCES),
        "-o",
        str(lib),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for b in bundles.values():
        (b.path / "build").mkdir(exist_ok=True)
        (b.path / "build" / f"lib{b.prefix}.so").symlink_to(lib)
    return bundles


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", FILES)
def test_fixture_bit_exact_against_tflm(model_file, host_bundles):
    from zoflash.reference.tflm import TflmInterpreter

    x = _inputs(model_file)
    ours = HostModel(host_bundles[model_file]).run(x)
    golden = TflmInterpreter((OPS_FIXTURES / model_file).read_bytes()).run_batch(x).reshape(ours.shape)
    assert_same(ours, golden, f"{model_file}: C vs TFLM")
    assert len(np.unique(golden)) > 10, "the outputs should vary with the inputs"
    model = compile_graph(api.load_model(OPS_FIXTURES / model_file).graph)
    assert_same(ReferenceForward(model).forward(x), golden, f"{model_file}: reference vs TFLM")


@pytest.mark.cc
@pytest.mark.tflm
def test_trained_16x8_mlp_bit_exact_against_tflm():
    """tests/fixtures/int16_act.tflite: the digits MLP of tests/fixtures, trained, converted 16x8."""
    from conftest import FIXTURES, fixture_index

    assert next(f for f in fixture_index() if f["file"] == "int16_act.tflite")["kind"] == "int16"
    path = FIXTURES / "int16_act.tflite"
    report = api.validate(path, api.random_inputs(api.load_model(path), 100, seed=6))
    assert report.ok and report.samples == 100, report


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_and_infer_take_int16_inputs():
    path = OPS_FIXTURES / "s16_cnn.tflite"
    x = _inputs("s16_cnn.tflite", 100)
    report = api.validate(path, x)
    assert report.ok and report.samples == 100, report
    y = api.infer(path, x)
    assert y.dtype == np.int16 and len(y) == 100
    t = api.load_model(path).graph
    scale = t.tensors[t.inputs[0]].quant.scale
    assert_same(api.infer(path, x.astype(np.float64) * scale), y, "float data in real units, quantized to int16")


# ----------------------------------------------------------------------- what legality refuses


@pytest.mark.parametrize("model_file", sorted(REFUSED))
def test_ops_without_an_int16_variant_are_refused(model_file):
    with pytest.raises(UnsupportedModelError) as err:
        api.compile_model(api.load_model(OPS_FIXTURES / model_file))
    assert REFUSED[model_file] in str(err.value) and "on int8 activations only" in str(err.value)


def _problems(graph) -> str:
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(graph)
    return "\n".join(err.value.problems)


def test_int16_softmax_needs_tflm_output_quantization():
    graph = api.load_model(OPS_FIXTURES / "s16_softmax.tflite").graph
    op = next(op for op in graph.ops if op.type == "SOFTMAX")
    y = graph.tensors[op.outputs[0]]
    graph.tensors[y.index] = replace(y, quant=replace(y.quant, scales=(1 / 65536,)))
    assert "SOFTMAX" in _problems(graph) and "1/32768 and 0 with an input zero point 0" in _problems(graph)
    graph.tensors[y.index] = replace(y, dtype="int8")
    assert "SOFTMAX must be int8 -> int8, int8 -> int16 or int16 -> int16 (int16 -> int8)" in _problems(graph)


def test_a_16x8_model_with_float_io_generates_its_training_c(tmp_path):
    """The trained layer's int64 bias is a RAM int64_t array, the loss reads int16 logits (its
    training is checked end to end in tests/test_16x8_training.py)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(
        data,
        x_train=rng.uniform(-1, 1, (8, 6, 6, 3)).astype(np.float32),
        y_train=rng.integers(0, 5, 8),
        x_test=rng.uniform(-1, 1, (4, 6, 6, 3)).astype(np.float32),
        y_test=rng.integers(0, 5, 4),
    )
    bundle = api.generate(OPS_FIXTURES / "s16_cnn_float.tflite", "host", tmp_path / "b", data_path=data)
    train_c = next(bundle.path.glob("*_train.c")).read_text()
    assert re.search(r"extern int64_t \w+\[\d+\];", train_c) and ".logits_bytes = 2u" in train_c


@pytest.mark.cross
@pytest.mark.parametrize("model_file", ["s16_cnn.tflite", "s16_shuffle.tflite"])
def test_cortex_m55_compile_is_warning_free(model_file, tmp_path):
    """The generated C (int16 tensors, int16 LUTs, int64 biases, int16 pointer lists) and the kernels."""
    bundle = api.generate(OPS_FIXTURES / model_file, "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)
