"""Ops that rearrange bytes: TRANSPOSE, SLICE, STRIDED_SLICE (one strided copy), PACK (a
concatenation), UNPACK, SPLIT, SPLIT_V (one split, several outputs), GATHER, DEPTH_TO_SPACE and
SPACE_TO_DEPTH.

TFLM copies the bytes for all of them without looking at the quantization (it checks none), so the
kernels copy bytes too and zoflash checks no quantization either: the result is TFLM's. DEPTH_TO_SPACE
and SPACE_TO_DEPTH are the exception: their output must keep the input's quantization (the
converter writes it so), since a byte copy under another scale would change the values.
"""

from __future__ import annotations

import numpy as np

from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops import movement_params
from zoflash.compiler.ops.common import INT8_INT16, image_4d, output_keeps_input_quantization, same_type
from zoflash.compiler.ops.data_movement import CONCAT, CONCAT_S16
from zoflash.compiler.ops.registry import (
    CONSTANT,
    Arg,
    Kernel,
    OpEntry,
    Option,
    any_value,
    at_least,
    build,
    input_tensor,
    one_of,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

_TRANSPOSE_MAX_RANK = 5  # as TFLM
_SLICE_MAX_RANK = 5  # as TFLM
_STRIDED_SLICE_MAX_RANK = 4  # as TFLM ("input dim should not exceed 4")
_INDEX_TYPES = ("int32", "int64")


def _copy_kernel(name: str, builder) -> Kernel:
    return Kernel(
        name,
        "zo_strided_copy_s8",
        "zo_strided_copy_params_t",
        builder,
        ("int8", "int8"),
        movement_params.strided_copy_extents,
        sources=("zo_kernels_movement.c",),
    )


TRANSPOSE = _copy_kernel("transpose", movement_params.transpose_params)
SLICE = _copy_kernel("slice", movement_params.slice_params)
STRIDED_SLICE = _copy_kernel("strided_slice", movement_params.strided_slice_params)
# PACK is CONCATENATION's C kernel, with chunks of the new axis
PACK = Kernel(
    "pack",
    CONCAT.function,
    CONCAT.struct,
    movement_params.pack_params,
    CONCAT.arg_dtypes,
    CONCAT.extents,
    sources=CONCAT.sources,
)
SPLIT = Kernel(
    "split",
    "zo_split_s8",
    "zo_split_params_t",
    movement_params.split_params,
    ("int8", "int8"),
    lambda p: (p["outer"] * int(sum(p["chunk"])), [p["outer"] * int(c) for c in p["chunk"]]),
    sources=("zo_kernels_movement.c",),
)
# int16 (16x8 models): the same params (they count elements), the C kernels of zo_kernels_int16.c
_S16 = {
    k: Kernel(
        f"{k.name}_s16",
        f,
        k.struct,
        k.build,
        ("int16", "int16"),
        lambda p, k=k: tuple([2 * v for v in e] if isinstance(e, list) else 2 * e for e in k.extents(p)),
        sources=("zo_kernels_int16.c",),
    )
    for k, f in (
        (TRANSPOSE, "zo_strided_copy_s16"),
        (SLICE, "zo_strided_copy_s16"),
        (STRIDED_SLICE, "zo_strided_copy_s16"),
        (SPLIT, "zo_split_s16"),
    )
}
_S16[PACK] = Kernel(
    "pack_s16",
    CONCAT_S16.function,
    CONCAT_S16.struct,
    movement_params.pack_params,
    CONCAT_S16.arg_dtypes,
    CONCAT_S16.extents,
    sources=CONCAT_S16.sources,
)
DEPTH_TO_SPACE = Kernel(
    "depth_to_space",
    "zo_depth_to_space_s8",
    "zo_depth_space_params_t",
    movement_params.depth_to_space_params,
    ("int8", "int8"),
    movement_params.depth_space_extents,
    sources=("zo_kernels_movement.c",),
)
SPACE_TO_DEPTH = Kernel(
    "space_to_depth",
    "zo_space_to_depth_s8",
    "zo_depth_space_params_t",
    movement_params.space_to_depth_params,
    ("int8", "int8"),
    movement_params.depth_space_extents,
    sources=("zo_kernels_movement.c",),
)
GATHER = Kernel(
    "gather",
    "zo_gather_s8",
    "zo_gather_params_t",
    movement_params.gather_params,
    ("int8", "int8"),
    lambda p: (p["outer"] * p["axis_size"] * p["inner"], p["outer"] * p["num_indices"] * p["inner"]),
    sources=("zo_kernels_movement.c",),
)


def _values(graph: Graph, op: Op, pos: int) -> list[int]:
    return [int(v) for v in np.asarray(input_tensor(graph, op, pos).data).reshape(-1)]


def _normalized(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _step(graph: Graph, op: Op, kernel: Kernel, params: dict, inputs: list[int]) -> Step:
    """One kernel call: the inputs, then the output (or the tuple of outputs); on int16 data, the
    kernel's int16 twin (same params)."""
    outs = tuple(op.outputs)
    read = tuple(t for t in inputs if not graph.tensors[t].is_constant)
    args = [tuple(inputs) if kernel is PACK else inputs[0], outs if kernel is SPLIT else outs[0]]
    if graph.tensors[outs[0]].dtype == "int16":
        kernel = _S16[kernel]
    return Step(op, kernel.name, params, args=args, inputs=read, outputs=outs)


def _index_vector(graph: Graph, op: Op, pos: int, role: str) -> str | None:
    """Why input `pos` is not one value per dimension of input 0, or None."""
    x, v = input_tensor(graph, op, 0), input_tensor(graph, op, pos)
    return None if tuple(v.shape) == (len(x.shape),) else f"{role} {shape(v)} for a {shape(x)} input"


def _rank_at_most(limit: int):
    def check(graph: Graph, op: Op) -> str | None:
        x = input_tensor(graph, op, 0)
        return x.describe() if len(x.shape) > limit else None

    check.__doc__ = f"the input must have at most {limit} dimensions (as TFLM)"
    check.__name__ = f"rank_at_most_{limit}"
    return check


def _output_shape_is(graph: Graph, op: Op, expected: list[int], how: str) -> str | None:
    y = output_tensor(graph, op)
    return None if list(y.shape) == list(expected) else f"{how} gives {list(expected)}; the output is {shape(y)}"


# ------------------------------------------------------------------------------------ TRANSPOSE


def perm_valid(graph: Graph, op: Op) -> str | None:
    """the permutation must hold each input dimension exactly once"""
    issue = _index_vector(graph, op, 1, "perm")
    perm = _values(graph, op, 1)
    if issue is None and sorted(perm) != list(range(len(input_tensor(graph, op, 0).shape))):
        issue = f"perm {perm} for a {shape(input_tensor(graph, op, 0))} input"
    return issue


def transpose_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the input's dimensions in the permutation's order"""
    if perm_valid(graph, op):
        return None  # reported by perm_valid
    x, perm = input_tensor(graph, op, 0), _values(graph, op, 1)
    return _output_shape_is(graph, op, [x.shape[a] for a in perm], f"input {shape(x)} with perm {perm}")


def lower_transpose(graph: Graph, op: Op) -> Step:
    x = input_tensor(graph, op, 0)
    params = build(graph, op, TRANSPOSE, input_shape=x.shape, perm=_values(graph, op, 1))
    return _step(graph, op, TRANSPOSE, params, [x.index])


register(
    OpEntry(
        types=("TRANSPOSE",),
        summary="any permutation, up to 5-D",
        inputs=(Arg("input", dtypes=INT8_INT16), Arg("perm", CONSTANT, _INDEX_TYPES)),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_transpose,
        kernels=(TRANSPOSE, _S16[TRANSPOSE]),
        constraints=(same_type, _rank_at_most(_TRANSPOSE_MAX_RANK), perm_valid, transpose_output_shape),
    )
)


# ---------------------------------------------------------------------------------------- SLICE


def _slice_sizes(graph: Graph, op: Op) -> tuple[list[int], list[int]]:
    """begin and size, size -1 meaning up to the end of the dimension."""
    x, begin = input_tensor(graph, op, 0), _values(graph, op, 1)
    size = [d - b if s == -1 else s for d, b, s in zip(x.shape, begin, _values(graph, op, 2))]
    return begin, size


def slice_within_input(graph: Graph, op: Op) -> str | None:
    """begin and size must have one value per input dimension, and the slice must lie within the
    input (size -1: up to the end)"""
    issue = _index_vector(graph, op, 1, "begin") or _index_vector(graph, op, 2, "size")
    if issue:
        return issue
    x = input_tensor(graph, op, 0)
    begin, size = _slice_sizes(graph, op)
    if all(b >= 0 and s >= 0 and b + s <= d for d, b, s in zip(x.shape, begin, size)):
        return None
    return f"begin {begin} size {_values(graph, op, 2)} for a {shape(x)} input"


def slice_output_shape(graph: Graph, op: Op) -> str | None:
    """the output's shape must be the slice's size"""
    if slice_within_input(graph, op):
        return None
    begin, size = _slice_sizes(graph, op)
    return _output_shape_is(graph, op, size, f"begin {begin} size {_values(graph, op, 2)}")


def lower_slice(graph: Graph, op: Op) -> Step:
    x = input_tensor(graph, op, 0)
    params = build(graph, op, SLICE, input_shape=x.shape, begin=_values(graph, op, 1), size=_values(graph, op, 2))
    return _step(graph, op, SLICE, params, [x.index])


register(
    OpEntry(
        types=("SLICE",),
        summary="up to 5-D",
        inputs=(
            Arg("input", dtypes=INT8_INT16),
            Arg("begin", CONSTANT, _INDEX_TYPES),
            Arg("size", CONSTANT, _INDEX_TYPES),
        ),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_slice,
        kernels=(SLICE, _S16[SLICE]),
        constraints=(same_type, _rank_at_most(_SLICE_MAX_RANK), slice_within_input, slice_output_shape),
    )
)


# -------------------------------------------------------------------------------- STRIDED_SLICE


def _strided_slice_args(graph: Graph, op: Op) -> dict:
    return dict(
        input_shape=input_tensor(graph, op, 0).shape,
        begin=_values(graph, op, 1),
        end=_values(graph, op, 2),
        strides=_values(graph, op, 3),
        begin_mask=option(op, "begin_mask"),
        end_mask=option(op, "end_mask"),
        shrink_axis_mask=option(op, "shrink_axis_mask"),
    )


def strided_slice_indices(graph: Graph, op: Op) -> str | None:
    """begin, end and strides must have one value per input dimension, no stride may be 0, and the
    begin of a shrunk axis must lie within it"""
    issue = next(
        (i for pos, role in ((1, "begin"), (2, "end"), (3, "strides")) if (i := _index_vector(graph, op, pos, role))),
        None,
    )
    if issue:
        return issue
    try:
        movement_params.strided_slice_axes(**_strided_slice_args(graph, op))
    except ValueError as exc:
        return str(exc).removeprefix("strided_slice: ")
    return None


def strided_slice_output_shape(graph: Graph, op: Op) -> str | None:
    """the output's shape must be what begin, end, strides and the masks select (shrunk axes dropped)"""
    if strided_slice_indices(graph, op):
        return None
    args = _strided_slice_args(graph, op)
    axes = movement_params.strided_slice_axes(**args)
    expected = [count for k, (_, count, _) in enumerate(axes) if not args["shrink_axis_mask"] >> k & 1]
    return _output_shape_is(
        graph,
        op,
        expected,
        f"begin {args['begin']} end {args['end']} strides {args['strides']} "
        f"(masks {args['begin_mask']}/{args['end_mask']}/{args['shrink_axis_mask']})",
    )


def lower_strided_slice(graph: Graph, op: Op) -> Step:
    params = build(graph, op, STRIDED_SLICE, **_strided_slice_args(graph, op))
    return _step(graph, op, STRIDED_SLICE, params, [op.inputs[0]])


def _unsupported_mask(name: str) -> Option:
    return Option(
        name, "0 (TFLM's kernel ignores this mask, so it would slice differently from TensorFlow)", lambda v: v == 0, 0
    )


register(
    OpEntry(
        types=("STRIDED_SLICE",),
        summary="up to 4-D, any strides, begin/end/shrink-axis masks",
        inputs=(
            Arg("input", dtypes=INT8_INT16),
            Arg("begin", CONSTANT, ("int32",)),
            Arg("end", CONSTANT, ("int32",)),
            Arg("strides", CONSTANT, ("int32",)),
        ),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_strided_slice,
        kernels=(STRIDED_SLICE, _S16[STRIDED_SLICE]),
        options=(
            any_value("begin_mask", "any bit mask", default=0),
            any_value("end_mask", "any bit mask", default=0),
            any_value("shrink_axis_mask", "any bit mask", default=0),
            _unsupported_mask("ellipsis_mask"),
            _unsupported_mask("new_axis_mask"),
            one_of("offset", False, default=False),
        ),
        constraints=(
            same_type,
            _rank_at_most(_STRIDED_SLICE_MAX_RANK),
            strided_slice_indices,
            strided_slice_output_shape,
        ),
    )
)


# ----------------------------------------------------------------------------------------- PACK


def pack_inputs(graph: Graph, op: Op) -> str | None:
    """values_count must be the number of inputs, all of one shape"""
    xs = [graph.tensors[i] for i in op.inputs]
    if option(op, "values_count") == len(xs) and all(tuple(x.shape) == tuple(xs[0].shape) for x in xs):
        return None
    return f"values_count {option(op, 'values_count')}, inputs {[shape(x) for x in xs]}"


def pack_axis_in_range(graph: Graph, op: Op) -> str | None:
    """the axis must be a dimension of the output"""
    rank = len(output_tensor(graph, op).shape)
    return None if 0 <= _normalized(option(op, "axis"), rank) < rank else f"axis {option(op, 'axis')}, rank {rank}"


def pack_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the inputs' shape with their count inserted at the axis"""
    if pack_inputs(graph, op) or pack_axis_in_range(graph, op):
        return None
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    axis = _normalized(option(op, "axis"), len(y.shape))
    expected = list(x.shape[:axis]) + [len(op.inputs)] + list(x.shape[axis:])
    return _output_shape_is(graph, op, expected, f"{len(op.inputs)} inputs {shape(x)} along axis {axis}")


def lower_pack(graph: Graph, op: Op) -> Step:
    params = build(
        graph, op, PACK, input_shape=input_tensor(graph, op, 0).shape, count=len(op.inputs), axis=option(op, "axis")
    )
    return _step(graph, op, PACK, params, list(op.inputs))


register(
    OpEntry(
        types=("PACK",),
        summary="any axis",
        inputs=(Arg("values", dtypes=INT8_INT16, variadic=True),),
        outputs=(Arg("output", dtypes=INT8_INT16),),
        lower=lower_pack,
        kernels=(PACK, _S16[PACK]),
        options=(
            at_least("values_count", 1),
            any_value("axis", "a dimension of the output (negative counts from the end)", default=0),
        ),
        constraints=(same_type, pack_inputs, pack_axis_in_range, pack_output_shape),
    )
)


# ------------------------------------------------------------------------- UNPACK, SPLIT, SPLIT_V


def _split_input(graph: Graph, op: Op):
    """SPLIT takes the axis first, the data second; UNPACK and SPLIT_V the data first."""
    return input_tensor(graph, op, 1 if op.type == "SPLIT" else 0)


def _split_axis(graph: Graph, op: Op) -> int | None:
    """The normalized axis; None when the axis tensor is not one value."""
    if op.type == "UNPACK":
        axis = option(op, "axis")
    else:
        values = _values(graph, op, 0 if op.type == "SPLIT" else 2)
        if len(values) != 1:
            return None
        axis = values[0]
    return _normalized(axis, len(_split_input(graph, op).shape))


def split_axis_in_range(graph: Graph, op: Op) -> str | None:
    """the axis must be one value naming a dimension of the input"""
    x, axis = _split_input(graph, op), _split_axis(graph, op)
    return None if axis is not None and 0 <= axis < len(x.shape) else f"axis for a {shape(x)} input"


def _split_sizes(graph: Graph, op: Op) -> list[int] | None:
    """The size of each output along the axis, as the op's parameters state them; None when they
    cannot (their count is not the number of outputs, or the sizes do not add up)."""
    x, axis, n = _split_input(graph, op), _split_axis(graph, op), len(op.outputs)
    d = x.shape[axis]
    if op.type == "UNPACK":
        return [1] * n if option(op, "num") == n == d else None
    if op.type == "SPLIT":
        return [d // n] * n if option(op, "num_splits") == n and d % n == 0 else None
    sizes = _values(graph, op, 1)
    if option(op, "num_splits") != n or len(sizes) != n or sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        return None
    if -1 in sizes:  # one size may be left for TensorFlow to infer
        sizes[sizes.index(-1)] = d - sum(s for s in sizes if s != -1)
    return sizes if sum(sizes) == d and min(sizes) >= 0 else None


def split_sizes(graph: Graph, op: Op) -> str | None:
    """the outputs must divide the input along the axis: UNPACK makes one output per index (num),
    SPLIT num_splits equal parts, SPLIT_V one part per size_splits value (one may be -1)"""
    if split_axis_in_range(graph, op) or _split_sizes(graph, op) is not None:
        return None
    x, axis = _split_input(graph, op), _split_axis(graph, op)
    if op.type == "UNPACK":
        what = f"num {option(op, 'num')}"
    else:
        what = f"num_splits {option(op, 'num_splits')}" + (
            f", size_splits {_values(graph, op, 1)}" if op.type == "SPLIT_V" else ""
        )
    return f"{what} for {len(op.outputs)} outputs and {shape(x)} along axis {axis}"


def split_output_shapes(graph: Graph, op: Op) -> str | None:
    """each output must be the input with the axis cut to its part (UNPACK: without the axis)"""
    if split_axis_in_range(graph, op) or (sizes := _split_sizes(graph, op)) is None:
        return None
    x, axis = _split_input(graph, op), _split_axis(graph, op)
    expected = [list(x.shape[:axis]) + ([] if op.type == "UNPACK" else [s]) + list(x.shape[axis + 1 :]) for s in sizes]
    got = [shape(output_tensor(graph, op, k)) for k in range(len(op.outputs))]
    return None if got == expected else f"{shape(x)} along axis {axis} gives {expected}; the outputs are {got}"


def lower_split(graph: Graph, op: Op) -> Step:
    x = _split_input(graph, op)
    params = build(graph, op, SPLIT, input_shape=x.shape, axis=_split_axis(graph, op), sizes=_split_sizes(graph, op))
    return _step(graph, op, SPLIT, params, [x.index])


_SPLIT_CONSTRAINTS = (split_axis_in_range, split_sizes, split_output_shapes)
_AXIS = Arg("axis", CONSTANT, ("int32",))
_SPLIT_OUTPUTS = (Arg("outputs", dtypes=INT8_INT16, variadic=True),)

register(
    OpEntry(
        types=("UNPACK",),
        summary="any axis, one output per index",
        inputs=(Arg("input", dtypes=INT8_INT16),),
        outputs=_SPLIT_OUTPUTS,
        lower=lower_split,
        kernels=(SPLIT, _S16[SPLIT]),
        options=(
            at_least("num", 1),
            any_value("axis", "a dimension of the input (negative counts from the end)", default=0),
        ),
        constraints=(same_type, *_SPLIT_CONSTRAINTS),
    )
)

register(
    OpEntry(
        types=("SPLIT",),
        summary="any axis, equal parts",
        inputs=(_AXIS, Arg("input", dtypes=INT8_INT16)),
        outputs=_SPLIT_OUTPUTS,
        lower=lower_split,
        kernels=(SPLIT, _S16[SPLIT]),
        options=(at_least("num_splits", 1),),
        constraints=(same_type, *_SPLIT_CONSTRAINTS),
    )
)

register(
    OpEntry(
        types=("SPLIT_V",),
        summary="any axis, parts of the given sizes",
        inputs=(Arg("input", dtypes=INT8_INT16), Arg("size_splits", CONSTANT, _INDEX_TYPES), _AXIS),
        outputs=_SPLIT_OUTPUTS,
        lower=lower_split,
        kernels=(SPLIT, _S16[SPLIT]),
        options=(at_least("num_splits", 1),),
        constraints=(same_type, *_SPLIT_CONSTRAINTS),
    )
)


# --------------------------------------------------------------------------------------- GATHER


def _gather_axis(graph: Graph, op: Op) -> int:
    return _normalized(option(op, "axis"), len(input_tensor(graph, op, 0).shape))


def gather_indices(graph: Graph, op: Op) -> str | None:
    """the axis must be a dimension of the input and every index must lie within it (TFLM does not
    check indices at run time)"""
    x, axis = input_tensor(graph, op, 0), _gather_axis(graph, op)
    if not 0 <= axis < len(x.shape):
        return f"axis {option(op, 'axis')} for a {shape(x)} input"
    idx = _values(graph, op, 1)
    bad = sorted({i for i in idx if not 0 <= i < x.shape[axis]})
    return f"indices {bad} outside [0, {x.shape[axis]})" if bad or not idx else None


def gather_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be the input with the axis replaced by the indices' shape"""
    if gather_indices(graph, op):
        return None
    x, idx, axis = input_tensor(graph, op, 0), input_tensor(graph, op, 1), _gather_axis(graph, op)
    expected = list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1 :])
    return _output_shape_is(graph, op, expected, f"{shape(x)} gathered along axis {axis} by {shape(idx)} indices")


def lower_gather(graph: Graph, op: Op) -> Step:
    x = input_tensor(graph, op, 0)
    params = build(graph, op, GATHER, input_shape=x.shape, axis=_gather_axis(graph, op), indices=_values(graph, op, 1))
    return _step(graph, op, GATHER, params, [x.index])


register(
    OpEntry(
        types=("GATHER",),
        summary="any axis, constant int32 indices, batch_dims 0",
        inputs=(Arg("params"), Arg("indices", CONSTANT, ("int32",))),
        outputs=(Arg("output"),),
        lower=lower_gather,
        kernels=(GATHER,),
        options=(
            any_value("axis", "a dimension of the input (negative counts from the end)", default=0),
            one_of("batch_dims", 0, default=0),
        ),
        constraints=(gather_indices, gather_output_shape),
    )
)


# ------------------------------------------------------------------ DEPTH_TO_SPACE, SPACE_TO_DEPTH


def _block(op: Op) -> int:
    return int(option(op, "block_size"))


def depth_to_space_channels(graph: Graph, op: Op) -> str | None:
    """the input's channels must be a multiple of block_size squared"""
    x, b = input_tensor(graph, op, 0), _block(op)
    return None if x.shape[3] % (b * b) == 0 else f"{x.shape[3]} channels, block_size {b}"


def space_to_depth_size(graph: Graph, op: Op) -> str | None:
    """the input's height and width must be multiples of block_size"""
    x, b = input_tensor(graph, op, 0), _block(op)
    return None if x.shape[1] % b == 0 and x.shape[2] % b == 0 else f"input {shape(x)}, block_size {b}"


def _depth_space_output(graph: Graph, op: Op, fits, expected) -> str | None:
    if image_4d(graph, op) or fits(graph, op):
        return None  # reported by those
    (_, h, w, c), b = input_tensor(graph, op, 0).shape, _block(op)
    return _output_shape_is(graph, op, expected(h, w, c, b), f"input {[1, h, w, c]} with block_size {b}")


def depth_to_space_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be [1, H * b, W * b, C / b^2] for a [1, H, W, C] input and block_size b"""
    return _depth_space_output(graph, op, depth_to_space_channels, lambda h, w, c, b: [1, h * b, w * b, c // (b * b)])


def space_to_depth_output_shape(graph: Graph, op: Op) -> str | None:
    """the output must be [1, H / b, W / b, C * b^2] for a [1, H, W, C] input and block_size b"""
    return _depth_space_output(graph, op, space_to_depth_size, lambda h, w, c, b: [1, h // b, w // b, c * b * b])


def lower_depth_space(graph: Graph, op: Op) -> Step:
    x, y = input_tensor(graph, op, 0), output_tensor(graph, op)
    kernel = DEPTH_TO_SPACE if op.type == "DEPTH_TO_SPACE" else SPACE_TO_DEPTH
    params = build(graph, op, kernel, input_shape=x.shape, block_size=_block(op))
    return Step(op, kernel.name, params, args=[x.index, y.index], inputs=(x.index,), outputs=(y.index,))


_DEPTH_SPACE_KEEPS_QUANTIZATION = output_keeps_input_quantization("TFLM copies the int8 values without requantizing")

register(
    OpEntry(
        types=("DEPTH_TO_SPACE",),
        summary="NHWC, any block_size (channels a multiple of its square)",
        inputs=(Arg("input"),),  # int8: TFLM's DEPTH_TO_SPACE runs no int16
        outputs=(Arg("output"),),
        lower=lower_depth_space,
        kernels=(DEPTH_TO_SPACE,),
        options=(at_least("block_size", 1),),
        constraints=(
            image_4d,
            depth_to_space_channels,
            depth_to_space_output_shape,
            _DEPTH_SPACE_KEEPS_QUANTIZATION,
        ),
    )
)

register(
    OpEntry(
        types=("SPACE_TO_DEPTH",),
        summary="NHWC, any block_size (height and width multiples of it)",
        inputs=(Arg("input"),),  # int8, as DEPTH_TO_SPACE
        outputs=(Arg("output"),),
        lower=lower_depth_space,
        kernels=(SPACE_TO_DEPTH,),
        options=(at_least("block_size", 1),),
        constraints=(image_4d, space_to_depth_size, space_to_depth_output_shape, _DEPTH_SPACE_KEEPS_QUANTIZATION),
    )
)
