"""The product's scheduler configuration: validate scheduler parameters and resolve every
zo_sched_config_t field from them (ids, defaults and limits from the training spec).

The Python reference (reference/schedulers.py) resolves its own configuration independently,
so the C-vs-reference tests catch a mistake here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from zoflash.spec import training as spec

F32 = np.float32


def kind_name(kind: int | str) -> str:
    """'plateau' for 'plateau' or 1; ValueError for anything else."""
    if isinstance(kind, str) and kind in spec.SCHEDULER_IDS:
        return kind
    if isinstance(kind, (int, np.integer)) and not isinstance(kind, bool) and int(kind) in range(len(spec.SCHEDULERS)):
        return spec.SCHEDULERS[int(kind)]
    raise ValueError(f"unknown scheduler kind {kind!r} (use one of {', '.join(spec.SCHEDULER_IDS)})")


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
    if name != "critical":
        need(
            _pow2(vals["q0"]) and q_min <= vals["q0"] <= q_max,
            f"q0 {vals['q0']} must be a power of two in [q_min, q_max] = [{q_min}, {q_max}]",
        )
    if name == "critical":
        need(
            _pow2(vals["calib_q"]) and q_min <= vals["calib_q"] <= q_max,
            f"calib_q {vals['calib_q']} must be a power of two in [q_min, q_max] = [{q_min}, {q_max}]",
        )
    if name in ("plateau", "critical"):
        need(
            vals["window_max_steps"] >= vals["window_min_steps"],
            f"window_max_steps {vals['window_max_steps']} must be >= window_min_steps {vals['window_min_steps']}",
        )
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
    if name == "adazeta" and p["steps_per_epoch"] is None:
        problems.append("adazeta: steps_per_epoch must be given (ceil(n_train / batch))")
    if problems:
        raise ValueError("; ".join(problems))
    if name == "plateau" and p["rise"] is None:
        p["rise"] = F32(spec.SCHED_RISE_PER_TAU) * F32(p["tau"])
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
