"""uint8 and float32 model inputs and outputs: the QUANTIZE kernels at a model's edges (uint8 -> int8,
int8 -> uint8, float32 -> int8) against the NumPy reference, and whole models converted with uint8 or
float32 I/O (tests/fixtures/ops/make_io.py) against the tflite-micro interpreter, through the API
and the CLI."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402
from conftest import FIXTURES  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.cli import main  # noqa: E402
from zoflash.compiler.ops import (
    KERNELS,  # noqa: E402
    activation_params,  # noqa: E402
)
from zoflash.compiler.quant import as_samples  # noqa: E402
from zoflash.errors import DataError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import activation as ref_activation  # noqa: E402

OPS_DIR = FIXTURES / "ops"
INDEX = json.loads((OPS_DIR / "io.json").read_text())["fixtures"]
IO_MODELS = [e["file"] for e in INDEX]
# Every model whose input or output is not int8, with the model's own two types.
TYPED_MODELS = [OPS_DIR / f for f in IO_MODELS] + [FIXTURES / "float_io.tflite"]

SAMPLES = {
    "requantize_u8_s8": dict(
        size=10, input_scale=0.1, input_zp=128, output_scale=0.1, output_zp=0, input_dtype="uint8", output_dtype="int8"
    ),
    "requantize_s8_u8": dict(
        size=10, input_scale=0.1, input_zp=-3, output_scale=0.2, output_zp=250, input_dtype="int8", output_dtype="uint8"
    ),
    "quantize_f32_s8": dict(size=10, output_scale=0.1, output_zp=-128),
}


def f32(x) -> float:
    return float(np.float32(x))


# ----------------------------------------------------------------------------------- builders


def test_index_matches_files():
    for e in INDEX:
        raw = (OPS_DIR / e["file"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == e["sha256"] and len(raw) == e["size_bytes"] < 8 * 1024


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_builder_keys_are_exactly_the_struct_fields(name):
    info = KERNELS.get(name)
    fields = [f for f, _ in cbuild.parse_structs()[info.struct]]
    assert f"void {info.function}(const {info.struct} *p" in cbuild.header_text()
    assert list(info.build(**SAMPLES[name])) == fields


def test_builders_reject_zero_points_outside_each_type():
    for name, change in (
        ("requantize_u8_s8", dict(input_zp=-1)),
        ("requantize_u8_s8", dict(output_zp=128)),
        ("requantize_s8_u8", dict(output_zp=256)),
        ("requantize_s8_u8", dict(input_zp=200)),
        ("requantize_s8_u8", dict(output_scale=1e-12)),
        ("quantize_f32_s8", dict(output_zp=128)),
        ("quantize_f32_s8", dict(output_scale=0.0)),
    ):
        with pytest.raises(ValueError):
            KERNELS.get(name).build(**{**SAMPLES[name], **change})


def test_same_scale_is_an_exact_128_shift():
    """TFLM's fast path (in ^ 0x80) and its general path agree: the multiplier is exactly one."""
    p = activation_params.requantize_u8_params(**{**SAMPLES["requantize_u8_s8"], "size": 256})
    assert (p["multiplier"], p["shift"]) == (1 << 30, 1)
    x = np.arange(256, dtype=np.uint8)
    assert np.array_equal(ref_activation.requantize_u8_s8(p, x).view(np.uint8), x ^ 0x80)


def test_reference_quantize_rounds_half_away_and_saturates():
    p = activation_params.quantize_f32_params(size=1, output_scale=0.5, output_zp=3)
    x = np.array(
        [1.25, -1.25, 0.75, -0.75, 0.2499999, 63.0, 63.25, -65.75, -66.0, np.inf, -np.inf, np.nan, 1e30], np.float32
    )
    want = [6, 0, 5, 1, 3, 127, 127, -128, -128, 127, -128, 3, 127]  # x / 0.5 = 2.5 -> 3, -2.5 -> -3, ...
    assert ref_activation.quantize_f32_s8(p, x).tolist() == want


