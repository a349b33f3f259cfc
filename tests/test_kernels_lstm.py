"""UNIDIRECTIONAL_SEQUENCE_LSTM: the C kernel against the NumPy reference on random sizes and
parameters over sequences of invokes (output, hidden and cell state after each), the reference's
int16 sigmoid and tanh against their float definitions, the fixtures (tests/fixtures/ops/lstm.json)
bit for bit against the tflite-micro interpreter over input sequences, the state across invokes
and after a reset against TFLM's, the sanitizer build, and what legality refuses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402
from conftest import OPS_FIXTURES, derived_op_fixture, need_public_models  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ir import Quantization  # noqa: E402
from zoflash.compiler.ops import (
    KERNELS,  # noqa: E402
    sequence_params,  # noqa: E402
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import sequence as ref_sequence  # noqa: E402
from zoflash.targets.host_runner import HostModel  # noqa: E402

INDEX = json.loads((OPS_FIXTURES / "lstm.json").read_text())
FIXTURES = [f["file"] for f in INDEX]

# The builder/struct contract sample (tests/test_kernels.py collects it).
SAMPLES = {
    "lstm_s8_s16": dict(
        batches=2,
        time_steps=3,
        input_size=5,
        units=4,
        time_major=False,
        input_scale=0.03,
        input_zp=-3,
        input_weight_scales=[0.01, 0.02, 0.015, 0.01],
        recurrent_weight_scales=[0.02, 0.01, 0.01, 0.03],
        hidden_scale=1 / 128,
        hidden_zp=4,
        cell_scale=2**-11,
        cell_clip=0.0,
    )
}


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


def test_sigmoid_table_is_the_same_in_c_and_in_the_reference():
    """The C kernel and the reference each carry TFLM's sigmoid table: the same 256 values, and
    within 1.5 units of sigmoid(i / 24) in Q0.16 (TFLM rounds some entries off by a little more than one)."""
    text = (cbuild.INFERENCE / "zo_kernels_lstm.c").read_text()
    body = re.search(r"zo_sigmoid_table\[256\] = \{(.*?)\};", text, re.S).group(1)
    c_table = np.array([int(v) for v in body.replace("\n", " ").split(",") if v.strip()])
    assert c_table.tolist() == ref_sequence.SIGMOID_TABLE.tolist()
    exact = 65536.0 / (1.0 + np.exp(-np.arange(256) / 24.0))
    assert np.max(np.abs(c_table - np.minimum(exact, 65535))) <= 1.5


# ------------------------------------------------------------------------- C vs NumPy reference


def _random_case(rng, i):
    batches, steps = int(rng.integers(1, 4)), int(rng.integers(1, 7))
    n_in, units = int(rng.integers(1, 20)), int(rng.integers(1, 17))
    in_s, h_s = f32(rng.uniform(0.01, 0.1)), f32(rng.uniform(0.004, 0.02))
    # Power-of-two cell scales from 2^-15 to 2^-9 (the tanh's right and left shifts), and others.
    cell_s = f32(2.0 ** -rng.integers(9, 16) * (1 if i % 3 else rng.uniform(0.75, 1.4)))
    clip = 0.0 if i % 2 else f32(rng.uniform(0.1, 1.2) * cell_s * 32768)
    p = sequence_params.lstm_params(
        batches=batches,
        time_steps=steps,
        input_size=n_in,
        units=units,
        time_major=bool(i % 4 == 1),
        input_scale=in_s,
        input_zp=int(rng.integers(-128, 128)),
        input_weight_scales=[f32(rng.uniform(0.2, 3) / (n_in * 40 * in_s)) for _ in range(4)],
        recurrent_weight_scales=[f32(rng.uniform(0.2, 3) / (units * 40 * h_s)) for _ in range(4)],
        hidden_scale=h_s,
        hidden_zp=int(rng.integers(-20, 21)),
        cell_scale=cell_s,
        cell_clip=clip,
    )
    wx = [rng.integers(-127, 128, (units, n_in)).astype(np.int8) for _ in range(4)]
    wh = [rng.integers(-127, 128, (units, units)).astype(np.int8) for _ in range(4)]
    bias_s = [in_s * 0.01 for _ in range(4)]
    bs = [np.round(rng.normal(0, 1.5, units) / s).astype(np.int32) for s in bias_s]
    if i % 5 == 0:  # extreme biases: saturated gates and int32 wrap-around in the accumulator
        bs[int(rng.integers(4))][:] = rng.choice([-(2**31), 2**31 - 1], units)
    return p, wx, wh, bs


@pytest.mark.cc
def test_lstm_sequences_c_vs_reference(K):
    rng = np.random.default_rng(31)
    kernel = KERNELS.get("lstm_s8_s16")
    for i in range(60):
        p, wx, wh, bs = _random_case(rng, i)
        n = p["batches"] * p["units"]
        hidden_c = rng.integers(-128, 128, n).astype(np.int8)
        cell_c = rng.integers(-32768, 32768, n).astype(np.int16)
        hidden_ref, cell_ref = hidden_c.copy(), cell_c.copy()
        for invoke in range(3):  # the states carry on from one invoke to the next
            x = rng.integers(-128, 128, p["batches"] * p["time_steps"] * p["input_size"]).astype(np.int8)
            if invoke == 1:
                x[::2] = -128
                x[1::2] = 127
            want = ref_sequence.lstm(p, x, wx, wh, bs, hidden_ref, cell_ref)
            out = np.zeros(p["batches"] * p["time_steps"] * p["units"], np.int8)
            K.call(kernel.function, kernel.struct, p, x, *wx, *wh, *bs, hidden_c, cell_c, out)
            what = (
                f"lstm case {i} invoke {invoke} (batches {p['batches']}, steps {p['time_steps']}, "
                f"inputs {p['input_size']}, units {p['units']}, time_major {p['time_major']})"
            )
            assert_same(out, want, what)
            assert_same(hidden_c, hidden_ref, what + " hidden")
            assert_same(cell_c, cell_ref, what + " cell")


def test_int16_sigmoid_and_tanh_follow_their_definitions():
    """Every Q3.12 input: the table interpolations are within 2^-10 of the float functions, and
    odd (tanh) or point-symmetric about 1/2 (sigmoid) to one LSB; inputs past the table saturate."""
    q = np.arange(-32768, 32768)
    x = q / 4096.0
    sig, tanh = ref_sequence.sigmoid_s16(q * 3) / 32768.0, ref_sequence.tanh_s16(q * 3) / 32768.0
    assert np.abs(sig - 1 / (1 + np.exp(-x))).max() < 2**-10
    assert np.abs(tanh - np.tanh(x)).max() < 2**-10
    assert ref_sequence.sigmoid_s16(0) == 16384 and ref_sequence.tanh_s16(0) == 0
    assert ref_sequence.sigmoid_s16(1 << 20) == 32767 and ref_sequence.tanh_s16(-(1 << 20)) == -32767  # past the table
    inner = q[1:]
    assert np.abs(ref_sequence.tanh_s16(inner * 3) + ref_sequence.tanh_s16(-inner * 3)).max() <= 1
    assert np.abs(ref_sequence.sigmoid_s16(inner * 3) + ref_sequence.sigmoid_s16(-inner * 3) - 32768).max() <= 1


def test_reference_is_close_to_a_float_lstm():
    """The reference on lstm_small against the float LSTM of its dequantized weights (Keras's
    equations): the hidden states agree to a few of the int8 steps."""
    graph = api.load_model(_path("lstm_small.tflite")).graph
    model = compile_graph(graph)
    step = model.program.steps[0]
    t = [graph.tensors[a] for a in step.args]
    deq = [w.data.astype(np.float64) * w.quant.scale for w in t[1:13]]
    x_q = np.random.default_rng(5).integers(-128, 128, t[0].shape).astype(np.int8)
    ours = ReferenceForward(model).forward(x_q[None])[0].reshape(-1, t[-1].shape[-1])
    h_s, h_zp = t[13].quant.scale, t[13].quant.zero_point
    x = (x_q.reshape(-1, t[0].shape[-1]).astype(np.float64) - t[0].quant.zero_point) * t[0].quant.scale
    h, c = np.zeros(t[-1].shape[-1]), np.zeros(t[-1].shape[-1])
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for k in range(len(x)):
        i, f, g, o = (deq[j] @ x[k] + deq[4 + j] @ h + deq[8 + j] for j in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        assert np.abs((ours[k].astype(np.float64) - h_zp) * h_s - h).max() < 4 * h_s, f"step {k}"


def test_builder_refuses_what_tflm_cannot_run():
    kw = SAMPLES["lstm_s8_s16"]
    with pytest.raises(ValueError, match="one per gate"):
        sequence_params.lstm_params(**dict(kw, input_weight_scales=[0.01] * 3))
    with pytest.raises(ValueError, match="outside what the int16 tanh reads"):
        sequence_params.lstm_params(**dict(kw, cell_scale=8.0))
    p = sequence_params.lstm_params(**dict(kw, cell_scale=0.00021, cell_clip=f32(1.0)))
    assert (p["tanh_multiplier"], p["tanh_shift"]) == (3, 0)  # log2(0.00021) = -12.2, rounded to -12
    assert p["use_cell_clip"] == 1 and p["cell_clip"] == int(f32(1.0) / f32(0.00021))  # truncated
    assert sequence_params.lstm_params(**dict(kw, cell_clip=-1.0))["use_cell_clip"] == 0


# ------------------------------------------------------------------------- models against TFLM


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256(_path(f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
        assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in f["ops"]


def _inputs(path: Path, n: int = 120) -> np.ndarray:
    x = api.random_inputs(api.load_model(path), n, seed=3)
    x[0], x[1], x[2] = -128, 127, 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128  # every int8 value
    return x


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Every fixture and mnist_lstm generated for the host, compiled with the kernels into one shared
    library that each bundle's HostModel loads."""
    root = tmp_path_factory.mktemp("lstm")
    paths = [_path(f) for f in [*FIXTURES, "mnist_lstm.tflite"]]
    bundles = {p.name: api.generate(p, "host", root / p.stem, prefix=p.stem) for p in paths}
    models, asm_includes = cbuild.model_sources(bundles.values())
    lib = root / "liblstm.so"
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


