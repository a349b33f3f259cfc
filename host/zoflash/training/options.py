"""Training options: one dataclass, filled from defaults, an optional `zoflash.toml` `[train]`
table and command-line flags (in that order), then validated as a whole before anything is
generated. The same keys are used everywhere (flags use dashes, TOML uses underscores).

The fields, their defaults, types and checks come from the option table, spec/options.py.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import Field, field, make_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib

import numpy as np

from zoflash.errors import ZoflashError
from zoflash.spec import options as table
from zoflash.spec import training as spec
from zoflash.spec.training import DENSITY_LOG2_MAX, HEADROOM_MAX, SCHEDULERS
from zoflash.training import schedulers

FLOAT32_MAX = float(np.finfo(np.float32).max)


# --mode fleet builds a device that waits for its rounds: simulate and run would wait for ever
FLEET_NEEDS_A_FLEET = (
    "--mode fleet builds a device that trains only in the rounds a fleet commands: run it with `zoflash fleet "
    "simulate` (host twins), or build and flash it and `zoflash fleet join --port P` (docs/guides/fleet.md)"
)


class OptionsError(ZoflashError):
    """Invalid training options (reported before anything is generated)."""


class _Derived:
    """What TrainOptions derives from its fields (the fields: spec/options.py)."""

    DEFAULT_STEPS = spec.DEFAULT_STEPS

    @property
    def density_log2(self) -> int:
        if self.density is None:  # resolved when the training is compiled (training/pipeline.py)
            raise ZoflashError("--density auto is resolved when the training is compiled; compile it first")
        return int(round(-math.log2(self.density)))

    @property
    def lr_auto(self) -> bool:
        return self.lr is None

    @property
    def fleet(self) -> bool:
        """--mode fleet: the device trains in rounds its host commands (zoflash fleet)."""
        return self.mode == "fleet"

    @property
    def lr_trial_steps(self) -> int:
        """The lr trial's steps per candidate (0: off): --lr-trial, else spec.LR_TRIAL_STEPS for the
        adaptive schedulers with embedded data (a trial replays minibatches a ring has not kept)."""
        if self.lr_trial is not None:
            return self.lr_trial
        return spec.LR_TRIAL_STEPS if self.scheduler != "fixed" and self.data_source == "embedded" else 0

    @property
    def max_steps(self) -> int:
        """0 = no step limit (budget only)."""
        if self.steps is not None:
            return self.steps
        return 0 if self.budget is not None else self.DEFAULT_STEPS

    @property
    def q_buffer(self) -> int:
        """The largest q a run can use: q_max, and the lr / critical calibration q."""
        return max(self.q_max, self.calib_q if self.lr_auto else 1, int(self.sched_params().get("calib_q", 1)))

    def sched_params(self) -> dict:
        """The scheduler's parameters with defaults filled in (validated)."""
        defaults = spec.SCHED_DEFAULTS[self.scheduler]
        params = dict(defaults)
        params.update(self.sched)
        params.update(
            {k: v for k, v in (("q0", self.q), ("q_min", self.q_min), ("q_max", self.q_max)) if k in defaults}
        )
        return params

    def sched_run_params(self, n_train: int) -> dict:
        """The scheduler's parameters for a run, including those the trainer sets: the density p
        (critical) and the epoch length (adazeta)."""
        params = self.sched_params()
        if self.scheduler == "critical":
            params["p"] = float(np.float32(1.0) / np.float32(1 << self.density_log2))
        if self.scheduler == "adazeta":
            params["steps_per_epoch"] = max(1, math.ceil(n_train / self.batch))
        return params

    def sched_config(self, n_train: int) -> dict:
        """Every zo_sched_config_t field."""
        return schedulers.resolve(self.scheduler, **self.sched_run_params(n_train))

    def __post_init__(self) -> None:
        """Options made any way (TrainOptions(...), dataclasses.replace, make_options for the command
        line and zoflash.toml) pass the same validate(): the Python API refuses what the CLI refuses,
        with the same message. 'auto' spellings and integral floats are normalised first, as the
        command line's conversion does."""
        for o in table.OPTIONS:
            v = getattr(self, o.name)
            if o.auto and isinstance(v, str) and v.strip().lower() == "auto":
                object.__setattr__(self, o.name, o.default)
            elif o.type.startswith("float") and isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, o.name, float(v))
        validate(self)  # type: ignore[arg-type]  # self is a TrainOptions: _Derived is only its base

    def describe(self) -> str:
        lr = "auto" if self.lr_auto else f"{self.lr:g}"
        length = (
            f"{self.steps} steps"
            if self.steps is not None
            else (f"budget {self.budget} passes" if self.budget is not None else f"{self.max_steps} steps")
        )
        return (
            f"train {self.train}{' (biases only)' if self.biases_only else ''}, batch {self.batch}, "
            + (f"eps {self.eps}, " if self.eps != 1 else "")
            + f"scheduler {self.scheduler}, lr {lr}, rounding {self.rounding}, density {'auto' if self.density is None else f'{self.density:g}'}, "
            f"seed {self.seed}, {length}"
            + (f", headroom {self.headroom}" if self.headroom else "")
            + (f", loss {self.loss}" if self.loss != "auto" else "")
            + (f", target {self.target}" if self.target != "labels" else "")
            + (f", output {self.output}" if self.output is not None else "")
            + (f", data {self.data_source}" if self.data_source != "embedded" else "")
            + (f" (buffer {self.buffer}, refresh {self.refresh})" if self.data_source != "embedded" else "")
            + (
                f", validation {self.val_fraction:g}"
                if self.val_fraction != table.TRAIN_DEFAULTS["val_fraction"]
                else ""
            )
            + (f", continual (duty {self.duty:g}, holdout {self.holdout})" if self.mode == "continual" else "")
        )