# ------------------------------------------------------------------------------------ C kernels


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def run(K, name, params, x, out):
    K.call(KERNELS.get(name).function, KERNELS.get(name).struct, params, x, out)
    return out


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(3))
def test_requantize_uint8_both_ways_all_inputs(K, seed):
    rng = np.random.default_rng(9100 + seed)
    u8, s8 = np.arange(256, dtype=np.uint8), np.arange(-128, 128, dtype=np.int8)
    for i in range(12):
        in_s = f32(rng.uniform(0.001, 0.1))
        out_s = in_s if i < 2 else f32(in_s / float(np.exp(rng.uniform(-5, 5))))
        uzp, szp = int(rng.choice([0, 128, 255, int(rng.integers(0, 256))])), int(rng.integers(-128, 128))
        p = activation_params.requantize_u8_params(
            size=256,
            input_scale=in_s,
            input_zp=uzp,
            output_scale=out_s,
            output_zp=szp,
            input_dtype="uint8",
            output_dtype="int8",
        )
        assert np.array_equal(
            run(K, "requantize_u8_s8", p, u8, np.zeros(256, np.int8)), ref_activation.requantize_u8_s8(p, u8)
        )
        p = activation_params.requantize_u8_params(
            size=256,
            input_scale=in_s,
            input_zp=szp,
            output_scale=out_s,
            output_zp=uzp,
            input_dtype="int8",
            output_dtype="uint8",
        )
        assert np.array_equal(
            run(K, "requantize_s8_u8", p, s8, np.zeros(256, np.uint8)), ref_activation.requantize_s8_u8(p, s8)
        )


def exact_ties(scale: float, zero_point: int, span: int = 140) -> np.ndarray:
    """float32 values x with x / scale (in float32) exactly k + 0.5, for k around the int8 range."""
    s = np.float32(scale)
    out = []
    for k in range(-span - zero_point, span - zero_point):
        m = np.float32(k + 0.5)
        x = np.float32(m * s)
        for cand in (x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))):
            if np.float32(cand / s) == m:
                out.append(cand)
                break
    return np.array(out, np.float32)


@pytest.mark.cc
@pytest.mark.parametrize("seed", range(3))
def test_quantize_float_bit_exact(K, seed):
    rng = np.random.default_rng(9200 + seed)
    for _i in range(10):
        scale = f32(np.exp(rng.uniform(-12, 2)))
        zp = int(rng.choice([-128, 127, 0, int(rng.integers(-128, 128))]))
        ties = exact_ties(scale, zp)
        assert len(ties) > 100
        x = np.concatenate(
            [
                ties,
                (scale * rng.uniform(-200, 200, 2000)).astype(np.float32),  # in and out of the int8 range
                (scale * rng.uniform(-3e9, 3e9, 50)).astype(np.float32),  # beyond int32 after the division
                np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32),
            ]
        )
        p = activation_params.quantize_f32_params(size=x.size, output_scale=scale, output_zp=zp)
        got = run(K, "quantize_f32_s8", p, x, np.zeros(x.size, np.int8))
        want = ref_activation.quantize_f32_s8(p, x)
        assert np.array_equal(got, want), f"scale {scale!r} zp {zp}: {np.count_nonzero(got != want)} differ"
        # ties went away from zero: k + 0.5 -> k + 1 for k >= 0, k for k < 0
        q = (ties / np.float32(scale)).astype(np.float64)
        assert np.array_equal(got[: ties.size], np.clip(np.where(q > 0, q + 0.5, q - 0.5) + zp, -128, 127))


# ------------------------------------------------------------------------- whole models vs TFLM