def _path(name: str) -> Path:
    """mnist_lstm.tflite from the zoo, a fixture as made from it (both skip without the zoo)."""
    return need_public_models() / name if name == "mnist_lstm.tflite" else derived_op_fixture(name)


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("name", FIXTURES + ["mnist_lstm.tflite"])
def test_sequence_bit_exact_against_tflm(name, host_bundles):
    """120 inputs in order, no reset in between: the states' evolution is compared too."""
    from zoflash.reference.tflm import TflmInterpreter

    x = _inputs(_path(name))
    m = HostModel(host_bundles[name])
    m.reset()
    ours = m.run(x)
    golden = TflmInterpreter(_path(name).read_bytes()).run_batch(x).reshape(ours.shape)
    assert_same(ours, golden, f"{name}: C vs TFLM")
    model = compile_graph(api.load_model(_path(name)).graph)
    assert_same(ReferenceForward(model).forward(x), golden, f"{name}: reference vs TFLM")
    # The state matters: each input alone, from a reset state, gives other outputs (mnist_lstm's
    # saturated softmax hides most of it).
    alone = np.stack([(m.reset(), m.run(x[i : i + 1]))[1][0] for i in range(20, 40)])
    assert np.mean(alone != ours[20:40]) > (0.01 if name == "mnist_lstm.tflite" else 0.3)


