"""The training spec: every id, name, default and limit that the options, the CLI, the code
generator, the firmware C, the telemetry decoder and the Python reference share.

Plain data, no imports from the rest of zoflash: the product and the reference both read it,
and tests/test_spec.py checks the C headers (firmware_templates/runtime/zo_*.h) against it.
An id is a name's position in its tuple unless a dict gives it. The C name of an id is
C_PREFIX[table] + the name in upper case, '-' as '_' (c_name below).
"""

from __future__ import annotations

# ---------------------------------------------------------------------------- scheduler

SCHEDULERS = ("fixed", "plateau", "critical", "adazeta")  # zo_sched_kind_t
SCHEDULER_IDS = {name: i for i, name in enumerate(SCHEDULERS)}

# zo_sched_state_t (also the `state` of step, event and status frames)
STATES = (
    "FIXED",  # fixed: q = q0 forever
    "WARMUP",  # plateau: first window, no best loss yet
    "MONITOR",  # plateau: judging windows against the best loss
    "COOLDOWN",  # plateau: first window after doubling q
    "CAPPED",  # plateau, adazeta: q == q_max
    "DIVERGE",  # plateau, critical: first window after a rollback
    "CALIBRATE",  # critical: the first calib_steps steps at calib_q (no window yet)
    "TRACK",  # critical: following the confirmed target q*
    "RAMP",  # adazeta: open-loop growth per epoch
    "HOLD",
)  # plateau, critical: the last raise of q brought no significant gain: q is not raised
STATE_IDS = {name: i for i, name in enumerate(STATES)}

# zo_sched_event_code_t: what one observation means (the `code` of scheduler telemetry events)
EVENTS = (
    "NONE",  # no observation yet
    "STEP",  # nothing closed or due
    "DIVERGED",  # the trainer rolled the step back (plateau, critical)
    "WINDOW_FIRST",  # plateau: first window closed
    "IMPROVED",  # plateau: mean beat best by > tau*best and z * both windows' se
    "STALE",  # plateau: no improvement, patience left
    "PATIENCE",  # plateau: no improvement for `patience` windows
    "RISE",  # plateau: mean > best * (1 + rise), significant (counts as stale)
    "COOLED",  # plateau, critical: the window after a change closed
    "CALIBRATED",  # critical: calib_steps observations done
    "TARGET_HOLD",  # critical: target == q
    "TARGET_PENDING",  # critical: target != q, not confirmed yet
    "TARGET_UP",  # critical: target > q confirmed `confirm` times
    "TARGET_DOWN",  # critical: target < q confirmed `confirm` times
    "EPOCH_HOLD",  # adazeta: new epoch, target == q
    "EPOCH_UP",  # adazeta: new epoch, target > q
    "EPOCH_DOWN",  # adazeta: new epoch, target < q
    "NO_GAIN",
)  # plateau: patience ran out at a q whose raise brought no improvement;
# critical: a raise is due but the last one did not raise the decrease per pass
EVENT_IDS = {name: i for i, name in enumerate(EVENTS)}

# Actions of a transition-table row: name k is bit 1 << k (ZO_ACT_*), applied in bit order.
ACTIONS = (
    "TARGET",  # critical: store q*, the judged pending target and its count
    "COUNT_CLEAR",  # critical: count = 0
    "PENDING_CLEAR",  # critical: pending = none, count = 0
    "BEST_SET",  # plateau: best = window mean
    "BEST_MIN",  # plateau: best = min(best, mean)
    "STALE_INC",
    "STALE_CLEAR",
    "STOP",  # plateau: stop if stop_when_capped
    "DOUBLE",  # q = min(2q, q_max)
    "HALVE",  # q = max(q/2, q_min)
    "WINDOW_RESET",  # drop the open window
    "GAINED",
)  # plateau: a significant improvement since the last raise of q
ACTION_BITS = {name: 1 << k for k, name in enumerate(ACTIONS)}

Q_LIMIT = 64  # q_max may not exceed this (the statistics buffers): ZO_SCHED_Q_LIMIT