if TYPE_CHECKING:
    # The static view of the dataclass built below: its fields come from the option table at run
    # time, so the type checker sees them as Any (the derived properties keep their types).
    class TrainOptions(_Derived):
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

        def __init__(self, **fields: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...

else:
    TrainOptions = make_dataclass(
        "TrainOptions",
        [
            (o.name, o.type, field(default_factory=dict) if isinstance(o.default, dict) else field(default=o.default))
            for o in table.OPTIONS
        ],
        bases=(_Derived,),
        frozen=True,
        namespace={
            "__module__": __name__,
            "__doc__": "The training options; meanings, defaults and limits: spec/options.py.",
        },
    )

OPTION_NAMES = table.OPTION_NAMES


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _interval(v, text: str) -> bool:
    """v (finite) in an interval written "(a, b]" (bounds may be inf)."""
    lo, hi = (float(x) for x in text[1:-1].split(","))
    return math.isfinite(v) and (lo < v if text[0] == "(" else lo <= v) and (v < hi if text[-1] == ")" else v <= hi)


def _rule_ok(o: table.Option, v) -> bool:
    kind = o.rule[0] if o.rule else None
    if v is None and o.default is None:
        return True
    if kind == "range":
        lo, hi = o.rule[1:]
        return lo <= v and (hi is None or v <= hi)
    if kind == "interval":
        return _interval(v, o.rule[1])
    if kind == "pow2":
        return isinstance(v, int) and _is_pow2(v) and v <= o.rule[1]
    if kind == "choices":
        return v in o.choices
    if kind == "pattern":
        return isinstance(v, str) and re.match(o.rule[1], v) is not None
    if kind == "density":
        if not 0 < v <= 1:
            return False
        log2 = -math.log2(v)
        return abs(log2 - round(log2)) < 1e-9 and round(log2) <= DENSITY_LOG2_MAX
    if kind == "headroom":
        return v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= HEADROOM_MAX)
    if kind == "lr":
        return math.isfinite(v) and v >= 0
    if kind == "off_or_above":
        return v == 0 or (math.isfinite(v) and v > o.rule[1])
    return True


def _message(o: table.Option, v, template: str | None = None) -> str:
    kind = o.rule[0] if o.rule else None
    lo, hi = {
        "range": o.rule[1:3],
        "interval": o.rule[1:2] + (None,),
        "pow2": (1, o.rule[-1]),
        "headroom": (0, HEADROOM_MAX),
    }.get(kind, (None, None))
    fmt = dict(flag=o.named, lo=lo, hi=hi, choices=", ".join(map(str, o.choices)))
    template = template or o.message or table.RULE_MESSAGES[kind]
    try:
        return template.format(value=v, **fmt)
    except (TypeError, ValueError):  # a value of the wrong type from the Python API
        return template.replace(":g}", "}").format(value=repr(v), **fmt)


# What a value of each field type must be (the CLI and zoflash.toml convert theirs; the Python API
# passes values as they are).
_TYPE_WORDS = {
    "bool": "True or False",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "int | str": "an integer or 'auto'",
    "dict": "a dict of scheduler parameters",
}


def _type_ok(o: table.Option, v) -> bool:
    if v is None:
        return o.default is None
    kind = o.type.removesuffix(" | None")
    if kind == "bool":
        return isinstance(v, bool)
    if isinstance(v, bool):  # True is an int to Python, never a count or a rate here
        return False
    types = {"int": int, "float": (int, float), "str": str, "int | str": (int, str), "dict": dict}[kind]
    return isinstance(v, types)


