"""Training options: one dataclass, filled from defaults, an optional `zoflash.toml` `[train]`
table and command-line flags (in that order), then validated as a whole before anything is
generated. The same keys are used everywhere (flags use dashes, TOML uses underscores).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import tomllib

from zoflash.errors import ZoflashError
from zoflash.spec import training as spec
from zoflash.training import schedulers
from zoflash.spec.training import DENSITY_LOG2_MAX, HEADROOM_MAX, LR_SCALINGS, Q_LIMIT, ROUNDINGS, SCHEDULERS

_DENSITIES = ", ".join(["1"] + [f"1/{1 << k}" for k in range(1, DENSITY_LOG2_MAX)]) + f" or 1/{1 << DENSITY_LOG2_MAX}"
_TRAIN_SPEC = re.compile(r"^(last(:\d+)?|all|layers:(?=.*[^,\s]).+)$")


UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)


class OptionsError(ZoflashError):
    """Invalid training options (reported before anything is generated)."""


@dataclass(frozen=True)
class TrainOptions:
    """The options; meanings and defaults: spec.TRAIN_DEFAULTS."""
    train: str = spec.TRAIN_DEFAULTS["train"]
    biases_only: bool = spec.TRAIN_DEFAULTS["biases_only"]
    max_params: int | None = spec.TRAIN_DEFAULTS["max_params"]
    batch: int = spec.TRAIN_DEFAULTS["batch"]
    eps: int = spec.TRAIN_DEFAULTS["eps"]
    density: float = spec.TRAIN_DEFAULTS["density"]
    rounding: str = spec.TRAIN_DEFAULTS["rounding"]
    lr: float | None = spec.TRAIN_DEFAULTS["lr"]
    rho: float = spec.TRAIN_DEFAULTS["rho"]
    lr_scaling: str = spec.TRAIN_DEFAULTS["lr_scaling"]
    lr_decay: str = spec.TRAIN_DEFAULTS["lr_decay"]
    lr_trial: int | None = spec.TRAIN_DEFAULTS["lr_trial"]
    calib_steps: int = spec.TRAIN_DEFAULTS["calib_steps"]
    calib_q: int = spec.TRAIN_DEFAULTS["calib_q"]
    seed: int = spec.TRAIN_DEFAULTS["seed"]
    steps: int | None = spec.TRAIN_DEFAULTS["steps"]
    budget: int | None = spec.TRAIN_DEFAULTS["budget"]
    eval_every: int = spec.TRAIN_DEFAULTS["eval_every"]
    scheduler: str = spec.TRAIN_DEFAULTS["scheduler"]
    q: int = spec.TRAIN_DEFAULTS["q"]
    q_min: int = spec.TRAIN_DEFAULTS["q_min"]
    q_max: int = spec.TRAIN_DEFAULTS["q_max"]
    sched: dict = field(default_factory=dict)  # scheduler-specific parameters
    bias_bound: int = spec.TRAIN_DEFAULTS["bias_bound"]
    guard_sat: float = spec.TRAIN_DEFAULTS["guard_sat"]
    guard_zero: float = spec.TRAIN_DEFAULTS["guard_zero"]
    guard_steps: int = spec.TRAIN_DEFAULTS["guard_steps"]
    guard_loss: float = spec.TRAIN_DEFAULTS["guard_loss"]
    guard_loss_z: float = spec.TRAIN_DEFAULTS["guard_loss_z"]
    guard_max_rollbacks: int = spec.TRAIN_DEFAULTS["guard_max_rollbacks"]
    headroom: int | str = spec.TRAIN_DEFAULTS["headroom"]  # bits, or "auto" (resolved by compile_training)
    loss: str = spec.TRAIN_DEFAULTS["loss"]
    target: str = spec.TRAIN_DEFAULTS["target"]
    # ---- data sources ----
    data_source: str = spec.TRAIN_DEFAULTS["data_source"]
    buffer: int = spec.TRAIN_DEFAULTS["buffer"]
    refresh: int = spec.TRAIN_DEFAULTS["refresh"]
    # ---- end data sources ----
    val_fraction: float = spec.TRAIN_DEFAULTS["val_fraction"]
    checkpoint_every: int = spec.TRAIN_DEFAULTS["checkpoint_every"]

    DEFAULT_STEPS = spec.DEFAULT_STEPS

    @property
    def density_log2(self) -> int:
        return int(round(-math.log2(self.density)))

    @property
    def lr_auto(self) -> bool:
        return self.lr is None

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
        params.update({k: v for k, v in (("q0", self.q), ("q_min", self.q_min), ("q_max", self.q_max))
                       if k in defaults})
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

    def describe(self) -> str:
        lr = "auto" if self.lr_auto else f"{self.lr:g}"
        length = f"{self.steps} steps" if self.steps is not None else \
            (f"budget {self.budget} passes" if self.budget is not None else f"{self.max_steps} steps")
        return (f"train {self.train}{' (biases only)' if self.biases_only else ''}, batch {self.batch}, "
                + (f"eps {self.eps}, " if self.eps != 1 else "") +
                f"scheduler {self.scheduler}, lr {lr}, rounding {self.rounding}, density {self.density:g}, "
                f"seed {self.seed}, {length}" + (f", headroom {self.headroom}" if self.headroom else "")
                + (f", loss {self.loss}" if self.loss != "auto" else "")
                + (f", target {self.target}" if self.target != "labels" else "")
                + (f", data {self.data_source}" if self.data_source != "embedded" else "")
                + (f" (buffer {self.buffer}, refresh {self.refresh})" if self.data_source != "embedded" else "")
                + (f", validation {self.val_fraction:g}" if self.val_fraction != spec.TRAIN_DEFAULTS["val_fraction"]
                   else ""))


OPTION_NAMES = tuple(f.name for f in fields(TrainOptions))


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def validate(opts: TrainOptions) -> TrainOptions:
    """Every problem with the combination at once, as one OptionsError."""
    problems: list[str] = []

    def need(cond: bool, text: str) -> None:
        if not cond:
            problems.append(text)

    need(bool(_TRAIN_SPEC.match(opts.train)), f"--train '{opts.train}': use last, last:N, all or layers:NAME[,NAME]")
    m = re.match(r"^last:(\d+)$", opts.train)
    need(m is None or int(m.group(1)) >= 1, "--train last:N needs N >= 1")
    need(opts.max_params is None or opts.max_params >= 1, "--max-params must be >= 1")
    batch_lo, batch_hi = spec.BATCH_RANGE
    need(batch_lo <= opts.batch <= batch_hi, f"--batch {opts.batch}: must be in {batch_lo}..{batch_hi}")
    eps_lo, eps_hi = spec.EPS_RANGE
    need(eps_lo <= opts.eps <= eps_hi, f"--eps {opts.eps}: must be {eps_lo}..{eps_hi} LSB (trainable weights then "
                                       "stay in [-(127 - eps), 127 - eps])")
    if opts.density <= 0 or opts.density > 1:
        problems.append(f"--density {opts.density:g}: must be in (0, 1]")
    else:
        log2 = -math.log2(opts.density)
        need(abs(log2 - round(log2)) < 1e-9 and round(log2) <= DENSITY_LOG2_MAX,
             f"--density {opts.density:g}: must be {_DENSITIES}")
    need(opts.rounding in ROUNDINGS, f"--rounding {opts.rounding}: use one of {', '.join(ROUNDINGS)}")
    need(opts.lr_scaling in LR_SCALINGS, f"--lr-scaling {opts.lr_scaling}: use one of {', '.join(LR_SCALINGS)}")
    need(opts.lr_decay in spec.LR_DECAYS, f"--lr-decay {opts.lr_decay}: use one of {', '.join(spec.LR_DECAYS)}")
    need(opts.lr_trial is None or 0 <= opts.lr_trial <= UINT32_MAX, f"--lr-trial must be in 0..{UINT32_MAX} steps")
    need(not (opts.lr_trial and opts.data_source != "embedded"),
         f"--lr-trial {opts.lr_trial} needs --data-source embedded: the trial replays the same minibatches for "
         "every candidate, which a stream's ring no longer holds (use --lr-trial 0)")
    need(opts.lr is None or (math.isfinite(opts.lr) and opts.lr >= 0), "--lr must be a number >= 0 or 'auto'")
    need(math.isfinite(opts.rho) and opts.rho > 0, "--rho must be > 0")
    need(opts.calib_steps >= 1, "--calib-steps must be >= 1")
    need(_is_pow2(opts.calib_q) and opts.calib_q <= Q_LIMIT, f"--calib-q must be a power of two <= {Q_LIMIT}")
    need(0 <= opts.seed < spec.SEED_LIMIT, "--seed must be in 0..2^32-1")
    need(not (opts.steps is not None and opts.budget is not None), "give --steps or --budget, not both")
    # Counts become uint32_t fields of zo_train_config_t (the budget a uint64_t): range-checked here,
    # never left to the C compiler.
    need(opts.steps is None or 1 <= opts.steps <= UINT32_MAX, f"--steps must be in 1..{UINT32_MAX}")
    need(opts.budget is None or 1 <= opts.budget <= INT64_MAX, f"--budget must be in 1..{INT64_MAX}")
    need(1 <= opts.eval_every <= UINT32_MAX, f"--eval-every must be in 1..{UINT32_MAX}")
    need(opts.calib_steps <= UINT32_MAX, f"--calib-steps must be <= {UINT32_MAX}")
    need(opts.scheduler in SCHEDULERS, f"--scheduler {opts.scheduler}: use one of {', '.join(SCHEDULERS)}")
    n_before_q = len(problems)
    for name in ("q", "q_min", "q_max"):
        v = getattr(opts, name)
        need(_is_pow2(v) and v <= Q_LIMIT, f"--{name.replace('_', '-')} {v}: must be a power of two in 1..{Q_LIMIT}")
    need(opts.q_min <= opts.q <= opts.q_max, f"need --q-min <= --q <= --q-max (got {opts.q_min}, {opts.q}, {opts.q_max})")
    q_ok = len(problems) == n_before_q
    need(1 <= opts.bias_bound <= INT32_MAX, f"--bias-bound must be in 1..{INT32_MAX}")
    need(0 < opts.guard_sat <= 1 and 0 < opts.guard_zero <= 1, "guard thresholds must be in (0, 1]")
    need(1 <= opts.guard_steps <= UINT32_MAX, f"--guard-steps must be in 1..{UINT32_MAX}")
    for name in ("lr", "rho", "guard_loss", "guard_loss_z"):  # float fields of zo_train_config_t
        v = getattr(opts, name)
        if v is not None and math.isfinite(v) and abs(v) > FLOAT32_MAX:
            problems.append(f"--{name.replace('_', '-')} {v:g} does not fit a float32 (at most {FLOAT32_MAX:.6g})")
    need(opts.guard_loss == 0 or (math.isfinite(opts.guard_loss) and opts.guard_loss > 1),
         "--guard-loss must be 0 (off) or > 1")
    need(math.isfinite(opts.guard_loss_z) and opts.guard_loss_z >= 0, "--guard-loss-z must be finite and >= 0")
    need(0 <= opts.guard_max_rollbacks <= UINT32_MAX, f"--guard-max-rollbacks must be in 0..{UINT32_MAX}")
    if opts.headroom != "auto":
        need(isinstance(opts.headroom, int) and 0 <= opts.headroom <= HEADROOM_MAX,
             f"--headroom {opts.headroom}: must be auto or 0..{HEADROOM_MAX} bits")
        need(not (opts.headroom and opts.biases_only), "--headroom re-quantizes trainable weights: it does not go "
                                                       "with --biases-only")
    need(opts.loss in spec.LOSS_CHOICES, f"--loss {opts.loss}: use one of {', '.join(spec.LOSS_CHOICES)}")
    need(opts.target in spec.TARGETS, f"--target {opts.target}: use one of {', '.join(spec.TARGETS)}")
    need(not (opts.target == "input" and opts.loss not in ("auto", "mse")),
         f"--target input compares the output with the input: it needs --loss mse (or auto), not {opts.loss}")
    # ---- data sources ----
    need(opts.data_source in spec.DATA_SOURCES,
         f"--data-source {opts.data_source}: use one of {', '.join(spec.DATA_SOURCES)}")
    buf_lo, buf_hi = spec.BUFFER_RANGE
    need(buf_lo <= opts.buffer <= buf_hi, f"--buffer {opts.buffer}: must be in {buf_lo}..{buf_hi} samples")
    need(1 <= opts.refresh <= opts.buffer, f"--refresh {opts.refresh}: must be in 1..--buffer ({opts.buffer})")
    # ---- end data sources ----
    val_lo, val_hi = spec.VAL_FRACTION_RANGE
    need(math.isfinite(opts.val_fraction) and val_lo < opts.val_fraction <= val_hi,
         f"--val-fraction {opts.val_fraction:g}: must be in ({val_lo:g}, {val_hi:g}] (the share of the training data "
         "kept for validation)")
    need(0 <= opts.checkpoint_every <= UINT32_MAX, f"--checkpoint-every must be in 0..{UINT32_MAX} (0: never)")
    if opts.scheduler in SCHEDULERS:  # also when other options have problems: one error lists all
        q_keys = spec.SCHED_Q_PARAMS
        given_q = sorted(set(opts.sched) & set(q_keys))
        if given_q:  # sched_params() takes them from --q/--q-min/--q-max: never drop them silently
            problems.append(f"scheduler parameter {', '.join(given_q)}: set q with --q, --q-min, --q-max "
                            "(q, q_min, q_max in [train])")
        unknown = sorted(set(opts.sched) - set(spec.SCHED_DEFAULTS[opts.scheduler]) - set(q_keys))
        if unknown:
            allowed = ", ".join(sorted(k for k in spec.SCHED_DEFAULTS[opts.scheduler] if k not in q_keys))
            problems.append(f"scheduler '{opts.scheduler}' has no parameter {', '.join(unknown)} "
                            f"(it takes: {allowed or 'none'})")
        else:
            params = opts.sched_params()
            if not q_ok:  # already reported: check the scheduler's own parameters on the default q range
                params.update({k: v for k, v in spec.SCHED_DEFAULTS[opts.scheduler].items() if k in q_keys})
            problems += schedulers.validate_params(opts.scheduler, params)
    if problems:
        raise OptionsError("invalid training options:\n" + "\n".join(f"  - {p}" for p in problems))
    return opts


def _coerce(name: str, value, where: str):
    """A TOML or command-line value to the field's type."""
    if name == "sched":
        if not isinstance(value, dict):
            raise OptionsError(f"{where}: 'sched' must be a table of scheduler parameters")
        return {str(k): _number(v, f"{where}: sched.{k}") for k, v in value.items()}
    if name == "headroom" and isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if name == "lr":
        if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
            return None
        return float(_number(value, f"{where}: lr"))
    kind = {f.name: f.type for f in fields(TrainOptions)}[name]
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
            return float(_number(value, name))
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
        raise OptionsError(f"'{path}': unknown table(s) {', '.join(f'[{k}]' for k in unknown_tables)}; "
                           f"zoflash.toml holds {', '.join(f'[{k}]' for k in PROJECT_TABLES)}")
    table = data.get("train", {})
    if not isinstance(table, dict):
        raise OptionsError(f"'{path}': [train] must be a table")
    unknown = sorted(set(table) - set(OPTION_NAMES))
    if unknown:
        raise OptionsError(f"'{path}' [train]: unknown key(s) {', '.join(unknown)}; "
                           f"known: {', '.join(OPTION_NAMES)}")
    return {k: _coerce(k, v, f"'{path}' [train]") for k, v in table.items()}


def make_options(project_file: str | Path | None = None, **overrides) -> TrainOptions:
    """Defaults < project file < overrides (None values in overrides mean "not given")."""
    values: dict = {}
    if project_file is not None:
        values.update(load_project_file(project_file))
    elif Path("zoflash.toml").is_file():
        values.update(load_project_file("zoflash.toml"))
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
    return validate(replace(TrainOptions(), **values))
