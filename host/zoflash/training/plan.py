"""The training plan: which tensors train, where the graph splits, what the suffix computes, and
the memory training needs beyond inference. A pass over a CompiledModel; writes no C.

Rules (docs/training.md): the prefix is every step before the first one that reads a trainable
tensor; the suffix runs up to the step producing the logits (the int8 or int16 tensor feeding a
final SOFTMAX/DEQUANTIZE); the boundary is every activation the prefix (or the caller) writes and the
suffix reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.pipeline import step_tensors
from zoflash.compiler.quant import round_half_away
from zoflash.errors import InternalError, UnsupportedModelError
from zoflash.spec import training as spec
from zoflash.training.losses import LOSSES
from zoflash.training.options import OptionsError, TrainOptions

# int8 weights, with int8 activations or int16 ones (16x8: int64 biases, int16 logits)
WEIGHTED_KERNELS = tuple(k + w for k in ("conv2d", "depthwise_conv2d", "fully_connected") for w in ("", "_s16"))


@dataclass
class TrainableTensor:
    index: int  # root (storage) tensor index of the constant
    name: str
    op_index: int  # the model op that reads it (first one)
    is_bias: bool
    values: np.ndarray  # initial values (int8 clamped to [-126, 126], or int32 / int64 biases)
    stream: int
    eps_b: np.ndarray | None = None  # int32 per element (biases)
    max_step: int = 0

    @property
    def count(self) -> int:
        return int(self.values.size)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)


@dataclass
class BoundarySpan:
    index: int  # root tensor index
    offset: int  # arena offset
    nbytes: int


@dataclass
class TrainPlan:
    tensors: list[TrainableTensor]
    split: int  # steps [0, split) = frozen prefix
    logits_end: int  # steps [split, logits_end) = trainable suffix
    logits: int  # root tensor index of the int8 logits
    classes: int
    logits_scale: float
    logits_zp: int
    loss: str  # spec.LOSSES (auto resolved)
    boundary: list[BoundarySpan]
    clamped: int  # int8 weights moved from -127/-128/127 to the trainable range
    batch: int
    q_buffer: int  # directions the statistics buffers hold (TrainOptions.q_buffer)
    layers: list[int] = field(default_factory=list)  # op indices of the trained layers
    dropped_layers: list[int] = field(default_factory=list)  # removed by --max-params
    stream_buffer_bytes: int = 0  # --data-source stream: the ring of fed samples (set with the data)
    # The frozen prefix keeps state across invokes (variables, SVDF or LSTM state): every engine runs
    # it sample by sample in the device's order and never reuses a sample's boundary (no prefix memo).
    prefix_state: bool = False
    # --mode continual: its rings, candidate and A/B slots (training/continual.py memory(), set with the data)
    continual_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def params(self) -> int:
        return sum(t.count for t in self.tensors)

    @property
    def boundary_bytes(self) -> int:
        return sum(b.nbytes for b in self.boundary)

    def memory(self) -> dict:
        """Bytes of RAM training needs beyond inference."""
        residual = sum(t.count for t in self.tensors if not t.is_bias)
        snapshot = sum(t.nbytes for t in self.tensors) + residual
        return {
            "trainable_bytes_in_ram": sum(t.nbytes for t in self.tensors),
            "residual_bytes": residual,
            "feature_cache_bytes": self.batch * self.boundary_bytes,
            "statistics_bytes": 3 * 4 * self.batch
            + 2 * 4 * self.q_buffer
            + 3 * self.batch
            + (0 if LOSSES.get(self.loss).labels else 4 * self.batch * self.classes),  # float targets
            "snapshot_bytes": snapshot,
            "eps_bytes": sum(4 * t.count for t in self.tensors if t.is_bias),
            **({"stream_buffer_bytes": self.stream_buffer_bytes} if self.stream_buffer_bytes else {}),
            **self.continual_bytes,
        }

    FLASH_KEYS = ("eps_bytes",)  # constant tables (flash on a board)

    def training_ram_bytes(self) -> int:
        """RAM beyond inference: the trainable tensors (in flash for inference), residuals,
        feature cache, statistics and snapshot; the eps tables are constant (flash)."""
        return sum(v for k, v in self.memory().items() if k not in self.FLASH_KEYS)


def _weighted_steps(model: CompiledModel) -> list[int]:
    out = []
    for s, step in enumerate(model.program.steps):
        if step.kernel in WEIGHTED_KERNELS:
            w = step.args[1]
            if model.storage(w).is_constant and model.storage(w).dtype == "int8":
                out.append(s)
    return out


def _select_layers(model: CompiledModel, opts: TrainOptions, weighted: list[int]) -> list[int]:
    if not weighted:
        raise UnsupportedModelError(
            model.graph.name or "model",
            ["no layer with constant int8 weights (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) to train"],
        )
    g = model.graph
    if opts.train == "all":
        return list(weighted)
    m = re.match(r"^last(?::(\d+))?$", opts.train)
    if m:
        n = int(m.group(1) or 1)
        if n > len(weighted):
            raise OptionsError(f"--train last:{n}: the model has only {len(weighted)} layer(s) with weights")
        return weighted[-n:]
    names = [n.strip() for n in opts.train.split(":", 1)[1].split(",") if n.strip()]
    chosen = []
    for name in names:
        hits = [
            s
            for s in weighted
            if name
            in (g.tensors[model.program.steps[s].op.outputs[0]].name, g.tensors[model.program.steps[s].args[1]].name)
        ]
        if not hits:
            known = ", ".join(f"'{g.tensors[model.program.steps[s].op.outputs[0]].name}'" for s in weighted)
            raise OptionsError(
                f"--train layers: no layer named '{name}' (give a weighted layer's output or "
                f"weight tensor name; layers with weights: {known})"
            )
        chosen += [s for s in hits if s not in chosen]
    return sorted(chosen)


def _bias_eps(model: CompiledModel, step) -> np.ndarray:
    """eps_b[k] = max(1, round(0.5 * s_out / (s_in * s_w[k])))."""
    g = model.graph
    x, w, _, y = step.args[0], step.args[1], step.args[2], step.args[-1]
    s_in = g.tensors[x].quant.scale
    s_out = g.tensors[y].quant.scale
    wq = g.tensors[w].quant
    units = g.tensors[step.args[2]].num_elements
    s_w = np.broadcast_to(np.asarray(wq.scales, dtype=np.float64), (units,))
    return np.array([max(1, int(round_half_away(0.5 * s_out / (s_in * sw)))) for sw in s_w], dtype=np.int32)


def chosen_output(model: CompiledModel, opts: TrainOptions) -> int:
    """The graph tensor index of the output the loss reads: --output's name or index, else output 0.
    The other outputs keep running at inference; training stops at the chosen one."""
    g = model.graph
    if opts.output is None:
        return g.outputs[0]
    given = opts.output
    if given.isdigit() and int(given) < len(g.outputs):
        return g.outputs[int(given)]
    for o in g.outputs:
        if g.tensors[o].name == given:
            return o
    known = ", ".join(f"{k} '{g.tensors[o].name}' {list(g.tensors[o].shape)}" for k, o in enumerate(g.outputs))
    raise OptionsError(
        f"--output (output=) '{given}': the model has no output of that name or index; give one of its "
        f"outputs by index or name: {known}"
    )


def resolve_loss(model: CompiledModel, opts: TrainOptions) -> str:
    """The loss of a run: the option's, or for auto mse with --target input, sigmoid-bce for an
    output of one element, else softmax-ce.  A loss that cannot move is refused here."""
    outputs = model.graph.tensors[chosen_output(model, opts)].num_elements
    if opts.loss != "auto":
        loss = opts.loss
    elif opts.target == "input":
        loss = "mse"
    else:
        loss = "sigmoid-bce" if outputs == 1 else "softmax-ce"
    refused = LOSSES.get(loss).refuse(outputs)
    if refused:
        raise OptionsError(refused)
    return loss


def _logits(model: CompiledModel, loss: str, output: int) -> tuple[int, int]:
    """(root index of the tensor the loss reads, index of the step producing it), from graph output
    tensor `output` back through the loss's head (SOFTMAX, DEQUANTIZE...)."""
    producer = {model.root[o]: s for s, step in enumerate(model.program.steps) for o in step.outputs}
    t = model.root[output]
    while True:
        s = producer.get(t)
        if s is None:
            raise UnsupportedModelError(
                model.graph.name or "model", [f"output '{model.graph.tensors[output].name}' is not computed by any op"]
            )
        step = model.program.steps[s]
        if step.kernel in LOSSES.get(loss).head_kernels:
            t = model.root[step.args[0]]
            continue
        tensor = model.storage(t)
        if tensor.dtype not in ("int8", "int16") or tensor.quant is None or tensor.quant.per_channel:
            raise UnsupportedModelError(
                model.graph.name or "model", [f"the logits tensor '{tensor.name}' is not per-tensor int8 or int16"]
            )
        return t, s


