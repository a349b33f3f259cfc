"""Run a CompiledModel's program with the NumPy reference kernels on a batch of samples.

This is the Python reference trainer's model: it executes `program.steps` (the same kernel calls,
with the same params, as the generated C) on B samples at once.  Every activation value is kept
flat as [B, elements] under its root storage index (`CompiledModel.root`), so reshapes cost
nothing.  Constants come from the model unless `weights` overrides them, which lets a trainer
perturb tensors without rebuilding anything.

Batching never changes the arithmetic: each adapter either folds the batch into a dimension the
reference kernel already treats independently (FC and softmax rows, pooling channels, ...) or
loops over the samples (convolutions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoflash.reference.ops import (
    activation,
    binary,
    cast,
    convolution,
    data_movement,
    fully_connected,
    movement,
    pooling,
    reduction,
    resize,
    sequence,
)

# The compiled model arrives as an argument and is read by duck typing: the reference imports
# nothing of the product it checks.
CompiledModel = Any

# Steps walked back from output 0 to reach the logits (docs/training.md, "Model split").
_AFTER_LOGITS = ("softmax", "log_softmax", "dequantize", "requantize_s8_u8")
# Args that are parameters (weights, bias), passed to the kernel as stored; the other constant
# args are data with a leading axis of 1 that broadcasts over the batch.
_PARAM_ARGS = {"conv2d": (1, 2), "depthwise_conv2d": (1, 2), "fully_connected": (1, 2)}


# ------------------------------------------------------------------------------ the adapters
# Each takes (params, batch size, *inputs in C argument order) and returns [B, elements].


def _fully_connected(p, n, x, w, b):
    return fully_connected.fully_connected_s8(dict(p, rows=p["rows"] * n), x, w, b).reshape(n, -1)


def _softmax(p, n, x):
    return activation.softmax_s8(dict(p, outer=p["outer"] * n), x).reshape(n, -1)


def _elementwise(kernel):
    return lambda p, n, x: kernel(p, x)


def _per_sample(kernel):
    """One call per sample.  CONV_2D taps would cross sample borders if the batch were folded into
    H or W; DEPTHWISE_CONV_2D could fold it into the channels but runs slower so (cache misses)."""
    return lambda p, n, x, *rest: np.stack([kernel(p, x[i], *rest).reshape(-1) for i in range(n)])


def _pool(kernel):
    def run(p, n, x):
        # Channels are independent: the batch becomes extra channels of one (H, W, B*C) image.
        h, w = p["input_h"], p["input_w"]
        x = x.reshape(n, h, w, -1).transpose(1, 2, 0, 3).reshape(h, w, -1)
        y = kernel(dict(p, channels=p["channels"] * n), x)
        return y.reshape(p["output_h"], p["output_w"], n, -1).transpose(2, 0, 1, 3).reshape(n, -1)

    return run


def _binary(kernel):
    """ADD / MUL: the params' 4-D walk gives each input's shape, 1 where it broadcasts."""

    def run(p, n, a, b):
        out = tuple(p[f"out_d{k}"] for k in range(4))
        shape1 = tuple(d if p[f"in1_s{k}"] else 1 for k, d in enumerate(out))
        shape2 = tuple(d if p[f"in2_s{k}"] else 1 for k, d in enumerate(out))
        y = kernel(p, a.reshape(len(a), *shape1), b.reshape(len(b), *shape2))
        return np.broadcast_to(y, (n,) + out).reshape(n, -1)

    return run


def _pad(p, n, x):
    if p["before0"] == p["after0"] == 0:  # the batch joins dimension 0, which is not padded
        return data_movement.pad_s8(dict(p, in_d0=p["in_d0"] * n), x).reshape(n, -1)
    return _per_sample(data_movement.pad_s8)(p, n, x)


def _concat(p, n, *xs):
    # As the C does: each input is [outer, chunk]; join the chunks.
    parts = [np.broadcast_to(x, (n, x.shape[1])).reshape(n, p["outer"], -1) for x in xs]
    return data_movement.concat_s8(p, parts, axis=2).reshape(n, -1)


def _mean(p, n, x):
    x = x.reshape(n, p["outer"], p["reduce"], p["inner"])
    return reduction.mean_s8(p, x, axes=(2,)).reshape(n, -1)


DISPATCH = {
    "conv2d": _per_sample(convolution.conv2d_s8),
    "depthwise_conv2d": _per_sample(convolution.depthwise_conv2d_s8),
    "fully_connected": _fully_connected,
    "avg_pool": _pool(pooling.avg_pool_s8),
    "max_pool": _pool(pooling.max_pool_s8),
    "add": _binary(binary.add_s8),
    "mul": _binary(binary.mul_s8),
    "pad": _pad,
    "concat": _concat,
    "mean": _mean,
    "softmax": _softmax,
    "log_softmax": lambda p, n, x: activation.log_softmax_s8(dict(p, outer=p["outer"] * n), x).reshape(n, -1),
    "logistic": _elementwise(activation.logistic_s8),
    "requantize": _elementwise(activation.requantize_s8),
    "dequantize": _elementwise(activation.dequantize_s8),
    # ---- QUANTIZE at the model's edges
    "requantize_u8_s8": _elementwise(activation.requantize_u8_s8),
    "requantize_s8_u8": _elementwise(activation.requantize_s8_u8),
    "quantize_f32_s8": _elementwise(activation.quantize_f32_s8),
}

# ==== reductions, resizing, transposed convolution ============================================
# TRANSPOSE_CONV's weights and bias are parameters; the other kernels run one sample at a time.
_PARAM_ARGS["transpose_conv"] = (1, 2)
DISPATCH.update(
    {
        "reduce_max": _per_sample(reduction.reduce_max_s8),
        "arg_max": _per_sample(reduction.arg_max_s8),
        "resize_bilinear": _per_sample(resize.resize_bilinear_s8),
        "resize_nearest": _per_sample(resize.resize_nearest_s8),
        "transpose_conv": _per_sample(convolution.transpose_conv_s8),
    }
)
# ==== end of reductions, resizing, transposed convolution =====================================


# ------------------------------------------------------------------------------- the executor


def _samples(x, shape: tuple[int, ...], quant, dtype: str = "int8") -> np.ndarray:
    """int8 [N, *shape] from int8 data or from float data in real units, quantized as TFLite does:
    zero_point + round(x / scale), halves away from zero, saturated to int8.  A uint8 or float32
    model input takes its own type (its first QUANTIZE converts it)."""
    x = np.asarray(x)
    x = x.reshape((-1,) + tuple(shape)[1:] if shape and shape[0] == 1 else (-1,) + tuple(shape))
    if x.dtype == np.int8 or dtype != "int8":
        return x.astype(dtype)
    q = x.astype(np.float64) / quant.scale
    a = np.abs(q)
    r = np.floor(a)
    r = np.copysign(np.where(a - r >= 0.5, r + 1.0, r), q)
    return np.clip(r + quant.zero_point, -128, 127).astype(np.int8)


def _flat(x) -> np.ndarray:
    x = np.asarray(x)
    return x.reshape(len(x), -1)


class ReferenceForward:
    """Executes a CompiledModel's steps on batches; values are [B, elements] by root index."""

    def __init__(self, model: CompiledModel):
        self.model = model
        self.graph = model.graph
        self.root = model.root
        self.steps = model.program.steps
        tensors = self.graph.tensors
        # Per step: the adapter, its params, each input as (root index, is a constant, is a
        # parameter, aliases a variable) or None, and the output's root index (a tuple of them for
        # several outputs).
        self._plan = []
        for step in self.steps:
            params = _PARAM_ARGS.get(step.kernel, ())
            ins = []
            for pos, a in enumerate(step.args[:-1]):
                for t in a if isinstance(a, tuple) else (a,):  # a tuple (concat) becomes *inputs
                    ins.append(
                        None
                        if t is None
                        else (
                            self.root[t],
                            tensors[self.root[t]].is_constant,
                            pos in params,
                            tensors[self.root[t]].is_variable and not tensors[t].is_variable,
                        )
                    )
            last = step.args[-1]
            out = tuple(self.root[t] for t in last) if isinstance(last, tuple) else self.root[last]
            self._plan.append((DISPATCH[step.kernel], step.params, ins, out))
        self.logits_index, self.logits_end = self._find_logits()
        self.state: dict[int, np.ndarray] = {}  # variable tensors by root index, kept across runs
        self.reset()
        # CALL_ONCE's initial values, written at the first run (TFLM's reset does not run it again).
        self._call_once = {
            r: self.graph.tensors[r].initial for r in self.state if self.graph.tensors[r].initial is not None
        }
        # A step writing a variable (ASSIGN_VARIABLE) makes each sample depend on the previous one.
        self._sequential = any(
            not isinstance(out, tuple) and self.graph.tensors[out].is_variable for _, _, _, out in self._plan
        )

    def reset(self) -> None:
        """The variable tensors (state) as TFLM's reset leaves them: an int8 one at its zero point,
        any other type at zero. Each `run` then carries them on, sample after sample."""
        self.state = {}
        for r in sorted(set(self.root.values())):
            t = self.graph.tensors[r]
            if t.is_variable:
                zp = t.quant.zero_point if t.dtype == "int8" and t.quant is not None else 0
                self.state[r] = np.full(t.num_elements, zp, dtype=t.dtype)

    def _find_logits(self) -> tuple[int, int]:
        """The int8 logits (output 0 before SOFTMAX / DEQUANTIZE) and one past its step."""
        producer = {self.root[t]: k for k, s in enumerate(self.steps) for t in s.written}
        t = self.root[self.graph.outputs[0]]
        while t in producer and self.steps[producer[t]].kernel in _AFTER_LOGITS:
            t = self.root[self.steps[producer[t]].args[0]]
        return t, producer[t] + 1 if t in producer else 0

    def _overrides(self, weights: dict | None) -> dict[int, np.ndarray]:
        """`weights` by root index, each checked to have its constant's shape and dtype."""
        out = {}
        for t, w in (weights or {}).items():
            r, w = self.root[t], np.asarray(w)
            data = self.graph.tensors[r].data
            if data is None or w.shape != data.shape or w.dtype != data.dtype:
                raise ValueError(
                    f"weights[{t}]: {w.dtype}{list(w.shape)} does not replace tensor {self.graph.tensors[r].describe()}"
                )
            out[r] = w
        return out

    def run(
        self,
        inputs: dict[int, np.ndarray],
        first: int = 0,
        end: int | None = None,
        env: dict | None = None,
        weights: dict[int, np.ndarray] | None = None,
    ) -> dict[int, np.ndarray]:
        """Execute steps [first, end) on a batch.  inputs: tensor index -> int8 [B, ...]; env: earlier
        values by root index (e.g. cached boundary features); weights: constant overrides.
        Returns a new env (the given one is not modified) holding every value as [B, elements]."""
        env = {r: _flat(v) for r, v in (env or {}).items()}
        env.update((self.root[t], _flat(x)) for t, x in inputs.items())
        if not env:
            raise ValueError("no inputs and no env: nothing to run on")
        n = len(next(iter(env.values())))
        if self._sequential and n != 1:
            # Each sample sees the variables the previous one assigned: one at a time, in order.
            rows = [self.run({}, first, end, {r: v[i : i + 1] for r, v in env.items()}, weights) for i in range(n)]
            return {r: np.concatenate([row[r] for row in rows]) for r in rows[0]}
        for r, initial in self._call_once.items():
            self.state[r][:] = initial.reshape(-1)
        self._call_once = {}
        over = self._overrides(weights)
        tensors = self.graph.tensors

        def value(slot):
            if slot is None:
                return None
            r, const, param, aliases_state = slot
            if aliases_state:  # READ_VARIABLE's value left in the state: one row, broadcast over the batch
                return self.state[r][None]
            if r in self.state:  # updated in place by the step
                return self.state[r]
            if not const:
                try:
                    return env[r]
                except KeyError:
                    raise KeyError(
                        f"tensor {tensors[r].describe()} has no value: run the step producing it or pass it in env"
                    ) from None
            data = over.get(r, tensors[r].data)
            return data if param else data.reshape(1, -1)  # a batch of one broadcasts

        for fn, p, ins, out in self._plan[first:end]:
            y = fn(p, n, *[value(s) for s in ins])
            if isinstance(out, tuple):  # several outputs (SPLIT, UNPACK): the adapter returns one each
                env.update(zip(out, y))
            elif out in self.state:  # ASSIGN_VARIABLE: the state, one sample at a time
                self.state[out][:] = y.reshape(-1)
            else:
                env[out] = y
        return env

    def output(self, env: dict, k: int = 0) -> np.ndarray:
        """Model output k from an env, as [B, *output shape]."""
        t = self.graph.outputs[k]
        y = env[self.root[t]]
        return y.reshape((len(y),) + tuple(self.graph.tensors[t].shape))

    def logits(self, env: dict, first: int = 0, weights: dict | None = None) -> np.ndarray:
        """Run [first, logits_end) from env (e.g. cached boundary features) -> int8 logits [B, classes]."""
        return self.run({}, first, self.logits_end, env, weights)[self.logits_index]

    def forward(self, x: np.ndarray, weights: dict | None = None) -> np.ndarray:
        """The whole model on input 0 (int8, or float in real units quantized as zoflash.api.infer
        does) -> output 0 as [B, *output shape]."""
        t = self.graph.tensors[self.graph.inputs[0]]
        x = _samples(x, t.shape, t.quant, t.dtype)
        if self._sequential:  # each sample sees the variables the previous one assigned
            return np.concatenate(
                [self.output(self.run({t.index: x[i : i + 1]}, weights=weights)) for i in range(len(x))]
            )
        return self.output(self.run({t.index: x}, weights=weights))