# User-facing parameters per kind with their defaults (q0/q_min/q_max come from the training
# options).  None: filled later (plateau rise = 5 * tau in float32; adazeta steps_per_epoch =
# ceil(n_train / batch), from the trainer).
_Q = {"q0": 1, "q_min": 1, "q_max": Q_LIMIT}
SCHED_DEFAULTS: dict[str, dict] = {
    "fixed": dict(_Q),
    "plateau": {
        **_Q,
        "tau": 0.01,
        "z": 2.0,
        "patience": 2,
        "rise": None,
        "window_passes": 4096,
        "window_min_steps": 16,
        "window_max_steps": 128,
        "stop_when_capped": False,
    },
    "critical": {
        "q_min": 1,
        "q_max": Q_LIMIT,
        "c": 1.0,
        "z": 2.0,
        "floor": 0.05,
        "centre_every": 8,
        "calib_steps": 8,
        "calib_q": 8,
        "confirm": 2,
        "window_passes": 1024,
        "window_min_steps": 16,
        "window_max_steps": 128,
    },
    "adazeta": {**_Q, "alpha": 1.0, "beta": 1.0, "steps_per_epoch": None},
}
# Limits of the other parameters, as intervals of their (float32 or integer) values; None is
# allowed where the default is None.  q0, q_min, q_max (and critical's calib_q) are powers of two
# with q_min <= q0 (calib_q) <= q_max <= Q_LIMIT.
SCHED_LIMITS = {
    "window_passes": "[1, inf)",
    "window_min_steps": "[1, inf)",
    "window_max_steps": "[1, inf)",
    "tau": "[0, inf)",
    "z": "[0, inf)",
    "rise": "[0, inf)",
    "patience": "[1, inf)",
    "c": "(0, inf)",
    "floor": "(0, 1]",
    "p": "(0, 1]",
    "centre_every": "[1, inf)",
    "calib_steps": "[1, inf)",
    "confirm": "[1, inf)",
    "alpha": "(0, inf)",
    "beta": "(-inf, inf)",
    "steps_per_epoch": "[1, inf)",
}
SCHED_Q_PARAMS = ("q0", "q_min", "q_max")  # set with --q, --q-min, --q-max, not as scheduler parameters
SCHED_TRAINER_PARAMS = {"critical": {"p": 1.0}}  # set by the trainer (p = density 2^-L), not by users
SCHED_FLOAT_PARAMS = frozenset({"tau", "z", "rise", "c", "floor", "p", "alpha", "beta"})
SCHED_RISE_PER_TAU = 5  # plateau: rise defaults to 5 * tau

# zo_sched_config_t, in field order (fields a kind does not use are 0).
SCHED_CONFIG_FIELDS = (
    "kind",
    "q0",
    "q_min",
    "q_max",
    "window_passes",
    "window_min_steps",
    "window_max_steps",
    "tau",
    "z",
    "rise",
    "patience",
    "stop_when_capped",
    "c",
    "floor",
    "p",
    "centre_every",
    "calib_steps",
    "calib_q",
    "confirm",
    "alpha",
    "beta",
    "steps_per_epoch",
)

# ---------------------------------------------------------------------------- training step

