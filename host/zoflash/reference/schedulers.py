"""The q schedulers (fixed, plateau, critical, adazeta): the independent NumPy float32 model of
firmware_templates/runtime/training/zo_sched.c, bit for bit.  Rules: docs/training.md, "Schedulers".

Each scheduler is a state machine driven by a transition table (Python data below; the state,
event and action ids are those of the training spec, as in the C).  One observation is first
measured (window statistics, EMAs), then turned into one event, then (state, event) is looked
up: the row gives the actions and the next state (or the alternative one when q ends at q_max).
The model reads its parameters itself (config below), independently of the product's
training/schedulers.py that configures the C.

Every float operation is one np.float32 operation, in the C's order.

    s = make_scheduler("plateau", q0=1, tau=0.01)
    q, centre = s.q, s.wants_centre()
    q_next, event = s.observe(Obs(step=t, q=q, passes=..., loss=..., m2=..., v=...))
    if s.should_stop(): ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import NamedTuple

import numpy as np

from zoflash.reference import zo_math
from zoflash.spec import training as spec

F32 = np.float32
SQRT2 = F32(1.41421354)
CRIT_TOL = F32(1 - 1 / np.sqrt(2))  # critical: 1 - 1/sqrt(2) rounded to float32 (the C's CRIT_TOL)

FIXED_KIND, PLATEAU_KIND, CRITICAL_KIND, ADAZETA_KIND = (spec.SCHEDULER_IDS[k] for k in spec.SCHEDULERS)
FIXED, WARMUP, MONITOR, COOLDOWN, CAPPED, DIVERGE, CALIBRATE, TRACK, RAMP, HOLD = (
    spec.STATE_IDS[s] for s in spec.STATES
)
EV = IntEnum("EV", {name: i for i, name in enumerate(spec.EVENTS)})  # scheduler events (spec.EVENTS)
Act = IntFlag("Act", spec.ACTION_BITS)  # actions of a table row (spec.ACTIONS), applied in bit order

_DIV = Act.DOUBLE | Act.WINDOW_RESET
_GAIN = Act.BEST_SET | Act.STALE_CLEAR | Act.GAINED
NONE = Act(0)

# (state, event) -> (next state, next state if q == q_max afterwards, actions)
TABLES: dict[int, dict[tuple[int, int], tuple[int, int, Act]]] = {
    FIXED_KIND: {
        (FIXED, EV.STEP): (FIXED, FIXED, NONE),
    },
    PLATEAU_KIND: {
        (WARMUP, EV.STEP): (WARMUP, WARMUP, NONE),
        (WARMUP, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (WARMUP, EV.WINDOW_FIRST): (MONITOR, CAPPED, Act.BEST_SET),
        (MONITOR, EV.STEP): (MONITOR, CAPPED, NONE),
        (MONITOR, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (MONITOR, EV.IMPROVED): (MONITOR, CAPPED, _GAIN),
        (MONITOR, EV.STALE): (MONITOR, CAPPED, Act.BEST_MIN | Act.STALE_INC),
        (MONITOR, EV.PATIENCE): (COOLDOWN, CAPPED, Act.BEST_MIN | Act.STALE_CLEAR | Act.DOUBLE),
        (MONITOR, EV.RISE): (MONITOR, CAPPED, Act.STALE_INC),
        (MONITOR, EV.NO_GAIN): (HOLD, HOLD, Act.BEST_MIN | Act.STALE_CLEAR | Act.STOP),
        (COOLDOWN, EV.STEP): (COOLDOWN, COOLDOWN, NONE),
        (COOLDOWN, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (COOLDOWN, EV.COOLED): (MONITOR, CAPPED, Act.STALE_CLEAR),
        (CAPPED, EV.STEP): (CAPPED, CAPPED, NONE),
        (CAPPED, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (CAPPED, EV.IMPROVED): (CAPPED, CAPPED, _GAIN),
        (CAPPED, EV.STALE): (CAPPED, CAPPED, Act.BEST_MIN | Act.STALE_INC),
        (CAPPED, EV.PATIENCE): (CAPPED, CAPPED, Act.BEST_MIN | Act.STALE_CLEAR | Act.STOP),
        (CAPPED, EV.RISE): (CAPPED, CAPPED, Act.STALE_INC),
        (HOLD, EV.STEP): (HOLD, HOLD, NONE),
        (HOLD, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (HOLD, EV.IMPROVED): (HOLD, HOLD, _GAIN),
        (HOLD, EV.STALE): (HOLD, HOLD, Act.BEST_MIN | Act.STALE_INC),
        (HOLD, EV.PATIENCE): (HOLD, HOLD, Act.BEST_MIN | Act.STALE_CLEAR | Act.STOP),
        (HOLD, EV.RISE): (HOLD, HOLD, Act.STALE_INC),
        (DIVERGE, EV.STEP): (DIVERGE, DIVERGE, NONE),
        (DIVERGE, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.STALE_CLEAR),
        (DIVERGE, EV.COOLED): (MONITOR, CAPPED, Act.BEST_SET | Act.STALE_CLEAR),
    },
    CRITICAL_KIND: {
        (CALIBRATE, EV.STEP): (CALIBRATE, CALIBRATE, NONE),
        (CALIBRATE, EV.CALIBRATED): (TRACK, TRACK, NONE),
        (CALIBRATE, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.PENDING_CLEAR),
        (TRACK, EV.STEP): (TRACK, TRACK, NONE),
        (TRACK, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.PENDING_CLEAR),
        (TRACK, EV.TARGET_HOLD): (TRACK, TRACK, Act.TARGET),
        (TRACK, EV.TARGET_PENDING): (TRACK, TRACK, Act.TARGET),
        (TRACK, EV.TARGET_UP): (TRACK, TRACK, Act.TARGET | Act.COUNT_CLEAR | Act.DOUBLE),
        (TRACK, EV.TARGET_DOWN): (TRACK, TRACK, Act.TARGET | Act.COUNT_CLEAR | Act.HALVE),
        (TRACK, EV.NO_GAIN): (HOLD, HOLD, Act.TARGET | Act.COUNT_CLEAR),
        (HOLD, EV.STEP): (HOLD, HOLD, NONE),
        (HOLD, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.PENDING_CLEAR),
        (HOLD, EV.TARGET_HOLD): (HOLD, HOLD, Act.TARGET),
        (HOLD, EV.TARGET_PENDING): (HOLD, HOLD, Act.TARGET),
        (HOLD, EV.TARGET_DOWN): (HOLD, HOLD, Act.TARGET | Act.COUNT_CLEAR | Act.HALVE),
        (HOLD, EV.NO_GAIN): (HOLD, HOLD, Act.TARGET | Act.COUNT_CLEAR),
        (DIVERGE, EV.STEP): (DIVERGE, DIVERGE, NONE),
        (DIVERGE, EV.DIVERGED): (DIVERGE, DIVERGE, _DIV | Act.PENDING_CLEAR),
        (DIVERGE, EV.COOLED): (TRACK, TRACK, NONE),
    },
    ADAZETA_KIND: {
        (RAMP, EV.STEP): (RAMP, CAPPED, NONE),
        (RAMP, EV.EPOCH_HOLD): (RAMP, CAPPED, NONE),
        (RAMP, EV.EPOCH_UP): (RAMP, CAPPED, Act.DOUBLE),
        (RAMP, EV.EPOCH_DOWN): (RAMP, CAPPED, Act.HALVE),
        (CAPPED, EV.STEP): (CAPPED, CAPPED, NONE),
        (CAPPED, EV.EPOCH_HOLD): (CAPPED, CAPPED, NONE),
        (CAPPED, EV.EPOCH_DOWN): (RAMP, CAPPED, Act.HALVE),
    },
}

# first state, and the first state when q starts at q_max
INITIAL = {
    FIXED_KIND: (FIXED, FIXED),
    PLATEAU_KIND: (WARMUP, WARMUP),
    CRITICAL_KIND: (CALIBRATE, CALIBRATE),
    ADAZETA_KIND: (RAMP, CAPPED),
}


def config(kind, **params) -> dict:
    """This model's own reading of a scheduler's parameters (independent of the product's
    training/schedulers.py): every zo_sched_config_t field, defaults from the spec, floats as
    np.float32.  The values are taken as valid (the options validate them); an unknown kind or
    parameter, or adazeta without steps_per_epoch, raises ValueError."""
    name = spec.SCHEDULERS[kind] if isinstance(kind, (int, np.integer)) and 0 <= kind < len(spec.SCHEDULERS) else kind
    if name not in spec.SCHED_DEFAULTS:
        raise ValueError(f"unknown scheduler kind {kind!r}")
    p = {**spec.SCHED_DEFAULTS[name], **spec.SCHED_TRAINER_PARAMS.get(name, {})}
    unknown = set(params) - set(p) - set(spec.SCHED_Q_PARAMS)
    if unknown:
        raise ValueError(f"scheduler '{name}' has no parameter {', '.join(sorted(unknown))}")
    p.update(params)
    if name == "adazeta" and p["steps_per_epoch"] is None:
        raise ValueError("adazeta: steps_per_epoch must be given (ceil(n_train / batch))")
    if name == "plateau" and p["rise"] is None:
        p["rise"] = F32(spec.SCHED_RISE_PER_TAU) * F32(p["tau"])
    cfg = {f: F32(p.get(f, 0)) if f in spec.SCHED_FLOAT_PARAMS else int(p.get(f, 0)) for f in spec.SCHED_CONFIG_FIELDS}
    cfg["kind"] = spec.SCHEDULER_IDS[name]
    return cfg


# ---------------------------------------------------------------------------- the model


@dataclass
class Obs:
    """One step as the trainer saw it (zo_sched_obs_t)."""

    step: int = 0
    q: int = 0
    passes: int = 0
    loss: float = 0.0
    m2: float = 0.0
    v: float = 0.0
    has_kappa: bool = False
    kappa: float = 0.0
    diverged: bool = False
    lr: float = 0.0


class Event(NamedTuple):
    """A change of state or q (zo_sched_event_t)."""

    step: int
    code: int
    state_from: int
    state_to: int
    q_from: int
    q_to: int


class Scheduler:
    """One scheduler; see the module docstring.  Attributes mirror zo_sched_t."""

    def __init__(self, kind, **params):
        self.cfg = config(kind, **params)
        self.kind = self.cfg["kind"]
        self.table = TABLES[self.kind]
        c = self.cfg
        self.q = c["calib_q"] if self.kind == CRITICAL_KIND else c["q0"]
        self.state = INITIAL[self.kind][1 if self.q == c["q_max"] else 0]
        self.stop = False
        self.n_obs = 0
        self.last_event = EV.NONE
        self._window_reset()
        self.has_best, self.best, self.best_se2, self.stale = False, F32(0), F32(0), 0
        self.raised, self.gained = False, False
        self.c_m2, self.c_s, self.c_kappa, self.c_rse2 = F32(0), F32(0), F32(0), F32(-1)
        self.pending, self.count, self.q_star = 0, 0, F32(0)
        self.w_mean, self.w_se2 = F32(0), F32(0)
        self.base_mean, self.base_se2, self.base_gap = F32(0), F32(0), F32(0)
        self.base_rate, self.base_rate_se2, self.since_passes = F32(0), F32(0), 0
        self.last_window = None  # (passes, steps, mean, se2, critical's rse2 or None) of the last closed window

    # -- queries
    def wants_centre(self) -> bool:
        return self.kind == CRITICAL_KIND and self.n_obs % self.cfg["centre_every"] == 0

    def should_stop(self) -> bool:
        return self.stop

    def internal_state(self) -> dict:
        """Everything zo_sched_t holds besides the config (the tests compare it with the C)."""
        names = (
            "q",
            "state",
            "stop",
            "n_obs",
            "last_event",
            "w_passes",
            "w_steps",
            "w_sum",
            "w_sq",
            "w_mean",
            "w_se2",
            "has_best",
            "best",
            "best_se2",
            "stale",
            "raised",
            "gained",
            "w_m2",
            "w_s",
            "w_s2",
            "w_k",
            "w_k2",
            "w_kn",
            "c_m2",
            "c_s",
            "c_kappa",
            "c_rse2",
            "q_star",
            "pending",
            "count",
            "base_mean",
            "base_se2",
            "base_gap",
            "base_rate",
            "base_rate_se2",
            "since_passes",
        )
        return {
            n: (getattr(self, n) if isinstance(getattr(self, n), np.floating) else int(getattr(self, n))) for n in names
        }

    # -- one observation
    def observe(self, obs: Obs | Mapping) -> tuple[int, Event | None]:
        if isinstance(obs, Mapping):
            obs = Obs(**obs)
        before = (self.state, self.q)
        self.n_obs = (self.n_obs + 1) & 0xFFFFFFFF
        judged: dict = {}
        with np.errstate(all="ignore"):
            if self.kind in (PLATEAU_KIND, CRITICAL_KIND) and obs.diverged:
                event = EV.DIVERGED
            else:
                event = self._event(obs, judged)
        self.last_event = int(event)
        closed = "passes" in judged
        row = self.table.get((self.state, event))
        if row is not None:
            nxt, nxt_cap, acts = row
            self._apply(acts, judged)
            self.state = nxt_cap if self.q == self.cfg["q_max"] else nxt
        if closed:
            self.w_mean, self.w_se2 = judged["mean"], judged["se2"]
            if self.kind == CRITICAL_KIND:
                if not self.base_gap > 0:
                    self._segment_start(judged)  # the first window after calibration
                elif self.q <= before[1]:
                    self.since_passes += judged["passes"]  # (a raise started a new segment here)
                self.c_m2, self.c_s, self.c_kappa, self.c_rse2 = (judged[k] for k in ("m2", "sig", "kappa", "rse2"))
        if (self.state, self.q) == before:
            return self.q, None
        return self.q, Event(int(obs.step), int(event), before[0], self.state, before[1], self.q)

    # -- measurement and events
    def _window_reset(self):
        self.w_passes, self.w_steps, self.w_sum, self.w_sq = 0, 0, F32(0), F32(0)
        self.w_m2, self.w_s, self.w_s2, self.w_k, self.w_k2, self.w_kn = F32(0), F32(0), F32(0), F32(0), F32(0), 0

    @staticmethod
    def _mean_se2(total, sq, n):
        """(mean, squared standard error of the mean) of a window sum, as the C's mean_se2."""
        mean = total / n
        var = max(sq / n - mean * mean, F32(0))
        return mean, var / n

    def _critical_stats(self) -> dict:
        """The window's means of m2, m2 - v, kappa and the squared relative standard error of q*
        (-1: unknown: fewer than 2 centre steps, or kappa or m2 not > 0)."""
        n = F32(self.w_steps)
        st = {"m2": self.w_m2 / n, "kappa": F32(0), "rse2": F32(-1)}
        st["sig"], se2_s = self._mean_se2(self.w_s, self.w_s2, n)
        if self.w_kn < 2:
            return st
        st["kappa"], se2_k = self._mean_se2(self.w_k, self.w_k2, F32(self.w_kn))
        if not (st["kappa"] > 0 and st["m2"] > 0):
            return st
        rse2 = se2_k / (st["kappa"] * st["kappa"])
        if st["sig"] > self.cfg["floor"] * st["m2"]:
            rse2 = rse2 + se2_s / (st["sig"] * st["sig"])
        st["rse2"] = rse2
        return st

    def _window_add(self, obs: Obs):
        """Adds a kept step; returns the closed window's statistics (mean, se2, passes and for
        critical m2, sig, kappa, rse2) if it closed with it, else None."""
        c = self.cfg
        loss = F32(obs.loss)
        self.w_passes += int(obs.passes)
        self.w_steps += 1
        self.w_sum = self.w_sum + loss
        self.w_sq = self.w_sq + loss * loss
        if self.kind == CRITICAL_KIND:
            m2 = F32(obs.m2)
            sig = m2 - F32(obs.v)
            self.w_m2, self.w_s, self.w_s2 = self.w_m2 + m2, self.w_s + sig, self.w_s2 + sig * sig
            if obs.has_kappa:
                k = F32(obs.kappa)
                self.w_k, self.w_k2, self.w_kn = self.w_k + k, self.w_k2 + k * k, self.w_kn + 1
        if self.w_passes < c["window_passes"] or self.w_steps < c["window_min_steps"]:
            return None
        mean, se2 = self._mean_se2(self.w_sum, self.w_sq, F32(self.w_steps))
        open_ = self.w_steps < c["window_max_steps"]
        # plateau: grow the window until z * se <= tau * mean, or window_max_steps
        tol = c["tau"] * mean
        if self.kind == PLATEAU_KIND and open_ and (c["z"] * c["z"]) * se2 > tol * tol:
            return None
        out = {"mean": mean, "se2": se2, "passes": self.w_passes}
        if self.kind == CRITICAL_KIND:
            out.update(self._critical_stats())
            # critical: grow the window until z * rse(q*) <= 1 - 1/sqrt(2), or window_max_steps
            if open_ and not (out["rse2"] >= 0 and (c["z"] * c["z"]) * out["rse2"] <= CRIT_TOL * CRIT_TOL):
                return None
        self.last_window = (self.w_passes, self.w_steps, mean, se2, out.get("rse2"))
        self._window_reset()
        return out

    def _event(self, obs: Obs, judged: dict) -> int:
        if self.kind == FIXED_KIND:
            return EV.STEP
        if self.kind == ADAZETA_KIND:
            return self._epoch_event()
        if self.kind == CRITICAL_KIND and self.state == CALIBRATE:  # its windows start after calibration
            return EV.CALIBRATED if self.n_obs >= self.cfg["calib_steps"] else EV.STEP
        closed = self._window_add(obs)
        if closed is None:
            return EV.STEP
        judged.update(closed)
        if self.kind == CRITICAL_KIND:
            return EV.COOLED if self.state == DIVERGE else self._target_event(F32(obs.lr), judged)
        if self.state == WARMUP:
            return EV.WINDOW_FIRST
        if self.state in (COOLDOWN, DIVERGE):
            return EV.COOLED
        return self._plateau_event(closed["mean"], closed["se2"])

    def _plateau_event(self, mean, se2) -> int:
        c = self.cfg
        gain = self.best - mean
        z2se2 = (c["z"] * c["z"]) * (self.best_se2 + se2)
        if gain > c["tau"] * self.best and gain * gain > z2se2:
            return EV.IMPROVED
        if self.stale + 1 >= c["patience"]:
            return EV.NO_GAIN if self.state == MONITOR and self.raised and not self.gained else EV.PATIENCE
        if mean > self.best * (F32(1) + c["rise"]) and gain * gain > z2se2:
            return EV.RISE
        return EV.STALE

    def target(self, lr, st: Mapping) -> tuple[int, np.float32]:
        """critical: (rounded target, q*) of a window's statistics `st` (m2, sig, kappa, rse2) at
        lr; the target is q unless q* lies significantly beyond the threshold toward it (q* = 0:
        unknown)."""
        c = self.cfg
        if not st["rse2"] >= 0:
            return self.q, F32(0)
        with np.errstate(all="ignore"):
            d2 = c["floor"] * st["m2"]
            den = max(d2, st["sig"])  # d2 unless sig > d2: the C's sig > d2 ? sig : d2 (NaN too)
            q_star = ((c["c"] * F32(lr)) * st["kappa"]) * st["m2"] / (c["p"] * den)
            t = c["q_min"]
            while t < c["q_max"] and q_star >= F32(t) * SQRT2:
                t *= 2
            if t != self.q:
                thr = F32(self.q) * SQRT2 if t > self.q else F32(self.q) / SQRT2
                d = q_star - thr
                if not d * d > ((c["z"] * c["z"]) * st["rse2"]) * (q_star * q_star):
                    t = self.q
        return t, q_star

    def _rate(self, judged: Mapping) -> tuple[np.float32, np.float32]:
        """critical: the loss decrease per pass over the segment, from its first window's centre
        to the centre of the judged window, and its squared standard error."""
        dist = (self.base_gap + F32(self.since_passes)) + F32(0.5) * F32(judged["passes"])
        return (self.base_mean - judged["mean"]) / dist, (self.base_se2 + judged["se2"]) / (dist * dist)

    def _raise_gain(self, judged: Mapping) -> int:
        """critical: did the segment since the last raise decrease the loss faster per pass than
        the one before it?  1 by more than z combined standard errors, -1 not faster, 0 faster
        but not yet significantly."""
        z = self.cfg["z"]
        rate, se2 = self._rate(judged)
        d = rate - self.base_rate
        if not d > 0:
            return -1
        return 1 if d * d > (z * z) * (se2 + self.base_rate_se2) else 0

    def _segment_start(self, judged: Mapping):
        self.base_mean, self.base_se2 = judged["mean"], judged["se2"]
        self.base_gap, self.since_passes = F32(0.5) * F32(judged["passes"]), 0

    def _target_event(self, lr, judged: dict) -> int:
        t, judged["q_star"] = self.target(lr, judged)
        count = self.count + 1 if t == self.pending else 1
        judged["pending"], judged["count"] = t, count
        if t == self.q:
            return EV.TARGET_HOLD
        if count < self.cfg["confirm"]:
            return EV.TARGET_PENDING
        if t < self.q:
            return EV.TARGET_DOWN
        gain = -1 if self.state == HOLD else self._raise_gain(judged) if self.raised else 1
        return EV.TARGET_UP if gain > 0 else EV.NO_GAIN if gain < 0 else EV.TARGET_PENDING

    def epoch_target(self, epoch: int) -> int:
        """adazeta: the target of epoch `epoch` (1-based)."""
        c = self.cfg
        with np.errstate(all="ignore"):
            lg = zo_math.logf(F32(epoch))[0]
            g = c["alpha"] * zo_math.expf(c["beta"] * lg)[0]
        qe = max(int(zo_math.floor_f32(g)[0]), 1)
        t = c["q_min"]
        while t < c["q_max"] and 2 * t <= qe:
            t *= 2
        return t

    def _epoch_event(self) -> int:
        spe = self.cfg["steps_per_epoch"]
        if self.n_obs % spe:
            return EV.STEP
        t = self.epoch_target(self.n_obs // spe + 1)
        return EV.EPOCH_UP if t > self.q else EV.EPOCH_DOWN if t < self.q else EV.EPOCH_HOLD

    def _apply(self, acts: Act, judged: dict):
        c = self.cfg
        if Act.TARGET in acts:
            self.pending, self.count, self.q_star = judged["pending"], judged["count"], judged["q_star"]
        if Act.COUNT_CLEAR in acts:
            self.count = 0
        if Act.PENDING_CLEAR in acts:
            self.pending, self.count = 0, 0
        if Act.BEST_SET in acts:
            self.best, self.best_se2, self.has_best = judged["mean"], judged["se2"], True
        if Act.BEST_MIN in acts and judged["mean"] < self.best:
            self.best, self.best_se2 = judged["mean"], judged["se2"]
        if Act.STALE_INC in acts:
            self.stale += 1
        if Act.STALE_CLEAR in acts:
            self.stale = 0
        if Act.STOP in acts and c["stop_when_capped"]:
            self.stop = True
        if Act.DOUBLE in acts and self.q < c["q_max"]:
            self.q = 2 * self.q
            closed = "passes" in judged
            if self.kind == PLATEAU_KIND or closed:  # critical: a rollback's raise is not judged
                self.raised, self.gained = True, False
            if self.kind == CRITICAL_KIND and closed:  # the segment before the raise: the rate to beat
                self.base_rate, self.base_rate_se2 = self._rate(judged) if self.base_gap > 0 else (F32(0), F32(0))
                self._segment_start(judged)
        if Act.HALVE in acts:
            self.q = max(self.q // 2, c["q_min"])
        if Act.WINDOW_RESET in acts:
            self._window_reset()
        if Act.GAINED in acts:
            self.gained = True


def make_scheduler(kind, **params) -> Scheduler:
    """A scheduler of `kind` ('fixed', 'plateau', 'critical', 'adazeta' or its id); params
    override spec.SCHED_DEFAULTS[kind] (plus critical's p, the direction density from the trainer)."""
    return Scheduler(kind, **params)