def typed_inputs(model_path: Path, n: int = 120) -> np.ndarray:
    """Random inputs of the model's type plus the extremes: for uint8 all-0 and all-255 samples, for
    float32 samples of exact rounding ties, values beyond the int8 range and the range's ends."""
    model = api.load_model(model_path)
    x = api.random_inputs(model, n, seed=3)
    flat = x.reshape(n, -1)
    if x.dtype == np.uint8:
        flat[0], flat[1] = 0, 255
        flat[2] = np.arange(flat.shape[1]) * 4 % 256
    else:
        q = api.input_quantization(model.graph)
        ties = exact_ties(q.scale, q.zero_point)
        for i in range(4):
            flat[i] = np.resize(np.roll(ties, 17 * i), flat.shape[1])
        lo, hi = q.scale * (-128 - q.zero_point), q.scale * (127 - q.zero_point)
        flat[4], flat[5] = lo, hi
        flat[6], flat[7] = lo - 1000 * q.scale, hi + 1000 * q.scale
        flat[8] = np.linspace(-1e6 * q.scale, 1e6 * q.scale, flat.shape[1])
    return x


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model_path", TYPED_MODELS, ids=lambda p: p.name)
def test_bit_exact_against_tflm(model_path):
    x = typed_inputs(model_path)
    report = api.validate(model_path, x)
    assert report.samples == x.shape[0] >= 100 and report.ok, report
    t_in = api.load_model(model_path).graph
    assert x.dtype == np.dtype(t_in.tensors[t_in.inputs[0]].dtype)


@pytest.mark.cc
@pytest.mark.parametrize("model_path", TYPED_MODELS, ids=lambda p: p.name)
def test_generated_api_has_the_real_types_and_matches_the_reference(model_path, tmp_path):
    model = api.load_model(model_path)
    g = model.graph
    t_in, t_out = g.tensors[g.inputs[0]], g.tensors[g.outputs[0]]
    x = typed_inputs(model_path, 20)
    with api.host_model(model_path, tmp_path / "b") as m:
        y = m.run(x)
        assert [m.inputs[0]["dtype"], m.outputs[0]["dtype"]] == [t_in.dtype, t_out.dtype]
        assert m.inputs[0]["bytes"] == t_in.num_elements * x.itemsize
        prefix = m.bundle.prefix
    assert y.dtype == np.dtype(t_out.dtype)
    source = (tmp_path / "b" / f"{prefix}.c").read_text()
    names = {"int8": "ZO_INT8", "uint8": "ZO_UINT8", "float32": "ZO_FLOAT32"}
    assert "_forward(const void *input" in (tmp_path / "b" / f"{prefix}.h").read_text()
    for t, table in ((t_in, "inputs"), (t_out, "outputs")):
        line = source.split(f"_{table}[1] = {{")[1].split("\n")[1]
        assert f", {names[t.dtype]}, " in line and f"}}, {t.nbytes}, " in line
    want = ReferenceForward(api.compile_model(model)).forward(x)
    assert np.array_equal(y.view(np.uint8), want.reshape(y.shape).view(np.uint8))


def test_samples_take_the_model_input_type():
    shape = (1, 4)
    u = as_samples(np.array([[-1.0, 0.0, 0.5, 300.0]]), shape, 1.0, 0, dtype="uint8")
    assert u.dtype == np.uint8 and u.tolist() == [[[0, 0, 1, 255]]]  # 0.5 rounds away from zero
    assert as_samples(np.arange(4, dtype=np.uint8), shape, 1.0, 0, dtype="uint8").dtype == np.uint8
    f = as_samples(np.array([[1e9, -2.5, 0.1, 7]], np.float64), shape, None, None, dtype="float32")
    assert f.dtype == np.float32 and f.tolist() == [[[1e9, -2.5, f32(0.1), 7.0]]]  # no quantization
    with pytest.raises(DataError, match="give uint8 data"):
        as_samples(np.zeros(4, np.int8), shape, 1.0, 0, dtype="uint8")
    with pytest.raises(DataError, match="takes float32 input"):
        as_samples(np.zeros(4, np.uint8), shape, None, None, dtype="float32")