def _feeding_steps(model: CompiledModel, end: int) -> set[int]:
    """The steps whose results step `end` reads, directly or not (itself included)."""
    steps = model.program.steps
    producer = {model.root[o]: s for s, step in enumerate(steps) for o in step.written}
    feeding, todo = set(), [end]
    while todo:
        s = todo.pop()
        if s in feeding:
            continue
        feeding.add(s)
        todo += [producer[r] for a in step_tensors(steps[s], include_output=False) if (r := model.root[a]) in producer]
    return feeding


def plan_training(model: CompiledModel, opts: TrainOptions) -> TrainPlan:
    g = model.graph
    weighted = _weighted_steps(model)
    loss = resolve_loss(model, opts)
    output = chosen_output(model, opts)
    logits, logits_step = _logits(model, loss, output)
    # Layers on another output's branch never change the loss: last/all pick among those feeding it.
    feeding = _feeding_steps(model, logits_step)
    if not opts.train.startswith("layers:"):
        weighted_feeding = [s for s in weighted if s in feeding]
        if not weighted_feeding:
            raise UnsupportedModelError(
                g.name or "model",
                [f"no layer with constant int8 weights feeds output '{g.tensors[output].name}' (the loss reads it)"],
            )
        weighted = weighted_feeding
    layers = _select_layers(model, opts, weighted)
    for s in layers:
        if s not in feeding:
            raise OptionsError(
                f"--train: layer {model.program.steps[s].op.where(g)} does not feed output "
                f"'{g.tensors[output].name}' (the loss reads it), so it cannot be trained; choose another "
                "layer or that layer's output with --output"
            )
    dropped: list[int] = []

    def layer_params(s: int) -> int:
        step = model.program.steps[s]
        bias = step.args[2]
        n = 0 if opts.biases_only else model.storage(step.args[1]).num_elements
        return n + (model.storage(bias).num_elements if bias is not None else 0)

    if opts.max_params is not None:
        while layers and sum(layer_params(s) for s in layers) > opts.max_params:
            dropped.append(layers.pop(0))
        if not layers:
            raise OptionsError(
                f"--max-params {opts.max_params}: even the last selected layer alone has "
                f"{layer_params(dropped[-1])} trainable parameters"
            )
    tensors: list[TrainableTensor] = []
    clamped = 0
    seen: set[int] = set()
    for s in layers:
        step = model.program.steps[s]
        w, b = model.root[step.args[1]], step.args[2]
        if not opts.biases_only and w not in seen:
            data = model.storage(w).data
            assert data is not None  # _weighted_steps keeps the layers with constant weights
            w_max = spec.INT8_WEIGHT_LIMIT - opts.eps  # +-eps perturbations must never wrap
            values = np.clip(data, -w_max, w_max).astype(np.int8)
            clamped += int(np.count_nonzero(values != data))
            tensors.append(TrainableTensor(w, g.tensors[w].name, step.op.index, False, values, stream=0))
            seen.add(w)
        if b is not None and model.root[b] not in seen:
            rb = model.root[b]
            if model.storage(rb).dtype not in ("int32", "int64"):
                raise OptionsError(
                    f"{step.op.where(g)}: bias is {model.storage(rb).dtype}; only int32 and int64 biases train"
                )
            eps = _bias_eps(model, step)
            max_step = opts.bias_bound * int(eps.max())
            if max_step > 2**31 - 1:  # an int32_t field of the trainer
                raise OptionsError(
                    f"--bias-bound {opts.bias_bound}: the bias step bound of op {step.op.index} "
                    f"would be {opts.bias_bound} x {int(eps.max())} = {max_step}, past int32; "
                    f"use at most {(2**31 - 1) // int(eps.max())}"
                )
            bias = model.storage(rb).data
            assert bias is not None  # a weighted op's bias is a constant argument (its op table)
            tensors.append(
                TrainableTensor(
                    rb,
                    g.tensors[rb].name,
                    step.op.index,
                    True,
                    bias.astype(model.storage(rb).dtype),
                    stream=0,
                    eps_b=eps,
                    max_step=max_step,
                )
            )
            seen.add(rb)
    if not tensors:
        raise OptionsError("the selected layers have nothing to train (biases only, but they have no bias)")
    for k, t in enumerate(tensors):
        t.stream = k
    trainable_roots = {t.index for t in tensors}
    split = min(
        s
        for s, step in enumerate(model.program.steps)
        if any(a is not None and not isinstance(a, tuple) and model.root[a] in trainable_roots for a in step.args)
    )
    prefix_state = _state_check(model, weighted, split, logits_step + 1)
    boundary = _boundary(model, split, logits_step + 1)
    logits_quant = model.storage(logits).quant
    assert logits_quant is not None  # _logits refuses an unquantized logits tensor
    plan = TrainPlan(
        tensors=tensors,
        split=split,
        logits_end=logits_step + 1,
        logits=logits,
        classes=model.storage(logits).num_elements,
        logits_scale=logits_quant.scale,
        logits_zp=logits_quant.zero_point,
        loss=loss,
        boundary=boundary,
        clamped=clamped,
        batch=opts.batch,
        q_buffer=opts.q_buffer,
        layers=[model.program.steps[s].op.index for s in layers],
        dropped_layers=[model.program.steps[s].op.index for s in dropped],
        prefix_state=prefix_state,
    )
    verify_training_plan(model, plan)
    return plan


