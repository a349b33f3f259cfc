"""The data-movement ops (TRANSPOSE, SLICE, STRIDED_SLICE, PACK, UNPACK, SPLIT, SPLIT_V, GATHER,
DEPTH_TO_SPACE, SPACE_TO_DEPTH).

The C kernels, with params from zoflash.compiler.kernels, against NumPy's own statement of each op
(np.transpose, Python slicing, np.stack, np.split, np.take) on random shapes and parameters; the
fixture models of tests/fixtures/ops/movement.json against the tflite-micro interpreter; the
constraints on hand-broken models; and the Cortex-M55 build of generated code with several outputs.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ir import Quantization  # noqa: E402
from zoflash.compiler.ops import (
    KERNELS,  # noqa: E402
    movement_params,  # noqa: E402
)
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import movement as ref_movement  # noqa: E402

OPS_DIR = Path(__file__).resolve().parent / "fixtures" / "ops"
INDEX = json.loads((OPS_DIR / "movement.json").read_text())
N_CASES = 150

SAMPLES = {  # one valid call of each builder
    "transpose": dict(input_shape=(1, 2, 3, 4), perm=(0, 3, 1, 2)),
    "slice": dict(input_shape=(1, 4, 5), begin=(0, 1, 2), size=(1, -1, 2)),
    "strided_slice": dict(
        input_shape=(1, 6, 5),
        begin=(0, 1, -1),
        end=(1, 5, 0),
        strides=(1, 2, -1),
        begin_mask=0,
        end_mask=0,
        shrink_axis_mask=0,
    ),
    "pack": dict(input_shape=(2, 3), count=4, axis=1),
    "split": dict(input_shape=(1, 6, 4), axis=1, sizes=(1, 3, 2)),
    "gather": dict(input_shape=(3, 5, 2), axis=1, indices=(4, 0, 0)),
    "depth_to_space": dict(input_shape=(1, 2, 3, 8), block_size=2),
    "space_to_depth": dict(input_shape=(1, 6, 3, 2), block_size=3),
}


@pytest.fixture(scope="module")
def K():
    return cbuild.Kernels()


def rand_i8(rng, shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def rand_shape(rng, rank, hi=5):
    return tuple(int(d) for d in rng.integers(1, hi + 1, size=rank))


def run_copy(K, name, params, x):
    """zo_strided_copy_s8 through `name`'s kernel entry; checks the extents against the buffers."""
    read, written = KERNELS.get(name).extents(params)
    assert read <= x.size
    y = np.full(written, 99, np.int8)
    K.call("zo_strided_copy_s8", "zo_strided_copy_params_t", params, np.ascontiguousarray(x), y)
    np.testing.assert_array_equal(ref_movement.strided_copy_s8(params, x).reshape(-1), y)  # the executor's kernel
    return y


def test_builders_emit_exactly_the_struct_fields():
    structs = cbuild.parse_structs()
    header = cbuild.header_text()
    assert set(SAMPLES) == {k for k in KERNELS if k in SAMPLES}
    for name, kw in SAMPLES.items():
        info = KERNELS.get(name)
        assert f"void {info.function}(const {info.struct} *p" in header
        params = info.build(**kw)
        assert list(params) == [f for f, _ in structs[info.struct]], name


@pytest.mark.parametrize(
    "name, change",
    [
        ("transpose", dict(perm=(0, 1, 1, 2))),
        ("slice", dict(begin=(0, 5, 0))),
        ("slice", dict(size=(1, 1, 4))),
        ("strided_slice", dict(strides=(1, 0, 1))),
        ("strided_slice", dict(begin=(0, 6, 0), shrink_axis_mask=2)),  # shrunk axis begins past its end
        ("pack", dict(axis=3)),
        ("split", dict(sizes=(1, 3, 3))),
        ("gather", dict(indices=(5,))),
        ("gather", dict(indices=(-1,))),
        ("depth_to_space", dict(block_size=3)),  # 8 channels are not a multiple of 9
        ("depth_to_space", dict(block_size=0)),
        ("depth_to_space", dict(input_shape=(2, 2, 3, 8))),  # batch 2
        ("space_to_depth", dict(block_size=2)),  # width 3 is not a multiple of 2
        ("space_to_depth", dict(input_shape=(1, 6, 3))),
    ],
)
def test_builders_refuse_what_tflm_cannot_run(name, change):
    with pytest.raises(ValueError):
        KERNELS.get(name).build(**{**SAMPLES[name], **change})


