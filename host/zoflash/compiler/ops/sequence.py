"""Stateful sequence ops: SVDF (int8, with an int8 or int16 activation state).

Their state is a variable tensor the op reads and updates in place: it lives in the model's
state array (never planned, kept across invokes, re-initialised by <prefix>_reset), so the
legality pass lets a variable tensor reach only the inputs listed in STATE_INPUTS.
"""
from __future__ import annotations

from zoflash.compiler import kernels, quant
from zoflash.compiler.ir import Graph, Op
from zoflash.compiler.ops.registry import (
    CONSTANT,
    DATA,
    FUSED_ACTIVATION,
    Arg,
    Kernel,
    OpEntry,
    any_value,
    at_least,
    build,
    input_tensor,
    option,
    output_tensor,
    register,
    shape,
)
from zoflash.compiler.program import Step

STATE_INPUTS = {"SVDF": (4,)}  # op type -> the input positions that hold its state

def _svdf_extents(p):
    t = p["state_bytes"]
    filters, memory = p["num_filters"], p["memory_size"]
    return (p["batches"] * p["input_size"], filters * p["input_size"], t * filters * memory, 4 * p["num_units"],
            t * p["batches"] * filters * memory, p["batches"] * p["num_units"])


SVDF_S8 = Kernel("svdf_s8", "zo_svdf_s8", "zo_svdf_params_t", kernels.svdf_params,
                 ("int8", "int8", "int8", "int32", "int8", "int8"),
                 lambda p: _svdf_extents(dict(p, state_bytes=1)))
SVDF_S8_S16 = Kernel("svdf_s8_s16", "zo_svdf_s8_s16", "zo_svdf_params_t", kernels.svdf_params,
                     ("int8", "int8", "int16", "int32", "int16", "int8"),
                     lambda p: _svdf_extents(dict(p, state_bytes=2)))


def _parts(graph: Graph, op: Op):
    return (input_tensor(graph, op, 0), input_tensor(graph, op, 1), input_tensor(graph, op, 2),
            input_tensor(graph, op, 3), input_tensor(graph, op, 4), output_tensor(graph, op))


def state_is_variable(graph: Graph, op: Op) -> str | None:
    """the activation state (input 4) must be a variable tensor of the model, which no other op reads or
    writes (TFLM keeps it across invokes)"""
    s = input_tensor(graph, op, 4)
    if not s.is_variable:
        return f"'{s.name}' is not a variable tensor"
    users = [o.index for o in graph.ops if s.index in o.inputs + o.outputs and o.index != op.index]
    return f"'{s.name}' is also used by ops {users}" if users else None


def svdf_shapes(graph: Graph, op: Op) -> str | None:
    """input [batches, input_size], weights_feature [filters, input_size], weights_time [filters, memory],
    bias [filters / rank], state [batches, filters x memory] and output [batches, filters / rank], with
    filters a multiple of rank (TFLM's PrepareSvdf)"""
    x, wf, wt, b, s, y = _parts(graph, op)
    rank = option(op, "rank")
    ok = (len(x.shape) == 2 and len(wf.shape) == 2 and len(wt.shape) == 2 and len(s.shape) == 2
          and len(y.shape) == 2 and wf.shape[1] == x.shape[1] and wt.shape[0] == wf.shape[0]
          and wf.shape[0] % rank == 0 and b.num_elements == wf.shape[0] // rank
          and tuple(s.shape) == (x.shape[0], wt.shape[0] * wt.shape[1])
          and tuple(y.shape) == (x.shape[0], wf.shape[0] // rank))
    if ok:
        return None
    return (f"input {shape(x)}, weights_feature {shape(wf)}, weights_time {shape(wt)}, bias {shape(b)}, "
            f"state {shape(s)}, output {shape(y)}, rank {rank}")


def state_type_matches_time_weights(graph: Graph, op: Op) -> str | None:
    """the state must have the type of weights_time (int8 and int8, or int16 and int16)"""
    wt, s = input_tensor(graph, op, 2), input_tensor(graph, op, 4)
    return None if wt.dtype == s.dtype else f"weights_time is {wt.dtype}, the state {s.dtype}"


def svdf_quantized(graph: Graph, op: Op) -> str | None:
    """weights_feature, weights_time, bias and state must be quantized per tensor (a float or hybrid SVDF
    is not supported)"""
    bad = [f"'{t.name}'" for t in _parts(graph, op)[1:5] if t.quant is None or t.quant.per_channel]
    return ", ".join(bad) + " not quantized per tensor" if bad else None


def svdf_bias_scale(graph: Graph, op: Op) -> str | None:
    """the bias scale must be state scale x weights_time scale (within 1e-5, as TFLM requires)"""
    _, _, wt, b, s, _ = _parts(graph, op)
    expected = float(quant.f32(s.quant.scale * wt.quant.scale))
    if abs(b.quant.scale - expected) < 1e-5:
        return None
    return f"bias scale {b.quant.scale:.9g}, state x time scales {expected:.9g}"


def lower_svdf(graph: Graph, op: Op) -> Step:
    x, wf, wt, b, s, y = _parts(graph, op)
    kernel = SVDF_S8 if s.dtype == "int8" else SVDF_S8_S16
    params = build(graph, op, kernel, batches=x.shape[0], input_size=x.shape[1], num_filters=wf.shape[0],
                   rank=option(op, "rank"), memory_size=wt.shape[1], input_scale=x.quant.scale,
                   input_zp=x.quant.zero_point, feature_scale=wf.quant.scale, state_scale=s.quant.scale,
                   state_zp=s.quant.zero_point, time_scale=wt.quant.scale, output_scale=y.quant.scale,
                   output_zp=y.quant.zero_point, state_dtype=s.dtype)
    return Step(op, kernel.name, params, args=[x.index, wf.index, wt.index, b.index, s.index, y.index],
                inputs=(x.index,), outputs=(y.index,))


register(OpEntry(
    types=("SVDF",),
    summary="int8 input, weights_feature and output; int8 or int16 weights_time and state (a variable "
            "tensor kept across invokes); any rank. As TFLM's int8 path, the fused activation is not applied",
    inputs=(Arg("input"), Arg("weights_feature", CONSTANT, ("int8",)), Arg("weights_time", CONSTANT, ("int8", "int16")),
            Arg("bias", CONSTANT, ("int32",)), Arg("activation_state", DATA, ("int8", "int16"))),
    outputs=(Arg("output"),), lower=lower_svdf, kernels=(SVDF_S8, SVDF_S8_S16),
    options=(at_least("rank", 1), FUSED_ACTIVATION,
             any_value("asymmetric_quantize_inputs", "any (hybrid models only)", default=False)),
    constraints=(state_is_variable, svdf_shapes, state_type_matches_time_weights, svdf_quantized,
                 svdf_bias_scale)))
