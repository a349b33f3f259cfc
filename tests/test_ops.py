"""The op registry: every entry complete, the docs generated from it up to date, and per-op
constraints that reject hand-made invalid models; a property test over random mutants."""

from __future__ import annotations

import copy
import os
import random
import re
import subprocess

import cbuild
import numpy as np
import pytest
from conftest import FIXTURES, ROOT, positive_fixtures

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.ops import KERNELS, OPS, docs
from zoflash.compiler.ops.common import GENERIC, STRUCTURE
from zoflash.compiler.ops.registry import message
from zoflash.compiler.pipeline import compile_graph
from zoflash.errors import UnsupportedModelError
from zoflash.registry import UnknownName

KERNELS_H = ROOT / "firmware_templates" / "runtime" / "inference" / "zo_kernels.h"


def test_every_entry_is_complete():
    for op_type, entry in OPS.items():
        assert op_type in entry.types
        # Every entry declares its tensors; CALL_ONCE alone has none (it names a subgraph).
        assert entry.summary and (entry.inputs or entry.outputs or op_type == "CALL_ONCE"), op_type
        for check in STRUCTURE + GENERIC + entry.constraints:
            assert check.__doc__, f"{op_type}: {check.__name__} needs a docstring (the message users see)"


def test_kernels_name_real_c_functions_and_structs():
    header = cbuild.header_text(KERNELS_H)
    for name, kernel in KERNELS.items():
        assert kernel.name == name
        assert f"void {kernel.function}(const {kernel.struct} *p" in header, name


def test_kernel_sources_are_the_files_defining_the_function():
    """A kernel declares the C files that define its function (its family's portable kernel and,
    where there is one, the Helium variant beside it): a bundle copies only those. Every kernel C
    file serves some kernel."""
    inference = KERNELS_H.parent
    defined: dict[str, set[str]] = {}
    for c in inference.glob("zo_kernels_*.c"):
        for function in re.findall(r"^void\s+(?:ZO_PORTABLE\()?(zo_\w+)\)?\s*\(", c.read_text(), flags=re.M):
            defined.setdefault(function, set()).add(c.name)
    used: set[str] = set()
    for name, kernel in KERNELS.items():
        assert set(kernel.sources) == defined.get(kernel.function), name
        used |= set(kernel.sources)
    assert used == {c.name for c in inference.glob("zo_kernels_*.c")}


def test_unknown_names_list_the_known_ones():
    with pytest.raises(UnknownName, match=r"unknown op 'NOT_AN_OP' \(known: CONV_2D, "):
        OPS.get("NOT_AN_OP")
    with pytest.raises(UnknownName, match=r"unknown kernel 'conv9d' \(known: conv2d, "):
        KERNELS.get("conv9d")


def test_docs_ops_md_is_up_to_date():
    assert (ROOT / "docs" / "ops.md").read_text() == docs.markdown(), (
        "docs/ops.md is stale: regenerate it with `make docs`"
    )


def test_ops_page_lists_every_op_once():
    listed = [t for line in docs.markdown().splitlines() if line.startswith("## ") for t in line[3:].split(", ")]
    assert sorted(listed) == sorted(OPS)


def test_ops_command(capsys):
    assert main(["ops"]) == 0
    text = capsys.readouterr().out
    for op_type in OPS:
        assert op_type in text
    assert message(OPS.get("PAD").constraints[3]) in text
    assert main(["ops", "--markdown"]) == 0
    assert capsys.readouterr().out == docs.markdown()


# ---- each family rejects what its kernels cannot compute ------------------------------------


def graph_of(name: str):
    return api.load_model(FIXTURES / name).graph


def op_of(graph, op_type: str):
    return next(op for op in graph.ops if op.type == op_type)


def rejected(graph, op, words: str) -> None:
    with pytest.raises(UnsupportedModelError) as info:
        compile_graph(graph)
    assert any(p.startswith(f"op {op.index} {op.type} (") and words in p for p in info.value.problems), (
        info.value.problems
    )


def test_concatenation_sizes_must_add_up():
    g = graph_of("branchy.tflite")
    op = op_of(g, "CONCATENATION")
    g.tensors[op.outputs[0]].shape = (1, 10, 10, 30)
    rejected(g, op, "the sizes along the axis must add up to the output's")