@pytest.mark.cc
def test_transpose_matches_numpy(K):
    rng = np.random.default_rng(1)
    for _ in range(N_CASES):
        shape = rand_shape(rng, int(rng.integers(1, 7)))
        perm = tuple(int(a) for a in rng.permutation(len(shape)))
        x = rand_i8(rng, shape)
        y = run_copy(K, "transpose", movement_params.transpose_params(input_shape=shape, perm=perm), x)
        np.testing.assert_array_equal(y, np.transpose(x, perm).reshape(-1))


@pytest.mark.cc
def test_slice_matches_numpy(K):
    rng = np.random.default_rng(2)
    for _ in range(N_CASES):
        shape = rand_shape(rng, int(rng.integers(1, 6)), 7)
        begin = [int(rng.integers(0, d)) for d in shape]
        size = [-1 if rng.random() < 0.2 else int(rng.integers(1, d - b + 1)) for d, b in zip(shape, begin)]
        x = rand_i8(rng, shape)
        y = run_copy(K, "slice", movement_params.slice_params(input_shape=shape, begin=begin, size=size), x)
        want = x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]
        np.testing.assert_array_equal(y, want.reshape(-1))


@pytest.mark.cc
def test_strided_slice_matches_python_indexing(K):
    """Random begin/end (negative, past the ends), strides (negative, larger than the axis) and masks."""
    rng = np.random.default_rng(3)
    done = 0
    while done < N_CASES:
        shape = rand_shape(rng, int(rng.integers(1, 5)), 8)
        rank = len(shape)
        begin = [int(rng.integers(-d - 2, d + 3)) for d in shape]
        end = [int(rng.integers(-d - 2, d + 3)) for d in shape]
        strides = [int(rng.choice([-3, -2, -1, 1, 1, 2, 3, 9])) for _ in shape]
        masks = [int(rng.integers(0, 1 << rank)) for _ in range(2)]
        shrink = int(rng.integers(0, 1 << rank)) & int(rng.integers(0, 1 << rank))
        for k, d in enumerate(shape):
            if shrink >> k & 1:  # a shrunk axis indexes one element inside the axis
                begin[k], strides[k] = int(rng.integers(-d, d)), 1
        kw = dict(
            input_shape=shape,
            begin=begin,
            end=end,
            strides=strides,
            begin_mask=masks[0],
            end_mask=masks[1],
            shrink_axis_mask=shrink,
        )
        x = rand_i8(rng, shape)
        want = ref_movement.strided_slice_op(x, begin, end, strides, masks[0], masks[1], shrink)
        axes = movement_params.strided_slice_axes(**kw)
        assert [c for k, (_, c, _) in enumerate(axes) if not shrink >> k & 1] == list(want.shape)
        if want.size == 0:
            continue
        y = run_copy(K, "strided_slice", movement_params.strided_slice_params(**kw), x)
        np.testing.assert_array_equal(y, want.reshape(-1))
        done += 1


@pytest.mark.cc
def test_pack_matches_numpy_stack(K):
    rng = np.random.default_rng(4)
    for _ in range(N_CASES):
        shape = rand_shape(rng, int(rng.integers(1, 5)))
        count = int(rng.integers(1, 13))
        axis = int(rng.integers(-len(shape) - 1, len(shape) + 1))
        xs = [rand_i8(rng, shape) for _ in range(count)]
        p = movement_params.pack_params(input_shape=shape, count=count, axis=axis)
        y = np.zeros(count * xs[0].size, np.int8)
        K.call("zo_concat_s8", "zo_concat_params_t", p, xs, y)
        np.testing.assert_array_equal(y, np.stack(xs, axis=axis).reshape(-1))


