"""The Python reference of the training loop: docs/training.md in NumPy, written independently of
the C (zo_trainer.c). It emits the same telemetry frames as the firmware, so both engines go
through the same decoder and their logs can be compared field by field.

Float32 discipline: every float is an np.float32 scalar or array and every sum is a sequential
Python loop in the order the spec gives (NumPy's pairwise `sum` would round differently).
The forward pass is the NumPy reference kernels (reference/forward.py), run on whole
minibatches; the frozen prefix is computed once per training sample, since it cannot change.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from zoflash.reference import zo_math as zm
from zoflash.reference.forward import ReferenceForward
from zoflash.reference.schedulers import Scheduler
from zoflash.spec import training as spec
from zoflash.spec import wire
from zoflash.spec.wire import Encoder, UpdateLog

# The product's objects arrive as arguments and are read by duck typing: the reference imports
# nothing of the product it checks (only the training contract and the wire format).
CompiledModel = Dataset = TrainOptions = TrainPlan = Any

F32 = np.float32
SQRT2 = F32(1.41421354)
DONE_STEPS, DONE_BUDGET, DONE_SCHEDULER, DONE_DEAD_ZONE, DONE_GUARD, DONE_COMMAND = (
    spec.DONE_REASON_IDS[r] for r in ("steps", "budget", "scheduler", "dead-zone", "guard", "command")
)
EVENT_SCHEDULER, EVENT_LR, EVENT_ROLLBACK = (spec.EVENT_KINDS[k] for k in ("scheduler", "lr", "rollback"))
LR_TRIAL, LR_CHOSEN = spec.LR_EVENT_CODE_IDS["trial"], spec.LR_EVENT_CODE_IDS["chosen"]
ROLLBACK_GUARD, ROLLBACK_LOSS, ROLLBACK_END = (spec.ROLLBACK_CAUSE_IDS[c] for c in ("guard", "loss", "end"))
FLAG = spec.STEP_FLAGS
VALUES, RESIDUAL, BEST = (spec.WEIGHTS_PARTS.index(p) for p in ("values", "residual", "best-values"))


class RunSettings(NamedTuple):
    """What the reference derives from the options itself (not from the product's properties)."""

    density_log2: int  # density = 2^-density_log2
    lr_auto: bool  # lr None: calibrate
    max_steps: int  # 0: no step limit (a budget)


def run_settings(opts: TrainOptions) -> RunSettings:
    max_steps = opts.steps if opts.steps is not None else (0 if opts.budget is not None else spec.DEFAULT_STEPS)
    return RunSettings(round(-math.log2(opts.density)), opts.lr is None, max_steps)


def scheduler_params(opts: TrainOptions, n_train: int) -> dict:
    """The scheduler's parameters as this reference reads the options: the user's, the q range
    from --q/--q-min/--q-max, and what the trainer sets (critical's density p, adazeta's epoch)."""
    params = dict(opts.sched)
    given_q = {"q0": opts.q, "q_min": opts.q_min, "q_max": opts.q_max}
    params.update((k, v) for k, v in given_q.items() if k in spec.SCHED_DEFAULTS[opts.scheduler])
    if opts.scheduler == "critical":
        params["p"] = F32(1.0) / F32(1 << run_settings(opts).density_log2)
    if opts.scheduler == "adazeta":
        params["steps_per_epoch"] = max(1, math.ceil(n_train / opts.batch))
    return params


def resolve_loss(opts: TrainOptions, outputs: int) -> str:
    """--loss auto as this reference reads it: mse against the input, sigmoid-bce for one output,
    else softmax-ce."""
    if opts.loss != "auto":
        return opts.loss
    if opts.target == "input":
        return "mse"
    return "sigmoid-bce" if outputs == 1 else "softmax-ce"


def lr_at_q(lr1: np.float32, q: int, scaling: str) -> np.float32:
    if scaling == "fixed":
        return F32(lr1)
    if scaling == "linear":
        return F32(F32(lr1) * F32(q))
    k = int(q).bit_length() - 1
    g = F32(2.0 ** (k // 2))
    if k % 2:
        g = F32(g * SQRT2)
    return F32(F32(lr1) * g)


def lr_decay_factor(decay: str, t: int, passes: int, budget: int | None, max_steps: int) -> np.float32:
    """The lr's factor at step t after `passes` training passes (docs/training.md "Learning rate")."""
    if decay == "none":
        return F32(1)
    f = F32(passes) / F32(budget) if budget else F32(t) / F32(max_steps)
    if decay == "linear":
        return F32(1) - f if f < 1 else F32(0)
    if decay == "tail":
        div = F32(spec.LR_DECAY_TAIL_DIV)
        return F32(1) if f < F32(1) - F32(1) / div else F32(F32(1) - f) * div if f < 1 else F32(0)
    return F32(1) if f < F32(0.5) else F32(0.1) if f < F32(0.75) else F32(0.01)


class ReferenceTrainer:
    def __init__(self, model: CompiledModel, plan: TrainPlan, opts: TrainOptions, data: Dataset, model_sha256: str):
        self.model, self.plan, self.opts, self.data = model, plan, opts, data
        self.sha = bytes.fromhex(model_sha256[:16])
        self.settings = run_settings(opts)
        self.fwd = ReferenceForward(model)
        self.tm = Encoder()
        self.ulog = UpdateLog(self.tm, opts.eps)
        g = model.graph
        self.input_root = model.root[g.inputs[0]]
        # trainable state: flat arrays in plan order
        self.values = [t.values.reshape(-1).copy() for t in plan.tensors]
        self.stop_requested = False  # set between frames: the run ends before its next step (reason "command")
        self.residual = [None if t.is_bias else np.zeros(t.count, np.int8) for t in plan.tensors]
        self.shapes = [model.storage(t.index).data.shape for t in plan.tensors]
        self.sched = Scheduler(opts.scheduler, **scheduler_params(opts, len(data.y_train)))
        self.loss = resolve_loss(opts, plan.classes)
        if self.loss == "mse":  # float32 targets per sample: the data's, or the input dequantized
            q_in = g.tensors[g.inputs[0]].quant
            self.t_train, self.t_val, self.t_test = (
                np.asarray(t, F32)
                if t is not None
                else (
                    F32(q_in.scale) * (x.reshape(len(x), -1).astype(np.int32) - np.int32(q_in.zero_point)).astype(F32)
                )
                for x, t in ((data.x_train, data.t_train), (data.x_val, data.t_val), (data.x_test, data.t_test))
            )
        # A model keeping state (in the prefix: the plan refuses it elsewhere) runs its prefix on
        # every pass, in the device's order, so that the state evolves sample by sample as there.
        self.stateful = bool(self.fwd.state)
        # else the frozen prefix, once per training sample: boundary root index -> [N, bytes]
        self.features = {} if self.stateful else self._prefix(data.x_train)
        self.prefix_passes = self.suffix_passes = self.eval_passes = 0
        self.t0 = time.monotonic()

    # ---- helpers ---------------------------------------------------------------------------

    def _time_us(self) -> int:
        return int((time.monotonic() - self.t0) * 1e6)

    def _weights(self) -> dict[int, np.ndarray]:
        return {t.index: v.reshape(s) for t, v, s in zip(self.plan.tensors, self.values, self.shapes)}

    def _perturb(self, sign: int, t: int, i: int) -> None:
        o = self.opts
        sign = sign * o.eps
        for k, tt in enumerate(self.plan.tensors):
            if tt.is_bias:
                self.values[k] = zm.perturb_bias(
                    self.values[k], sign, tt.eps_b.reshape(-1), o.seed, t, i, tt.stream, self.settings.density_log2
                )
            else:
                self.values[k] = zm.perturb_s8(
                    self.values[k], sign, o.seed, t, i, tt.stream, self.settings.density_log2
                )

    def _loss(self, out: np.ndarray, labels: np.ndarray, targets: np.ndarray | None) -> np.ndarray:
        """Per-sample float32 losses of the outputs [B, classes] (int8, or int16 in 16x8 models)."""
        scale, zp = F32(self.plan.logits_scale), self.plan.logits_zp
        if self.loss == "sigmoid-bce":
            return zm.sigmoid_bce(out[:, 0], scale, zp, labels)
        if self.loss == "mse":
            return zm.mse(out, scale, zp, targets)
        return np.asarray(zm.cross_entropy(out, scale, zp, labels), F32).reshape(-1)

    def _saturated(self, out: np.ndarray, labels: np.ndarray, targets: np.ndarray | None) -> int:
        """Outputs at their type's extremes (-128 or 127 for int8); for sigmoid-bce and mse only those
        saturated away from the target."""
        hi, lo = out == np.iinfo(out.dtype).max, out == np.iinfo(out.dtype).min
        if self.loss == "sigmoid-bce":
            one = (np.asarray(labels) != 0).reshape(-1, 1)
            hi, lo = hi & ~one, lo & one
        elif self.loss == "mse":
            x = F32(self.plan.logits_scale) * (out.astype(np.int32) - np.int32(self.plan.logits_zp)).astype(F32)
            hi, lo = hi & (targets < x), lo & (targets > x)
        return int(np.count_nonzero(hi | lo))

    def _settled(self, out: np.ndarray, labels: np.ndarray, targets: np.ndarray | None) -> np.ndarray:
        """Per sample: every output saturated towards its target (never for softmax-ce)."""
        hi, lo = out == np.iinfo(out.dtype).max, out == np.iinfo(out.dtype).min
        if self.loss == "sigmoid-bce":
            one = (np.asarray(labels) != 0).reshape(-1, 1)
            towards = (hi & one) | (lo & ~one)
        elif self.loss == "mse":
            x = F32(self.plan.logits_scale) * (out.astype(np.int32) - np.int32(self.plan.logits_zp)).astype(F32)
            towards = (hi & (targets >= x)) | (lo & (targets <= x))
        else:
            towards = np.zeros_like(hi)
        return towards.all(axis=1)

    def _prefix(self, x: np.ndarray) -> dict[int, np.ndarray]:
        """The boundary activations of samples x (in order): root index -> [len(x), bytes]."""
        env = self.fwd.run({self.model.graph.inputs[0]: x}, 0, self.plan.split)
        return {b.index: env[b.index] for b in self.plan.boundary}

    def _outputs(self, env: dict, first: int) -> np.ndarray:
        """The output the loss reads, [B, classes], running [first, logits_end)."""
        out = self.fwd.run({}, first, self.plan.logits_end, env, self._weights())[self.plan.logits]
        return out.reshape(len(out), -1)

    def _losses(self, env: dict, labels: np.ndarray, targets: np.ndarray | None) -> tuple[np.ndarray, int, np.ndarray]:
        """Suffix on the minibatch: per-sample float32 losses, the saturated output count and which
        samples are settled."""
        out = self._outputs(env, self.plan.split)
        self.suffix_passes += len(labels)
        return (
            self._loss(out, labels, targets),
            self._saturated(out, labels, targets),
            self._settled(out, labels, targets),
        )

    def _frame(self, frame_type: str, **fields) -> bytes:
        return self.tm.frame(frame_type, fields)

    def _event(self, step, kind, code, s_from, s_to, q_from, q_to, value, aux) -> bytes:
        return self._frame(
            "event",
            step=step,
            kind=kind,
            code=code,
            state_from=s_from,
            state_to=s_to,
            q_from=q_from,
            q_to=q_to,
            value=value,
            aux=aux,
        )

    def _evaluate_split(
        self, x: np.ndarray, y: np.ndarray, targets: np.ndarray | None
    ) -> tuple[int, np.float32, int, np.float32]:
        """Correct answers, mean loss, saturated logits and the mean loss's standard error of one
        split, samples in order."""
        out = self._outputs({self.input_root: x.reshape(len(x), -1)}, 0)
        total, squares = F32(0.0), F32(0.0)
        for v in self._loss(out, y, targets):
            total = F32(total + v)
            squares = F32(squares + F32(F32(v) * F32(v)))
        if self.loss == "sigmoid-bce":  # sigmoid(x) > 0.5 is class 1
            correct = int(np.count_nonzero((out[:, 0].astype(np.int32) > self.plan.logits_zp) == (y != 0)))
        elif self.loss == "mse":  # no accuracy
            correct = 0
        else:
            correct = int(np.count_nonzero(zm.argmax(out) == y))
        self.eval_passes += len(y)
        n = F32(len(y))
        mean = F32(total / n)
        var = F32(F32(squares / n) - F32(mean * mean))
        se = np.sqrt(F32(var / n)) if var > 0 else F32(0)
        return correct, mean, self._saturated(out, y, targets), se

    def _evaluate(self, steps_done: int) -> tuple[bytes, np.float32, int, np.float32]:
        """The eval frame (validation, then test), the validation loss, its saturated logits and its
        standard error: the guards and the snapshots see only the validation split."""
        mse = self.loss == "mse"
        d = self.data
        v_correct, v_loss, v_sat, v_se = self._evaluate_split(d.x_val, d.y_val, self.t_val if mse else None)
        correct, loss, _, _ = self._evaluate_split(d.x_test, d.y_test, self.t_test if mse else None)
        n, n_val = len(d.y_test), len(d.y_val)
        return (
            self._frame(
                "eval",
                step=steps_done,
                correct=correct,
                count=n,
                accuracy=F32(correct) / F32(n),
                loss=loss,
                prefix_passes=self.prefix_passes,
                suffix_passes=self.suffix_passes,
                eval_passes=self.eval_passes,
                time_us=self._time_us(),
                val_correct=v_correct,
                val_count=n_val,
                val_accuracy=F32(v_correct) / F32(n_val),
                val_loss=v_loss,
            ),
            v_loss,
            v_sat,
            v_se,
        )

    # ---- one step ----------------------------------------------------------------------------

    def _n_train(self) -> int:
        """The sampler's n: the data's training samples, or the stream ring's slots."""
        return self.opts.buffer if self.opts.data_source == "stream" else len(self.data.y_train)

    def _sample_indices(self, t: int) -> np.ndarray:
        """The training samples of step t's minibatch.  --data-source stream: the sampler draws a
        ring slot s; before step t the ring holds stream samples [t*R, N + t*R) (N slots, R new per
        step), slot s the one congruent to s mod N; stream sample k is training sample k % n."""
        o = self.opts
        slots = np.asarray(zm.sample_index(o.seed, t, np.arange(o.batch, dtype=np.uint32), self._n_train()))
        if o.data_source != "stream":
            return slots
        first = t * o.refresh
        k = first + (slots.astype(np.int64) - first) % o.buffer
        return k % len(self.data.y_train)

    def _step(self, t: int, q: int, centre: bool) -> dict:
        o, b = self.opts, self.opts.batch
        idx = self._sample_indices(t)
        labels = self.data.y_train[idx]
        targets = self.t_train[idx] if self.loss == "mse" else None
        env = self._prefix(self.data.x_train[idx]) if self.stateful else {r: f[idx] for r, f in self.features.items()}
        if self.plan.split > 0:
            self.prefix_passes += b
        saturated = 0
        l0 = None
        if centre:
            l0, s, _ = self._losses(env, labels, targets)
            saturated += s
        half = F32(F32(0.5) / F32(o.eps))
        loss_sum, m2_sum, v_sum, k_sum = F32(0), F32(0), F32(0), F32(0)
        zeros = 0
        self.delta = []
        for i in range(q):
            self._perturb(+1, t, i)
            lp, s1, settled = self._losses(env, labels, targets)
            self._perturb(-2, t, i)
            lm, s2, _ = self._losses(env, labels, targets)
            self._perturb(+1, t, i)
            saturated += s1 + s2
            dsum = F32(0)
            for j in range(b):
                dsum = F32(dsum + F32(F32(lp[j] - lm[j]) * half))
            delta = F32(dsum / F32(b))
            ssum = F32(0)
            for j in range(b):
                e = F32(F32(F32(lp[j] - lm[j]) * half) - delta)
                ssum = F32(ssum + F32(e * e))
            vi = F32(F32(ssum / F32(b - 1)) / F32(b)) if b > 1 else F32(0)
            for j in range(b):
                zeros += int(lp[j] == lm[j] and not settled[j])
                loss_sum = F32(loss_sum + lp[j])
                loss_sum = F32(loss_sum + lm[j])
                if centre:
                    k_sum = F32(k_sum + F32(F32(lp[j] + lm[j]) - F32(F32(2.0) * l0[j])))
            self.delta.append(delta)
            m2_sum = F32(m2_sum + F32(delta * delta))
            v_sum = F32(v_sum + vi)
        passes = (2 * q + int(centre)) * b
        return dict(
            loss=F32(loss_sum / F32(2 * q * b)),
            m2=F32(m2_sum / F32(q)),
            v=F32(v_sum / F32(q)),
            zero_frac=F32(F32(zeros) / F32(q * b)),
            sat_frac=F32(F32(saturated) / F32(F32(passes) * F32(self.plan.classes))),
            kappa=F32(k_sum / F32(q * b)) if centre else F32(0),
            passes=passes,
        )

    def _auto_step_lsb(self, rho: np.float32, p: np.float32) -> np.float32:
        """Auto lr: RMS step in LSB, rho but at most max(1, w_rms / LR_W_RMS_DIV / sqrt(p)) (w_rms:
        the trainable int8 weights' RMS, from an exact integer sum of squares; p: direction density)."""
        weights = [v for v, tt in zip(self.values, self.plan.tensors) if not tt.is_bias]
        n = sum(len(v) for v in weights)
        if n == 0:
            return rho
        sq = sum(int(np.sum(v.astype(np.int64) ** 2)) for v in weights)
        by_w = F32(F32(np.sqrt(F32(F32(sq) / F32(n))) / F32(spec.LR_W_RMS_DIV)) / np.sqrt(p))
        bound = by_w if by_w > F32(1) else F32(1)
        return rho if rho < bound else bound

    def _update(self, t: int, q: int, lr: np.float32) -> np.ndarray:
        """Applies the step's update with its coefficients as binary16; returns their bits (logged)."""
        o = self.opts
        c16, c = zm.coefficients(lr, self.delta, q)
        for k, tt in enumerate(self.plan.tensors):
            if tt.is_bias:
                self.values[k] = zm.update_bias(
                    self.values[k],
                    c,
                    tt.eps_b.reshape(-1),
                    tt.max_step,
                    o.seed,
                    t,
                    tt.stream,
                    self.settings.density_log2,
                )
            else:
                self.values[k], self.residual[k] = zm.update_s8(
                    self.values[k],
                    self.residual[k],
                    c,
                    o.seed,
                    t,
                    tt.stream,
                    self.settings.density_log2,
                    o.rounding,
                    w_max=spec.INT8_WEIGHT_LIMIT - o.eps,
                )
        return c16

    # ---- lr trial (docs/training.md "lr trial") -------------------------------------------------

    def _lr_trial_fits(self) -> bool:
        """Whether the trial's worst case (LR_TRIAL_MAX_MOVES + 2 candidates) is at most
        1 / LR_TRIAL_SHARE of the budget, or of the steps."""
        o = self.opts
        steps = o.lr_trial_steps * (spec.LR_TRIAL_MAX_MOVES + 2)
        if o.budget:
            return steps * o.batch * ((1 if self.plan.split > 0 else 0) + 2) * spec.LR_TRIAL_SHARE <= o.budget
        return self.settings.max_steps == 0 or steps * spec.LR_TRIAL_SHARE <= self.settings.max_steps

    def _lr_trial(self, t: int, lr1: np.float32, snapshot: tuple, frames: list) -> tuple[int, np.float32]:
        """Candidates lr1 * 2^j, each lr_trial_steps steps at q = 1 from the snapshot on the seeds
        of steps t .. t + T - 1, judged by the validation loss; j climbs from 0 while it improves,
        else descends.  Returns the step after the trial and the chosen lr_1; the weights are the
        snapshot's again."""
        o, t0, state = self.opts, t, self.sched.state

        def candidate(lr: np.float32) -> np.float32:
            nonlocal t
            self._restore(snapshot)
            sat_run = zero_run = 0
            for i in range(o.lr_trial_steps):
                st = self._step(t0 + i, 1, False)
                self._update(t0 + i, 1, lr)
                if sent := self.ulog.step(t, wire.UPDATE_TRIAL):
                    frames.append(sent)
                sat_run, zero_run, diverged = self._guard_runs(st, sat_run, zero_run)
                frames.append(
                    self._frame(
                        "step",
                        step=t,
                        q=1,
                        state=state,
                        flags=FLAG["trial"] | (FLAG["diverged"] if diverged else 0),
                        lr=lr,
                        loss=st["loss"],
                        m2=st["m2"],
                        v=st["v"],
                        zero_frac=st["zero_frac"],
                        sat_frac=st["sat_frac"],
                        prefix_passes=self.prefix_passes,
                        suffix_passes=self.suffix_passes,
                        time_us=self._time_us(),
                    )
                )
                t += 1
                if diverged:
                    return F32(np.inf)
            d = self.data
            return self._evaluate_split(d.x_val, d.y_val, self.t_val if self.loss == "mse" else None)[1]

        def trial(j: int) -> np.float32:
            loss = candidate(lr_at_q(F32(lr1 * F32(2.0**j)), 1, o.lr_scaling))
            frames.append(self._event(t0, EVENT_LR, LR_TRIAL, state, state, 1, 1, loss, j & 0xFFFFFFFF))
            return loss

        best_j, best = 0, trial(0)
        for direction in (1, -1):
            for j in range(direction, direction * (spec.LR_TRIAL_MAX_MOVES + 1), direction):
                loss = trial(j)
                if not loss < best:
                    break
                best, best_j = loss, j
            if best_j != 0:
                break
        self._restore(snapshot)
        self.ulog.mark(wire.UPDATE_RESTORE)
        # the short-horizon best is too greedy, and more so before a long run
        chosen = F32(F32(lr1 * F32(2.0 ** (best_j - spec.LR_TRIAL_BACKOFF))) * self._lr_trial_horizon_factor())
        frames.append(self._event(t - 1, EVENT_LR, LR_CHOSEN, state, state, 1, 1, chosen, t - t0))
        return t, chosen

    def _lr_trial_horizon_factor(self) -> np.float32:
        """sqrt(lr_trial_horizon * P / H) when below 1: P one candidate's passes, H the run's (its
        budget, else its steps at q = 1); 1 without either, or with lr_trial_horizon 0 (the C's
        lr_trial_horizon_factor)."""
        o = self.opts
        if o.lr_trial_horizon == 0:
            return F32(1.0)
        per_step = F32(F32(o.batch) * F32((1 if self.plan.split > 0 else 0) + 2))
        candidate = F32(F32(o.lr_trial_steps) * per_step)
        horizon = F32(o.budget) if o.budget else F32(F32(self.settings.max_steps) * per_step)
        ratio = F32(F32(F32(o.lr_trial_horizon) * candidate) / horizon) if horizon > 0 else F32(1.0)
        return F32(np.sqrt(ratio)) if ratio < 1 else F32(1.0)

    def _ends_worse_than_best(self, best_loss: np.float32) -> bool:
        """The C's ends_worse_than_best: the validation loss now above the best's + guard_loss_z
        standard errors (the validation-loss guard on, not a fleet device)."""
        o, d = self.opts, self.data
        if o.fleet or not o.guard_loss > 0:
            return False
        _, loss, _, se = self._evaluate_split(d.x_val, d.y_val, self.t_val if self.loss == "mse" else None)
        return bool(loss > F32(best_loss + F32(F32(o.guard_loss_z) * se)))

    def _restore(self, snapshot: tuple) -> None:
        self.values = [v.copy() for v in snapshot[0]]
        self.residual = [None if r is None else r.copy() for r in snapshot[1]]

    def _guard_runs(self, st: dict, sat_run: int, zero_run: int) -> tuple[int, int, bool]:
        """The saturation and dead-zone runs after a step, and whether either reached guard_steps."""
        o = self.opts
        sat_run = sat_run + 1 if st["sat_frac"] >= F32(o.guard_sat) else 0
        zero_run = zero_run + 1 if st["zero_frac"] >= F32(o.guard_zero) else 0
        return sat_run, zero_run, sat_run >= o.guard_steps or zero_run >= o.guard_steps

    def _snapshot(self) -> tuple:
        return [v.copy() for v in self.values], [None if r is None else r.copy() for r in self.residual]

    def boundary_crc32(self) -> int:
        """zlib's CRC-32 of the boundary activations of the first test sample (the boundary tensors in
        the plan's order, each in its C layout): what the device's boundary frame reports."""
        x = self.data.x_test[:1]
        env = self.fwd.run({self.model.graph.inputs[0]: x}, 0, self.plan.split)
        crc = 0
        for b in self.plan.boundary:
            crc = zlib.crc32(np.ascontiguousarray(env[b.index][0]).tobytes(), crc)
        return crc

    # ---- the run -------------------------------------------------------------------------------

    def frames(self) -> Iterator[bytes]:
        """The whole run as telemetry frames (the bytes the firmware would write)."""
        o, plan = self.opts, self.plan
        yield self._frame(
            "hello",
            seed=o.seed,
            batch=o.batch,
            classes=plan.classes,
            n_train=self._n_train(),
            n_test=len(self.data.y_test),
            trainable_params=plan.params,
            scheduler=spec.SCHEDULER_IDS[o.scheduler],
            rounding=spec.ROUNDING_IDS[o.rounding],
            density_log2=self.settings.density_log2,
            lr_auto=int(self.settings.lr_auto),
            lr=F32(0.0) if self.settings.lr_auto else F32(o.lr),
            max_steps=self.settings.max_steps,
            budget=o.budget or 0,
            q_max=o.q_max,
            n_tensors=len(plan.tensors),
            model_sha256=self.sha,
            loss_kind=spec.LOSS_IDS[self.loss],
            headroom=int(o.headroom),
        )
        if plan.split > 0:  # --- boundary checksum: the first test sample's prefix, once
            yield self._frame(
                "boundary", crc32=self.boundary_crc32(), expected_crc32=0, bytes=plan.boundary_bytes, boundary_flags=0
            )
        lr1 = F32(o.lr or 0.0)
        frame, best_loss, _, _ = self._evaluate(0)
        yield frame
        snapshot, snapshot_step = self._snapshot(), 0
        # a snapshot is good only with few saturated validation logits (< guard_sat / 2)
        sat_good = F32(F32(F32(F32(o.guard_sat) * F32(0.5)) * F32(len(self.data.y_val))) * F32(plan.classes))
        rollbacks = 0

        def rollback():
            nonlocal lr1, sat_run, zero_run, rollbacks
            self._restore(snapshot)
            self.ulog.mark(wire.UPDATE_RESTORE)
            lr1 = F32(lr1 * F32(0.5))
            sat_run = zero_run = 0
            rollbacks += 1

        calib = o.calib_steps if self.settings.lr_auto else 0
        m2_calib = F32(0)
        sat_run = zero_run = 0
        t, last_eval, reason = 0, True, DONE_STEPS
        while True:
            if self.stop_requested:  # as the C serves a stop command: before the step, then the usual end
                reason = DONE_COMMAND
                break
            if t == calib and o.lr_trial_steps and o.data_source == "embedded" and self._lr_trial_fits():
                trial_frames: list = []
                t, lr1 = self._lr_trial(t, lr1, snapshot, trial_frames)
                sat_run = zero_run = 0
                yield from trial_frames
                continue
            calibrating = t < calib
            q = o.calib_q if calibrating else self.sched.q
            centre = (not calibrating) and self.sched.wants_centre()
            lr = F32(0) if calibrating else lr_at_q(lr1, q, o.lr_scaling)
            if not calibrating and o.lr_decay != "none":
                lr = F32(
                    lr
                    * lr_decay_factor(
                        o.lr_decay, t, self.prefix_passes + self.suffix_passes, o.budget, self.settings.max_steps
                    )
                )
            state = self.sched.state
            st = self._step(t, q, centre)
            if calibrating:
                sent = self.ulog.step(t, 0)
            else:
                sent = self.ulog.step(t, wire.UPDATE_APPLIED, self._update(t, q, lr))
            if sent:
                yield sent
            diverged = False
            if not calibrating:
                sat_run, zero_run, diverged = self._guard_runs(st, sat_run, zero_run)
                if diverged:
                    rollback()
            flags = (
                (FLAG["calibrating"] if calibrating else 0)
                | (FLAG["centre"] if centre else 0)
                | (FLAG["diverged"] if diverged else 0)
            )
            yield self._frame(
                "step",
                step=t,
                q=q,
                state=state,
                flags=flags,
                lr=lr,
                loss=st["loss"],
                m2=st["m2"],
                v=st["v"],
                zero_frac=st["zero_frac"],
                sat_frac=st["sat_frac"],
                prefix_passes=self.prefix_passes,
                suffix_passes=self.suffix_passes,
                time_us=self._time_us(),
            )
            ev = None
            if not calibrating:
                obs = dict(
                    step=t,
                    q=q,
                    passes=st["passes"],
                    loss=st["loss"],
                    m2=st["m2"],
                    v=st["v"],
                    has_kappa=centre,
                    kappa=st["kappa"],
                    diverged=diverged,
                    lr=lr,
                )
                q_next, ev = self.sched.observe(obs)
                if diverged and q_next != q:
                    # a rollback answered by a larger q still halves the lr used at q, not only lr_1
                    ratio = F32(lr_at_q(F32(1.0), q, o.lr_scaling) / lr_at_q(F32(1.0), q_next, o.lr_scaling))
                    lr1 = F32(lr1 * ratio)
            if diverged:
                yield self._event(t, EVENT_ROLLBACK, ROLLBACK_GUARD, state, state, q, q, lr1, snapshot_step)
            if calibrating:
                m2_calib = F32(m2_calib + st["m2"])
                if t + 1 == calib:
                    m2_calib = F32(m2_calib / F32(calib))
                    if not m2_calib > 0:
                        reason, last_eval = DONE_DEAD_ZONE, False
                        t += 1
                        break
                    p = F32(F32(1.0) / F32(1 << self.settings.density_log2))
                    lr1 = F32(self._auto_step_lsb(F32(o.rho), p) * np.sqrt(F32(p / m2_calib)))
                    yield self._event(t, EVENT_LR, 0, state, state, q, q, lr1, calib)
            elif ev is not None:
                yield self._event(
                    t, EVENT_SCHEDULER, ev.code, ev.state_from, ev.state_to, ev.q_from, ev.q_to, F32(0), 0
                )
            t += 1
            last_eval = False
            if t % o.eval_every == 0:
                frame, loss, eval_sat, loss_se = self._evaluate(t)
                yield frame
                last_eval = True
                limit = F32(F32(best_loss * F32(o.guard_loss)) + F32(F32(o.guard_loss_z) * loss_se))
                if not calibrating and o.guard_loss > 0 and loss > limit:
                    rollback()  # the validation loss ran away from the best so far, beyond its noise
                    last_eval = False  # the weights changed: a run ending here evaluates them again
                    yield self._event(t - 1, EVENT_ROLLBACK, ROLLBACK_LOSS, state, state, q, q, lr1, snapshot_step)
                elif loss < best_loss and sat_run == 0 and zero_run == 0 and F32(eval_sat) < sat_good:
                    best_loss = loss  # the last good state
                    snapshot, snapshot_step = self._snapshot(), t
                    self.ulog.mark(wire.UPDATE_SNAPSHOT)
            if o.guard_max_rollbacks and rollbacks >= o.guard_max_rollbacks:
                reason = DONE_GUARD
                break
            if self.settings.max_steps and t >= self.settings.max_steps:
                reason = DONE_STEPS
                break
            if o.budget and self.prefix_passes + self.suffix_passes >= o.budget:
                reason = DONE_BUDGET
                break
            if not calibrating and self.sched.should_stop():
                reason = DONE_SCHEDULER
                break
        # the run ends on its best weights when its validation loss is above the best's beyond the
        # noise; the restore must be in the update log, which marks it on the last step it holds
        restored = self._ends_worse_than_best(best_loss) and self.ulog.mark(wire.UPDATE_RESTORE)
        if restored:
            self._restore(snapshot)
            q, state = self.sched.q, self.sched.state
            yield self._event(max(t - 1, 0), EVENT_ROLLBACK, ROLLBACK_END, state, state, q, q, lr1, snapshot_step)
        if sent := self.ulog.flush():
            yield sent
        if not last_eval or restored:
            yield self._evaluate(t)[0]
        for tt, v, r in zip(plan.tensors, self.values, self.residual):
            yield self.tm.weights(tt.index, VALUES, v.astype(tt.values.dtype.newbyteorder("<")).tobytes())
            if r is not None:
                yield self.tm.weights(tt.index, RESIDUAL, r.tobytes())
        for tt, v in zip(plan.tensors, snapshot[0]):  # the best values: the last good snapshot
            yield self.tm.weights(tt.index, BEST, v.astype(tt.values.dtype.newbyteorder("<")).tobytes())
        crc, size = wire.tensors_crc((v, tt.values.dtype) for tt, v in zip(plan.tensors, self.values))
        yield self._frame("crc", step=t, crc32=crc, bytes=size, pushed=0)
        yield self._frame(
            "done",
            steps=t,
            reason=reason,
            prefix_passes=self.prefix_passes,
            suffix_passes=self.suffix_passes,
            time_us=self._time_us(),
        )
