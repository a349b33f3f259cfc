"""`zoflash replay`: the trained tensors rebuilt from the base model and a run's log alone, byte
for byte equal to the run's own weights (docs/training.md "Update log")."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ENDS_WORSE_THAN_BEST, FIXTURES

from zoflash.cli.main import main
from zoflash.errors import DataError
from zoflash.monitor.session import read_log
from zoflash.spec import wire
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.replay import replay
from zoflash.workflows.simulate import simulate

pytestmark = pytest.mark.cc

DIGITS = FIXTURES / "digits_cnn.tflite"
MLP = FIXTURES / "mlp.tflite"
SHIFT = FIXTURES / "digits_shift.npz"


@pytest.fixture(scope="module")
def mlp_data(tmp_path_factory):
    """The shifted digits, flattened for the MLP (64 inputs)."""
    d = np.load(SHIFT)
    path = tmp_path_factory.mktemp("data") / "digits_flat.npz"
    n = len(d["x_train"])
    np.savez(
        path,
        x_train=d["x_train"].reshape(n, -1),
        y_train=d["y_train"],
        x_test=d["x_test"].reshape(len(d["x_test"]), -1)[:200],
        y_test=d["y_test"][:200],
    )
    return path


def assert_same_weights(replayed, trained):
    a, b = load_weights(replayed), load_weights(trained)
    assert a.model_sha256 == b.model_sha256 and a.headroom == b.headroom
    assert a.tensors.keys() == b.tensors.keys() == a.best.keys() == b.best.keys()
    assert a.residuals.keys() == b.residuals.keys()
    for i in b.tensors:
        for got, want in ((a.tensors[i], b.tensors[i]), (a.best[i], b.best[i])):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), i
        if i in b.residuals:
            assert a.residuals[i].tobytes() == b.residuals[i].tobytes(), i
        if i in b.scales:
            np.testing.assert_array_equal(a.scales[i], b.scales[i])


CASES = {
    "digits-plateau": (DIGITS, None, dict(steps=400, eval_every=50)),
    "digits-fixed-q8-stochastic": (
        DIGITS,
        None,
        dict(scheduler="fixed", q=8, steps=120, eval_every=40, rounding="stochastic"),
    ),
    "digits-guard-rollback": (
        DIGITS,
        None,
        dict(scheduler="fixed", q=1, lr=20000.0, steps=120, eval_every=20, guard_steps=4),
    ),
    "digits-loss-rollback": (
        DIGITS,
        None,
        dict(
            scheduler="fixed",
            q=1,
            lr=3000.0,
            steps=300,
            eval_every=10,
            guard_steps=1000,
            guard_loss=1.2,
            guard_max_rollbacks=3,
        ),
    ),
    # no step beat the start by the end: the run ends on the best weights (a restore at the end)
    "mlp-end-rollback": ("mlp", None, ENDS_WORSE_THAN_BEST),
    "mlp-all-critical-nearest": (
        "mlp",
        None,
        dict(scheduler="critical", train="all", steps=120, eval_every=30, batch=8, rounding="nearest", density=0.25),
    ),
    "mlp-lr-trial-plateau": ("mlp", None, dict(lr_trial=8, steps=200, eval_every=25)),
    "mlp-biases": (
        "mlp",
        "last:2",
        dict(train="last:2", biases_only=True, lr=50.0, q=4, scheduler="fixed", steps=80, eval_every=25),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_replay_rebuilds_the_c_runs_weights(tmp_path, mlp_data, case):
    model, train, options = CASES[case]
    model, data = (MLP, mlp_data) if model == "mlp" else (model, SHIFT)
    run = simulate(model, data, make_options(**options), tmp_path / "run.jsonl", engine="c", plot=False)
    plan = make_options(**{k: v for k, v in options.items() if k in ("train", "biases_only")})
    result = replay(model, run.log_path, tmp_path / "replayed.npz", plan)
    assert_same_weights(tmp_path / "replayed.npz", run.weights_path)
    flags = [
        e.flags
        for r in run.records
        if r["type"] == "updates"
        for e in wire.parse_updates(r["step"], r["steps"], bytes.fromhex(r["entries"]))
    ]
    assert result.steps == run.done["steps"] == len(flags)
    assert result.updates == sum(f & wire.UPDATE_APPLIED != 0 for f in flags) > 0
    if "rollback" in case:  # the markers were exercised
        assert any(f & wire.UPDATE_RESTORE for f in flags)
    if "trial" in case:
        assert any(f & wire.UPDATE_TRIAL for f in flags)
    if case == "digits-plateau":  # a run that improves takes snapshots (the best weights)
        assert any(f & wire.UPDATE_SNAPSHOT for f in flags)


def test_replay_of_the_reference_log_and_bytes_per_update(tmp_path, capsys):
    """The reference's log (equal to the C's, tests/test_training.py) replays too; the command
    prints the update count and the bytes per update, which stay within the log's budget."""
    opts = make_options(scheduler="fixed", q=1, steps=200, eval_every=50)
    run = simulate(DIGITS, SHIFT, opts, tmp_path / "ref.jsonl", engine="reference", plot=False)
    out = tmp_path / "adapted.tflite"
    code = main(["replay", "--model", str(DIGITS), "--log", str(run.log_path), "--out", str(out), "--select", "last"])
    text = capsys.readouterr().out
    assert code == 0, text
    line = next(x for x in text.splitlines() if x.startswith("replayed "))
    n, frame_bytes, per = line.split()[1], line.split()[4], float(line.split("(")[1].split()[0])
    assert int(n) == 200 - 8  # the auto lr's 8 calibration steps apply nothing
    assert per == pytest.approx(int(frame_bytes) / int(n), abs=0.01) and per <= 16  # q = 1
    assert out.is_file()
    code = main(["replay", "--model", str(DIGITS), "--log", str(run.log_path), "--out", str(tmp_path / "w.npz")])
    assert code == 0
    assert_same_weights(tmp_path / "w.npz", run.weights_path)


