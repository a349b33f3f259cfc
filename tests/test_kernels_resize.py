"""REDUCE_MAX, ARG_MAX, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR and TRANSPOSE_CONV.

The C kernels against the NumPy reference on random shapes and parameters, the builders' refusals,
and the fixture models (tests/fixtures/ops/resize.json) bit for bit against the tflite-micro
interpreter, through the generated C and through the reference forward pass.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ir import Quantization  # noqa: E402
from zoflash.compiler.ops import (  # noqa: E402
    KERNELS,  # noqa: E402
    convolution_params,
    reduction_params,
    resize_params,
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import convolution as ref_convolution  # noqa: E402
from zoflash.reference.ops import reduction as ref_reduction  # noqa: E402
from zoflash.reference.ops import resize as ref_resize  # noqa: E402
from zoflash.targets.host_runner import HostModel  # noqa: E402

OPS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ops"
INDEX = json.loads((OPS_FIXTURES / "resize.json").read_text())
POSITIVE = [f["file"] for f in INDEX if f["kind"] == "positive"]


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def rand_i8(rng, shape, lo=-128, hi=128):
    return rng.integers(lo, hi, size=shape, dtype=np.int64).astype(np.int8)


def run(K, name, params, *arrays):
    info = KERNELS.get(name)
    K.call(info.function, info.struct, params, *arrays)


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want).reshape(np.shape(got))
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    assert bad.size == 0, (
        f"{what}: {bad.size} of {got.size} differ; first at {bad[0]}: "
        f"C {got.reshape(-1)[bad[0]]} vs reference {want.reshape(-1)[bad[0]]}"
    )


# ------------------------------------------------------------------------- C vs NumPy reference


@pytest.mark.cc
def test_reduce_max(K):
    rng = np.random.default_rng(7)
    for _ in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 7))))
        k = int(rng.integers(1, len(shape) + 1))
        axes = [
            int(a) - (len(shape) if rng.random() < 0.3 else 0) for a in rng.choice(len(shape), size=k, replace=False)
        ]
        p = reduction_params.reduce_max_params(input_shape=shape, axes=axes)
        x = rand_i8(rng, shape)
        want = np.max(x, axis=tuple(a % len(shape) for a in axes))  # numpy's own max, the definition
        assert_same(ref_reduction.reduce_max_s8(p, x), want, f"reference {shape} {axes}")
        out = np.zeros(want.size, np.int8)
        run(K, "reduce_max", p, x, out)
        assert_same(out, want, f"reduce_max {shape} axes {axes}")


@pytest.mark.cc
def test_arg_max(K):
    rng = np.random.default_rng(8)
    for _ in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 7, size=int(rng.integers(1, 5))))
        axis = int(rng.integers(-len(shape), len(shape)))
        p = reduction_params.arg_max_params(input_shape=shape, axis=axis)
        x = rand_i8(rng, shape, -3, 3) if rng.random() < 0.5 else rand_i8(rng, shape)  # many ties
        want = ref_reduction.arg_max_s8(p, x)
        out = np.zeros(want.size, np.int32)
        run(K, "arg_max", p, x, out)
        assert_same(out, want, f"arg_max {shape} axis {axis}")


FLAGS = ((False, False), (True, False), (False, True))


@pytest.mark.cc
def test_resize_bilinear(K):
    rng = np.random.default_rng(9)
    for i in range(90):
        align, half = FLAGS[i % 3]
        h, w, oh, ow = (int(v) for v in rng.integers(1, 14, size=4))
        c = int(rng.integers(1, 6))
        p = resize_params.resize_bilinear_params(
            input_hwc=(h, w, c), output_hwc=(oh, ow, c), align_corners=align, half_pixel_centers=half
        )
        x = rand_i8(rng, (h, w, c))
        x[0, 0, 0] = -128
        want = ref_resize.resize_bilinear_s8(p, x)
        out = np.zeros((oh, ow, c), np.int8)
        run(K, "resize_bilinear", p, x, out)
        assert_same(out, want, f"resize_bilinear {h}x{w} -> {oh}x{ow} align {align} half {half}")


@pytest.mark.cc
def test_resize_nearest(K):
    rng = np.random.default_rng(10)
    for i in range(90):
        align, half = FLAGS[i % 3]
        h, w, oh, ow = (int(v) for v in rng.integers(1, 20, size=4))
        c = int(rng.integers(1, 6))
        p = resize_params.resize_nearest_params(
            input_hwc=(h, w, c), output_hwc=(oh, ow, c), align_corners=align, half_pixel_centers=half
        )
        # The builder's float32 tables against the reference's scalar reading of TFLM's formula.
        np.testing.assert_array_equal(p["y_index"], ref_resize.nearest_index(h, oh, align, half))
        np.testing.assert_array_equal(p["x_index"], ref_resize.nearest_index(w, ow, align, half))
        x = rand_i8(rng, (h, w, c))
        want = ref_resize.resize_nearest_s8(p, x)
        out = np.zeros((oh, ow, c), np.int8)
        run(K, "resize_nearest", p, x, out)
        assert_same(out, want, f"resize_nearest {h}x{w} -> {oh}x{ow} align {align} half {half}")


def test_nearest_index_examples():
    """Hand-checked: x2 up (UpSampling2D), align_corners rounding, half-pixel centres."""
    assert ref_resize.nearest_index(3, 6, False, False).tolist() == [0, 0, 1, 1, 2, 2]
    assert ref_resize.nearest_index(3, 5, True, False).tolist() == [0, 1, 1, 2, 2]  # (i * 0.5) rounded half up
    assert ref_resize.nearest_index(4, 3, False, True).tolist() == [0, 2, 3]  # floor((i + 0.5) * 4/3)


def _tconv_case(rng):
    kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
    sh, sw = (int(v) for v in rng.integers(1, 4, size=2))
    padding = str(rng.choice(["SAME", "VALID"]))
    h, w = (int(v) for v in rng.integers(1, 7, size=2))
    ic, oc = (int(v) for v in rng.integers(1, 9, size=2))
    if padding == "SAME":
        oh, ow = h * sh - int(rng.integers(0, sh)), w * sw - int(rng.integers(0, sw))  # ceil(o / s) == h
    else:
        oh, ow = (h - 1) * sh + kh + int(rng.integers(0, sh)), (w - 1) * sw + kw + int(rng.integers(0, sw))
    return (h, w, ic), (oh, ow, oc), (oc, kh, kw, ic), (sh, sw), padding


@pytest.mark.cc
def test_transpose_conv(K):
    rng = np.random.default_rng(11)
    for i in range(80):
        in_hwc, out_hwc, f_shape, stride, padding = _tconv_case(rng)
        oc = out_hwc[2]
        per_channel = i % 2 == 0
        scales = [float(np.float32(s)) for s in rng.uniform(0.002, 0.02, oc if per_channel else 1)]
        p = convolution_params.transpose_conv_params(
            input_hwc=in_hwc,
            output_hwc=out_hwc,
            filter_ohwi=f_shape,
            stride_hw=stride,
            padding=padding,
            input_scale=float(np.float32(rng.uniform(0.01, 0.1))),
            input_zp=int(rng.integers(-128, 128)),
            filter_scales=scales,
            output_scale=float(np.float32(rng.uniform(0.02, 0.3))),
            output_zp=int(rng.integers(-128, 128)),
            activation=("NONE", "RELU", "RELU6", "RELU_N1_TO_1")[i % 4],
        )
        x, w = rand_i8(rng, in_hwc), rand_i8(rng, f_shape, -127, 128)
        b = None if i % 3 == 0 else rng.integers(-5000, 5000, oc).astype(np.int32)
        want = ref_convolution.transpose_conv_s8(p, x, w, b)
        out = np.zeros(out_hwc, np.int8)
        run(K, "transpose_conv", p, x, w, b, out)
        assert_same(out, want, f"transpose_conv {in_hwc} -> {out_hwc} filter {f_shape} stride {stride} {padding}")


def test_transpose_conv_reference_by_definition():
    """A stride-2 1x1 transposed convolution spreads the input over the even positions (zp 0, unit scale)."""
    p = convolution_params.transpose_conv_params(
        input_hwc=(2, 2, 1),
        output_hwc=(4, 4, 1),
        filter_ohwi=(1, 1, 1, 1),
        stride_hw=(2, 2),
        padding="SAME",
        input_scale=0.5,
        input_zp=0,
        filter_scales=[1.0],
        output_scale=0.5,
        output_zp=0,
        activation="NONE",
    )
    y = ref_convolution.transpose_conv_s8(p, np.array([1, 2, 3, 4], np.int8), np.ones(1, np.int8)).reshape(4, 4)
    assert y.tolist() == [[1, 0, 2, 0], [0, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]]


def test_builders_refuse_what_tflm_does_not_run():
    with pytest.raises(ValueError, match="cannot both be set"):
        resize_params.resize_bilinear_params(
            input_hwc=(2, 2, 1), output_hwc=(4, 4, 1), align_corners=True, half_pixel_centers=True
        )
    with pytest.raises(ValueError, match="channels"):
        resize_params.resize_nearest_params(
            input_hwc=(2, 2, 1), output_hwc=(4, 4, 2), align_corners=False, half_pixel_centers=False
        )
    with pytest.raises(ValueError, match="needs a 3x3 input"):
        convolution_params.transpose_conv_params(
            input_hwc=(2, 2, 1),
            output_hwc=(6, 6, 1),
            filter_ohwi=(1, 3, 3, 1),
            stride_hw=(2, 2),
            padding="SAME",
            input_scale=0.1,
            input_zp=0,
            filter_scales=[0.1],
            output_scale=0.1,
            output_zp=0,
            activation="NONE",
        )
    with pytest.raises(ValueError, match="rank 7"):
        reduction_params.reduce_max_params(input_shape=(1,) * 7, axes=[0])


# ------------------------------------------------------------------------- models against TFLM


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256((OPS_FIXTURES / f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
    covered = {op for f in INDEX if f["kind"] == "positive" for op in f["ops"]}
    assert {"REDUCE_MAX", "ARG_MAX", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "TRANSPOSE_CONV"} <= covered


def _inputs(model_file: str, n: int = 120) -> np.ndarray:
    m = api.load_model(OPS_FIXTURES / model_file)
    x = api.random_inputs(m, n, seed=3)
    x[0], x[1], x[2] = -128, 127, 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128
    return x


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Every positive fixture generated for the host under its own prefix, and all of them compiled
    with the kernels once into one shared library that each bundle's HostModel loads (one compile
    instead of one make per model)."""
    root = tmp_path_factory.mktemp("ops")
    bundles = {f: api.generate(OPS_FIXTURES / f, "host", root / Path(f).stem, prefix=Path(f).stem) for f in POSITIVE}
    models, asm_includes = cbuild.model_sources(bundles.values())
    lib = root / "libops.so"
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
@pytest.mark.parametrize("model_file", POSITIVE)
def test_fixture_bit_exact_against_tflm(model_file, host_bundles):
    from zoflash.reference.tflm import TflmInterpreter

    x = _inputs(model_file)
    ours = HostModel(host_bundles[model_file]).run(x)
    golden = TflmInterpreter((OPS_FIXTURES / model_file).read_bytes()).run_batch(x).reshape(ours.shape)
    assert ours.dtype == golden.dtype
    assert_same(ours, golden, f"{model_file}: C vs TFLM")
    model = compile_graph(api.load_model(OPS_FIXTURES / model_file).graph)
    assert_same(ReferenceForward(model).forward(x), golden, f"{model_file}: reference vs TFLM")


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_compares_int32_indices():
    x = _inputs("arg_max_i32.tflite", 100)
    report = api.validate(OPS_FIXTURES / "arg_max_i32.tflite", x)
    assert report.ok and report.outputs[0].elements == 100 * 4 * 6, report  # [1, 4, 6] indices per sample


