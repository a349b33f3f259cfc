"""Warnings before training: data and options that train, but probably not as the user meant.

Each warning is one line: what is wrong, then the option (or the data) that fixes it.
compile_training collects them (CompiledTraining.warnings); the workflows say them before anything
trains (simulate, run, build with --data) and hand them back (SimulationResult.warnings,
Compiled.warnings). The thresholds are here, each with why.
"""

from __future__ import annotations

import numpy as np

from zoflash.compiler.quant import SATURATION_WARNING, input_real_range
from zoflash.spec import options as table
from zoflash.spec import training as spec
from zoflash.training.dataset import Dataset
from zoflash.training.options import TrainOptions
from zoflash.training.plan import TrainPlan

# The validation split promises VAL_MIN_COUNT samples (validation_indices tops a smaller split up,
# but to at most half the data): its loss drives the guards and the best-weight snapshot, and the
# mean of fewer samples is mostly noise.
VAL_MIN_COUNT = spec.VAL_MIN_COUNT
# mse targets the int8 output cannot reach pull it to saturation; a few outliers are normal, more
# than this share means targets in other units than the output's.
TARGETS_OUTSIDE_SHARE = 0.1


def lr_trial_fits(opts: TrainOptions, split: int) -> bool:
    """Whether the lr trial runs: its worst case (LR_TRIAL_MAX_MOVES + 2 candidates) must be at most
    1 / LR_TRIAL_SHARE of the budget, or of the steps. The firmware's rule (zo_lr.c lr_trial_fits,
    reference/trainer.py _lr_trial_fits); `split`: the plan's frozen prefix length (a prefix adds a
    pass per sample)."""
    steps = opts.lr_trial_steps * (spec.LR_TRIAL_MAX_MOVES + 2)
    if opts.budget:
        return steps * opts.batch * ((1 if split > 0 else 0) + 2) * spec.LR_TRIAL_SHARE <= opts.budget
    return opts.max_steps == 0 or steps * spec.LR_TRIAL_SHARE <= opts.max_steps


def training_warnings(
    data: Dataset, opts: TrainOptions, plan: TrainPlan, input_quant: tuple[float | None, int | None, str]
) -> list[str]:
    """Every warning for this data, these options and this plan, in the order a user would fix them.
    `input_quant`: the model input's (scale, zero point, type)."""
    out = []
    src = data.source
    n = len(data.y_train)
    if data.labels:
        labels = np.unique(data.y_train)
        if len(labels) == 1:
            out.append(
                f"{src}: every training sample has label {int(labels[0])}: the model can only learn to answer "
                f"{int(labels[0])}; give --data with samples of at least two classes in y_train"
            )
    n_val = 0 if data.y_val is None else len(data.y_val)
    if n_val < VAL_MIN_COUNT:
        out.append(
            f"{src}: the validation split has {n_val} sample(s), fewer than the {VAL_MIN_COUNT} the guards and "
            f"the best-weight snapshot need for a loss that is not noise; give --data with at least "
            f"{2 * VAL_MIN_COUNT} training samples (or raise --val-fraction, now {opts.val_fraction:g})"
        )
    for array, share in data.saturated.items():
        if share > SATURATION_WARNING:
            lo, hi = input_real_range(*input_quant)
            out.append(
                f"{src}: {100 * share:.1f}% of {array}'s values fall outside the model input's range "
                f"[{lo:.4g}, {hi:.4g}] and saturate at its limits; give --data with x in the input's real units "
                "(e.g. [0, 1] pixels, not 0..255)"
            )
    if n < opts.batch:
        out.append(
            f"{src}: {n} training samples for a batch of {opts.batch}: every step draws samples more than once; "
            f"lower --batch to at most {n}"
        )
    if data.t_train is not None:
        lo, hi = (plan.logits_scale * (v - plan.logits_zp) for v in (-128, 127))
        outside = float(np.mean((data.t_train < lo) | (data.t_train > hi)))
        if outside > TARGETS_OUTSIDE_SHARE:
            out.append(
                f"{src}: {100 * outside:.0f}% of the training targets lie outside the output's range "
                f"[{lo:.4g}, {hi:.4g}]; give --data with y in the output's real units"
            )
    if opts.lr == 0:
        out.append(
            f"{table.BY_NAME['lr'].named} 0: every update is scaled by 0, so the weights never change; "
            "give --lr > 0 or auto"
        )
    if opts.lr_trial and opts.data_source == "embedded" and not lr_trial_fits(opts, plan.split):
        worst = opts.lr_trial * (spec.LR_TRIAL_MAX_MOVES + 2)
        run = f"--budget {opts.budget} passes" if opts.budget else f"--steps {opts.max_steps}"
        out.append(
            f"{table.BY_NAME['lr_trial'].named} {opts.lr_trial}: the trial's worst case ({spec.LR_TRIAL_MAX_MOVES + 2} "
            f"candidates x {opts.lr_trial} steps = {worst} steps) is more than 1/{spec.LR_TRIAL_SHARE} of the run "
            f"({run}), so it does not run; lower --lr-trial or raise " + ("--budget" if opts.budget else "--steps")
        )
    return out