@pytest.fixture(scope="module")
def digits_log(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("log")
    opts = make_options(scheduler="fixed", q=2, steps=300, eval_every=50)
    return simulate(DIGITS, SHIFT, opts, tmp / "run.jsonl", engine="c", plot=False).log_path


def _rewrite(path, records, keep):
    out = path.with_name("tampered.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for k, r in enumerate(records) if keep(k, r)))
    return out


def test_replay_refuses_a_log_with_a_gap_or_of_another_model(tmp_path, digits_log, mlp_data):
    records = read_log(digits_log)
    frames = [k for k, r in enumerate(records) if r["type"] == "updates"]
    assert len(frames) >= 3
    gap = _rewrite(tmp_path / "a", records, lambda k, r: k != frames[1])
    with pytest.raises(DataError, match=r"misses the updates of steps \d+\.\.\d+ \(a lost updates frame\)"):
        replay(DIGITS, gap, tmp_path / "w.npz")
    last = _rewrite(tmp_path / "b", records, lambda k, r: k != frames[-1])
    with pytest.raises(DataError, match="the last updates frame is missing"):
        replay(DIGITS, last, tmp_path / "w.npz")
    twice = _rewrite(tmp_path / "t", records[: frames[1] + 1] + records[frames[1] :], lambda k, r: True)
    with pytest.raises(DataError, match=r"has the updates of step \d+ twice"):
        replay(DIGITS, twice, tmp_path / "w.npz")
    bad = [dict(r, entries="zz") if k == frames[0] else r for k, r in enumerate(records)]
    with pytest.raises(DataError, match="an updates record that does not decode"):
        replay(DIGITS, _rewrite(tmp_path / "d", bad, lambda k, r: True), tmp_path / "w.npz")
    cut = [dict(r, entries=r["entries"][:-2]) if k == frames[0] else r for k, r in enumerate(records)]
    with pytest.raises(DataError, match=r"step \d+ is cut short\): a damaged log"):
        replay(DIGITS, _rewrite(tmp_path / "c", cut, lambda k, r: True), tmp_path / "w.npz")
    with pytest.raises(DataError, match="not of .*mlp.tflite.*replay it on the model that run started from"):
        replay(MLP, digits_log, tmp_path / "w.npz")
    with pytest.raises(DataError, match="pass the --train, --biases-only and --max-params"):
        replay(DIGITS, digits_log, tmp_path / "w.npz", make_options(train="last:2"))
    # a log cut short (no done record) replays what it has, and says so
    head = _rewrite(tmp_path / "e", records, lambda k, r: k <= frames[1])
    result = replay(DIGITS, head, tmp_path / "head.npz")
    assert not result.complete and "no done record: these are the weights after its step" in result.summary()
    assert not (tmp_path / "w.npz").exists()
    # the CLI says it in one line, no traceback
    code = main(["replay", "--model", str(MLP), "--log", str(digits_log), "--out", str(tmp_path / "w.npz")])
    assert code != 0


@pytest.mark.cross
@pytest.mark.qemu
def test_replay_of_an_emulated_m55_run(tmp_path, capsys):
    """A board's log (the Cortex-M55 under QEMU, through `zoflash run`'s monitor) replays to the
    weights the board sent, headroom scales included."""
    log = tmp_path / "m55.jsonl"
    args = ["run", "--board", "mps3-an547", "--out", str(tmp_path / "bundle"), "--log", str(log), "--timeout", "300"]
    args += ["--model", str(DIGITS), "--data", str(SHIFT), "--steps", "80", "--eval-every", "20"]
    assert main(args + ["--scheduler", "fixed", "--q", "2"]) == 0
    capsys.readouterr()
    assert main(["replay", "--model", str(DIGITS), "--log", str(log), "--out", str(tmp_path / "w.npz")]) == 0
    assert "replayed 72 updates from " in capsys.readouterr().out  # 80 steps, 8 of lr calibration
    assert_same_weights(tmp_path / "w.npz", tmp_path / "m55.weights.npz")