def test_int64_arg_max_is_refused_with_a_hint():
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(api.load_model(OPS_FIXTURES / "arg_max_i64_h.tflite").graph)
    assert "int64" in str(err.value) and "output_type=tf.int32" in str(err.value)


def test_generated_api_declares_int32_output(tmp_path):
    bundle = api.generate(OPS_FIXTURES / "arg_max_i32.tflite", "host", tmp_path / "b")
    assert bundle.manifest["outputs"][0]["dtype"] == "int32"
    assert "ZO_INT32" in (bundle.path / f"{bundle.prefix}.c").read_text()


# ----------------------------------------------------------------------- what legality refuses


def _graph_and_op(model_file: str, op_type: str):
    graph = api.load_model(OPS_FIXTURES / model_file).graph
    return graph, next(op for op in graph.ops if op.type == op_type)


def _problems(graph) -> str:
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(graph)
    return "\n".join(err.value.problems)


def _set_data(graph, index: int, values) -> None:
    data = np.array(values, dtype=np.int32)
    graph.tensors[index] = replace(graph.tensors[index], shape=data.shape, data=data)


def _requantize(graph, index: int, scale: float):
    graph.tensors[index] = replace(graph.tensors[index], quant=Quantization((scale,), (0,)))


@pytest.mark.parametrize(
    "model_file, op_type",
    [
        ("reduce_max_c.tflite", "REDUCE_MAX"),
        ("bilinear_down.tflite", "RESIZE_BILINEAR"),
        ("nearest_align.tflite", "RESIZE_NEAREST_NEIGHBOR"),
    ],
)
def test_output_must_keep_the_input_quantization(model_file, op_type):
    graph, op = _graph_and_op(model_file, op_type)
    _requantize(graph, op.outputs[0], 0.5)
    assert "input and output must share scale and zero point" in _problems(graph)


