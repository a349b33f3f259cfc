"""SUB, SQUARED_DIFFERENCE, MINIMUM, MAXIMUM, PRELU, RELU, RELU6, LEAKY_RELU, TANH, HARD_SWISH and
RSQRT: the C kernels against the NumPy reference on random shapes, scales and zero points, the
reference against the real functions, and the fixture models (tests/fixtures/ops/activation.json)
against the tflite-micro interpreter."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ops import KERNELS  # noqa: E402
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import activation as ref_activation  # noqa: E402
from zoflash.reference.ops import binary as ref_binary  # noqa: E402

OPS_DIR = Path(__file__).resolve().parent / "fixtures" / "ops"
_SHAPES = dict(input1_shape=(1, 2, 3), input2_shape=(3,), output_shape=(1, 2, 3))
_Q2 = dict(input1_scale=0.1, input1_zp=0, input2_scale=0.2, input2_zp=1, output_scale=0.3, output_zp=-2)
_Q1 = dict(size=10, input_scale=0.1, input_zp=3, output_scale=0.05, output_zp=-4)
SAMPLES = {
    "sub": dict(_SHAPES, **_Q2, activation="NONE"),
    "squared_difference": dict(_SHAPES, **_Q2),
    "maximum": dict(_SHAPES),
    "minimum": dict(_SHAPES),
    "prelu": dict(
        input_shape=(1, 2, 3),
        alpha_shape=(3,),
        output_shape=(1, 2, 3),
        input_scale=0.1,
        input_zp=0,
        alpha_scale=0.01,
        alpha_zp=5,
        output_scale=0.08,
        output_zp=-3,
    ),
    "relu": dict(_Q1),
    "relu6": dict(size=10, input_scale=0.05, input_zp=-128),
    "leaky_relu": dict(_Q1, alpha=0.2),
    "tanh": dict(_Q1, output_scale=1 / 128, output_zp=0),
    "hard_swish": dict(_Q1),
    "rsqrt": dict(_Q1),
}
# test_kernels.py adds SAMPLES to its SAMPLE_ARGS (every registered kernel has a sample), so they come
# before its import.
from test_kernels import (  # noqa: E402
    ACTS,
    assert_same,
    f32,
    rand_i8,
    rand_zp,
    random_broadcast_shapes,
    run,
)

BINARY = {
    "sub": ref_binary.sub_s8,
    "squared_difference": ref_binary.squared_difference_s8,
    "maximum": ref_binary.maximum_s8,
    "minimum": ref_binary.minimum_s8,
    "prelu": ref_binary.prelu_s8,
}
UNARY = {
    "relu": ref_activation.relu_s8,
    "relu6": ref_activation.relu6_s8,
    "leaky_relu": ref_activation.leaky_relu_s8,
    "tanh": ref_activation.tanh_s8,
    "hard_swish": ref_activation.hard_swish_s8,
    "rsqrt": ref_activation.rsqrt_s8,
}
ALL_INPUTS = np.arange(-128, 128).astype(np.int8)


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_builder_keys_are_exactly_the_struct_fields(name):
    info = KERNELS.get(name)
    assert f"void {info.function}(const {info.struct} *p" in cbuild.header_text()
    params = info.build(**SAMPLES[name])
    assert list(params) == [f for f, _ in cbuild.parse_structs()[info.struct]]
    assert all(isinstance(v, int) and -(1 << 31) <= v < (1 << 31) for v in params.values())
    with pytest.raises(TypeError):
        info.build(*SAMPLES[name].values())


def test_builders_reject_what_tflm_cannot_run():
    bad = [
        ("sub", dict(output_scale=1e-9)),  # TFLM's output multiplier must be < 1
        ("sub", dict(input2_shape=(4,))),
        ("prelu", dict(alpha_shape=(2,))),
        ("hard_swish", dict(output_scale=0.1 / 200)),  # input / output scale > 128: a left shift
        ("relu", dict(output_scale=1e-12)),  # left shift > 30
        ("leaky_relu", dict(alpha=float("inf"))),
    ]
    for name, change in bad:
        with pytest.raises(ValueError):
            KERNELS.get(name).build(**{**SAMPLES[name], **change})


def _binary_case(rng, name, i):
    s1, s2, so = random_broadcast_shapes(rng)
    a_s, b_s = f32(rng.uniform(0.01, 0.2)), f32(rng.uniform(0.01, 0.2) * (10 if i % 4 == 0 else 1))
    zp1, zp2, zpo = rand_zp(rng), rand_zp(rng), rand_zp(rng)
    shapes = dict(input1_shape=s1, input2_shape=s2, output_shape=so)
    if name in ("maximum", "minimum"):
        return s1, s2, so, KERNELS.get(name).build(**shapes)
    if name == "prelu":
        return (
            s1,
            s2,
            so,
            KERNELS.get(name).build(
                input_shape=s1,
                alpha_shape=s2,
                output_shape=so,
                input_scale=a_s,
                input_zp=zp1,
                alpha_scale=f32(b_s / 20),
                alpha_zp=zp2,
                output_scale=f32(a_s * rng.uniform(0.3, 3)),
                output_zp=zpo,
            ),
        )
    q = dict(input1_scale=a_s, input1_zp=zp1, input2_scale=b_s, input2_zp=zp2, output_zp=zpo)
    if name == "sub":
        return (
            s1,
            s2,
            so,
            KERNELS.get(name).build(
                **shapes, **q, output_scale=f32(max(a_s, b_s) * rng.uniform(0.5, 3)), activation=ACTS[i % 4]
            ),
        )
    return (
        s1,
        s2,
        so,
        KERNELS.get(name).build(**shapes, **q, output_scale=f32(max(a_s, b_s) ** 2 * rng.uniform(20, 800))),
    )


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("seed", range(4))
def test_binary_broadcast_random(K, name, seed):
    rng = np.random.default_rng(12000 + 100 * sorted(BINARY).index(name) + seed)
    for i in range(12):
        s1, s2, so, params = _binary_case(rng, name, i)
        if math.prod(so) == 0:
            continue
        a, b = rand_i8(rng, s1), rand_i8(rng, s2)
        out = np.zeros(so, np.int8)
        run(K, name, params, np.ascontiguousarray(a), np.ascontiguousarray(b), out)
        assert_same(out, BINARY[name](params, a, b), f"{name} {s1} x {s2} -> {so}")


def _unary_params(rng, name):
    in_s, zp = f32(np.exp(rng.uniform(-6, 1))), rand_zp(rng)
    if name == "relu6":
        return KERNELS.get(name).build(size=256, input_scale=in_s, input_zp=zp)
    q = dict(size=256, input_scale=in_s, input_zp=zp, output_zp=rand_zp(rng))
    if name == "tanh":
        return KERNELS.get(name).build(**q, output_scale=1 / 128)
    if name == "rsqrt":
        return KERNELS.get(name).build(**q, output_scale=f32(rng.uniform(0.3, 3) / math.sqrt(in_s) / 100))
    out_s = f32(in_s * np.exp(rng.uniform(-2, 2)))
    if name == "leaky_relu":
        return KERNELS.get(name).build(**q, output_scale=out_s, alpha=f32(rng.choice([0.2, 0.01, 0.3, -0.5, 1.5, 0.0])))
    return KERNELS.get(name).build(**q, output_scale=out_s)


@pytest.mark.cc
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_all_inputs(K, name):
    rng = np.random.default_rng(13000 + sorted(UNARY).index(name))
    for _ in range(25):
        params = _unary_params(rng, name)
        out = np.zeros(256, np.int8)
        run(K, name, params, ALL_INPUTS, out)
        assert_same(out, UNARY[name](params, ALL_INPUTS), f"{name} {params}")


# The reference itself against the real functions: a wrong reading of TFLM shows up as a large error.


def _real(q, scale, zp):
    return (q.astype(np.float64) - zp) * scale


def _close(got, real, scale, zp, lsb):
    want = np.clip(np.round(real / scale) + zp, -128, 127)
    assert np.max(np.abs(got.astype(int) - want)) <= lsb


def test_reference_tracks_the_real_functions():
    x = ALL_INPUTS
    for s, zp in ((0.05, 0), (0.1, -20), (0.02, 100)):
        p = KERNELS.get("tanh").build(size=256, input_scale=s, input_zp=zp, output_scale=1 / 128, output_zp=0)
        _close(ref_activation.tanh_s8(p, x), np.tanh(_real(x, s, zp)), 1 / 128, 0, 1)
        o = 3 * s / 4
        p = KERNELS.get("hard_swish").build(size=256, input_scale=s, input_zp=zp, output_scale=o, output_zp=-30)
        v = _real(x, s, zp)
        _close(ref_activation.hard_swish_s8(p, x), v * np.clip(v + 3, 0, 6) / 6, o, -30, 1)
        p = KERNELS.get("leaky_relu").build(
            size=256, alpha=-0.3, input_scale=s, input_zp=zp, output_scale=o, output_zp=5
        )
        _close(ref_activation.leaky_relu_s8(p, x), np.where(v >= 0, v, -0.3 * v), o, 5, 1)
        p = KERNELS.get("relu6").build(size=256, input_scale=s, input_zp=zp)
        _close(ref_activation.relu6_s8(p, x), np.clip(v, 0, 6), s, zp, 0)
        p = KERNELS.get("rsqrt").build(size=256, input_scale=s, input_zp=-128, output_scale=0.08, output_zp=-128)
        pos = x.astype(int) > -128
        got = ref_activation.rsqrt_s8(p, x)[pos]
        _close(got, 1 / np.sqrt(_real(x[pos], s, -128)), 0.08, -128, 1)
    a, b = np.meshgrid(ALL_INPUTS, ALL_INPUTS[::5])
    p = KERNELS.get("sub").build(
        input1_shape=a.shape,
        input2_shape=b.shape,
        output_shape=a.shape,
        input1_scale=0.03,
        input1_zp=4,
        input2_scale=0.05,
        input2_zp=-9,
        output_scale=0.07,
        output_zp=1,
        activation="NONE",
    )
    _close(ref_binary.sub_s8(p, a, b), _real(a, 0.03, 4) - _real(b, 0.05, -9), 0.07, 1, 1)
    p = KERNELS.get("squared_difference").build(
        input1_shape=a.shape,
        input2_shape=b.shape,
        output_shape=a.shape,
        input1_scale=0.03,
        input1_zp=4,
        input2_scale=0.05,
        input2_zp=-9,
        output_scale=0.5,
        output_zp=-128,
    )
    _close(ref_binary.squared_difference_s8(p, a, b), (_real(a, 0.03, 4) - _real(b, 0.05, -9)) ** 2, 0.5, -128, 1)


# ------------------------------------------------------------------------- models against TFLM

FIXTURES = json.loads((OPS_DIR / "activation.json").read_text())


def sample_inputs(model, n, seed=0):
    x = api.random_inputs(model, n, seed)
    x[0], x[1], x[2] = -128, 127, 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128
    return x


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("entry", FIXTURES, ids=[e["file"] for e in FIXTURES])
def test_fixture_bit_exact_against_tflm(entry, tmp_path):
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets.host_runner import HostModel

    path = OPS_DIR / entry["file"]
    model = api.load_model(path)
    assert sorted({op.type for op in model.graph.ops}) == entry["ops"]
    x = sample_inputs(model, 120)
    ours = HostModel(api.build(path, "host", tmp_path / "b").bundle).run(x)
    golden = TflmInterpreter(path.read_bytes()).run_batch(x).reshape(ours.shape)
    mismatch = np.argwhere(ours != golden)
    assert mismatch.size == 0, f"{len(mismatch)} elements differ, first at {mismatch[:5].tolist()}"
    # the NumPy reference engine, batched, gives the same bytes
    reference = ReferenceForward(compile_graph(model.graph)).forward(x)
    np.testing.assert_array_equal(reference.reshape(ours.shape), ours)


@pytest.mark.cross
@pytest.mark.parametrize("entry", FIXTURES, ids=[e["file"] for e in FIXTURES])
def test_fixture_cortex_m55_compile_is_warning_free(entry, tmp_path):
    """The generated model sources; test_kernels.py cross-compiles the static zo_* ones."""
    bundle = api.generate(OPS_DIR / entry["file"], "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path, generated_only=True)


def rescaled(path: Path, seed: int) -> bytes:
    """The model with every computed tensor's scale (where its float32 bytes occur once in the
    file) multiplied by a random factor in [1/e, e]: other multipliers and paths, same graph."""
    data = bytearray(path.read_bytes())
    graph = api.load_model(path).graph
    rng = np.random.default_rng(seed)
    for t in graph.tensors:
        if t.is_constant or t.index in graph.inputs or t.quant is None or t.quant.per_channel:
            continue
        old = struct.pack("<f", t.quant.scale)
        if data.count(old) == 1:
            i = data.index(old)
            data[i : i + 4] = struct.pack("<f", t.quant.scale * float(np.exp(rng.uniform(-1, 1))))
    return bytes(data)


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("name", ["hard_swish.tflite", "sub_broadcast.tflite", "tanh_leaky.tflite"])
def test_rescaled_fixture_bit_exact_against_tflm(name, tmp_path):
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets.host_runner import HostModel

    path = tmp_path / name
    path.write_bytes(rescaled(OPS_DIR / name, 7))
    x = sample_inputs(api.load_model(path), 100)
    ours = HostModel(api.build(path, "host", tmp_path / "b").bundle).run(x)
    golden = TflmInterpreter(path.read_bytes()).run_batch(x).reshape(ours.shape)
    assert np.array_equal(ours, golden), f"{int((ours != golden).sum())} of {ours.size} differ"
