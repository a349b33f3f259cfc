"""Training options (zoflash.training.options): the documented defaults, defaults < zoflash.toml
[train] < command line, and validation that reports every problem of a combination in one
OptionsError before anything is generated (docs/training.md)."""

from __future__ import annotations

import pytest

from zoflash.errors import ZoflashError
from zoflash.training.options import (
    OptionsError,
    TrainOptions,
    load_project_file,
    make_options,
    parse_sched_params,
    validate,
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """make_options() reads ./zoflash.toml when it exists: never the checkout's."""
    monkeypatch.chdir(tmp_path)


def project(tmp_path, text: str, name: str = "zoflash.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(err: OptionsError) -> list[str]:
    """The listed problems of an OptionsError ("  - ..." lines)."""
    return [line[4:] for line in str(err).splitlines() if line.startswith("  - ")]


def error_of(**kw) -> OptionsError:
    with pytest.raises(OptionsError) as exc:
        make_options(**kw)
    return exc.value


# ------------------------------------------------------------------------------------ defaults


def test_defaults_are_the_documented_ones():
    o = make_options()
    assert o == TrainOptions()
    assert (o.train, o.biases_only, o.max_params) == ("last:1", False, None)
    # density None = auto: resolved from the trained values' count when the training is compiled
    assert (o.batch, o.eps, o.density, o.rounding, o.seed) == (16, 1, None, "split16", 1)
    assert o.lr is None and o.lr_auto
    assert (o.rho, o.lr_scaling, o.calib_steps, o.calib_q) == (4.0, "linear", 8, 8)
    assert (o.steps, o.budget, o.max_steps, o.eval_every) == (None, None, 500, 50)
    assert (o.scheduler, o.q, o.q_min, o.q_max, o.sched) == ("plateau", 1, 1, 64, {})
    # docs/training.md, "Guards and rollback": guard_sat 0.25, guard_zero 0.98, guard_steps 8
    assert (o.bias_bound, o.guard_sat, o.guard_zero, o.guard_steps) == (8, 0.25, 0.98, 8)
    # docs/training.md, "plateau": q0 = 1, tau = 0.01, z = 2, patience 2, window 4096 passes / 16-128 steps
    p = o.sched_params()
    assert (p["q0"], p["q_min"], p["q_max"]) == (1, 1, 64)
    assert (p["tau"], p["z"], p["patience"], p["window_passes"], p["window_min_steps"], p["window_max_steps"]) == (
        0.01,
        2.0,
        2,
        4096,
        16,
        128,
    )
    assert not p["stop_when_capped"]


@pytest.mark.parametrize("density, log2", [(1, 0), (0.5, 1), (0.25, 2), (0.125, 3), (0.0625, 4)])
def test_density_log2(density, log2):
    assert make_options(density=density).density_log2 == log2


def test_validate_returns_valid_options_and_raises_on_invalid():
    o = TrainOptions(batch=4, scheduler="fixed", q=8)
    assert validate(o) is o
    with pytest.raises(OptionsError):
        validate(TrainOptions(batch=0))
    assert issubclass(OptionsError, ZoflashError) and OptionsError("x").exit_code == 2


# ---------------------------------------------------------------------------------- precedence


TOML = """
[train]
batch = 8
seed = 7
scheduler = "plateau"
q = 2
lr = 0.25
rounding = "nearest"
density = 0.5
budget = 5000

[train.sched]
tau = 0.02
patience = 3
"""


def test_project_file_over_defaults(tmp_path):
    o = make_options(project(tmp_path, TOML, "p.toml"))
    assert (o.batch, o.seed, o.q, o.lr, o.rounding, o.density_log2) == (8, 7, 2, 0.25, "nearest", 1)
    assert o.budget == 5000 and o.steps is None and o.max_steps == 0  # budget only
    assert o.sched == {"tau": 0.02, "patience": 3}
    p = o.sched_params()
    assert (p["tau"], p["patience"], p["q0"]) == (0.02, 3, 2)
    assert o.eval_every == 50  # not in the file: default


def test_flags_over_project_file(tmp_path):
    path = project(tmp_path, TOML, "p.toml")
    o = make_options(path, batch=32, seed=None, lr="auto", rounding="stochastic", sched={"patience": 5})
    assert o.batch == 32  # flag wins
    assert o.seed == 7  # None = flag not given: the file's value stays
    assert o.lr is None and o.lr_auto  # 'auto' on the command line replaces the file's number
    assert o.rounding == "stochastic"
    assert o.sched == {"tau": 0.02, "patience": 5}  # parameters merge, the flag's value wins
    assert o.budget == 5000


def test_steps_on_the_command_line_replace_a_project_budget(tmp_path):
    path = project(tmp_path, TOML, "p.toml")
    o = make_options(path, steps=40)
    assert (o.steps, o.budget, o.max_steps) == (40, None, 40)
    # and the other way round
    path2 = project(tmp_path, "[train]\nsteps = 100\n", "q.toml")
    o = make_options(path2, budget=1000)
    assert (o.steps, o.budget, o.max_steps) == (None, 1000, 0)
    assert make_options(path2).max_steps == 100


def test_steps_and_budget_exclude_each_other(tmp_path):
    assert "not both" in str(error_of(steps=10, budget=100))
    with pytest.raises(OptionsError, match="not both"):
        make_options(project(tmp_path, "[train]\nsteps = 10\nbudget = 100\n"))


def test_cwd_project_file_is_used_and_an_explicit_one_wins(tmp_path):
    project(tmp_path, "[train]\nbatch = 4\n")  # ./zoflash.toml
    assert make_options().batch == 4
    assert make_options(batch=2).batch == 2
    assert make_options(project(tmp_path, "[train]\nbatch = 64\n", "other.toml")).batch == 64


def test_project_file_without_train_table(tmp_path):
    assert make_options(project(tmp_path, "# nothing to set yet\n", "p.toml")) == TrainOptions()


@pytest.mark.parametrize("text", ["[trian]\nsteps = 5\n", "[board]\nid = 'host'\n"])
def test_a_table_zoflash_does_not_read_is_an_error_not_ignored(tmp_path, text):
    with pytest.raises(OptionsError, match=r"unknown table\(s\) \[\w+\]; zoflash.toml holds \[train\]"):
        make_options(project(tmp_path, text, "p.toml"))


def test_a_project_file_that_is_not_utf8_is_an_error(tmp_path):
    path = tmp_path / "p.toml"
    path.write_bytes(b"[train]\nsteps = 5\n\xff = 1\n")
    with pytest.raises(OptionsError, match="not UTF-8"):
        make_options(path)


# ------------------------------------------------------------------------------------ the lr


@pytest.mark.parametrize(
    "given, expected",
    [("auto", None), ("AUTO", None), ("0.5", 0.5), (0.125, 0.125), ("3", 3.0), (0, 0.0), ("1e-3", 1e-3)],
)
def test_lr_auto_or_number(given, expected):
    o = make_options(lr=given)
    assert o.lr == expected and o.lr_auto == (expected is None)
    if expected is not None:
        assert isinstance(o.lr, float)


@pytest.mark.parametrize("given", ["-1", -0.5, "nan", "inf"])
def test_lr_negative_or_not_finite(given):
    err = error_of(lr=given)
    assert any("--lr" in p for p in problems(err))


def test_lr_not_a_number():
    with pytest.raises(OptionsError, match="lr"):
        make_options(lr="fast")


@pytest.mark.parametrize("text, expected", [('lr = "auto"', None), ("lr = 0.5", 0.5), ("lr = 2", 2.0)])
def test_lr_in_project_file(tmp_path, text, expected):
    assert make_options(project(tmp_path, f"[train]\n{text}\n", "p.toml")).lr == expected


def test_negative_lr_in_project_file(tmp_path):
    with pytest.raises(OptionsError, match=r"--lr \(lr=\) must be a number >= 0"):
        make_options(project(tmp_path, "[train]\nlr = -0.5\n", "p.toml"))


# ---------------------------------------------------------------------------- invalid options


INVALID = [
    (dict(batch=0), "--batch (batch=) 0"),
    (dict(batch=2000), "--batch (batch=) 2000"),
    (dict(eps=0), "--eps (eps=) 0"),
    (dict(eps=9), "--eps (eps=) 9"),
    (dict(density=0.3), "--density (density=) 0.3"),
    (dict(density=0), "--density (density=) 0"),
    (dict(density=2), "--density (density=) 2"),
    (dict(density=1 / 32), "--density"),
    (dict(q=3), "--q (q=) 3"),
    (dict(q_max=48), "--q-max (q_max=) 48"),
    (dict(q_min=0), "--q-min (q_min=) 0"),
    (dict(q=8, q_max=4), "--q-min <= --q <= --q-max"),
    (dict(q=1, q_min=2), "--q-min <= --q <= --q-max"),
    (dict(calib_q=3), "--calib-q"),
    (dict(calib_steps=0), "--calib-steps"),
    (dict(steps=0), "--steps"),
    (dict(budget=0), "--budget"),
    (dict(eval_every=0), "--eval-every"),
    (dict(seed=-1), "--seed"),
    (dict(seed=2**32), "--seed"),
    (dict(train="first"), "--train (train=) 'first'"),
    (dict(train="last:0"), "last:N needs N >= 1"),
    (dict(max_params=0), "--max-params"),
    (dict(rounding="down"), "--rounding (rounding=) down"),
    (dict(lr_scaling="log"), "--lr-scaling (lr_scaling=) log"),
    (dict(scheduler="random"), "--scheduler (scheduler=) random"),
    (dict(rho=0), "--rho"),
    (dict(bias_bound=0), "--bias-bound"),
    (dict(guard_sat=0), "guard"),
    (dict(guard_zero=1.5), "guard"),
    (dict(guard_steps=0), "--guard-steps"),
    (dict(sched={"bogus": 1}), "no parameter bogus"),
]


@pytest.mark.parametrize("kw, text", INVALID, ids=[str(kw) for kw, _ in INVALID])
def test_each_invalid_option_is_reported(kw, text):
    found = problems(error_of(**kw))
    assert len(found) == 1, found
    assert text in found[0]


def test_q_beyond_the_limit():
    found = problems(error_of(q=128))
    assert any("--q (q=) 128" in p for p in found) and all("q" in p for p in found), found


def test_all_problems_in_one_error():
    err = error_of(batch=0, density=0.3, q=3, steps=10, budget=10, lr=-1, sched={"bogus": 1})
    found = problems(err)
    for text in ("--batch (batch=) 0", "--density (density=) 0.3", "--q (q=) 3", "not both", "--lr", "bogus"):
        assert sum(text in p for p in found) == 1, (text, found)
    assert len(found) == 6, found


def test_scheduler_value_problems_are_listed_with_the_others():
    found = problems(error_of(batch=0, scheduler="plateau", sched={"patience": 0}))
    assert any("--batch (batch=) 0" in p for p in found)
    assert any("patience" in p for p in found), found
    found = problems(error_of(batch=0, q=3, scheduler="critical", sched={"floor": 1.5}))
    assert any("floor" in p for p in found) and any("--q (q=) 3" in p for p in found), found


# ------------------------------------------------------------------------- scheduler parameters


@pytest.mark.parametrize(
    "scheduler, param, value, ok",
    [
        ("fixed", "tau", 0.02, False),
        ("fixed", "patience", 3, False),
        ("plateau", "tau", 0.02, True),
        ("plateau", "patience", 3, True),
        ("plateau", "stop_when_capped", 1, True),
        ("plateau", "alpha", 2, False),
        ("plateau", "c", 1.0, False),
        ("critical", "c", 2.0, True),
        ("critical", "centre_every", 4, True),
        ("critical", "tau", 0.02, False),
        ("adazeta", "alpha", 2.0, True),
        ("adazeta", "beta", 0.5, True),
        ("adazeta", "window_passes", 100, False),
        ("adazeta", "patience", 2, False),
    ],
)
def test_scheduler_params_are_checked_per_scheduler(scheduler, param, value, ok):
    q = {"scheduler": scheduler}
    if ok:
        o = make_options(sched={param: value}, **q)
        assert o.sched_params()[param] == value
    else:
        found = problems(error_of(sched={param: value}, **q))
        assert len(found) == 1 and param in found[0] and f"'{scheduler}'" in found[0], found


def test_rejected_scheduler_param_lists_what_the_scheduler_takes():
    assert "it takes: none" in str(error_of(scheduler="fixed", sched={"tau": 0.1}))
    text = str(error_of(scheduler="plateau", sched={"alpha": 2}))
    for name in ("tau", "z", "patience", "window_passes"):
        assert name in text.split("it takes:")[1]


@pytest.mark.parametrize(
    "scheduler, sched, text",
    [
        ("plateau", {"tau": -1}, "tau"),
        ("plateau", {"patience": 0}, "patience"),
        ("plateau", {"window_passes": 0}, "window_passes"),
        ("plateau", {"stop_when_capped": 2}, "stop_when_capped"),
        ("critical", {"floor": 1.5}, "floor"),
        ("critical", {"floor": 0}, "floor"),
        ("critical", {"calib_q": 3}, "calib_q"),
        ("critical", {"calib_q": 128}, "calib_q"),
        ("adazeta", {"alpha": 0}, "alpha"),
    ],
)
def test_scheduler_param_values(scheduler, sched, text):
    found = problems(error_of(scheduler=scheduler, sched=sched))
    assert len(found) == 1 and text in found[0], found


def test_q_range_params_are_not_silently_ignored_in_sched():
    """q0/q_min/q_max come from --q/--q-min/--q-max; as scheduler parameters they must either
    take effect or be refused, never be dropped without a word."""
    for key, value in (("q0", 4), ("q_max", 8), ("q_min", 2)):
        try:
            o = make_options(sched={key: value})
        except OptionsError as err:
            assert key in str(err)
        else:
            assert o.sched_params()[key] == value, f"sched {key}={value} was silently ignored"


def test_scheduler_params_in_project_file_checked_against_its_scheduler(tmp_path):
    path = project(tmp_path, '[train]\nscheduler = "fixed"\nq = 4\n[train.sched]\ntau = 0.02\n', "p.toml")
    with pytest.raises(OptionsError, match="'fixed' has no parameter tau"):
        make_options(path)
    # switching the scheduler on the command line to one that has tau makes it valid
    assert make_options(path, scheduler="plateau").sched_params()["tau"] == 0.02


def test_parse_sched_params():
    got = parse_sched_params(("tau=0.02", "patience=3", "stop-when-capped=1", " z = 2.5 "))
    assert got == {"tau": 0.02, "patience": 3, "stop_when_capped": 1, "z": 2.5}
    assert isinstance(got["patience"], int) and isinstance(got["tau"], float)
    assert parse_sched_params(()) == {}
    for bad in ("tau", "=3", "tau=abc", "tau="):
        with pytest.raises(OptionsError):
            parse_sched_params((bad,))


# ------------------------------------------------------------------------------- project file


def test_unknown_project_key_is_named_with_the_known_ones(tmp_path):
    path = project(tmp_path, "[train]\nbatch = 8\nbatchsize = 4\neval-every = 3\n", "p.toml")
    with pytest.raises(OptionsError) as exc:
        load_project_file(path)
    text = str(exc.value)
    assert "batchsize" in text and "eval-every" in text and "known:" in text and "eval_every" in text
    with pytest.raises(OptionsError):
        make_options(path)


def test_bad_toml_syntax(tmp_path):
    path = project(tmp_path, "[train]\nbatch = = 8\n", "p.toml")
    with pytest.raises(OptionsError, match="not valid TOML"):
        make_options(path)
    # a broken ./zoflash.toml is reported too, not skipped
    project(tmp_path, "[train\n")
    with pytest.raises(OptionsError, match="not valid TOML"):
        make_options()


def test_missing_project_file(tmp_path):
    with pytest.raises(OptionsError, match="does not exist"):
        make_options(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "text",
    [
        'batch = "lots"',
        "batch = 2.5",
        "biases_only = 1",
        "train = 3",
        "sched = 3",
        'sched = {tau = "x"}',
        "batch = true",
    ],
)
def test_bad_project_values(tmp_path, text):
    with pytest.raises(OptionsError):
        make_options(project(tmp_path, f"[train]\n{text}\n", "p.toml"))


def test_train_must_be_a_table(tmp_path):
    with pytest.raises(OptionsError, match="table"):
        make_options(project(tmp_path, "train = 3\n", "p.toml"))


def test_project_values_are_validated_like_flags(tmp_path):
    path = project(tmp_path, "[train]\nbatch = 0\ndensity = 0.3\nq = 3\n", "p.toml")
    found = problems(error_of(project_file=path))
    assert len(found) == 3
    # a flag fixing one of them leaves the other two
    assert len(problems(error_of(project_file=path, batch=4))) == 2


def test_unknown_override_key():
    with pytest.raises(OptionsError, match="unknown training option"):
        make_options(batchsize=4)


def test_describe_names_the_run():
    text = make_options(steps=40, lr=0.5, scheduler="fixed", q=4).describe()
    assert "40 steps" in text and "lr 0.5" in text and "scheduler fixed" in text
    assert "budget 9 passes" in make_options(budget=9).describe()
    assert "lr auto" in make_options().describe()