@pytest.mark.parametrize(
    "axes, words",
    [
        ([1, 1], "the axes must be distinct"),
        ([3, 4], "each in [-rank, rank)"),
        ([1], "the output must be the input without the reduced dimensions"),
    ],
)
def test_reduce_max_axes(axes, words):
    graph, op = _graph_and_op("reduce_max_split.tflite", "REDUCE_MAX")
    _set_data(graph, op.inputs[1], axes)
    assert words in _problems(graph)


def test_arg_max_axis_must_be_one_value_giving_the_output():
    graph, op = _graph_and_op("arg_max_i32.tflite", "ARG_MAX")
    _set_data(graph, op.inputs[1], [1, 2])
    assert "the axis must be one value" in _problems(graph)
    _set_data(graph, op.inputs[1], [1])
    assert "the output must be the input without the axis" in _problems(graph)


def test_resize_size_and_flags():
    graph, op = _graph_and_op("bilinear_align.tflite", "RESIZE_BILINEAR")
    op.options["half_pixel_centers"] = True
    assert "cannot both be true" in _problems(graph)
    op.options["half_pixel_centers"] = False
    _set_data(graph, op.inputs[1], [11, 8])
    assert "the size must be 2 positive values [height, width], the output's" in _problems(graph)


def test_transpose_conv_shapes():
    graph, op = _graph_and_op("tconv_same_s2.tflite", "TRANSPOSE_CONV")
    op.options["stride_h"] = 3  # a 8-row output at stride 3 comes from 3 rows, the input has 4
    assert "the input height and width must be what a convolution of the output" in _problems(graph)
    op.options["stride_h"] = 2
    _set_data(graph, op.inputs[0], [1, 8, 10, 5])
    assert "the output shape input must hold the output's shape" in _problems(graph)


@pytest.mark.cross
@pytest.mark.parametrize("model_file", ["arg_max_i32.tflite", "tconv_same_s2.tflite"])
def test_cortex_m55_compile_is_warning_free(model_file, tmp_path):
    bundle = api.generate(OPS_FIXTURES / model_file, "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)
