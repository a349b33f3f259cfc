"""Stateful models: SVDF and the state infrastructure (variable tensors in <prefix>_state, reset).

The C kernel against the NumPy reference on random shapes and parameters over sequences of calls
(outputs and state after every call), the fixture models (tests/fixtures/ops/sequence.json) bit for
bit against the tflite-micro interpreter over input sequences, through the generated C and through
the reference forward pass, the reset of both engines, and what legality refuses.
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
from conftest import derived_op_fixture  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ir import Quantization  # noqa: E402
from zoflash.compiler.ops import (  # noqa: E402
    KERNELS,  # noqa: E402
    activation_params,
    sequence_params,
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import sequence as ref_sequence  # noqa: E402
from zoflash.targets.host_runner import HostModel  # noqa: E402

OPS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ops"  # relu_relu6 (not derived)
INDEX = json.loads((OPS_FIXTURES / "sequence.json").read_text())
POSITIVE = [f["file"] for f in INDEX if f["kind"] == "positive"]


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want).reshape(np.shape(got))
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    assert bad.size == 0, (
        f"{what}: {bad.size} of {got.size} differ; first at {bad[0]}: "
        f"C {got.reshape(-1)[bad[0]]} vs reference {want.reshape(-1)[bad[0]]}"
    )


def f32(v) -> float:
    return float(np.float32(v))


# ------------------------------------------------------------------------- C vs NumPy reference


@pytest.mark.cc
@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_svdf_sequences(K, dtype):
    rng = np.random.default_rng(21 if dtype == "int8" else 22)
    kernel = KERNELS.get("svdf_s8" if dtype == "int8" else "svdf_s8_s16")
    info = np.iinfo(dtype)
    for i in range(40):
        batches, n_in = int(rng.integers(1, 3)), int(rng.integers(1, 24))
        rank, units, memory = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(1, 10))
        filters = rank * units
        state_scale = f32(rng.uniform(0.02, 0.3) if dtype == "int8" else rng.uniform(1e-4, 3e-3))
        time_scale = f32(rng.uniform(0.001, 0.01) if dtype == "int8" else rng.uniform(1e-6, 1e-5))
        p = sequence_params.svdf_params(
            batches=batches,
            input_size=n_in,
            num_filters=filters,
            rank=rank,
            memory_size=memory,
            input_scale=f32(rng.uniform(0.01, 0.1)),
            input_zp=int(rng.integers(-128, 128)),
            feature_scale=f32(rng.uniform(0.002, 0.02)),
            state_scale=state_scale,
            state_zp=int(rng.integers(-20, 21)) if dtype == "int8" else 0,
            time_scale=time_scale,
            output_scale=f32(rng.uniform(0.05, 0.5)),
            output_zp=int(rng.integers(-128, 128)),
            state_dtype=dtype,
        )
        wf = rng.integers(-127, 128, (filters, n_in)).astype(np.int8)
        wt = rng.integers(info.min // 2, info.max // 2, (filters, memory)).astype(dtype)
        b = None if i % 4 == 0 else rng.integers(-50000, 50000, units).astype(np.int32)
        state_c = rng.integers(info.min, info.max + 1, batches * filters * memory).astype(dtype)
        state_ref = state_c.copy()
        for step in range(6):  # a sequence: both states carry on
            x = rng.integers(-128, 128, batches * n_in).astype(np.int8)
            want = ref_sequence.svdf(p, x, wf, wt, b, state_ref)
            out = np.zeros(batches * units, np.int8)
            K.call(kernel.function, kernel.struct, p, x, wf, wt, b, state_c, out)
            what = f"svdf {dtype} case {i} step {step} ({batches}x{n_in}, rank {rank}, units {units}, memory {memory})"
            assert_same(out, want, what)
            assert_same(state_c, state_ref, what + " state")


@pytest.mark.cc
def test_requantize_s16_s8(K):
    rng = np.random.default_rng(23)
    kernel = KERNELS.get("requantize_s16_s8")
    for _ in range(40):
        p = activation_params.requantize_s16_params(
            size=64,
            input_scale=f32(rng.uniform(1e-5, 1e-3)),
            input_zp=int(rng.integers(-300, 300)),
            output_scale=f32(rng.uniform(0.001, 0.1)),
            output_zp=int(rng.integers(-128, 128)),
        )
        x = rng.integers(-32768, 32768, 64).astype(np.int16)
        x[:2] = -32768, 32767
        out = np.zeros(64, np.int8)
        K.call(kernel.function, kernel.struct, p, x, out)
        assert_same(out, ref_sequence.requantize_s16_s8(p, x), "requantize_s16_s8")


def test_svdf_reference_by_definition():
    """Unit scales, one filter, memory 2: the state shifts left and the newest activation is the
    feature dot product; the output is the time weights against the memory."""
    p = sequence_params.svdf_params(
        batches=1,
        input_size=1,
        num_filters=1,
        rank=1,
        memory_size=2,
        input_scale=1.0,
        input_zp=0,
        feature_scale=1.0,
        state_scale=1.0,
        state_zp=0,
        time_scale=1.0,
        output_scale=1.0,
        output_zp=0,
        state_dtype="int16",
    )
    state = np.zeros(2, np.int16)
    wf, wt, b = np.array([[2]], np.int8), np.array([[1, 10]], np.int16), np.array([0], np.int32)
    assert ref_sequence.svdf(p, np.array([3], np.int8), wf, wt, b, state).tolist() == [60] and state.tolist() == [0, 6]
    assert ref_sequence.svdf(p, np.array([1], np.int8), wf, wt, b, state).tolist() == [26] and state.tolist() == [6, 2]


def test_svdf_builder_refuses_what_tflm_does_not_run():
    kw = dict(
        batches=1,
        input_size=4,
        num_filters=6,
        rank=4,
        memory_size=3,
        input_scale=0.1,
        input_zp=0,
        feature_scale=0.01,
        state_scale=0.1,
        state_zp=0,
        time_scale=0.01,
        output_scale=0.1,
        output_zp=0,
        state_dtype="int8",
    )
    with pytest.raises(ValueError, match="not a multiple of rank"):
        sequence_params.svdf_params(**kw)
    with pytest.raises(ValueError, match="int8 or int16"):
        sequence_params.svdf_params(**dict(kw, rank=2, state_dtype="int32"))


# ------------------------------------------------------------------------- models against TFLM


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256(derived_op_fixture(f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
    assert {"SVDF", "QUANTIZE"} <= {op for f in INDEX if f["kind"] == "positive" for op in f["ops"]}


def _inputs(model_file: str, n: int = 120) -> np.ndarray:
    x = api.random_inputs(api.load_model(derived_op_fixture(model_file)), n, seed=3)
    x[0], x[1], x[2] = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max, 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128  # every int8 value
    return x


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Every positive fixture generated for the host, all compiled with the kernels into one shared
    library that each bundle's HostModel loads (one compile instead of one make per model)."""
    root = tmp_path_factory.mktemp("seq")
    bundles = {
        f: api.generate(derived_op_fixture(f), "host", root / Path(f).stem, prefix=Path(f).stem) for f in POSITIVE
    }
    models, asm_includes = cbuild.model_sources(bundles.values())
    lib = root / "libseq.so"
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
def test_fixture_sequence_bit_exact_against_tflm(model_file, host_bundles):
    """120 inputs in order, no reset in between: the state's evolution is compared too."""
    from zoflash.reference.tflm import TflmInterpreter

    x = _inputs(model_file)
    m = HostModel(host_bundles[model_file])
    m.reset()
    ours = m.run(x)
    golden = TflmInterpreter(derived_op_fixture(model_file).read_bytes()).run_batch(x).reshape(ours.shape)
    assert_same(ours, golden, f"{model_file}: C vs TFLM")
    model = compile_graph(api.load_model(derived_op_fixture(model_file)).graph)
    assert_same(ReferenceForward(model).forward(x), golden, f"{model_file}: reference vs TFLM")
    if not model.stateful:
        return
    # The state matters: each input alone, from a reset state, gives other outputs.
    alone = np.stack([(m.reset(), m.run(x[i : i + 1]))[1][0] for i in range(20, 40)])
    assert np.mean(alone != ours[20:40]) > 0.5