def _option_problems(opts) -> list[str]:
    """Each option's type and own rule (spec/options.py), one message per rule."""
    problems = []
    for o in table.OPTIONS:
        v = getattr(opts, o.name)
        if not _type_ok(o, v):
            problems.append(f"{o.named} {v!r}: expected {_TYPE_WORDS[o.type.removesuffix(' | None')]}")
            continue
        try:
            ok = _rule_ok(o, v)
        except TypeError:
            ok = False
        if not ok:
            problems.append(_message(o, v))
        elif "float" in o.type and o.name in o.c and v is not None and math.isfinite(v) and abs(v) > FLOAT32_MAX:
            # the value itself becomes a float field of zo_train_config_t
            problems.append(table.FLOAT32_MESSAGE.format(flag=o.named, value=v, hi=FLOAT32_MAX))
    return problems


def validate(opts: TrainOptions) -> TrainOptions:
    """Every problem with the combination at once, as one OptionsError: each option's rule
    (spec/options.py), then the rules between options."""
    problems = _option_problems(opts)

    def need(cond: bool, text: str) -> None:
        if not cond:
            problems.append(text)

    m = re.match(r"^last:(\d+)$", opts.train) if isinstance(opts.train, str) else None
    need(m is None or int(m.group(1)) >= 1, "--train last:N needs N >= 1")
    need(
        not (opts.lr_trial and opts.data_source != "embedded"),
        f"--lr-trial {opts.lr_trial} needs --data-source embedded: the trial replays the same minibatches for "
        "every candidate, which a stream's ring no longer holds (use --lr-trial 0)",
    )
    need(not (opts.steps is not None and opts.budget is not None), "give --steps or --budget, not both")
    n_before_q = len(problems)
    need(
        opts.q_min <= opts.q <= opts.q_max, f"need --q-min <= --q <= --q-max (got {opts.q_min}, {opts.q}, {opts.q_max})"
    )
    q_ok = len(problems) == n_before_q and all(
        _rule_ok(table.BY_NAME[k], getattr(opts, k)) for k in ("q", "q_min", "q_max")
    )
    need(
        not (opts.headroom not in ("auto", 0) and opts.biases_only),
        "--headroom re-quantizes trainable weights: it does not go with --biases-only",
    )
    need(
        not (opts.target == "input" and opts.loss not in ("auto", "mse")),
        f"--target input compares the output with the input: it needs --loss mse (or auto), not {opts.loss}",
    )
    # ---- data sources ----
    need(1 <= opts.refresh <= opts.buffer, f"--refresh {opts.refresh}: must be in 1..--buffer ({opts.buffer})")
    # ---- end data sources ----
    # --- continual adaptation
    need(
        opts.mode != "continual" or opts.data_source in ("stream", "app"),
        "--mode continual serves samples as they arrive: add --data-source stream (the host feeds them) "
        "or app (your firmware calls zo_cl_serve)",
    )
    need(
        opts.mode != "continual" or (opts.loss not in ("mse",) and opts.target == "labels"),
        "--mode continual compares candidates by their correct answers: it needs labels (not --loss mse "
        "or --target input)",
    )
    need(
        opts.mode != "continual" or opts.budget is None,
        "--mode continual: an episode is --steps training steps, not a --budget",
    )
    need(
        opts.mode != "fleet" or opts.data_source == "embedded",
        "--mode fleet trains each round on the device's own built-in data: leave --data-source at embedded",
    )
    if opts.scheduler in SCHEDULERS:  # also when other options have problems: one error lists all
        q_keys = spec.SCHED_Q_PARAMS
        given_q = sorted(set(opts.sched) & set(q_keys))
        if given_q:  # sched_params() takes them from --q/--q-min/--q-max: never drop them silently
            problems.append(
                f"scheduler parameter {', '.join(given_q)}: set q with --q, --q-min, --q-max "
                "(q, q_min, q_max in [train])"
            )
        unknown = sorted(set(opts.sched) - set(spec.SCHED_DEFAULTS[opts.scheduler]) - set(q_keys))
        if unknown:
            allowed = ", ".join(sorted(k for k in spec.SCHED_DEFAULTS[opts.scheduler] if k not in q_keys))
            problems.append(
                f"scheduler '{opts.scheduler}' has no parameter {', '.join(unknown)} (it takes: {allowed or 'none'})"
            )
        else:
            params = opts.sched_params()
            if not q_ok:  # already reported: check the scheduler's own parameters on the default q range
                params.update({k: v for k, v in spec.SCHED_DEFAULTS[opts.scheduler].items() if k in q_keys})
            problems += schedulers.validate_params(opts.scheduler, params)
    if problems:  # one line per problem
        raise OptionsError("invalid training options:\n" + "\n".join(f"  - {p}" for p in dict.fromkeys(problems)))
    return opts


