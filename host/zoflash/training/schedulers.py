"""The product's scheduler configuration: validate scheduler parameters and resolve every
zo_sched_config_t field from them (ids, defaults and limits from the training spec).

The Python reference (reference/schedulers.py) resolves its own configuration independently,
so the C-vs-reference tests catch a mistake here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from zoflash.registry import Registry
from zoflash.spec import training as spec

F32 = np.float32


def kind_name(kind: int | str) -> str:
    """'plateau' for 'plateau' or 1; ValueError for anything else."""
    if isinstance(kind, str) and kind in spec.SCHEDULER_IDS:
        return kind
    if isinstance(kind, (int, np.integer)) and not isinstance(kind, bool) and int(kind) in range(len(spec.SCHEDULERS)):
        return spec.SCHEDULERS[int(kind)]
    raise ValueError(f"unknown scheduler kind {kind!r} (use one of {', '.join(spec.SCHEDULER_IDS)})")


# ---------------------------------------------------------------------------- the kinds

Need = Callable[[bool, str], None]  # need(ok, problem): record the problem unless ok


def _q_in_range(vals: dict, key: str, need: Need) -> None:
    q_min, q_max = vals["q_min"], vals["q_max"]
    need(
        _pow2(vals[key]) and q_min <= vals[key] <= q_max,
        f"{key} {vals[key]} must be a power of two in [q_min, q_max] = [{q_min}, {q_max}]",
    )


def _window(vals: dict, need: Need) -> None:
    need(
        vals["window_max_steps"] >= vals["window_min_steps"],
        f"window_max_steps {vals['window_max_steps']} must be >= window_min_steps {vals['window_min_steps']}",
    )


class Scheduler:
    """A scheduler kind's own rules (its ids, parameters, defaults and limits are the spec's)."""

    @classmethod
    def check(cls, vals: dict, need: Need) -> None:
        """Its rules over the parameter values (float32 / int), after the common q range."""
        _q_in_range(vals, "q0", need)

    @classmethod
    def missing(cls, p: dict) -> list[str]:
        """Parameters a run must supply (not given by the user: derived from the data)."""
        return []

    @classmethod
    def complete(cls, p: dict) -> None:
        """Fill the parameters derived from others."""


# One per spec.SCHEDULERS kind, in the spec's order (tests check both).
SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler", "see docs/options.md")


@SCHEDULERS.register("fixed")
class Fixed(Scheduler):
    """q stays at q0: the common rules only."""


@SCHEDULERS.register("plateau")
class Plateau(Scheduler):
    @classmethod
    def check(cls, vals, need):
        super().check(vals, need)
        _window(vals, need)

    @classmethod
    def complete(cls, p):
        if p["rise"] is None:
            p["rise"] = F32(spec.SCHED_RISE_PER_TAU) * F32(p["tau"])


@SCHEDULERS.register("critical")
class Critical(Scheduler):
    @classmethod
    def check(cls, vals, need):  # no q0: it calibrates q at calib_q
        _q_in_range(vals, "calib_q", need)
        _window(vals, need)


@SCHEDULERS.register("adazeta")
class AdaZeta(Scheduler):
    @classmethod
    def missing(cls, p):
        return (
            []
            if p["steps_per_epoch"] is not None
            else ["adazeta: steps_per_epoch must be given (ceil(n_train / batch))"]
        )


# ---------------------------------------------------------------------------- validation


def _pow2(v) -> bool:
    return v >= 1 and (v & (v - 1)) == 0


def _as_int(v):
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        return int(v)
    return None


def _interval(text: str) -> tuple[float, float, bool, bool]:
    """'[0, 1)' -> (0.0, 1.0, True, False): the bounds and whether each is included."""
    lo, hi = (float(v) for v in text[1:-1].split(","))
    return lo, hi, text[0] == "[", text[-1] == "]"


def _within(v, text: str) -> bool:
    lo, hi, lo_in, hi_in = _interval(text)
    return math.isfinite(v) and (lo < v or (lo_in and v == lo)) and (v < hi or (hi_in and v == hi))


def _describe(param: str, text: str) -> str:
    """'finite and >= 0', '>= 1', 'in [0, 1)', 'finite': the limit as the messages say it."""
    lo, hi, lo_in, _ = _interval(text)
    if math.isfinite(hi):
        return f"in {text}"
    if not math.isfinite(lo):
        return "finite"
    return ("finite and " if param in spec.SCHED_FLOAT_PARAMS else "") + f"{'>=' if lo_in else '>'} {lo:g}"


def validate_params(kind, params: Mapping) -> list[str]:
    """Every problem with a scheduler's parameters (defaults fill what `params` lacks), as
    readable messages; [] when they are valid.  Float limits apply to the float32 values."""
    try:
        name = kind_name(kind)
    except ValueError as exc:
        return [str(exc)]
    trainer = spec.SCHED_TRAINER_PARAMS.get(name, {})
    known = set(spec.SCHED_DEFAULTS[name]) | set(spec.SCHED_Q_PARAMS) | set(trainer)
    unknown = [f"scheduler '{name}' has no parameter '{k}'" for k in sorted(set(params) - known)]
    problems: list[str] = []
    p = {**spec.SCHED_DEFAULTS[name], **trainer, **{k: v for k, v in params.items() if k in known}}
    vals: dict = {}
    for k, v in p.items():
        if v is None:
            vals[k] = None
        elif k in spec.SCHED_FLOAT_PARAMS:
            try:
                with np.errstate(all="ignore"):
                    vals[k] = float(F32(v))
            except (TypeError, ValueError):
                problems.append(f"{name}: {k} = {v!r} is not a number")
        elif k == "stop_when_capped":
            if _as_int(v) not in (0, 1):
                problems.append(f"{name}: stop_when_capped = {v!r} must be 0/1 (false/true)")
            vals[k] = _as_int(v)
        else:
            iv = _as_int(v)
            if iv is None or not 0 <= iv < 2**32:
                problems.append(f"{name}: {k} = {v!r} must be an integer in 0..2^32-1")
            vals[k] = iv
    if problems:
        return unknown + problems

    def need(ok: bool, text: str) -> None:
        if not ok:
            problems.append(f"{name}: {text}")

    q_min, q_max = vals["q_min"], vals["q_max"]
    need(
        _pow2(q_min) and _pow2(q_max) and q_min <= q_max <= spec.Q_LIMIT,
        f"q_min {q_min} and q_max {q_max} must be powers of two with 1 <= q_min <= q_max <= {spec.Q_LIMIT}",
    )
    SCHEDULERS.get(name).check(vals, need)
    for k, v in vals.items():
        if k in spec.SCHED_LIMITS and v is not None:
            need(_within(v, spec.SCHED_LIMITS[k]), f"{k} must be {_describe(k, spec.SCHED_LIMITS[k])} (got {v})")
    return unknown + problems


def resolve(kind, **params) -> dict:
    """All zo_sched_config_t fields (spec.SCHED_CONFIG_FIELDS) for `kind`: defaults filled, floats as
    np.float32, ints as int.  Raises ValueError listing the problems."""
    name = kind_name(kind)
    problems = validate_params(name, params)
    p = {**spec.SCHED_DEFAULTS[name], **spec.SCHED_TRAINER_PARAMS.get(name, {}), **params}
    kind = SCHEDULERS.get(name)
    problems += kind.missing(p)
    if problems:
        raise ValueError("; ".join(problems))
    kind.complete(p)
    out = {}
    for f in spec.SCHED_CONFIG_FIELDS:
        v = spec.SCHEDULER_IDS[name] if f == "kind" else p.get(f, 0)
        out[f] = F32(v) if f in spec.SCHED_FLOAT_PARAMS else _as_int(v)
    return out


def c_initializer(kind, **params) -> str:
    """A C initializer of zo_sched_config_t (floats as exact hex literals)."""
    cfg = resolve(kind, **params)
    parts = [f".{f} = {float(v).hex()}f" if f in spec.SCHED_FLOAT_PARAMS else f".{f} = {v}" for f, v in cfg.items()]
    return "{ " + ", ".join(parts) + " }"