def verify_training_plan(model: CompiledModel, plan: TrainPlan) -> None:
    """The plan's invariants (zoflash's own mistakes, raised as InternalError naming what broke):
    the prefix reads no trainable tensor, the suffix gets every activation it reads from the prefix
    through the boundary, the boundary lies in the arena without overlaps, the logits come from the
    suffix's last step, and each trainable tensor is a constant of its values' shape."""

    def fail(what: str):
        raise InternalError("the training plan", what)

    steps = model.program.steps
    if not 0 <= plan.split < plan.logits_end <= len(steps):
        fail(f"prefix [0, {plan.split}) and suffix [{plan.split}, {plan.logits_end}) of {len(steps)} steps")
    trainable = {t.index for t in plan.tensors}
    for step in steps[: plan.split]:
        if trainable & {model.root[a] for a in step_tensors(step, include_output=False)}:
            fail(f"op {step.op.index} {step.op.type} in the frozen prefix reads a trainable tensor")
    for t in plan.tensors:
        data = model.storage(t.index).data
        if data is None or data.shape != t.values.shape or model.root[t.index] != t.index:
            fail(f"trainable tensor {t.index} '{t.name}' is not a constant of shape {list(t.values.shape)}")
    written = {model.root[i] for i in model.graph.inputs}
    for step in steps[: plan.split]:
        written.update(model.root[o] for o in step_tensors(step) if o in step.written)
    spans = {b.index for b in plan.boundary}
    for step in steps[plan.split : plan.logits_end]:
        for a in step_tensors(step, include_output=False):
            r = model.root[a]
            if r in written and not model.storage(r).is_constant and r not in spans:
                fail(
                    f"op {step.op.index} {step.op.type} reads '{model.storage(r).name}' from the prefix past the boundary"
                )
    end = -1
    for b in sorted(plan.boundary, key=lambda b: b.offset):
        if b.offset < end or b.offset + b.nbytes > model.arena_size or b.nbytes != model.storage(b.index).nbytes:
            fail(
                f"the boundary span of '{model.storage(b.index).name}' at {b.offset} (+{b.nbytes} bytes) overlaps "
                f"another or leaves the arena ({model.arena_size} bytes)"
            )
        end = b.offset + b.nbytes
    if model.root[plan.logits] not in {model.root[t] for t in steps[plan.logits_end - 1].written}:
        fail(f"the logits '{model.storage(plan.logits).name}' are not written by the suffix's last step")