# ==================================================================== data movement (movement ops)
# The input may be a constant (one row): it broadcasts over the batch.


def _strided_copy(p, n, x):
    return np.stack([movement.strided_copy_s8(p, row).reshape(-1) for row in np.broadcast_to(x, (n, x.shape[1]))])


def _split(p, n, x):
    # The batch joins the outer blocks, which split independently.
    x = np.broadcast_to(x, (n, x.shape[1]))
    return [y.reshape(n, -1) for y in movement.split_s8(dict(p, outer=p["outer"] * n), x)]


def _gather(p, n, x):
    x = np.broadcast_to(x, (n, x.shape[1]))
    return movement.gather_s8(dict(p, outer=p["outer"] * n), x).reshape(n, -1)


def _depth_space(kernel):
    # The batch stacks the images' rows: it joins the height.
    def run(p, n, x):
        return kernel(dict(p, height=p["height"] * n), np.broadcast_to(x, (n, x.shape[1]))).reshape(n, -1)

    return run


DISPATCH.update(
    {
        "transpose": _strided_copy,
        "slice": _strided_copy,
        "strided_slice": _strided_copy,
        "pack": _concat,
        "split": _split,
        "gather": _gather,
        "depth_to_space": _depth_space(movement.depth_to_space_s8),
        "space_to_depth": _depth_space(movement.space_to_depth_s8),
    }
)
# ==================================================================== end of data movement