@pytest.mark.cc
def test_reset_restores_the_initial_state(host_bundles):
    f = "svdf_s8.tflite"
    x = _inputs(f, 30)
    m = HostModel(host_bundles[f])
    m.reset()
    first = m.run(x)
    assert not np.array_equal(m.run(x), first)  # the state carried on
    m.reset()
    assert np.array_equal(m.run(x), first)
    forward = ReferenceForward(compile_graph(api.load_model(derived_op_fixture(f)).graph))
    forward.forward(x)
    forward.reset()
    assert_same(forward.forward(x), first, "reference after reset")


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_compares_the_sequence():
    report = api.validate(derived_op_fixture("svdf_s16_rank2.tflite"), _inputs("svdf_s16_rank2.tflite", 100))
    assert report.ok and report.samples == 100, report


def test_generated_api_has_state_and_reset(tmp_path):
    model = compile_graph(api.load_model(derived_op_fixture("svdf_s8.tflite")).graph)
    s = model.graph.tensors[next(iter(model.state_offset))]
    assert model.state_size == 1024 and s.quant.zero_point == 7
    assert (ReferenceForward(model).state[s.index] == 7).all()  # TFLM writes an int8 state's zero point
    bundle = api.generate(derived_op_fixture("svdf_s8.tflite"), "host", tmp_path / "b")
    p = bundle.prefix
    header, source = (bundle.path / f"{p}.h").read_text(), (bundle.path / f"{p}.c").read_text()
    assert f"void {p}_reset(void);" in header and f"#define {p.upper()}_STATE_BYTES 1024" in header
    assert f"static int8_t {p}_state[1024]" in source and f"memset(&{p}_state[0], 7, 1024);" in source
    assert bundle.manifest["memory"]["state_bytes"] == 1024
    text = api.inspect(derived_op_fixture("svdf_s8.tflite")).text
    assert "state: 1024 bytes" in text and "state 1024 B" in text
    int16 = compile_graph(api.load_model(derived_op_fixture("svdf_s16_rank2.tflite")).graph)
    assert int16.state_size == 2048 and not any(v.any() for v in ReferenceForward(int16).state.values())  # zeros