ROUNDINGS = ("split16", "nearest", "stochastic")  # zo_rounding_t: int8 update rounding
ROUNDING_IDS = {name: i for i, name in enumerate(ROUNDINGS)}
LR_SCALINGS = ("sqrt", "linear", "fixed")  # zo_lr_scaling_t: lr at q from lr at q = 1
LR_SCALING_IDS = {name: i for i, name in enumerate(LR_SCALINGS)}
# --- lr decay: zo_lr_decay_t, the lr's factor over the run (fraction f of the budget,
# or of --steps): none 1; linear 1 - f; step 1, then 0.1 from f = 1/2, 0.01 from f = 3/4; tail 1, then
# linear to 0 over the last 1 / LR_DECAY_TAIL_DIV of the run (the default: docs/training.md "lr decay")
LR_DECAYS = ("none", "linear", "step", "tail")
LR_DECAY_TAIL_DIV = 5  # ZO_LR_DECAY_TAIL_DIV: tail decays over the last fifth
LR_DECAY_IDS = {name: i for i, name in enumerate(LR_DECAYS)}
# --- end lr decay
# --- lr trial: before training, candidates lr_1 * 2^j (|j| <= LR_TRIAL_MAX_MOVES) train
# lr_trial steps at q = 1 from the same weights on the same minibatches; the lowest validation loss
# picks the best candidate, and training runs at that rate / 2^LR_TRIAL_BACKOFF: the best rate over
# a short horizon is larger than the best over the whole run (docs/training.md "lr trial").  It runs
# only when its worst case, LR_TRIAL_MAX_MOVES + 2 candidates, is at most 1 / LR_TRIAL_SHARE of the
# budget (or of the steps).
LR_TRIAL_STEPS = 64  # the default for the adaptive schedulers with embedded data
LR_TRIAL_MAX_MOVES = 3  # ZO_LR_TRIAL_MAX_MOVES
LR_TRIAL_SHARE = 4  # ZO_LR_TRIAL_SHARE
LR_TRIAL_BACKOFF = 1  # ZO_LR_TRIAL_BACKOFF: the chosen lr_1 is the best candidate's / 2^this,
LR_TRIAL_HORIZON = 128  # --lr-trial-horizon default: ... times sqrt(this * candidate passes / run passes) if < 1
# --- end lr trial
# Training losses (zo_loss_t; the hello frame's `loss`), of the dequantized int8 output
# x = scale * (q - zero_point): softmax-ce (zo_cross_entropy_s8, labels 0..classes-1),
# sigmoid-bce (zo_sigmoid_bce, one output, labels 0/1), mse (zo_mse_s8, float targets).
LOSSES = ("softmax-ce", "sigmoid-bce", "mse")
LOSS_IDS = {name: i for i, name in enumerate(LOSSES)}
LOSS_CHOICES = ("auto",) + LOSSES  # auto: mse for --target input, sigmoid-bce for one output, else softmax-ce
TARGETS = ("labels", "input")  # what the loss compares the output with: y of the data, or the sample's input

# ---------------------------------------------------------------------------- training options

# TRAIN_DEFAULTS (every option's default): spec/options.py, the table of the training options.
# ---- data sources: where the training samples come from (docs/training.md "Data sources") ----
DATA_SOURCES = ("embedded", "stream", "app")  # embedded: built in; stream: fed over the serial link; app: pushed
BUFFER_RANGE = (1, 65535)  # --buffer: ring slots
# ---- end data sources ----
# --- continual adaptation (docs/guides/continual.md): train once, or serve a stream and adapt in the field
MODES = ("oneshot", "continual", "fleet")
HOLDOUT_RANGE = (8, 4096)  # --holdout: held-back samples of the paired test
# auto lr: the first updates move the int8 weights by min(rho, max(1, w_rms / LR_W_RMS_DIV)) LSB RMS
# per step (w_rms: RMS of the trainable int8 weights at the start): ZO_LR_W_RMS_DIV
LR_W_RMS_DIV = 32
DEFAULT_STEPS = 500  # when neither steps nor budget is given
BATCH_RANGE = (1, 1024)
EPS_RANGE = (1, 8)  # LSB; trainable int8 weights stay in [-(127 - eps), 127 - eps]
INT8_WEIGHT_LIMIT = 127  # w_max = INT8_WEIGHT_LIMIT - eps
DENSITY_LOG2_MAX = 4  # density 1, 1/2, ..., 1/16
# --density auto: directions with at most this many nonzero entries (dense up to this many trainable
# values, so every classifier head of the demos and the benchmarks stays dense); larger layers get
# 1/2, 1/4, ... down to 1/2^DENSITY_LOG2_MAX (research/2026-12-05-auto-density-large-fc.md)
AUTO_DENSITY_NONZEROS = 16384
HEADROOM_MAX = 4  # bits
HEADROOM_AUTO_LSB = 6.0  # --headroom auto: the trainable int8 weights keep an RMS of at least this many LSB
SEED_LIMIT = 2**32  # seeds are uint32
# --- validation split
VAL_FRACTION_RANGE = (0.0, 0.5)  # (lo, hi]: the split must not starve the training set
VAL_MIN_COUNT = 8  # fewer validation samples are topped up to this (at most half the data)