# ------------------------------------------- element-wise and activation ops --------------------
DISPATCH.update(
    {
        "sub": _binary(binary.sub_s8),
        "squared_difference": _binary(binary.squared_difference_s8),
        "maximum": _binary(binary.maximum_s8),
        "minimum": _binary(binary.minimum_s8),
        "prelu": _binary(binary.prelu_s8),
        "relu": _elementwise(activation.relu_s8),
        "relu6": _elementwise(activation.relu6_s8),
        "leaky_relu": _elementwise(activation.leaky_relu_s8),
        "tanh": _elementwise(activation.tanh_s8),
        "hard_swish": _elementwise(activation.hard_swish_s8),
        "rsqrt": _elementwise(activation.rsqrt_s8),
    }
)
# ---------------------------------------------------- end of element-wise and activation ops ----------


# ==== sequence ops: SVDF (stateful models) ===================================================
def _svdf(p, n, x, wf, wt, b, state):
    # The samples are a sequence: each one sees the state the previous one left.
    return np.stack([sequence.svdf(p, x[i], wf, wt, b, state) for i in range(n)])


_PARAM_ARGS.update({"svdf_s8": (1, 2, 3), "svdf_s8_s16": (1, 2, 3)})
DISPATCH.update({"svdf_s8": _svdf, "svdf_s8_s16": _svdf, "requantize_s16_s8": _elementwise(sequence.requantize_s16_s8)})
# ==== end of sequence ops ====================================================================