@pytest.mark.cc
def test_split_matches_numpy_split(K):
    rng = np.random.default_rng(5)
    for _ in range(N_CASES):
        shape = rand_shape(rng, int(rng.integers(1, 5)), 7)
        axis = int(rng.integers(0, len(shape)))
        cuts = np.sort(rng.integers(0, shape[axis] + 1, size=int(rng.integers(0, 4))))
        sizes = np.diff(np.concatenate([[0], cuts, [shape[axis]]])).tolist()
        x = rand_i8(rng, shape)
        p = movement_params.split_params(
            input_shape=shape, axis=axis - len(shape) if rng.random() < 0.5 else axis, sizes=sizes
        )
        read, written = KERNELS.get("split").extents(p)
        assert read == x.size and len(written) == len(sizes)
        ys = [np.full(n, 99, np.int8) for n in written]
        K.call("zo_split_s8", "zo_split_params_t", p, x, ys)
        for y, want, got in zip(ys, np.split(x, np.cumsum(sizes)[:-1], axis=axis), ref_movement.split_s8(p, x)):
            np.testing.assert_array_equal(y, want.reshape(-1))
            np.testing.assert_array_equal(got.reshape(-1), y)


@pytest.mark.cc
def test_gather_matches_numpy_take(K):
    rng = np.random.default_rng(6)
    for _ in range(N_CASES):
        shape = rand_shape(rng, int(rng.integers(1, 5)), 6)
        axis = int(rng.integers(0, len(shape)))
        indices = rng.integers(0, shape[axis], size=rand_shape(rng, int(rng.integers(1, 3)), 4))
        x = rand_i8(rng, shape)
        p = movement_params.gather_params(input_shape=shape, axis=axis, indices=indices)
        y = np.full(KERNELS.get("gather").extents(p)[1], 99, np.int8)
        K.call("zo_gather_s8", "zo_gather_params_t", p, x, y)
        np.testing.assert_array_equal(y, np.take(x, indices, axis=axis).reshape(-1))
        np.testing.assert_array_equal(ref_movement.gather_s8(p, x).reshape(-1), y)


