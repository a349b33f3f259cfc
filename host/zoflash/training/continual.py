"""--mode continual: the controller's configuration and memory (docs/guides/continual.md).

The options the user sets are in spec/options.py (mode, duty, holdout; --steps is an episode's
length, --buffer the training ring, --q the directions per step).  The statistics' constants are
here, each with why; the generated <prefix>_continual.c carries them into zo_cl_config_t
(firmware_templates/runtime/continual/zo_continual.h).
"""

from __future__ import annotations

from zoflash.spec import training as spec

CONTINUAL_RUNTIME = "continual"  # firmware_templates/runtime/continual/
CONTINUAL_TEMPLATE = "model_continual.c.j2"

# Page-Hinkley on the deployed weights' per-sample loss (units of 2^-8 nats, zo_drift.h), in units
# of the loss's own standard deviation, floored.  A cross-entropy loss is clipped at 4 nats so one
# confident mistake moves it by at most 4.  The floor (1.25 nats) makes an accurate model's rare,
# heavy-tailed mistakes count at a fixed scale; above it (a struggling model, about 1.6 nats at 60 %
# mistakes) the thresholds widen with the spread.  delta 1/8 sd per sample is the change ignored,
# lambda 38 sd the alarm: at the floor 40 and 12160 units (0.16 nats, 47.5 nats).  Trials on
# synthetic losses (tests/test_continual_c.py) and on the tuning streams:
# research/2026-12-05-continual-detector.md.
PH_FRAC = 8
PH_CLIP = 4 << PH_FRAC
PH_DELTA = 32  # 1/8 sd
PH_LAMBDA = 38 * 256  # 38 sd
PH_MIN_SD = 320  # 1.25 nats
PH_WARMUP = 200  # samples after a reset: the new baseline's mean and spread settle first
# The second detector, on the output margin (top output minus the runner-up, in output LSB, units of
# 1/16: every sample, labelled or not): shifts that change how sure the model is without changing
# its loss much.  The same rule in sd units, floored at 8 LSB.
MARGIN_FRAC = 4
MARGIN_CLIP = 255 << MARGIN_FRAC
MARGIN_DELTA = PH_DELTA
MARGIN_LAMBDA = PH_LAMBDA
MARGIN_MIN_SD = 8 << MARGIN_FRAC
ALPHA_LOG2 = 5  # the paired test's level for a candidate: 2^-5 = 3.1 %, one-sided
# ... and for the factory weights against adapted ones: 2^-3 = 12.5 %.  Returning to the weights the
# device shipped with is the safe direction, so it needs less evidence than a new candidate.
ROLLBACK_ALPHA_LOG2 = 3
HOLDOUT_EVERY = 4  # every 4th labelled sample is held back (never trained on)
WINDOW = 100  # a serving-accuracy frame every 100 labelled samples


def duty_q16(duty: float) -> int:
    return max(1, min(65536, round(duty * 65536)))


def episode_steps(opts) -> int:
    return opts.steps if opts.steps is not None else spec.DEFAULT_STEPS


def payload_bytes(plan) -> int:
    """The trainable bytes in the snapshot layout: values, then the residuals of int8 weights."""
    return int(plan.memory()["snapshot_bytes"])


def memory(plan, opts, input_bytes: int) -> dict:
    """The continual controller's memory, beside the training loop's (size report, fit check)."""
    payload = payload_bytes(plan)
    return {
        "training_ring_bytes": opts.buffer * (input_bytes + 2),
        "holdout_ring_bytes": opts.holdout * (input_bytes + 2),
        "candidate_bytes": payload,
        "factory_bytes": payload,
        "ab_slots_bytes": 2 * (16 + payload),
    }


def template_context(plan, opts, input_bytes: int, detector: bool = True) -> dict:
    """The context of model_continual.c.j2.  detector False: only shift marks start episodes (the
    stream benchmark's oracle)."""
    config = {
        "duty_q16": f"{duty_q16(opts.duty)}u",
        "episode_steps": f"{episode_steps(opts)}u",
        "holdout_every": f"{HOLDOUT_EVERY}u",
        "alpha_log2": f"{ALPHA_LOG2}u",
        "rollback_alpha_log2": f"{ROLLBACK_ALPHA_LOG2}u",
        "window": f"{WINDOW}u",
        "q": f"{opts.q}u",
        "detector": "1u" if detector else "0u",
    }
    ph = {"delta": PH_DELTA, "lambda": PH_LAMBDA, "clip": PH_CLIP, "min_sd": PH_MIN_SD, "warmup": f"{PH_WARMUP}u"}
    margin = {
        "delta": MARGIN_DELTA,
        "lambda": MARGIN_LAMBDA,
        "clip": MARGIN_CLIP,
        "min_sd": MARGIN_MIN_SD,
        "warmup": f"{PH_WARMUP}u",
    }
    return dict(
        slots=opts.buffer,
        hslots=opts.holdout,
        input_bytes=input_bytes,
        payload_bytes=payload_bytes(plan),
        config=list(config.items()),
        ph=list(ph.items()),
        margin=list(margin.items()),
    )