def test_concatenation_axis_in_range():
    g = graph_of("branchy.tflite")
    op = op_of(g, "CONCATENATION")
    op.options["axis"] = 4
    rejected(g, op, "the axis must be a dimension of the output")


def test_fully_connected_output_is_rows_by_units():
    g = graph_of("mlp.tflite")
    op = g.ops[0]
    g.tensors[op.outputs[0]].shape = (1, 17)
    rejected(g, op, "the output must hold rows x units elements")


def test_binary_inputs_must_broadcast_to_the_output():
    g = graph_of("mbv2_block.tflite")
    op = op_of(g, "ADD")
    g.tensors[op.inputs[1]].shape = (1, 16, 16, 8)
    rejected(g, op, "the inputs must broadcast (numpy rules) to the output's shape")


def test_softmax_keeps_the_shape():
    g = graph_of("mlp.tflite")
    op = op_of(g, "SOFTMAX")
    g.tensors[op.outputs[0]].shape = (1, 11)
    rejected(g, op, "the output must have the input's shape")


def test_reshape_keeps_the_element_count():
    g = graph_of("digits_cnn.tflite")
    op = op_of(g, "RESHAPE")
    g.tensors[op.outputs[0]].shape = (1, 7)
    rejected(g, op, "the output must have the input's type and element count")


def test_conv_output_size_follows_the_strides():
    g = graph_of("digits_cnn.tflite")
    op = op_of(g, "CONV_2D")
    op.options["stride_h"] = 2
    rejected(g, op, "the output height and width must be what the padding, strides and dilations give")


def test_pool_options_must_be_positive():
    g = graph_of("digits_cnn.tflite")
    op = op_of(g, "MAX_POOL_2D")
    op.options["filter_height"] = 0
    rejected(g, op, "filter_height is 0 (supported: integer >= 1)")


def test_tensors_larger_than_int32_counts():
    g = graph_of("branchy.tflite")
    pad = op_of(g, "PAD")
    g.tensors[pad.inputs[0]].shape = (1, 2**16, 2**16, 1)
    g.tensors[pad.outputs[0]].shape = (1, 2**16 + 4, 2**16 + 4, 1)
    rejected(g, pad, "every tensor must be smaller than 2 GiB")


def test_missing_input():
    g = graph_of("mlp.tflite")
    op = g.ops[0]
    op.inputs = op.inputs[:1]
    rejected(g, op, "the weights input is missing")


# ---- property: a random mutant is rejected by legality or verifies -----------------------------


def _parameters(graph, op) -> list[int]:
    """The op's constant parameter tensors that are not weights or biases (paddings, axes, shapes)."""
    args = OPS.get(op.type).inputs
    return [
        i
        for pos, i in enumerate(op.inputs)
        if i >= 0 and graph.tensors[i].is_constant and pos < len(args) and args[pos].role not in ("weights", "bias")
    ]


def _mutate(graph, rng: random.Random, op=None) -> str | None:
    """One random change to a shape, a parameter tensor or an option (of `op`, or of a random op);
    says what it did, None when the draw changed nothing."""
    kind = rng.choice(["shape", "parameter", "option"])
    with_params = [op for op in graph.ops if _parameters(graph, op)]
    op = op or rng.choice(with_params if kind == "parameter" and with_params else graph.ops)
    if kind == "parameter" and _parameters(graph, op):
        t = graph.tensors[rng.choice(_parameters(graph, op))]
        t.data = t.data.copy()
        flat = t.data.reshape(-1)
        k = rng.randrange(flat.size)
        old, flat[k] = int(flat[k]), rng.choice([-5, -1, 0, 1, 2, 3, 7, 2**31 - 1, int(flat[k]) + 1, int(flat[k]) - 1])
        return f"op {op.index} {op.type}: {t.name} = {t.data.tolist()}" if flat[k] != old else None
    if kind == "option" and op.options:
        name = rng.choice(sorted(op.options))
        old = value = op.options[name]
        if isinstance(value, bool):
            value = not value
        elif isinstance(value, int):
            value = rng.choice([-1, 0, value + 1, value * 3, 5])
        elif name == "padding":
            value = "VALID" if value == "SAME" else "SAME"
        op.options[name] = value
        return f"op {op.index} {op.type}: {name} = {value!r}" if value != old else None
    t = graph.tensors[rng.choice([i for i in op.inputs + op.outputs if i >= 0 and not graph.tensors[i].is_constant])]
    dims = list(t.shape)
    if dims:
        k = rng.randrange(len(dims))
        dims[k] = max(0, rng.choice([0, 1, 2, dims[k] - 1, dims[k] + 1, dims[k] * 2, 64]))
    if rng.random() < 0.2:
        dims = dims[:-1] if len(dims) > 1 and rng.random() < 0.5 else dims + [1]
    old, t.shape = t.shape, tuple(dims)
    return f"op {op.index} {op.type}: {t.name} shape {list(t.shape)}" if t.shape != old else None