def _depth_to_space_by_index(x, b):
    """TFLite's statement of DEPTH_TO_SPACE: output[h][w][d] = input[h / b][w / b][((h % b) * b + w % b) * D + d]."""
    h, w, c = x.shape
    oh, ow, od = np.indices((h * b, w * b, c // (b * b)))
    return x[oh // b, ow // b, ((oh % b) * b + ow % b) * (c // (b * b)) + od]


@pytest.mark.cc
def test_depth_to_space_and_space_to_depth_match_the_index_formula(K):
    """Random sizes and blocks: each C kernel against TFLite's index formula and the reference
    kernel, its extents exactly the tensors, and SPACE_TO_DEPTH undoing DEPTH_TO_SPACE."""
    rng = np.random.default_rng(7)
    for _ in range(N_CASES):
        h, w, b, d = (int(v) for v in rng.integers(1, 5, size=4))
        x = rand_i8(rng, (h, w, b * b * d))
        p = movement_params.depth_to_space_params(input_shape=(1, h, w, b * b * d), block_size=b)
        assert KERNELS.get("depth_to_space").extents(p) == (x.size, x.size)
        y = np.full(x.size, 99, np.int8)
        K.call("zo_depth_to_space_s8", "zo_depth_space_params_t", p, x, y)
        np.testing.assert_array_equal(y, _depth_to_space_by_index(x, b).reshape(-1))
        np.testing.assert_array_equal(ref_movement.depth_to_space_s8(p, x).reshape(-1), y)

        q = movement_params.space_to_depth_params(input_shape=(1, h * b, w * b, d), block_size=b)
        assert q == p and KERNELS.get("space_to_depth").extents(q) == (x.size, x.size)
        back = np.full(x.size, 99, np.int8)
        K.call("zo_space_to_depth_s8", "zo_depth_space_params_t", q, y, back)
        np.testing.assert_array_equal(back, x.reshape(-1))
        np.testing.assert_array_equal(ref_movement.space_to_depth_s8(q, y).reshape(-1), back)


# ----------------------------------------------------------------------------- fixture models


def sample_inputs(path: Path, n: int) -> np.ndarray:
    x = api.random_inputs(api.load_model(path), n, 0)
    x[0], x[1], x[2] = -128, 127, 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128
    return x


def test_index_lists_the_fixtures():
    files = sorted(p.name for p in OPS_DIR.glob("*.tflite") if p.name in {f["file"] for f in INDEX})
    assert files == sorted(f["file"] for f in INDEX)
    import hashlib

    for f in INDEX:
        assert hashlib.sha256((OPS_DIR / f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
    covered = {t for f in INDEX for t in f["ops"]}
    assert {
        "TRANSPOSE",
        "SLICE",
        "STRIDED_SLICE",
        "PACK",
        "UNPACK",
        "SPLIT",
        "SPLIT_V",
        "GATHER",
        "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH",
    } <= covered


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", [f["file"] for f in INDEX])
def test_fixture_bit_exact_against_tflm(model_file, tmp_path):
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets.host_runner import HostModel

    path = OPS_DIR / model_file
    x = sample_inputs(path, 120)
    ours = HostModel(api.build(path, "host", tmp_path / "b").bundle).run(x)
    golden = TflmInterpreter(path.read_bytes()).run_batch(x).reshape(ours.shape)
    np.testing.assert_array_equal(ours, golden)
    reference = ReferenceForward(compile_graph(api.load_model(path).graph)).forward(x)
    np.testing.assert_array_equal(reference.reshape(ours.shape), ours)


def test_several_outputs_lower_to_one_call_with_an_output_array(tmp_path):
    model = api.load_model(OPS_DIR / "split_unused.tflite")
    compiled = compile_graph(model.graph)
    (step,) = [s for s in compiled.program.steps if s.kernel == "split"]
    assert isinstance(step.args[-1], tuple) and len(step.args[-1]) == 2
    # the unread output still has its own place in the arena, apart from the one that is read
    a, b = (compiled.arena_offset[compiled.root[t]] for t in step.args[-1])
    assert a != b
    text = (api.generate(OPS_DIR / "split_unused.tflite", "host", tmp_path / "b").path / "split_unused.c").read_text()
    assert "static int8_t *const op0_outputs[2] = {" in text
    assert "zo_split_s8(&op0, &split_unused_arena[" in text


@pytest.mark.cross
@pytest.mark.parametrize(
    "model_file",
    ["pack_unpack.tflite", "split_v.tflite", "gather.tflite", "strided_slice.tflite", "conv_depth_to_space.tflite"],
)
def test_cortex_m55_compile_is_warning_free(model_file, tmp_path):
    bundle = api.generate(OPS_DIR / model_file, "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)


# -------------------------------------------------------------------------------- constraints


def _refused(path: str, edit, fragment: str) -> None:
    model = api.load_model(OPS_DIR / path)
    graph = copy.deepcopy(model.graph)
    edit(graph)
    with pytest.raises(UnsupportedModelError) as err:
        compile_graph(graph)
    assert fragment in str(err.value), str(err.value)


def _op(graph, op_type):
    return next(op for op in graph.ops if op.type == op_type)


def _set_const(graph, op_type, pos, values):
    t = graph.tensors[_op(graph, op_type).inputs[pos]]
    t.data = np.asarray(values, dtype=t.data.dtype).reshape(t.data.shape)


def test_strided_slice_ellipsis_and_new_axis_masks_are_refused():
    for mask in ("ellipsis_mask", "new_axis_mask"):
        _refused(
            "strided_slice.tflite",
            lambda g, mask=mask: _op(g, "STRIDED_SLICE").options.__setitem__(mask, 1),
            f"{mask} is 1 (supported: 0 (TFLM's kernel ignores this mask",
        )


def test_constraints_refuse_inconsistent_parameters():
    _refused(
        "transpose_4d.tflite",
        lambda g: _set_const(g, "TRANSPOSE", 1, [0, 3, 3, 2]),
        "the permutation must hold each input dimension exactly once",
    )
    _refused(
        "transpose_4d.tflite",
        lambda g: _set_const(g, "TRANSPOSE", 1, [0, 3, 2, 1]),
        "the output must be the input's dimensions in the permutation's order",
    )
    _refused("slice.tflite", lambda g: _set_const(g, "SLICE", 1, [0, 5, 2, 1]), "the slice must lie within the input")
    _refused("strided_slice.tflite", lambda g: _set_const(g, "STRIDED_SLICE", 3, [1, 2, 0, -3]), "no stride may be 0")
    _refused(
        "strided_slice.tflite",
        lambda g: _set_const(g, "STRIDED_SLICE", 3, [1, 1, -1, -3]),
        "the output's shape must be what begin, end, strides and the masks select",
    )
    _refused("gather.tflite", lambda g: _set_const(g, "GATHER", 1, [4, 0, 0, 2, 6, 1]), "indices [6] outside [0, 6)")
    _refused("gather.tflite", lambda g: _set_const(g, "GATHER", 1, [4, 0, 0, 2, -1, 1]), "indices [-1] outside")
    _refused("split_v.tflite", lambda g: _set_const(g, "SPLIT_V", 1, [2, 2, 2]), "the outputs must divide the input")
    _refused(
        "split.tflite",
        lambda g: _op(g, "SPLIT").options.__setitem__("num_splits", 2),
        "the outputs must divide the input",
    )
    _refused(
        "pack_unpack.tflite",
        lambda g: _op(g, "UNPACK").options.__setitem__("axis", 1),
        "the outputs must divide the input",
    )
    _refused(
        "pack_unpack.tflite",
        lambda g: _op(g, "PACK").options.__setitem__("axis", 2),
        "the output must be the inputs' shape with their count inserted at the axis",
    )
    _refused(
        "gather.tflite",
        lambda g: _op(g, "GATHER").options.__setitem__("batch_dims", 1),
        "batch_dims is 1 (supported: 0)",
    )


@pytest.mark.parametrize("model_file", [f["file"] for f in INDEX])
def test_mutants_are_rejected_or_verify(model_file):
    """What legality lets through of a randomly changed model (shapes, parameters, options) must pass
    the verifier, whose extents check every byte a kernel touches."""
    import random

    from test_ops import _mutate

    original = api.load_model(OPS_DIR / model_file).graph
    rng = random.Random(model_file)
    accepted = 0
    for _ in range(60):
        graph = copy.deepcopy(original)
        changes = [_mutate(graph, rng) for _ in range(rng.choice([1, 1, 2]))]
        try:
            compile_graph(graph)
            accepted += 1
        except UnsupportedModelError:
            pass
        except Exception as exc:  # an InternalError means a constraint is missing
            raise AssertionError(f"{model_file} with {changes}: {type(exc).__name__}: {exc}") from None
    assert accepted < 60


@pytest.mark.parametrize(
    "model_file",
    [
        "transpose_5d.tflite",
        "pack_unpack.tflite",
        "split_v.tflite",
        "gather.tflite",
        "depth_to_space.tflite",
        "space_to_depth.tflite",
    ],
)
def test_extents_equal_their_tensors(model_file):
    """Where a kernel reads its whole input, the extents are exactly the tensors' sizes."""
    model = compile_graph(api.load_model(OPS_DIR / model_file).graph)
    for step in model.program.steps:
        if step.kernel == "concat":
            continue
        for arg, extent in zip(step.args, KERNELS.get(step.kernel).extents(step.params)):
            tensors, sizes = (arg, extent) if isinstance(arg, tuple) else ((arg,), (extent,))
            assert [int(s) for s in sizes] == [model.graph.tensors[t].nbytes for t in tensors], step.kernel


def test_verifier_checks_every_output_of_a_step():
    from zoflash.compiler.verify import verify_program
    from zoflash.errors import InternalError

    program = compile_graph(api.load_model(OPS_DIR / "split_v.tflite").graph).program
    step = next(s for s in program.steps if s.kernel == "split")
    good = step.params["chunk"].copy()
    step.params["chunk"] = good + np.array([-1, 0, 1], np.int32)  # the input split at the wrong places
    with pytest.raises(InternalError, match="argument 1 touches"):
        verify_program(program)
    step.params["chunk"] = good
    program.graph.tensors[step.written[1]].data = np.zeros(program.graph.tensors[step.written[1]].shape, np.int8)
    with pytest.raises(InternalError, match="writes the constant tensor"):
        verify_program(program)


def _set_block(op_type, block_size):
    return lambda g: _op(g, op_type).options.__setitem__("block_size", block_size)


def _requantize_output(op_type, scale, zero_point):
    def edit(graph):
        y = _op(graph, op_type).outputs[0]
        graph.tensors[y] = replace(graph.tensors[y], quant=Quantization((scale,), (zero_point,)))

    return edit


def _as_int16(op_type):
    def edit(graph):
        op = _op(graph, op_type)
        for i in (op.inputs[0], op.outputs[0]):
            graph.tensors[i] = replace(graph.tensors[i], dtype="int16")

    return edit


@pytest.mark.parametrize(
    "model_file, edit, fragment",
    [
        (
            "depth_to_space.tflite",
            _set_block("DEPTH_TO_SPACE", 3),
            "the input's channels must be a multiple of block_size squared (8 channels, block_size 3)",
        ),
        (
            "depth_to_space.tflite",
            _set_block("DEPTH_TO_SPACE", 1),
            "the output must be [1, H * b, W * b, C / b^2] for a [1, H, W, C] input and block_size b "
            "(input [1, 3, 4, 8] with block_size 1 gives [1, 3, 4, 8]; the output is [1, 6, 8, 2])",
        ),
        ("depth_to_space.tflite", _set_block("DEPTH_TO_SPACE", 0), "block_size is 0 (supported: integer >= 1)"),
        (
            "space_to_depth.tflite",
            _set_block("SPACE_TO_DEPTH", 2),
            "the input's height and width must be multiples of block_size (input [1, 6, 9, 2], block_size 2)",
        ),
        (
            "space_to_depth.tflite",
            _set_block("SPACE_TO_DEPTH", 1),
            "the output must be [1, H / b, W / b, C * b^2] for a [1, H, W, C] input and block_size b "
            "(input [1, 6, 9, 2] with block_size 1 gives [1, 6, 9, 2]; the output is [1, 2, 3, 18])",
        ),
        (
            "space_to_depth.tflite",
            _requantize_output("SPACE_TO_DEPTH", 0.5, 3),
            "input and output must share scale and zero point (TFLM copies the int8 values without requantizing)",
        ),
        (
            "depth_to_space.tflite",
            _requantize_output("DEPTH_TO_SPACE", 0.029392709955573082, 1),
            "input and output must share scale and zero point",
        ),
        (
            "space_to_depth.tflite",
            _as_int16("SPACE_TO_DEPTH"),
            "int16[1, 6, 9, 2] scale 0.0267182 zp 3 is int16 (zoflash runs this op on int8 activations only)",
        ),
    ],
)
def test_depth_space_constraints(model_file, edit, fragment):
    _refused(model_file, edit, fragment)


def test_an_op_without_its_outputs_is_refused():
    _refused("pack_unpack.tflite", lambda g: setattr(_op(g, "UNPACK"), "outputs", []), "0 outputs, at least 1 expected")


def test_executor_broadcasts_a_constant_input_and_keeps_a_single_split_output_a_list():
    from zoflash.reference.forward import DISPATCH

    x = np.arange(24, dtype=np.int8).reshape(1, -1)  # a constant: one row for the whole batch
    cube = x.reshape(2, 3, 4)
    y = DISPATCH["transpose"](movement_params.transpose_params(input_shape=(2, 3, 4), perm=(2, 0, 1)), 3, x)
    np.testing.assert_array_equal(y, np.tile(np.transpose(cube, (2, 0, 1)).reshape(1, -1), (3, 1)))
    (only,) = DISPATCH["split"](movement_params.split_params(input_shape=(2, 3, 4), axis=1, sizes=[3]), 3, x)
    np.testing.assert_array_equal(only, np.tile(x, (3, 1)))
    y = DISPATCH["gather"](movement_params.gather_params(input_shape=(2, 3, 4), axis=2, indices=[3, 1]), 3, x)
    np.testing.assert_array_equal(y, np.tile(cube[:, :, [3, 1]].reshape(1, -1), (3, 1)))
