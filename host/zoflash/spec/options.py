"""The training options, declared once.

Every training option is one `Option` row of OPTIONS. From the table come the TrainOptions
dataclass and its validation (training/options.py), the zoflash.toml [train] keys, the command-line
flags (cli/common.py), the zo_train_config_t initializer (training/render.py) and docs/options.md
(`python -m zoflash.spec.options --markdown > docs/options.md`; tests/test_options_table.py checks
the page, the header and the flags against the table).

Plain data: the names, limits and C tables it uses are spec/training.py's.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from zoflash.spec import training as t

UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Option:
    """One training option.

    name: the TrainOptions field and the zoflash.toml [train] key; the flag is --name with '-'.
    type: the field's annotation ("int", "float | None", ...); it is also how TOML and flag values
      are converted.
    rule: what a valid value is, checked by training/options.py validate() with `message`:
      ("range", lo, hi)      an integer in lo..hi (hi None: no upper bound);
      ("interval", "(a, b]") a finite number in that interval (inf allowed as a bound);
      ("pow2", hi)           a power of two in 1..hi;
      ("choices",)           one of `choices`;
      ("pattern", regex[, words]) a string matching the regex (words: the valid values in the docs);
      ("density",)           1 or 1/2^k for k <= DENSITY_LOG2_MAX;
      ("headroom",)          "auto" or 0..HEADROOM_MAX bits;
      ("lr",)                None (auto) or a finite number >= 0;
      ("off_or_above", x)    0 (off) or a finite number > x;
      ()                     any value of the type.
      None is always valid for an option whose default is None.
    message: the problem's text, formatted with flag (the option named both ways: `named`), value, lo,
      hi, choices (the default per rule).
    choices: the values of a ("choices",) option (shown in --help and the docs).
    c: the zo_train_config_t fields this option sets. A field's value is TrainOptions' attribute
      of the field's name: the option itself, or a property derived from it (density ->
      density_log2). None becomes 0; c_enum names the spec table whose C names an enum field takes.
    help: the --help text; `shown` is the default as --help shows it (None: the default's value,
      not shown when the default is None or False).
    group: the docs section; doc: more for docs/options.md.
    auto: the value may be 'auto' (the default None or "auto" means it).
    """

    name: str
    type: str
    default: object
    help: str
    group: str
    rule: tuple = ()
    message: str = ""
    choices: tuple = ()
    c: tuple = ()
    c_enum: str | None = None
    shown: str | None = None
    auto: bool = False
    doc: str = ""

    @property
    def flag(self) -> str:
        return "--sched-param" if self.name == "sched" else "--" + self.name.replace("_", "-")

    @property
    def named(self) -> str:
        """The option as its messages name it, the flag and the keyword (TrainOptions, zoflash.toml):
        one text whichever way the value came."""
        return f"{self.flag} ({self.name}=)"


# The default message of each rule.
RULE_MESSAGES = {
    "range": "{flag} must be in {lo}..{hi}",
    "interval": "{flag} {value:g}: must be in {lo}",
    "pow2": "{flag} {value}: must be a power of two in 1..{hi}",
    "choices": "{flag} {value}: use one of {choices}",
    "pattern": "{flag} '{value}': invalid",
}
FLOAT32_MESSAGE = "{flag} {value:g} does not fit a float32 (at most {hi:.6g})"  # float fields of the C config

_DENSITIES = (
    ", ".join(["1"] + [f"1/{1 << k}" for k in range(1, t.DENSITY_LOG2_MAX)]) + f" or 1/{1 << t.DENSITY_LOG2_MAX}"
)

LAYERS, STEP, LR, LENGTH, SCHED, GUARDS, LOSS, DATA, OUTPUT, CONTINUAL = (
    "Trainable layers",
    "The step",
    "Learning rate",
    "Length and evaluation",
    "q scheduler",
    "Guards",
    "Loss and headroom",
    "Data",
    "Checkpoints",
    "Continual adaptation",
)

OPTIONS: tuple[Option, ...] = (
    Option(
        "train",
        "str",
        "last:1",
        "Trainable layers: last, last:N, all, layers:NAME,NAME,...",
        LAYERS,
        rule=("pattern", r"^(last(:\d+)?|all|layers:(?=.*[^,\s]).+)$"),
        message="{flag} '{value}': use last, last:N, all or layers:NAME,NAME,...",
    ),
    Option("biases_only", "bool", False, "Train only the biases of those layers.", LAYERS),
    Option(
        "max_params",
        "int | None",
        None,
        "Cap on trainable parameters (drops the earliest layers).",
        LAYERS,
        rule=("range", 1, None),
        message="{flag} must be >= 1",
    ),
    Option(
        "batch",
        "int",
        16,
        "Minibatch size b",
        STEP,
        rule=("range", *t.BATCH_RANGE),
        message="{flag} {value}: must be in {lo}..{hi}",
        c=("batch",),
    ),
    Option(
        "eps",
        "int",
        1,
        "Perturbation size in LSB (biases: eps * their eps_b)",
        STEP,
        rule=("range", *t.EPS_RANGE),
        c=("eps",),
        message="{flag} {value}: must be {lo}..{hi} LSB (trainable weights then stay in [-(127 - eps), 127 - eps])",
    ),
    Option(
        "density",
        "float | None",
        None,
        f"Sparse directions: nonzero fraction 1, 1/2, ..., 1/{1 << t.DENSITY_LOG2_MAX}, or auto: "
        f"1 up to {t.AUTO_DENSITY_NONZEROS} trainable values, then the largest with at most "
        f"{t.AUTO_DENSITY_NONZEROS} nonzeros per direction",
        STEP,
        rule=("density",),
        message="{flag} {value:g}: must be " + _DENSITIES,
        c=("density_log2",),
        auto=True,
        shown="auto",
        doc="The C config holds its log2: density = 2^-density_log2. auto (auto_density) is resolved "
        "when the training is compiled, from the trainable values' count: a dense direction over a large "
        "layer moves every weight by the step's noise, and the loss of the MLPerf Tiny autoencoder's "
        "82,560-value layer rose at density 1.",
    ),
    Option(
        "rounding",
        "str",
        "split16",
        "int8 update rounding",
        STEP,
        rule=("choices",),
        choices=t.ROUNDINGS,
        c=("rounding",),
        c_enum="ROUNDINGS",
    ),
    Option(
        "lr",
        "float | None",
        None,
        "Learning rate lr_1, or 'auto' (calibrated on the device)",
        LR,
        rule=("lr",),
        message="{flag} must be a number >= 0 or 'auto'",
        c=("lr_auto", "lr"),
        auto=True,
        shown="auto",
    ),
    Option(
        "rho",
        "float",
        4.0,
        "auto lr: RMS update per step at q = 1, in LSB",
        LR,
        rule=("interval", "(0, inf)"),
        message="{flag} must be > 0",
        c=("rho",),
    ),
    Option(
        "lr_scaling",
        "str",
        "linear",
        "lr at q vs q = 1",
        LR,
        rule=("choices",),
        choices=t.LR_SCALINGS,
        c=("lr_scaling",),
        c_enum="LR_SCALINGS",
        doc='linear: lr at q = lr_1 * q, the ZO theory for q << d (docs/training.md "Learning rate").',
    ),
    Option(
        "lr_decay",
        "str",
        "tail",
        "lr factor over the run (budget or steps): linear 1 - f, step 1/0.1/0.01, tail 1 "
        f"then linear to 0 over the last 1/{t.LR_DECAY_TAIL_DIV}",
        LR,
        rule=("choices",),
        choices=t.LR_DECAYS,
        c=("lr_decay",),
        c_enum="LR_DECAYS",
    ),
    Option(
        "lr_trial",
        "int | None",
        None,
        "lr trial: steps per candidate lr_1 * 2^j before training, 0 off",
        LR,
        rule=("range", 0, UINT32_MAX),
        message="{flag} must be in {lo}..{hi} steps",
        c=("lr_trial_steps",),
        shown=f"{t.LR_TRIAL_STEPS} for the adaptive schedulers with embedded data, else 0",
    ),
    Option(
        "lr_trial_horizon",
        "int",
        t.LR_TRIAL_HORIZON,
        "lr trial: a run longer than this many candidates trains at the chosen rate times "
        "sqrt(this x candidate passes / run passes); 0 keeps the chosen rate",
        LR,
        rule=("range", 0, UINT32_MAX),
        c=("lr_trial_horizon",),
        doc="The best constant rate of a long run falls as 1 / sqrt(its length) once the gradient noise "
        "dominates, and the trial only sees a few candidates' worth of steps. The default knee is calibrated "
        "on the digits, sensor and vision tasks (research records); raise it to keep more of the trial's rate "
        "on long runs.",
    ),
    Option(
        "calib_steps", "int", 8, "auto lr: calibration steps", LR, rule=("range", 1, UINT32_MAX), c=("calib_steps",)
    ),
    Option("calib_q", "int", 8, "auto lr: q during calibration", LR, rule=("pow2", t.Q_LIMIT), c=("calib_q",)),
    Option(
        "seed",
        "int",
        1,
        "Run seed",
        STEP,
        rule=("range", 0, t.SEED_LIMIT - 1),
        message="{flag} must be in 0..2^32-1",
        c=("seed",),
    ),
    Option(
        "steps",
        "int | None",
        None,
        "Training steps",
        LENGTH,
        rule=("range", 1, UINT32_MAX),
        c=("max_steps",),
        shown=f"{t.DEFAULT_STEPS} unless --budget",
        doc="The C config's max_steps: 0 with --budget alone.",
    ),
    Option(
        "budget",
        "int | None",
        None,
        "Forward-pass budget (prefix + suffix sample-passes).",
        LENGTH,
        rule=("range", 1, INT64_MAX),
        c=("max_steps", "budget"),
    ),
    Option(
        "eval_every",
        "int",
        50,
        "Evaluate on the validation and test sets every N steps",
        LENGTH,
        rule=("range", 1, UINT32_MAX),
        c=("eval_every",),
    ),
    Option(
        "scheduler",
        "str",
        "plateau",
        "q scheduler",
        SCHED,
        rule=("choices",),
        choices=t.SCHEDULERS,
        doc="The scheduler's own config (zo_sched_config_t) comes from scheduler, q, q_min, q_max and sched.",
    ),
    Option("q", "int", 1, "q of the fixed scheduler, starting q of plateau/adazeta", SCHED, rule=("pow2", t.Q_LIMIT)),
    Option("q_min", "int", 1, "Smallest q", SCHED, rule=("pow2", t.Q_LIMIT)),
    Option("q_max", "int", t.Q_LIMIT, "Largest q", SCHED, rule=("pow2", t.Q_LIMIT)),
    Option(
        "sched",
        "dict",
        {},
        "Scheduler parameter (repeatable), e.g. tau=0.02, patience=3, alpha=2.",
        SCHED,
        doc='In zoflash.toml a table, [train.sched]; each scheduler\'s parameters: docs/training.md "Schedulers".',
    ),
    Option(
        "bias_bound", "int", 8, "Bound of a step's bias change, in units of eps_b", STEP, rule=("range", 1, INT32_MAX)
    ),
    Option(
        "guard_sat",
        "float",
        0.25,
        "Guard: saturated-logit fraction",
        GUARDS,
        rule=("interval", "(0, 1]"),
        message="{flag} {value:g}: must be in (0, 1]",
        c=("guard_sat",),
    ),
    Option(
        "guard_zero",
        "float",
        0.98,
        "Guard: zero-loss-difference fraction",
        GUARDS,
        rule=("interval", "(0, 1]"),
        message="{flag} {value:g}: must be in (0, 1]",
        c=("guard_zero",),
    ),
    Option(
        "guard_steps",
        "int",
        8,
        "Guard: consecutive steps before a rollback",
        GUARDS,
        rule=("range", 1, UINT32_MAX),
        c=("guard_steps",),
    ),
    Option(
        "guard_loss",
        "float",
        1.5,
        "Guard: roll back when a validation loss exceeds best x this plus "
        "--guard-loss-z standard errors of the validation mean (0 off)",
        GUARDS,
        rule=("off_or_above", 1),
        message="{flag} must be 0 (off) or > 1",
        c=("guard_loss",),
    ),
    Option(
        "guard_loss_z",
        "float",
        2.0,
        "Guard: standard errors of the validation mean added to best x --guard-loss",
        GUARDS,
        rule=("interval", "[0, inf)"),
        message="{flag} must be finite and >= 0",
        c=("guard_loss_z",),
        doc="Without it a small split's loss near 0 crosses best x --guard-loss by noise alone.",
    ),
    Option(
        "guard_max_rollbacks",
        "int",
        10,
        "Guard: stop after this many rollbacks (0 never)",
        GUARDS,
        rule=("range", 0, UINT32_MAX),
        c=("guard_max_rollbacks",),
    ),
    Option(
        "headroom",
        "int | str",
        "auto",
        "Re-quantize the trainable layers with H bits of headroom (scales x 2^H, "
        f"weights / 2^H), 0..{t.HEADROOM_MAX}, or auto: the most bits that keep the trainable weights' RMS at "
        f"least {t.HEADROOM_AUTO_LSB:g} LSB",
        LOSS,
        rule=("headroom",),
        auto=True,
        message="{flag} {value}: must be auto or 0..{hi} bits",
        doc="Resolved to bits when the training is compiled; the model config's headroom_bits.",
    ),
    Option(
        "loss",
        "str",
        "auto",
        "Loss: auto = mse with --target input, sigmoid-bce for one output (labels 0/1), "
        "else softmax-ce; mse for float targets",
        LOSS,
        rule=("choices",),
        choices=t.LOSS_CHOICES,
        doc="The model config's loss, once auto is resolved.",
    ),
    Option(
        "target",
        "str",
        "labels",
        "What the output should match: the data's y, or the sample's own input (autoencoders; no y needed)",
        LOSS,
        rule=("choices",),
        choices=t.TARGETS,
    ),
    Option(
        "output",
        "str | None",
        None,
        "The model output the loss reads, by index or tensor name (models with several outputs; "
        "the others keep running)",
        LOSS,
        rule=("pattern", r"^\S(.*\S)?$", "an output's index or tensor name"),
        shown="0",
        doc="Training refuses a name or index the model does not have, listing its outputs.",
    ),
    Option(
        "data_source",
        "str",
        "embedded",
        "Where training samples come from: built in, fed by the host over the "
        "serial link, or pushed by your own firmware (a library)",
        DATA,
        rule=("choices",),
        choices=t.DATA_SOURCES,
    ),
    Option(
        "buffer",
        "int",
        64,
        "stream/app: samples the device keeps for minibatches",
        DATA,
        rule=("range", *t.BUFFER_RANGE),
        message="{flag} {value}: must be in {lo}..{hi} samples",
    ),
    Option(
        "refresh", "int", 1, "stream/app: new samples before each step", DATA, doc="At most --buffer (checked with it)."
    ),
    Option(
        "val_fraction",
        "float",
        0.1,
        "Share of the training data carved off for validation (guards, snapshots, "
        "best weights; the test set is only reported)",
        DATA,
        rule=("interval", f"({t.VAL_FRACTION_RANGE[0]:g}, {t.VAL_FRACTION_RANGE[1]:g}]"),
        message="{flag} {value:g}: must be in {lo} (the share of the training data kept for validation)",
    ),
    Option(
        "checkpoint_every",
        "int",
        0,
        "Send a checkpoint every N steps (monitor/run --checkpoint keeps it)",
        OUTPUT,
        rule=("range", 0, UINT32_MAX),
        message="{flag} must be in {lo}..{hi} (0: never)",
        shown="0: never",
        c=("checkpoint_every",),
    ),
    Option(
        "mode",
        "str",
        "oneshot",
        "oneshot: train once on the data and stop; continual: serve a stream of samples, detect drift "
        "and adapt in the background, deploying only a significantly better candidate; fleet: train in "
        "rounds with other devices (zoflash fleet)",
        CONTINUAL,
        rule=("choices",),
        choices=t.MODES,
        doc="continual needs --data-source stream (or app: your firmware calls zo_cl_serve); --steps is then the "
        "training steps of one adaptation "
        "episode (docs/guides/continual.md). fleet: the device waits for `zoflash fleet join` to command "
        "its rounds (docs/guides/fleet.md).",
        c=("fleet",),
    ),
    Option(
        "duty",
        "float",
        0.5,
        "continual: training's share of an adaptation episode's sample-passes, at most",
        CONTINUAL,
        rule=("interval", "(0, 1]"),
        message="{flag} {value:g}: must be in (0, 1] (the share of the passes training may take)",
    ),
    Option(
        "holdout",
        "int",
        128,
        "continual: held-back samples the paired test compares the candidate with the deployed weights on",
        CONTINUAL,
        rule=("range", *t.HOLDOUT_RANGE),
        message="{flag} {value}: must be in {lo}..{hi} samples",
    ),
)

OPTION_NAMES = tuple(o.name for o in OPTIONS)
BY_NAME = {o.name: o for o in OPTIONS}


def auto_density(trainable_values: int) -> float:
    """--density auto for a run training this many values: 1 up to t.AUTO_DENSITY_NONZEROS, then
    halved until a direction has at most that many nonzeros, down to 2^-t.DENSITY_LOG2_MAX."""
    log2 = 0
    while log2 < t.DENSITY_LOG2_MAX and trainable_values > t.AUTO_DENSITY_NONZEROS << log2:
        log2 += 1
    return 1.0 / (1 << log2)


TRAIN_DEFAULTS = {o.name: o.default for o in OPTIONS if o.name != "sched"}  # sched: the scheduler's SCHED_DEFAULTS


def shown_default(o: Option) -> str | None:
    """The default as --help and the docs show it (None: not shown)."""
    if o.shown is not None:
        return o.shown
    if o.default is None or o.default is False or o.name == "sched":
        return None
    return f"{o.default:g}" if isinstance(o.default, float) else str(o.default)


def help_text(o: Option) -> str:
    """The --help text: the help, then the default in brackets."""
    shown = shown_default(o)
    return o.help if shown is None else f"{o.help.rstrip('.')} [{shown}]."


def allowed(o: Option) -> str:
    """The valid values in words (docs/options.md)."""
    kind = o.rule[0] if o.rule else None
    text = {
        "range": lambda: f"{o.rule[1]}..{o.rule[2] if o.rule[2] is not None else ''}",
        "interval": lambda: o.rule[1],
        "pow2": lambda: f"a power of two in 1..{o.rule[1]}",
        "choices": lambda: " \\| ".join(f"`{c}`" for c in o.choices),
        "pattern": lambda: o.rule[2] if len(o.rule) > 2 else "`last`, `last:N`, `all`, `layers:NAME,NAME,...`",
        "density": lambda: _DENSITIES,
        "headroom": lambda: f"`auto` or 0..{t.HEADROOM_MAX}",
        "lr": lambda: "`auto` or a number >= 0",
        "off_or_above": lambda: f"0 (off) or > {o.rule[1]}",
    }.get(kind, lambda: "")()
    if o.type == "bool":
        text = "flag"
    return text + (" or unset" if o.default is None and kind not in ("lr",) else "")


def markdown() -> str:
    """docs/options.md."""
    lines = [
        "# Training options",
        "",
        "<!-- generated by `python -m zoflash.spec.options --markdown > docs/options.md` from",
        "     host/zoflash/spec/options.py; do not edit (tests/test_options_table.py checks it) -->",
        "",
        "Every option is a flag of `zoflash build`, `simulate` and `run` and a key of the "
        "`[train]` table of `zoflash.toml` (flags win over the file, the file over the defaults). "
        "The same checks apply wherever a value comes from. Meanings in depth: docs/training.md.",
        "",
    ]
    for group in dict.fromkeys(o.group for o in OPTIONS):
        lines += [
            f"## {group}",
            "",
            "| flag | `[train]` key | default | valid values | C config |",
            "|---|---|---|---|---|",
        ]
        rows = [o for o in OPTIONS if o.group == group]
        for o in rows:
            flag = f"`{o.flag} NAME=VALUE`" if o.name == "sched" else f"`{o.flag}`"
            key = "`[train.sched]`" if o.name == "sched" else f"`{o.name}`"
            lines.append(
                f"| {flag} | {key} | {shown_default(o) or '-'} | {allowed(o) or '-'} | "
                f"{', '.join(f'`{c}`' for c in o.c) or '-'} |"
            )
        lines.append("")
        for o in rows:
            lines.append(f"- `{o.flag}`: {o.help.rstrip('.')}." + (f" {o.doc}" if o.doc else ""))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m zoflash.spec.options --markdown > docs/options.md")
    sys.stdout.write(markdown())