def _coerce(name: str, value, where: str):
    """A TOML or command-line value to the field's type."""
    if name == "sched":
        if not isinstance(value, dict):
            raise OptionsError(f"{where}: 'sched' must be a table of scheduler parameters")
        return {str(k): _number(v, f"{where}: sched.{k}") for k, v in value.items()}
    o = table.BY_NAME[name]
    if o.auto and (value is None or (isinstance(value, str) and value.strip().lower() == "auto")):
        return o.default  # None or "auto": what 'auto' means for the option
    kind = o.type
    try:
        if "bool" in kind:
            if isinstance(value, bool):
                return value
            raise ValueError
        if kind.startswith("int"):
            if isinstance(value, bool):
                raise ValueError
            return int(value) if not isinstance(value, float) or value.is_integer() else _bad()
        if kind.startswith("float"):
            return float(_number(value, f"{where}: {name}"))
        if kind.startswith("str"):
            return str(value)
    except (TypeError, ValueError):
        pass
    raise OptionsError(f"{where}: '{name}' has an invalid value {value!r}")


def _bad():
    raise ValueError


def _number(v, where: str):
    if isinstance(v, bool):
        raise OptionsError(f"{where}: expected a number, got {v!r}")
    if isinstance(v, (int, float)):
        return v
    try:
        f = float(str(v))
    except ValueError:
        raise OptionsError(f"{where}: expected a number, got {v!r}") from None
    return int(f) if f.is_integer() and re.fullmatch(r"[+-]?\d+", str(v).strip()) else f


def parse_sched_params(items: tuple[str, ...]) -> dict:
    """`--sched-param key=value` items to a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionsError(f"--sched-param '{item}': use NAME=VALUE")
        out[key.strip().replace("-", "_")] = _number(value.strip(), f"--sched-param {key}")
    return out


PROJECT_TABLES = ("train", "build")  # the tables a zoflash.toml may hold ([build]: build_options.py)


def load_project_file(path: str | Path) -> dict:
    """The `[train]` table of a zoflash.toml project file (unknown keys are errors)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise OptionsError(f"project file '{path}' does not exist") from None
    except OSError as exc:
        raise OptionsError(f"cannot read project file '{path}': {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise OptionsError(f"'{path}' is not UTF-8 text (byte {exc.start}): TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise OptionsError(f"'{path}' is not valid TOML: {exc}") from None
    unknown_tables = sorted(set(data) - set(PROJECT_TABLES))
    if unknown_tables:  # a misspelled [train] would otherwise be ignored without a word
        raise OptionsError(
            f"'{path}': unknown table(s) {', '.join(f'[{k}]' for k in unknown_tables)}; "
            f"zoflash.toml holds {', '.join(f'[{k}]' for k in PROJECT_TABLES)}"
        )
    table = data.get("train", {})
    if not isinstance(table, dict):
        raise OptionsError(f"'{path}': [train] must be a table")
    unknown = sorted(set(table) - set(OPTION_NAMES))
    if unknown:
        raise OptionsError(f"'{path}' [train]: unknown key(s) {', '.join(unknown)}; known: {', '.join(OPTION_NAMES)}")
    return {k: _coerce(k, v, f"'{path}' [train]") for k, v in table.items()}


def make_options(project_file: str | Path | None = None, **overrides) -> TrainOptions:
    """Defaults < project file < overrides (None values in overrides mean "not given")."""
    values: dict = {}
    if project_file is None and Path("zoflash.toml").is_file():
        project_file = "zoflash.toml"
    from_file = load_project_file(project_file) if project_file is not None else {}
    values.update(from_file)
    for key, value in overrides.items():
        if key not in OPTION_NAMES:
            raise OptionsError(f"unknown training option '{key}'")
        if value is None or (key == "sched" and not value):
            continue
        if key == "sched":
            value = {**values.get("sched", {}), **value}
        values[key] = _coerce(key, value, "command line")
    # a length given on the command line replaces the project file's (steps and budget exclude each other)
    if overrides.get("steps") is not None and overrides.get("budget") is None:
        values.pop("budget", None)
    if overrides.get("budget") is not None and overrides.get("steps") is None:
        values.pop("steps", None)
    try:
        return replace(TrainOptions(), **values)  # validated as it is made (TrainOptions.__post_init__)
    except OptionsError as exc:
        if not from_file:
            raise
        flags = any(v is not None and not (k == "sched" and not v) for k, v in overrides.items())
        raise OptionsError(f"'{project_file}' [train]{' and the command line' if flags else ''}: {exc}") from None
