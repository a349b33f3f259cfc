"""Resource variables (CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) and custom-op refusals.

The copy kernel against NumPy; the fixture models (tests/fixtures/ops/variables.json) and the public
microWakeWord streaming model bit for bit against the tflite-micro interpreter over sequences of
invokes (the state carried), from a fresh start and after reset, through the generated C and the
reference forward pass; TFLM's once/reset semantics (CALL_ONCE runs at the first invoke only, reset
fills the variables with their zero point); what legality refuses, each in one line.
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
from conftest import PUBLIC, ZOO, zoo_param  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ops import (
    KERNELS,  # noqa: E402
    variables_params,  # noqa: E402
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.targets.host_runner import HostModel  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OPS_FIXTURES = FIXTURES / "ops"
INDEX = json.loads((OPS_FIXTURES / "variables.json").read_text())
WAKEWORD = PUBLIC / "microwakeword_hey_mycroft.tflite"
MODELS = [OPS_FIXTURES / f["file"] for f in INDEX] + [WAKEWORD]
MODEL_PARAMS = [zoo_param(p) if p == WAKEWORD else p for p in MODELS]


def assert_same(got, want, what):
    got, want = np.asarray(got), np.asarray(want).reshape(np.shape(got))
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    assert bad.size == 0, (
        f"{what}: {bad.size} of {got.size} differ; first at {bad[0]}: "
        f"ours {got.reshape(-1)[bad[0]]} vs TFLM {want.reshape(-1)[bad[0]]}"
    )


def _inputs(path: Path, n: int = 120) -> np.ndarray:
    """A sequence with the int8 extremes (on random features the wake-word model fires often)."""
    x = api.random_inputs(api.load_model(path), n, seed=3)
    x[0], x[1], x[2] = -128, 127, 0
    return x


def _problems(graph) -> str:
    with pytest.raises(UnsupportedModelError) as info:
        compile_graph(graph)
    return str(info.value)


# ------------------------------------------------------------------------------- the kernel


@pytest.mark.cc
def test_copy_kernel_against_numpy():
    K = cbuild.Kernels()
    kernel = KERNELS.get("copy_s8")
    rng = np.random.default_rng(31)
    for size in [1, 2, 3, 15, 16, 17, 255, 1000]:
        x = rng.integers(-128, 128, size).astype(np.int8)
        out = rng.integers(-128, 128, size).astype(np.int8)
        K.call(kernel.function, kernel.struct, variables_params.copy_params(size=size), x, out)
        assert_same(out, x, f"copy of {size} bytes")
    with pytest.raises(ValueError):
        variables_params.copy_params(size=0)


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256((OPS_FIXTURES / f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
        assert {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"} <= set(f["ops"])


# ------------------------------------------------------------------------- whole models vs TFLM


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Every model generated for the host and compiled with the kernels into one shared library."""
    root = tmp_path_factory.mktemp("var")
    present = [p for p in MODELS if p != WAKEWORD or ZOO]  # its test skips without the zoo
    bundles = {p: api.generate(p, "host", root / p.stem, prefix=p.stem) for p in present}
    sources, asm_includes = cbuild.model_sources(bundles.values())
    lib = root / "libvar.so"
    cmd = [
        cbuild.host_cc(),
        *cbuild.HOST_FLAGS,
        *asm_includes,
        "-fPIC",
        "-shared",
        "-I",
        str(cbuild.INFERENCE),
        *map(str, sources + cbuild.KERNEL_SOURCES),
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
@pytest.mark.parametrize("path", MODEL_PARAMS, ids=lambda p: p.stem)
def test_sequence_bit_exact_against_tflm(path, host_bundles):
    """>= 100 invokes from a fresh start, then reset and 40 more: C and reference vs TFLM."""
    from zoflash.reference.tflm import TflmInterpreter

    x = _inputs(path)
    tflm = TflmInterpreter(path.read_bytes())
    golden = tflm.run_batch(x)
    tflm.reset()
    golden_reset = tflm.run_batch(x[:40])
    m = HostModel(host_bundles[path])  # a fresh load: <prefix>_init
    assert_same(m.run(x), golden, f"{path.name}: C vs TFLM")
    m.reset()
    assert_same(m.run(x[:40]), golden_reset, f"{path.name}: C after reset vs TFLM")
    forward = ReferenceForward(compile_graph(api.load_model(path).graph))
    assert_same(forward.forward(x), golden, f"{path.name}: reference vs TFLM")
    forward.reset()
    assert_same(forward.forward(x[:40]), golden_reset, f"{path.name}: reference after reset vs TFLM")
    assert len(np.unique(golden)) > 3  # the outputs vary: the comparison means something
    # The state matters: each input from a reset state gives other outputs.
    alone = np.stack([(m.reset(), m.run(x[i : i + 1]))[1][0] for i in range(40, 60)])
    assert np.any(alone != golden[40:60].reshape(alone.shape))


@pytest.mark.cc
@pytest.mark.tflm
def test_call_once_runs_at_the_first_invoke_and_reset_fills_the_zero_point(host_bundles):
    """TFLM runs CALL_ONCE at the first invoke after construction, a reset before it included; a
    reset after it fills the variables with their zero point and does not run CALL_ONCE again."""
    from zoflash.reference.tflm import TflmInterpreter

    path = OPS_FIXTURES / "var_window.tflite"
    x = _inputs(path, 8)
    tflm = TflmInterpreter(path.read_bytes())
    tflm.reset()
    first = tflm.run_batch(x)
    tflm.reset()
    after = tflm.run_batch(x)
    assert not np.array_equal(first, after)  # the init value (0.5) is not the zero point
    m = HostModel(host_bundles[path])
    m.reset()
    assert_same(m.run(x), first, "C: reset before the first invoke")
    m.reset()
    assert_same(m.run(x), after, "C: reset after it")
    report = api.validate(path, _inputs(path, 100))
    assert report.ok and report.samples == 100, report


def test_generated_state_and_call_once(tmp_path):
    model = compile_graph(api.load_model(OPS_FIXTURES / "var_two_states.tflite").graph)
    g = model.graph
    # The reads alias the state (read before the variable is assigned again); the assigns copy.
    assert [s.op.type for s in model.program.steps if s.kernel == "copy_s8"] == ["ASSIGN_VARIABLE"] * 2
    assert [(a.op.type, g.tensors[a.source].is_variable) for a in model.program.aliases].count(
        ("READ_VARIABLE", True)
    ) == 2
    assert model.state_size == 32 and len(model.state_offset) == 2  # [1,2,6] and [1,6], 16-byte aligned
    bundle = api.generate(OPS_FIXTURES / "var_two_states.tflite", "host", tmp_path / "b")
    p = bundle.prefix
    source = (bundle.path / f"{p}.c").read_text()
    # Only the feature state (-0.25, not its zero point) needs an initial value; the ring buffer's
    # zeros are its zero point, which the reset writes.
    assert source.count(f"static const int8_t {p}_initial") == 1
    assert f"if (!{p}_call_once_done)" in source and f"{p}_call_once_done = 0;" in source
    assert "memset(&" in source.split(f"void {p}_reset(void)")[1].split("}")[0]
    text = api.inspect(OPS_FIXTURES / "var_two_states.tflite").text
    assert "state: 32 bytes" in text and "'Variable', initial values from CALL_ONCE" in text
    plain = api.generate(FIXTURES / "mlp.tflite", "host", tmp_path / "mlp")
    assert "call_once" not in (plain.path / f"{plain.prefix}.c").read_text()


def test_training_refuses_a_state_only_updated_after_the_output(tmp_path):
    """Training runs the model up to the output the loss reads: an ASSIGN_VARIABLE after it would
    never run, so the state would not evolve as on the device (a state in the frozen prefix
    trains: tests/test_engines.py)."""
    with pytest.raises(UnsupportedModelError, match="op 7 ASSIGN_VARIABLE .* after the output the loss reads"):
        api.generate(OPS_FIXTURES / "var_window.tflite", "host", tmp_path / "b", data_path=tmp_path / "none.npz")


# ------------------------------------------------------------------------------- refusals


def _graph(name="var_two_states.tflite"):
    return api.load_model(OPS_FIXTURES / name).graph


def _with_ops(g, ops):
    return replace(g, ops=[replace(op, index=k) for k, op in enumerate(ops)])


def test_read_before_assign_is_refused():
    g = _graph()
    text = _problems(_with_ops(g, g.ops[1:]))  # no CALL_ONCE: the feature state is read first
    assert "op 3 READ_VARIABLE" in text and "variable 'Variable' is read before anything assigns it" in text
    assert "op 2 READ_VARIABLE" in text and "'Variable_1' is read before" in text  # the ring buffer too


def test_init_subgraph_that_does_not_fold_is_refused():
    g = _graph()
    init = g.subgraphs[0]
    value = init.tensors[1]
    init = replace(init, tensors=[*init.tensors[:1], replace(value, data=None), *init.tensors[2:]])
    text = _problems(replace(g, subgraphs=(init,)))
    assert "op 0 CALL_ONCE" in text and "assigns 'Variable_1" not in text
    assert "computed at run time, not a constant" in text and text.count("\n  - ") == 1


def test_init_subgraph_with_other_ops_is_refused():
    g = _graph()
    init = g.subgraphs[0]
    read = replace(init.ops[1], type="READ_VARIABLE", inputs=(0,), outputs=(1,))
    text = _problems(replace(g, subgraphs=(replace(init, ops=[init.ops[0], read, *init.ops[2:]]),)))
    assert "init subgraph op 1 READ_VARIABLE is not an ASSIGN_VARIABLE of a VAR_HANDLE" in text


def test_call_once_not_first_is_refused():
    g = _graph()
    ops = [g.ops[1], g.ops[0], *g.ops[2:]]
    text = _problems(_with_ops(g, ops))
    assert "CALL_ONCE ops at [1]; one, the first op, is supported" in text


def test_wrong_size_and_type_are_refused():
    g = _graph()
    init = g.subgraphs[0]
    value = init.tensors[1]  # the feature state's initial value, int8 [1, 6]
    for data in (value.data[:, :5], value.data.view(np.int16)):
        bad = replace(value, shape=data.shape, dtype=str(data.dtype), data=data)
        text = _problems(replace(g, subgraphs=(replace(init, tensors=[init.tensors[0], bad, *init.tensors[2:]]),)))
        assert "of variable 'Variable' is not int8 of its 6 bytes" in text and text.count("\n  - ") == 1
    g = _graph()
    value = g.tensors[g.ops[10].inputs[1]]  # the feature state's ASSIGN_VARIABLE
    tensors = list(g.tensors)
    tensors[value.index] = replace(value, dtype="int16", shape=(1, 3))
    assert "op 10 ASSIGN_VARIABLE" in _problems(replace(g, tensors=tensors))


def test_other_subgraphs_and_foreign_handle_users_are_refused():
    g = _graph()
    assert "3 subgraphs (control flow)" in _problems(replace(g, num_subgraphs=3, subgraphs=g.subgraphs * 2))
    handle = g.ops[1].outputs[0]
    ops = list(g.ops)
    ops[11] = replace(ops[11], inputs=(ops[11].inputs[0], handle))  # ADD of a resource
    assert "VAR_HANDLE's output must be a resource tensor that only READ_VARIABLE and ASSIGN_VARIABLE use" in _problems(
        replace(g, ops=ops)
    )


@pytest.mark.zoo
def test_custom_ops_are_refused_in_one_line():
    text = _problems(api.load_model(PUBLIC / "audio_preprocessor.tflite").graph)
    assert text.count("\n  - ") == 1
    assert "op 0 CUSTOM:SignalWindow, op 2 CUSTOM:SignalFftAutoScale" in text
    assert "are vendor custom ops (the TFLM Signal library" in text and "zoflash does not run them" in text
    g = api.load_model(FIXTURES / "mlp.tflite").graph
    npu = replace(g, ops=[replace(g.ops[0], type="CUSTOM:ethos-u"), *g.ops[1:]])
    text = _problems(npu)
    assert text.count("\n  - ") == 1
    assert "op 0 CUSTOM:ethos-u is a vendor custom op (Arm's Vela compiler for the Ethos-U NPU" in text
    other = replace(g, ops=[replace(g.ops[0], type="CUSTOM:MyOp"), *g.ops[1:]])
    assert "op 0 CUSTOM:MyOp is a custom op; zoflash does not run it" in _problems(other)
