"""The table of the training options (spec/options.py) and what is derived from it: the
TrainOptions fields, the flags, the zo_train_config_t fields, one message per problem wherever a
value comes from, and docs/options.md."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from zoflash import api
from zoflash.cli import main
from zoflash.cli.build import build
from zoflash.spec import options as table
from zoflash.spec import training as spec
from zoflash.training.options import OptionsError, TrainOptions, make_options
from zoflash.training.render import train_config, train_config_fields

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "tests" / "fixtures" / "mlp.tflite"
HEADER = ROOT / "firmware_templates" / "runtime" / "training" / "zo_trainer.h"


def _header_config_fields() -> list[str]:
    """zo_train_config_t's field names, read from the C header."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"typedef struct \{([^}]*)\} zo_train_config_t;", text).group(1)
    return [re.match(r"\s*[\w ]+?\s+(\w+)$", d).group(1) for d in body.split(";") if d.strip()]


def test_every_c_field_of_the_table_is_in_the_header_and_every_header_field_has_an_option():
    header = _header_config_fields()
    assert header[-1] == "sched"  # zo_sched_config_t: from scheduler, q, q_min, q_max and sched
    table_fields = {c for o in table.OPTIONS for c in o.c}
    assert table_fields == set(header) - {"sched"}, table_fields ^ (set(header) - {"sched"})
    assert list(train_config_fields()) == header[:-1]
    # --density auto is resolved when the training is compiled: the C config takes a resolved one
    assert list(train_config(TrainOptions(density=1.0))) == header[:-1]


def test_c_enums_name_spec_tables():
    for o in table.OPTIONS:
        if o.c_enum:
            assert tuple(getattr(spec, o.c_enum)) == o.choices, o.name


def test_train_options_fields_are_the_table():
    fields = dataclasses.fields(TrainOptions)
    assert [f.name for f in fields] == [o.name for o in table.OPTIONS]
    opts = TrainOptions()
    for o in table.OPTIONS:
        assert getattr(opts, o.name) == o.default, o.name
        assert dict((f.name, f.type) for f in fields)[o.name] == o.type
    assert {o.name: o.default for o in table.OPTIONS if o.name != "sched"} == table.TRAIN_DEFAULTS
    # the defaults are valid values of the spec's tables
    assert table.TRAIN_DEFAULTS["rounding"] in spec.ROUNDINGS and table.TRAIN_DEFAULTS["scheduler"] in spec.SCHEDULERS


def test_every_option_has_its_flag_with_the_default_in_its_help():
    params = {p.opts[0]: p for p in build.params if isinstance(p, click.Option)}
    for o in table.OPTIONS:
        p = params[o.flag]
        shown = table.shown_default(o)
        if shown is not None:
            assert p.help.endswith(f"[{shown}]."), (o.flag, p.help)
        if o.choices:
            assert p.metavar == "[" + "|".join(o.choices) + "]"


@pytest.mark.parametrize(
    "name, bad",
    [
        ("rounding", "down"),
        ("batch", 0),
        ("guard_sat", 0.0),
        ("calib_q", 3),
        ("val_fraction", 0.7),
        ("headroom", 9),
        ("scheduler", "random"),
    ],
)
def test_one_message_from_the_api_the_project_file_and_the_command_line(tmp_path, monkeypatch, capsys, name, bad):
    monkeypatch.chdir(tmp_path)
    o = table.BY_NAME[name]
    with pytest.raises(OptionsError) as exc:
        make_options(**{name: bad})
    listed = [line for line in str(exc.value).splitlines() if line.startswith("  - ")]
    assert len(listed) == 1 and o.named in listed[0], listed
    toml_value = f'"{bad}"' if isinstance(bad, str) else bad
    (tmp_path / "p.toml").write_text(f"[train]\n{name} = {toml_value}\n")
    with pytest.raises(OptionsError) as exc:
        make_options(tmp_path / "p.toml")
    assert [line for line in str(exc.value).splitlines() if line.startswith("  - ")] == listed
    assert (
        main(
            [
                "build",
                "--board",
                "host",
                "--model",
                str(ROOT / "tests" / "fixtures" / "mlp.tflite"),
                "--data",
                "nope.npz",
                "--no-compile",
                o.flag,
                str(bad),
            ]
        )
        == 2
    )
    assert listed[0] in capsys.readouterr().err


def test_the_options_page_is_generated_from_the_table():
    page = (ROOT / "docs" / "options.md").read_text()
    assert page == table.markdown(), (
        "docs/options.md is stale: python -m zoflash.spec.options --markdown > docs/options.md"
    )
    out = subprocess.run(
        [sys.executable, "-m", "zoflash.spec.options", "--markdown"], capture_output=True, text=True, check=True
    ).stdout
    assert out == page
    for o in table.OPTIONS:
        assert f"`{o.flag}`" in page or o.name == "sched"


def _out_of_range(o: table.Option):
    """A value the option's rule refuses, of the option's type (a new rule kind needs a case here)."""
    kind = o.rule[0]
    if kind == "range":
        return o.rule[1] - 1
    if kind == "interval":
        lo, hi = (float(x) for x in o.rule[1][1:-1].split(","))
        return hi + 1 if math.isfinite(hi) else lo - 1
    if kind == "off_or_above":
        return o.rule[1] / 2
    if kind == "pattern":  # the first of these the option's regex refuses
        return next(v for v in ("bogus", " ") if not re.match(o.rule[1], v))
    value = {
        "pow2": 3,
        "choices": "bogus",
        "density": 0.3,
        "headroom": spec.HEADROOM_MAX + 1,
        "lr": -1.0,
    }.get(kind)
    assert value is not None, f"{o.name}: no out-of-range value for rule '{kind}': add one to this test"
    return value


RULED = [o for o in table.OPTIONS if o.rule]


@pytest.mark.parametrize("o", RULED, ids=[o.name for o in RULED])
def test_the_api_and_the_cli_refuse_every_out_of_range_value_with_the_same_text(tmp_path, monkeypatch, capsys, o):
    """Every option with a rule in the table: TrainOptions(...) (what api.simulate, run and build
    take), dataclasses.replace and the command line refuse the value with one text, naming the
    option both ways."""
    monkeypatch.chdir(tmp_path)
    bad = _out_of_range(o)
    with pytest.raises(OptionsError) as exc:
        TrainOptions(**{o.name: bad})
    text = str(exc.value)
    assert f"  - {o.named}" in text, text
    with pytest.raises(OptionsError) as exc:
        dataclasses.replace(TrainOptions(), **{o.name: bad})
    assert str(exc.value) == text
    argv = ["build", "--board", "host", "--model", str(MLP), "--data", "nope.npz", "--no-compile", f"{o.flag}={bad}"]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"error: {text}\n"


def test_the_api_refuses_what_users_passed_it():
    with pytest.raises(OptionsError, match=r"--batch \(batch=\) -1: must be in 1\.\.1024"):
        api.TrainOptions(batch=-1)
    with pytest.raises(OptionsError, match=r"--val-fraction \(val_fraction=\) 0\.9: must be in \(0, 0\.5\]"):
        api.TrainOptions(val_fraction=0.9)
    with pytest.raises(OptionsError, match=r"--batch \(batch=\) '16': expected an integer"):
        api.TrainOptions(batch="16")  # the command line converts its text; Python passes values as they are
    opts = api.TrainOptions(lr="auto", headroom="AUTO", rho=2)  # the spellings the command line takes
    assert (opts.lr, opts.headroom, opts.rho) == (None, "auto", 2.0) and isinstance(opts.rho, float)