def test_random_inputs_span_the_input_type():
    u = api.random_inputs(api.load_model(OPS_DIR / "io_uint8.tflite"), 50)
    assert u.dtype == np.uint8 and u.min() == 0 and u.max() == 255
    m = api.load_model(OPS_DIR / "io_float.tflite")
    f = api.random_inputs(m, 50)
    q = api.input_quantization(m.graph)
    steps = f / q.scale + q.zero_point
    assert f.dtype == np.float32 and steps.min() < -140 and steps.max() > 140  # some saturate
    assert 0.5 < np.mean((steps >= -128) & (steps <= 127)) < 0.9


def test_training_data_takes_the_input_type(tmp_path):
    from zoflash.training.dataset import load_dataset

    d = np.load(FIXTURES / "digits_shift.npz")
    for name, dtype in (("io_uint8.tflite", np.uint8), ("io_float.tflite", np.float32)):
        m = api.load_model(OPS_DIR / name)
        t, q = m.graph.tensors[m.graph.inputs[0]], api.input_quantization(m.graph)
        data = load_dataset(FIXTURES / "digits_shift.npz", t.shape, q.scale, q.zero_point, 10, dtype=t.dtype)
        assert data.x_train.dtype == dtype and data.x_train.shape == (1000, 1, 8, 8, 1)
        want = d["x_train"] if dtype == np.float32 else np.clip(np.floor(d["x_train"] / q.scale + 0.5), 0, 255)
        assert np.array_equal(data.x_train.reshape(d["x_train"].shape), want.astype(dtype))


@pytest.mark.cc
@pytest.mark.parametrize("name", ["io_uint8.tflite", "io_float.tflite"])
def test_training_c_identical_to_reference(tmp_path, name):
    """The embedded samples are the input type's bytes; the model's first QUANTIZE converts them."""
    from test_training import assert_identical, run_both

    runs = run_both(tmp_path, OPS_DIR / name, FIXTURES / "digits_shift.npz", steps=120, eval_every=40)
    assert_identical(runs)
    assert len(runs["c"].steps) == 120


# ------------------------------------------------------------------------------------------ CLI


@pytest.mark.cc
@pytest.mark.tflm
def test_cli_infer_and_validate_typed_models(tmp_path, capsys):
    for name in ("io_uint8.tflite", "io_float.tflite"):
        path = OPS_DIR / name
        x = typed_inputs(path, 10)
        np.save(tmp_path / "x.npy", x)
        assert (
            main(["infer", "--model", str(path), "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")])
            == 0
        )
        y = np.load(tmp_path / "y.npy")
        assert y.dtype == (np.uint8 if "uint8" in name else np.float32) and y.shape == (10, 1, 10)
        assert np.array_equal(y, api.infer(path, x))
        assert main(["validate", "--model", str(path), "--random", "100"]) == 0
        assert "OK" in capsys.readouterr().out
        np.save(tmp_path / "bad.npy", x.astype(np.int8))
        assert (
            main(
                ["infer", "--model", str(path), "--inputs", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "y.npy")]
            )
            == 2
        )


def test_legality_names_the_unsupported_type_pairs():
    import dataclasses

    from zoflash.compiler.legality import model_problems

    model = api.load_model(OPS_DIR / "io_uint8.tflite")
    g = model.graph
    assert model_problems(g) == []
    out = g.outputs[0]
    g.tensors[out] = dataclasses.replace(g.tensors[out], dtype="int64")  # QUANTIZE int8 -> int64
    problems = "\n".join(model_problems(g))
    assert (
        "QUANTIZE must be int8 -> int8, int16, int32 or uint8; int16 -> int8, int16 or int32; uint8 -> int8; "
        "or float32 -> int8 or int16 (int8 -> int64)"
    ) in problems
    assert "is int64, not int8, int16, uint8 or float32" in problems
    g.tensors[out] = dataclasses.replace(g.tensors[out], dtype="float32")  # a float output without DEQUANTIZE
    assert "is float32 but no DEQUANTIZE makes it" in "\n".join(model_problems(g))
