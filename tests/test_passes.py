"""Graph passes: compile-time integer arithmetic (the shape subgraphs of dynamic-batch Keras
exports) is folded into constants, checked against NumPy's own slicing and stacking."""

from __future__ import annotations

import numpy as np
import pytest

from zoflash.compiler.ir import Graph, Op, Quantization, Tensor
from zoflash.compiler.passes import fold_shape_arithmetic

Q = Quantization((0.1,), (0,))


def _graph(tensors, ops, inputs=(0,), outputs=None):
    ts = [
        Tensor(index=i, name=f"t{i}", shape=s, dtype=d, data=v, quant=Q if d == "int8" else None)
        for i, (s, d, v) in enumerate(tensors)
    ]
    return Graph(name="g", tensors=ts, ops=ops, inputs=inputs, outputs=outputs or (len(ts) - 1,))


def _keras_flatten_graph():
    """x[1,4,6,2] -> SHAPE -> STRIDED_SLICE(0:1, shrink) -> PACK(batch, 48) -> RESHAPE(x)."""
    tensors = [
        ((1, 4, 6, 2), "int8", None),  # 0 x
        ((4,), "int32", None),  # 1 shape
        ((1,), "int32", np.array([0], np.int32)),  # 2 begin
        ((1,), "int32", np.array([1], np.int32)),  # 3 end
        ((1,), "int32", np.array([1], np.int32)),  # 4 strides
        ((), "int32", None),  # 5 batch
        ((), "int32", np.array(48, np.int32)),  # 6 48
        ((2,), "int32", None),  # 7 new shape
        ((1, 48), "int8", None),
    ]  # 8 y
    ops = [
        Op(0, "SHAPE", (0,), (1,), {"out_type": 2}),
        Op(1, "STRIDED_SLICE", (1, 2, 3, 4), (5,), {"shrink_axis_mask": 1}),
        Op(2, "PACK", (5, 6), (7,), {"axis": 0, "values_count": 2}),
        Op(3, "RESHAPE", (0, 7), (8,), {}),
    ]
    return _graph(tensors, ops)


def test_keras_flatten_shape_subgraph_folds_to_a_constant_reshape():
    g, folded = fold_shape_arithmetic(_keras_flatten_graph())
    assert [op.type for op in folded] == ["SHAPE", "STRIDED_SLICE", "PACK"]
    assert [(op.index, op.type) for op in g.ops] == [(3, "RESHAPE")]  # original op indices kept
    assert g.tensors[7].data.tolist() == [1, 48] and g.tensors[7].dtype == "int32"


@pytest.mark.tf
@pytest.mark.parametrize("seed", range(40))
def test_strided_slice_matches_tensorflow(seed):
    """Random begin/end/strides (negative, out of range) and masks against TensorFlow's own op."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, size=tuple(rng.integers(1, 6, size=rng.integers(1, 4)))).astype(np.int32)
    n = x.ndim
    begin = rng.integers(-6, 6, size=n).astype(np.int32)
    end = rng.integers(-6, 7, size=n).astype(np.int32)
    strides = rng.choice([-2, -1, 1, 2, 3], size=n).astype(np.int32)
    bm, em = int(rng.integers(0, 1 << n)), int(rng.integers(0, 1 << n))
    sm = int(rng.integers(0, 1 << n)) if seed % 3 == 0 else 0
    for k in range(n):  # shrunk axes need an index inside the dimension
        if sm >> k & 1:
            begin[k] = rng.integers(-x.shape[k], x.shape[k])
            end[k], strides[k] = begin[k] + 1, 1
            bm &= ~(1 << k)
    expect = tf.strided_slice(x, begin, end, strides, begin_mask=bm, end_mask=em, shrink_axis_mask=sm).numpy()
    tensors = [
        ((1,), "int8", None),
        (x.shape, "int32", x),
        ((n,), "int32", begin),
        ((n,), "int32", end),
        ((n,), "int32", strides),
        (expect.shape, "int32", None),
    ]
    g, folded = fold_shape_arithmetic(
        _graph(
            tensors,
            [Op(0, "STRIDED_SLICE", (1, 2, 3, 4), (5,), {"begin_mask": bm, "end_mask": em, "shrink_axis_mask": sm})],
            outputs=(0,),
        )
    )
    assert len(folded) == 1
    assert np.array_equal(g.tensors[5].data, expect)


def test_ops_on_activations_and_unknown_masks_are_kept():
    tensors = [
        ((1, 4), "int8", None),
        ((1,), "int32", np.array([0], np.int32)),
        ((1,), "int32", np.array([1], np.int32)),
        ((1,), "int32", np.array([1], np.int32)),
        ((1, 1), "int8", None),
    ]
    on_activations = Op(0, "STRIDED_SLICE", (0, 1, 2, 3), (4,), {})
    g, folded = fold_shape_arithmetic(_graph(tensors, [on_activations]))
    assert folded == [] and g.ops == [on_activations]
    tensors[0] = ((4,), "int32", np.arange(4, dtype=np.int32))
    tensors[4] = ((1,), "int32", None)
    ellipsis = Op(0, "STRIDED_SLICE", (0, 1, 2, 3), (4,), {"ellipsis_mask": 1})
    g, folded = fold_shape_arithmetic(_graph(tensors, [ellipsis], outputs=(0,)))
    assert folded == []


def test_a_folded_value_that_disagrees_with_the_declared_shape_is_left_for_legality():
    tensors = [((1, 6), "int8", None), ((2,), "int32", None), ((3,), "int32", None)]
    g0 = _graph(
        [tensors[0], tensors[1], ((1,), "int32", np.array([5], np.int32)), tensors[2]],
        [Op(0, "SHAPE", (0,), (1,), {}), Op(1, "CONCATENATION", (1, 2), (3,), {"axis": 0})],
        outputs=(0,),
    )
    g, folded = fold_shape_arithmetic(g0)
    assert g.tensors[3].data.tolist() == [1, 6, 5]
    g0.tensors[3] = Tensor(index=3, name="t3", shape=(4,), dtype="int32")
    g, folded = fold_shape_arithmetic(g0)
    assert [op.type for op in g.ops] == ["CONCATENATION"]