def test_int16_input_only_through_quantize(tmp_path):
    bundle = api.generate(derived_op_fixture("quantize_s16.tflite"), "host", tmp_path / "b")
    assert bundle.manifest["inputs"][0]["dtype"] == "int16"
    assert "ZO_INT16" in (bundle.path / f"{bundle.prefix}.c").read_text()
    graph = api.load_model(derived_op_fixture("svdf_s8.tflite")).graph
    x = graph.tensors[graph.inputs[0]]
    graph.tensors[x.index] = replace(x, dtype="int16")
    assert "is int16 (zoflash runs this op on int8 activations only" in _problems(graph)


def test_stateless_models_have_an_empty_reset(tmp_path):
    bundle = api.generate(OPS_FIXTURES / "relu_relu6.tflite", "host", tmp_path / "b")
    source = (bundle.path / f"{bundle.prefix}.c").read_text()
    assert f"void {bundle.prefix}_reset(void)" in source and "_state[" not in source
    assert bundle.manifest["memory"]["state_bytes"] == 0


def test_training_an_svdf_alone_is_refused_for_want_of_a_trainable_layer(tmp_path):
    """The SVDF keeps state and has no CONV/FC weights: nothing trains (a state in the frozen
    prefix would train: tests/test_engines.py)."""
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(
        data,
        x_train=rng.uniform(-1, 1, (8, 1, 16)).astype(np.float32),
        y_train=rng.integers(0, 32, 8),
        x_test=rng.uniform(-1, 1, (4, 1, 16)).astype(np.float32),
        y_test=rng.integers(0, 32, 4),
    )
    with pytest.raises(UnsupportedModelError, match="no layer with constant int8 weights"):
        api.generate(derived_op_fixture("svdf_s8.tflite"), "host", tmp_path / "b", data_path=data)


def test_firmware_budget_counts_the_state():
    from zoflash.targets import boards
    from zoflash.targets.budget import estimate_regions

    board = boards.load_board("mps3-an547")
    model = compile_graph(api.load_model(derived_op_fixture("svdf_s8.tflite")).graph)
    uses = [u for r in estimate_regions(board, model) for u in r.items]
    assert any(u.label.startswith("model state") and u.bytes == 1024 for u in uses)


# ----------------------------------------------------------------------- what legality refuses


def _problems(graph) -> str:
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(graph)
    return "\n".join(err.value.problems)


def _graph():
    graph = api.load_model(derived_op_fixture("svdf_s8.tflite")).graph
    return graph, next(op for op in graph.ops if op.type == "SVDF")


def test_state_must_be_a_variable():
    graph, op = _graph()
    graph.tensors[op.inputs[4]] = replace(graph.tensors[op.inputs[4]], is_variable=False)
    assert "the activation state (input 4) must be a variable tensor" in _problems(graph)


def test_a_variable_elsewhere_is_refused():
    graph, op = _graph()
    graph.tensors[op.outputs[0]] = replace(graph.tensors[op.outputs[0]], is_variable=True)
    problems = _problems(graph)
    assert (
        "is a variable (state) as an output" in problems
        and "READ_VARIABLE, SVDF, UNIDIRECTIONAL_SEQUENCE_LSTM state inputs" in problems
    )


def test_state_type_must_match_the_time_weights():
    graph, op = _graph()
    s = graph.tensors[op.inputs[4]]
    graph.tensors[s.index] = replace(s, dtype="int16")
    assert "the state must have the type of weights_time" in _problems(graph)


def test_bias_scale_must_match():
    graph, op = _graph()
    b = graph.tensors[op.inputs[3]]
    graph.tensors[b.index] = replace(b, quant=Quantization((b.quant.scale * 2,), (0,)))
    assert "the bias scale must be state scale x weights_time scale" in _problems(graph)


@pytest.mark.cross
@pytest.mark.parametrize("model_file", POSITIVE)
def test_cortex_m55_compile_is_warning_free(model_file, tmp_path):
    bundle = api.generate(derived_op_fixture(model_file), "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)