def _state_steps(model: CompiledModel) -> list[int]:
    """The steps reading or writing a state (a variable tensor, kept across invokes)."""
    return [
        s
        for s, step in enumerate(model.program.steps)
        if any(model.graph.tensors[model.root[t]].is_variable for t in step_tensors(step))
    ]


def _state_check(model: CompiledModel, weighted: list[int], split: int, end: int) -> bool:
    """Whether the frozen prefix keeps state; a state the trained part reads or writes, or that only
    steps after the loss's output update, is refused (the same decision for every engine, since
    each one plans through here).  The prefix's state evolves sample by sample as on the device."""
    stateful = _state_steps(model)
    if not stateful:
        return False
    g = model.graph
    inside = [s for s in stateful if split <= s < end]
    if inside:
        op = model.program.steps[inside[0]].op
        later = [s for s in weighted if s > max(inside)]
        fix = (
            f"train only layers after it (--train last:{len(later)})"
            if later
            else "no layer with weights comes after it, so the model cannot train"
        )
        raise UnsupportedModelError(
            g.name or "model",
            [
                f"{op.where(g)} keeps state across invokes and would be in the trained part of the model "
                f"(training needs a stateless trained part): {fix}, or build without --data for inference"
            ],
        )
    after = [s for s in stateful if s >= end]
    if after:
        op = model.program.steps[after[0]].op
        raise UnsupportedModelError(
            g.name or "model",
            [
                f"{op.where(g)} updates the model's state after the output the loss reads: training never "
                "runs it, so the state would not evolve as on the device; build without --data for inference"
            ],
        )
    return True


def _boundary(model: CompiledModel, split: int, end: int) -> list[BoundarySpan]:
    written = {model.root[i] for i in model.graph.inputs}
    for step in model.program.steps[:split]:
        written.update(model.root[o] for o in step.outputs)
    spans: dict[int, BoundarySpan] = {}
    for step in model.program.steps[split:end]:
        for a in step_tensors(step, include_output=False):
            r = model.root[a]
            if r in written and not model.storage(r).is_constant and r not in spans:
                spans[r] = BoundarySpan(r, model.arena_offset[r], model.storage(r).nbytes)
    return sorted(spans.values(), key=lambda b: b.offset)