# ==== UNIDIRECTIONAL_SEQUENCE_LSTM (int8, int16 cell state) ====================


def _lstm(p, n, x, *rest):
    *weights, b_i, b_f, b_c, b_o, hidden, cell = rest
    # The samples are a sequence: each one starts from the states the previous one left.
    return np.stack(
        [sequence.lstm(p, x[i], weights[:4], weights[4:], (b_i, b_f, b_c, b_o), hidden, cell) for i in range(n)]
    )


_PARAM_ARGS["lstm_s8_s16"] = tuple(range(1, 13))
DISPATCH["lstm_s8_s16"] = _lstm
# ==== end of UNIDIRECTIONAL_SEQUENCE_LSTM ====================================================


# ==== resource variables: READ_VARIABLE / ASSIGN_VARIABLE ===================================
def _copy(p, n, x):
    # A state (one flat row) broadcasts over the batch; an activation is already [B, elements].
    return np.broadcast_to(x, (n, p["size"])).copy()


DISPATCH.update({"copy_s8": _copy})
# ==== end of resource variables =============================================================


# ==== CAST ==================================================================================
def _cast(p, n, x):
    return cast.cast(p, np.broadcast_to(x, (n, p["size"]))).reshape(n, -1)


_CAST_TYPES = ("int8", "int16", "int32", "float32")
DISPATCH.update({f"cast_{s}_{d}": _cast for s in _CAST_TYPES for d in _CAST_TYPES if s != "float32" or d == "float32"})
# ==== end of CAST ===========================================================================
# ==== int16 activations (16x8 quantization) ==================================================