MUTANTS = 80


@pytest.mark.parametrize("model_file", positive_fixtures())
def test_mutants_are_rejected_or_verify(model_file):
    """compile_graph runs the verifier: any mutant legality lets through must fit its buffers."""
    original = graph_of(model_file)
    rng = random.Random(model_file)
    accepted = 0
    for _ in range(MUTANTS):
        graph = copy.deepcopy(original)
        changes = [_mutate(graph, rng) for _ in range(rng.choice([1, 1, 2]))]
        try:
            compile_graph(graph)
            accepted += 1
        except UnsupportedModelError:
            pass
        except Exception as exc:  # an InternalError means legality missed a constraint
            raise AssertionError(f"{model_file} with {changes}: {type(exc).__name__}: {exc}") from None
    assert accepted < MUTANTS  # the mutations do reach the constraints


def test_pad_and_mean_extents_equal_their_tensors():
    """The extents are exact, not just bounds: a kernel of a valid model touches every byte."""
    for name, op_type in (("branchy.tflite", "PAD"), ("mbv2_block.tflite", "MEAN")):
        model = compile_graph(graph_of(name))
        step = next(s for s in model.program.steps if s.op.type == op_type)
        extents = KERNELS.get(step.kernel).extents(step.params)
        assert [int(e) for e in extents] == [model.graph.tensors[a].nbytes for a in step.args]
        assert np.all(np.asarray(extents) > 0)


@pytest.mark.cc
@pytest.mark.parametrize("model_file", ["branchy.tflite", "mbv2_block.tflite", "conv1d_ts.tflite"])
def test_accepted_mutants_run_clean_under_sanitizers(model_file, tmp_path):
    """What legality lets through runs without an out-of-bounds access or undefined behaviour
    (AddressSanitizer + UBSan build of the generated C)."""
    from zoflash.targets.boards import load_board
    from zoflash.targets.project import generate_bundle

    original = graph_of(model_file)
    rng = random.Random(f"sanitize {model_file}")
    runs = []
    for attempt in range(200):
        graph = copy.deepcopy(original)
        change = _mutate(graph, rng)
        if change is None:
            continue
        try:
            model = compile_graph(graph)
        except UnsupportedModelError:
            continue
        out = tmp_path / f"mutant{attempt}"
        bundle = generate_bundle(model, load_board("host"), out, model_file, "0" * 64)
        subprocess.run(["make", "-s", "-C", str(out), "sanitize"], check=True, capture_output=True)
        x = np.random.default_rng(attempt).integers(
            -128, 128, size=4 * model.storage(graph.inputs[0]).nbytes, dtype=np.int8
        )
        (out / "in.bin").write_bytes(x.tobytes())
        proc = subprocess.run(
            [str(out / "build" / f"{bundle.prefix}_run_asan"), str(out / "in.bin"), str(out / "out.bin")],
            capture_output=True,
            text=True,
            env={**os.environ, "UBSAN_OPTIONS": "halt_on_error=1"},
        )
        assert proc.returncode == 0, f"{change}:\n{proc.stderr[-3000:]}"
        runs.append(change)
        if len(runs) == 2:
            break
    assert runs, "no mutant passed legality"