@pytest.mark.cc
@pytest.mark.tflm
def test_reset_restores_the_initial_state_as_tflm_does(host_bundles):
    from zoflash.reference.tflm import TflmInterpreter

    name = "lstm_clip.tflite"
    x = _inputs(_path(name), 30)
    m, tflm = HostModel(host_bundles[name]), TflmInterpreter(_path(name).read_bytes())
    m.reset()
    first, first_tflm = m.run(x[:15]), tflm.run_batch(x[:15])
    assert not np.array_equal(m.run(x[:15]), first)  # the states carried on
    tflm.run_batch(x[:15])
    m.reset()
    tflm.reset()
    again, again_tflm = m.run(x[15:]), tflm.run_batch(x[15:])
    assert_same(first, first_tflm.reshape(first.shape), "before the reset")
    assert_same(again, again_tflm.reshape(again.shape), "after the reset")
    forward = ReferenceForward(compile_graph(api.load_model(_path(name)).graph))
    forward.forward(x)
    forward.reset()
    assert_same(forward.forward(x[15:]), again, "reference after reset")


@pytest.mark.tflm
def test_arena_not_larger_than_tflm():
    """No scratch: the gates are consumed unit by unit, where TFLM requests four buffers."""
    from zoflash.reference.tflm import TflmInterpreter

    model = compile_graph(api.load_model(_path("mnist_lstm.tflite")).graph)
    assert model.arena_size <= TflmInterpreter(_path("mnist_lstm.tflite").read_bytes()).arena_usage()["head"]


def test_generated_api_has_both_states_and_reset(tmp_path):
    model = compile_graph(api.load_model(_path("lstm_small.tflite")).graph)
    hidden, cell = (model.graph.tensors[i] for i in sorted(model.state_offset, key=model.state_offset.get))
    assert (hidden.dtype, cell.dtype, hidden.quant.zero_point) == ("int8", "int16", 5)
    assert model.state_size == 16 + 16  # 8 int8 and 8 int16 values, each aligned
    state = ReferenceForward(model).state
    assert (state[hidden.index] == 5).all() and not state[cell.index].any()  # TFLM's reset values
    bundle = api.generate(_path("lstm_small.tflite"), "host", tmp_path / "b")
    p = bundle.prefix
    source = (bundle.path / f"{p}.c").read_text()
    assert f"void {p}_reset(void);" in (bundle.path / f"{p}.h").read_text()
    assert f"memset(&{p}_state[0], 5, 8);" in source
    assert bundle.manifest["memory"]["state_bytes"] == 32