# ---------------------------------------------------------------------------- telemetry ids

STEP_FLAGS = {"calibrating": 0x01, "centre": 0x02, "diverged": 0x04, "trial": 0x08}  # step frame `flags` (ZO_TM_FLAG_*)
EVENT_KINDS = {"scheduler": 1, "lr": 2, "rollback": 3, "stop": 4}  # event frame `kind` (ZO_TM_EV_*)
# --mode fleet: a round's local training ended (aux: its steps); `code`: all its steps, or cut short by
# guard_max_rollbacks rollbacks (the weights are then the round's global weights)
EVENT_KINDS["round"] = 5
ROUND_END_CODES = ("steps", "rollbacks")
LR_EVENT_CODES = ("calibrated", "trial", "chosen")  # lr event `code` (ZO_TM_LR_*): auto lr, lr trial
LR_EVENT_CODE_IDS = {name: i for i, name in enumerate(LR_EVENT_CODES)}
ROLLBACK_CAUSES = ("guard", "loss", "end")  # rollback event `code`: guard run, validation loss over best * guard_loss,
# or a run that ended with a validation loss above its best beyond the noise (it ends on the best)
ROLLBACK_CAUSE_IDS = {name: i for i, name in enumerate(ROLLBACK_CAUSES)}
DONE_REASONS = ("steps", "budget", "scheduler", "command", "dead-zone", "guard")  # done `reason`
DONE_REASON_IDS = {name: i for i, name in enumerate(DONE_REASONS)}
WEIGHTS_PARTS = ("values", "residual", "best-values")  # weights frame `part` (best: the snapshot, by validation)
COMMANDS = {"pause": 16, "resume": 17, "status": 18, "dump": 19, "stop": 20}  # host -> device frame types
# ---- data sources (docs/training.md "Data sources") ----
COMMANDS["sample"] = 21  # a chunk of a training sample (--data-source stream), answered by a need frame
# ---- end data sources ----
COMMANDS["restore"] = 22  # --- checkpoint and resume: a chunk of a checkpoint image
COMMANDS["push"] = 30  # --- push: a chunk of another run's update log to apply (zoflash push)
# --- fleet learning (--mode fleet): train a round's local steps; a chunk of a round's merged log to apply
COMMANDS["round"] = 31
COMMANDS["merge"] = 32
# --- end fleet learning
COMMAND_FIRST = 16  # frame types below are telemetry, never commands
ACK_RESULTS = ("ok", "ignored", "unknown", "refused")  # ack `result` (refused: restore of another build)
# --- boundary checksum: boundary frame `flags` (ZO_TM_BOUNDARY_*)
BOUNDARY_FLAGS = {"expected": 0x01, "npu": 0x02}  # expected: the host simulation's CRC is baked in

# ---------------------------------------------------------------------------- C names

C_PREFIX = {
    "SCHEDULERS": "ZO_SCHED_",
    "STATES": "ZO_ST_",
    "EVENTS": "ZO_EV_",
    "ACTIONS": "ZO_ACT_",
    "ROUNDINGS": "ZO_ROUND_",
    "LR_SCALINGS": "ZO_LR_",
    "LR_DECAYS": "ZO_LR_DECAY_",
    "LOSSES": "ZO_LOSS_",
    "DONE_REASONS": "ZO_TM_DONE_",
    "STEP_FLAGS": "ZO_TM_FLAG_",
    "EVENT_KINDS": "ZO_TM_EV_",
    "ROLLBACK_CAUSES": "ZO_TM_ROLLBACK_",
    "LR_EVENT_CODES": "ZO_TM_LR_",
    "WEIGHTS_PARTS": "ZO_TM_PART_",
    "COMMANDS": "ZO_CMD_",
    "ACK_RESULTS": "ZO_TM_ACK_",
    "BOUNDARY_FLAGS": "ZO_TM_BOUNDARY_",  # boundary checksum
}


def c_name(table: str, name: str) -> str:
    """The C constant of a spec name: c_name("ROUNDINGS", "split16") == "ZO_ROUND_SPLIT16"."""
    return C_PREFIX[table] + name.upper().replace("-", "_")