def _softmax_rows(kernel):
    return lambda p, n, x: kernel(dict(p, outer=p["outer"] * n), x).reshape(n, -1)


def _requantize_to(dtype: str):
    return lambda p, n, x: activation.requantize(p, x, dtype)


def _pad16(p, n, x):
    if p["before0"] == p["after0"] == 0:  # the batch joins dimension 0, which is not padded
        return data_movement.pad_s16(dict(p, in_d0=p["in_d0"] * n), x).reshape(n, -1)
    return _per_sample(data_movement.pad_s16)(p, n, x)


def _concat16(p, n, *xs):
    parts = [np.broadcast_to(x, (n, x.shape[1])).reshape(n, p["outer"], -1) for x in xs]
    return np.concatenate(parts, axis=2).reshape(n, -1)


def _copy16(p, n, x):
    return np.stack([movement.strided_copy_s16(p, row).reshape(-1) for row in np.broadcast_to(x, (n, x.shape[1]))])


def _split16(p, n, x):
    x = np.broadcast_to(x, (n, x.shape[1]))  # the batch joins the outer blocks, which split independently
    return [y.reshape(n, -1) for y in movement.split_s16(dict(p, outer=p["outer"] * n), x)]


_AFTER_LOGITS += ("softmax_s8_s16", "softmax_s16", "dequantize_s16", "requantize_s16_s32")
DISPATCH.update(
    {
        "softmax_s8_s16": _softmax_rows(activation.softmax_s8_s16),
        "softmax_s16": _softmax_rows(activation.softmax_s16),
        "requantize_s8_s16": _requantize_to("int16"),
        "requantize_s16_s16": _requantize_to("int16"),
        "requantize_s16_s32": _requantize_to("int32"),
        "requantize_s8_s32": _requantize_to("int32"),
        "dequantize_s16": _elementwise(activation.dequantize_s16),
        "quantize_f32_s16": _elementwise(activation.quantize_f32_s16),
        "conv2d_s16": _per_sample(convolution.conv2d_s16),
        "depthwise_conv2d_s16": _per_sample(convolution.depthwise_conv2d_s16),
        "fully_connected_s16": lambda p, n, x, w, b: fully_connected.fully_connected_s16(
            dict(p, rows=p["rows"] * n), x, w, b
        ).reshape(n, -1),
        "avg_pool_s16": _pool(pooling.avg_pool_s16),
        "max_pool_s16": _pool(pooling.max_pool_s16),
        "add_s16": _binary(binary.add_s16),
        "sub_s16": _binary(binary.sub_s16),
        "mul_s16": _binary(binary.mul_s16),
        "relu_s16": _elementwise(activation.relu_s16),
        "relu6_s16": _elementwise(activation.relu6_s16),
        "leaky_relu_s16": _elementwise(activation.leaky_relu_s16),
        "mean_s16": lambda p, n, x: reduction.mean_s16(dict(p, outer=p["outer"] * n), x).reshape(n, -1),
        "transpose_s16": _copy16,
        "slice_s16": _copy16,
        "strided_slice_s16": _copy16,
        "split_s16": _split16,
        "pack_s16": _concat16,
        "maximum_s16": _binary(binary.maximum_s16),
        "minimum_s16": _binary(binary.minimum_s16),
        "resize_nearest_s16": _per_sample(resize.resize_nearest_s16),
        "pad_s16": _pad16,
        "concat_s16": _concat16,
    }
)
_PARAM_ARGS.update({"conv2d_s16": (1, 2), "depthwise_conv2d_s16": (1, 2), "fully_connected_s16": (1, 2)})
# ==== end of int16 activations ===============================================================