@pytest.mark.cc
def test_sanitizer_build_matches(host_bundles, tmp_path):
    """AddressSanitizer + UBSan runner on a sequence gives the library's outputs."""
    bundle = host_bundles["lstm_clip.tflite"]
    subprocess.run(["make", "-s", "-C", str(bundle.path), "sanitize"], check=True, capture_output=True)
    x = _inputs(_path("lstm_clip.tflite"), 12)
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    exe = bundle.path / "build" / f"{bundle.prefix}_run_asan"
    proc = subprocess.run(
        [str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        env={**os.environ, "UBSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = HostModel(bundle)
    m.reset()
    expected = m.run(x)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=expected.dtype).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.cross
def test_cortex_m55_compile_is_warning_free(tmp_path):
    bundle = api.generate(_path("mnist_lstm.tflite"), "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)


# ----------------------------------------------------------------------- what legality refuses


def _problems(graph) -> str:
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(graph)
    return "\n".join(err.value.problems)


def _graph():
    graph = api.load_model(_path("lstm_small.tflite")).graph
    return graph, next(op for op in graph.ops if op.type == "UNIDIRECTIONAL_SEQUENCE_LSTM")


def _with_input(graph, op, pos: int, source: int):
    """The op with input `pos` set to tensor `source` (-1: omitted)."""
    inputs = list(op.inputs)
    inputs[pos] = source
    graph.ops[op.index] = replace(op, inputs=tuple(inputs))
    return graph


@pytest.mark.parametrize(
    "positions, rule",
    [
        ((1, 5, 12), "CIFG (coupled input and forget gates"),
        ((5,), "CIFG (coupled input and forget gates"),
    ],
)
def test_cifg_is_refused(positions, rule):
    graph, op = _graph()
    for pos in positions:
        graph = _with_input(graph, graph.ops[op.index], pos, -1)
    assert rule in _problems(graph)


@pytest.mark.parametrize(
    "pos, rule",
    [
        (9, "peephole connections"),
        (11, "peephole connections"),
        (16, "a projection layer"),
        (17, "a projection layer"),
        (20, "layer normalisation"),
        (23, "layer normalisation"),
    ],
)
def test_variants_are_refused_by_name(pos, rule):
    graph, op = _graph()
    problems = _problems(_with_input(graph, op, pos, op.inputs[12]))  # any tensor makes the variant present
    assert f"{rule} (inputs" in problems and "not supported (TFLM's kernel has none)" in problems


def test_the_20_input_form_is_refused():
    graph, op = _graph()
    graph.ops[op.index] = replace(op, inputs=op.inputs[:20])
    assert "the LSTM must have TFLM's 24 inputs" in _problems(graph)


def test_states_must_be_variables():
    graph, op = _graph()
    c = graph.tensors[op.inputs[19]]
    graph.tensors[c.index] = replace(c, is_variable=False)
    assert "the hidden and cell states (inputs 18 and 19) must be variable tensors" in _problems(graph)


def test_cell_state_must_be_int16():
    graph, op = _graph()
    c = graph.tensors[op.inputs[19]]
    graph.tensors[c.index] = replace(c, dtype="int8")
    assert "is int8, not int16 (TFLM's integer LSTM keeps an int16 cell state)" in _problems(graph)


def test_weights_must_be_symmetric_per_tensor():
    graph, op = _graph()
    w, r = graph.tensors[op.inputs[2]], graph.tensors[op.inputs[6]]
    graph.tensors[w.index] = replace(w, quant=Quantization((w.quant.scale,), (3,)))
    graph.tensors[r.index] = replace(
        r, quant=Quantization(tuple([r.quant.scale] * r.shape[0]), tuple([0] * r.shape[0]), axis=0)
    )
    problems = _problems(graph)
    assert "the weights must be quantized per tensor and symmetric" in problems
    assert f"'{w.name}' has zero point 3" in problems and f"'{r.name}' not quantized per tensor" in problems


def test_shapes_must_agree():
    graph, op = _graph()
    w = graph.tensors[op.inputs[3]]
    graph.tensors[w.index] = replace(
        w, shape=(w.shape[0], w.shape[1] + 1), data=np.zeros((w.shape[0], w.shape[1] + 1), np.int8)
    )
    assert f"'{w.name}' [8, 6]" in _problems(graph)
    graph, op = _graph()
    h = graph.tensors[op.inputs[18]]
    graph.tensors[h.index] = replace(h, shape=(8,))
    assert "hidden state [batches, units]" in _problems(graph)


@pytest.mark.parametrize(
    "option, value, rule",
    [
        ("fused_activation_function", "RELU", "fused_activation_function is 'RELU' (supported: TANH)"),
        ("diagonal_recurrent_tensors", True, "diagonal_recurrent_tensors is True (supported: False)"),
    ],
)
def test_options_outside_tflm_are_refused(option, value, rule):
    graph, op = _graph()
    graph.ops[op.index] = replace(op, options={**op.options, option: value})
    assert rule in _problems(graph)
