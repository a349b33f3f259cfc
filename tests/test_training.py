"""End to end: the generated training C (host simulation) against the independent Python
reference, record for record and weight for weight; training really adapts the digits model to
the shifted domain; the trained weights exported into a .tflite run identically in tflite-micro.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import ENDS_WORSE_THAN_BEST, FIXTURES

from zoflash.monitor.live_view import LiveView
from zoflash.monitor.session import comparable, read_log
from zoflash.reference import zo_math as zm
from zoflash.reference.forward import ReferenceForward
from zoflash.spec import training as spec
from zoflash.training.options import make_options
from zoflash.training.weights_file import load_weights
from zoflash.workflows.simulate import simulate
from zoflash.workflows.training import compile_for_training

pytestmark = pytest.mark.cc

DIGITS = FIXTURES / "digits_cnn.tflite"
MLP = FIXTURES / "mlp.tflite"
SHIFT = FIXTURES / "digits_shift.npz"
END = spec.ROLLBACK_CAUSE_IDS["end"]


@pytest.fixture(scope="module")
def mlp_data(tmp_path_factory):
    """The shifted digits, flattened for the MLP (64 inputs)."""
    d = np.load(SHIFT)
    path = tmp_path_factory.mktemp("data") / "digits_flat.npz"
    np.savez(
        path,
        x_train=d["x_train"].reshape(len(d["x_train"]), -1),
        y_train=d["y_train"],
        x_test=d["x_test"].reshape(len(d["x_test"]), -1)[:200],
        y_test=d["y_test"][:200],
    )
    return path


def run_both(tmp_path, model, data, **options):
    opts = make_options(**options)
    out = {}
    for engine in ("c", "reference"):
        log = tmp_path / f"{engine}.jsonl"
        out[engine] = simulate(model, data, opts, log, engine=engine, plot=False)
    return out


def assert_identical(runs):
    c, ref = (comparable(read_log(runs[e].log_path)) for e in ("c", "reference"))
    assert len(c) == len(ref)
    for k, (a, b) in enumerate(zip(c, ref)):
        assert a == b, f"record {k} differs:\nC         {a}\nreference {b}"
    wc, wr = load_weights(runs["c"].weights_path), load_weights(runs["reference"].weights_path)
    assert wc.tensors.keys() == wr.tensors.keys()
    for i in wc.tensors:
        np.testing.assert_array_equal(wc.tensors[i], wr.tensors[i])
        if i in wc.residuals or i in wr.residuals:
            np.testing.assert_array_equal(wc.residuals[i], wr.residuals[i])


# ---- C == reference, for every scheduler, on a CNN and an MLP ----------------------------------


@pytest.mark.parametrize("scheduler", ["fixed", "plateau", "critical", "adazeta"])
def test_cnn_identical_to_reference(tmp_path, scheduler):
    steps = 500 if scheduler == "plateau" else 160
    runs = run_both(
        tmp_path, DIGITS, SHIFT, scheduler=scheduler, steps=steps, eval_every=40, q=2 if scheduler == "fixed" else 1
    )
    assert_identical(runs)
    steps_seen = runs["c"].steps
    assert len(steps_seen) == steps
    if scheduler != "fixed":  # the scheduler really acted within the run
        assert any(r["type"] == "event" and r["kind"] == "scheduler" for r in runs["c"].records)


@pytest.mark.parametrize("scheduler", ["fixed", "plateau", "critical", "adazeta"])
def test_mlp_identical_to_reference(tmp_path, mlp_data, scheduler):
    """All three layers train: the split is at step 0 and the boundary is the model input."""
    runs = run_both(
        tmp_path, MLP, mlp_data, scheduler=scheduler, train="all", steps=120, eval_every=30, batch=8, seed=7
    )
    assert_identical(runs)
    assert runs["c"].steps[-1]["prefix_passes"] == 0  # nothing frozen before the first layer


@pytest.mark.parametrize(
    "variant",
    [
        dict(rounding="nearest", density=0.25, lr=20.0),
        dict(rounding="stochastic", lr_scaling="linear", batch=5, budget=20000, steps=None),
        dict(train="last:2", biases_only=True, lr=50.0, q=4, scheduler="fixed"),
        dict(eps=3, lr=10.0, scheduler="critical"),
        # --- lr decay: by the budget's fraction and by the steps'
        dict(lr_decay="linear", scheduler="fixed", q=2, budget=15000, steps=None),
        dict(lr_decay="step", lr=30.0),
        # --- lr trial: after the auto calibration, and from an explicit lr by the budget
        dict(lr_trial=8, steps=200),
        dict(lr_trial=4, lr=400.0, scheduler="critical", budget=30000, steps=None),
    ],
)
def test_variants_identical_to_reference(tmp_path, mlp_data, variant):
    runs = run_both(tmp_path, MLP, mlp_data, **{"steps": 80, "eval_every": 25, **variant})
    assert_identical(runs)


def test_a_run_that_ends_worse_than_its_best_ends_on_the_best(tmp_path, mlp_data):
    """A rate far too large for the MLP, no decay and a lax validation guard: no evaluation beats
    the start, the last one is far above it, so the run ends on its best weights (the start), in
    the C and the reference alike, with a rollback event `end` and an evaluation of them."""
    runs = run_both(tmp_path, MLP, mlp_data, **ENDS_WORSE_THAN_BEST)
    assert_identical(runs)
    records = runs["c"].records
    ends = [r for r in records if r["type"] == "event" and r["kind"] == "rollback" and r["code"] == END]
    assert len(ends) == 1 and ends[0]["aux"] == 0  # back to the snapshot of step 0
    evals = [r for r in records if r["type"] == "eval"]
    assert evals[-1]["val_loss"] == evals[0]["val_loss"] and evals[-1]["accuracy"] == evals[0]["accuracy"]
    w = load_weights(runs["c"].weights_path)
    for i in w.tensors:
        np.testing.assert_array_equal(w.tensors[i], w.best[i])
    out = io.StringIO()  # the live view says so in words
    view = LiveView(out=out)
    for r in records:
        view.show(r)
    assert "it ends on the best weights, of step 0" in out.getvalue()


def test_lr_decay_factors_in_the_step_records(tmp_path, mlp_data):
    """The lr of every step is lr_1 * q (linear scaling) times the decay factor of the fraction of
    the run done before it (by the budget's passes, or by --steps), recomputed here in float64
    from the records (the engines agree bit for bit above)."""
    for decay, length in (
        ("linear", dict(budget=12000)),
        ("step", dict(steps=40)),
        ("tail", dict(budget=12000)),
        ("tail", dict(steps=40)),
    ):
        opts = make_options(
            scheduler="fixed", q=2, lr=8.0, lr_scaling="linear", eval_every=20, lr_decay=decay, headroom=0, **length
        )  # an lr for the pretrained scale: no rollback may interfere
        run = simulate(MLP, mlp_data, opts, tmp_path / f"{decay}.jsonl", engine="c", plot=False)
        assert not [r for r in run.records if r["type"] == "event" and r["kind"] == "rollback"]
        done = 0
        for r in run.steps:
            f = done / length["budget"] if "budget" in length else r["step"] / length["steps"]
            if decay == "linear":
                factor = 1 - f
            elif decay == "tail":  # the last fifth of the run
                factor = 1.0 if f < 0.8 else max(0.0, (1 - f) * 5)
            else:
                factor = 1.0 if f < 0.5 else 0.1 if f < 0.75 else 0.01
            assert r["lr"] == pytest.approx(8.0 * 2 * factor, rel=1e-5, abs=1e-6), (decay, r["step"])
            done = r["prefix_passes"] + r["suffix_passes"]
        assert run.steps[-1]["lr"] < 0.2 * 16.0


def test_guard_rolls_back_identically(tmp_path):
    """A far too large lr saturates the logits; the guard restores the snapshot and halves lr."""
    runs = run_both(
        tmp_path, DIGITS, SHIFT, scheduler="fixed", q=1, lr=20000.0, steps=120, eval_every=20, guard_steps=4
    )
    assert_identical(runs)
    rollbacks = [r for r in runs["c"].records if r["type"] == "event" and r["kind"] == "rollback"]
    assert rollbacks, "the guard never tripped"
    assert rollbacks[0]["value"] == 10000.0  # lr_1 halved
    steps = {r["step"]: r for r in runs["c"].steps}
    assert steps[rollbacks[0]["step"]]["diverged"]


@pytest.mark.parametrize("scaling", ["linear", "sqrt"])
def test_rollback_halves_the_lr_at_the_raised_q(tmp_path, scaling):
    """plateau answers a guard rollback by doubling q; the rollback still halves the lr used at
    q (lr_1 falls by g(q) / g(2q) more), else the linear scaling would keep the step that diverged."""
    runs = run_both(
        tmp_path,
        DIGITS,
        SHIFT,
        scheduler="plateau",
        lr=20000.0,
        lr_scaling=scaling,
        lr_trial=0,
        lr_decay="none",
        steps=40,
        eval_every=20,
        guard_steps=4,
    )
    assert_identical(runs)
    steps = {r["step"]: r for r in runs["c"].steps}
    first = next(r for r in runs["c"].records if r["type"] == "event" and r["kind"] == "rollback")
    before, after = steps[first["step"]], steps[first["step"] + 1]
    assert before["diverged"] and after["q"] == 2 * before["q"]
    assert after["lr"] == pytest.approx(before["lr"] / 2, rel=1e-6)  # the lr at q halved
    assert first["value"] == pytest.approx(20000.0 / 2 * (0.5 if scaling == "linear" else 2**-0.5), rel=1e-6)


# ---- training works ------------------------------------------------------------------------------


def test_adapts_to_the_shifted_domain(tmp_path):
    """The README's headline: the pretrained digits CNN adapted on the device to rotated digits."""
    opts = make_options(budget=400_000, eval_every=100)  # defaults: plateau, lr auto (rho 4), split16
    run = simulate(DIGITS, SHIFT, opts, tmp_path / "run.jsonl", engine="c", plot=False)
    first, last = run.evals[0], run.evals[-1]
    assert first["step"] == 0 and first["accuracy"] < 0.55
    assert last["accuracy"] - first["accuracy"] >= 0.10, (first, last)
    assert last["loss"] < first["loss"]
    # make demo's curve has no dip: the earlier auto lr fell from 51% to 44% first
    lowest = min(run.evals[1:], key=lambda e: e["accuracy"])
    assert lowest["accuracy"] >= first["accuracy"], (first, lowest)


# ---- export: the trained C model, in tflite-micro ------------------------------------------------


@pytest.mark.tflm
def test_exported_model_reproduces_the_trained_c(tmp_path):
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.training.export import export_weights

    opts = make_options(scheduler="fixed", q=4, rho=1.0, steps=150, eval_every=150)
    run = simulate(DIGITS, SHIFT, opts, tmp_path / "run.jsonl", engine="c", plot=False)
    out = tmp_path / "trained.tflite"
    export_weights(DIGITS, run.weights_path, out)
    prep = compile_for_training(DIGITS, SHIFT, opts)
    x = prep.training.data.x_test
    golden = TflmInterpreter(out.read_bytes()).run_batch(x)
    # the generated C of the exported model (inference) equals tflite-micro, bit for bit
    np.testing.assert_array_equal(api.infer(out, x).reshape(golden.shape), golden)
    # the trained weights in the reference forward pass give tflite-micro's outputs too ...
    trained = load_weights(run.weights_path).tensors
    fwd = ReferenceForward(prep.model)
    np.testing.assert_array_equal(fwd.forward(x, weights=trained).reshape(golden.shape), golden)
    # ... and, through the logits, exactly the training program's final evaluation
    logits = fwd.run({prep.model.graph.inputs[0]: x}, 0, fwd.logits_end, weights=trained)[fwd.logits_index]
    plan = prep.training.plan
    losses = zm.cross_entropy(logits, np.float32(plan.logits_scale), plan.logits_zp, prep.training.data.y_test)
    total = np.float32(0)
    for v in np.asarray(losses, np.float32):
        total = np.float32(total + v)
    final = run.evals[-1]
    assert final["correct"] == int(np.count_nonzero(zm.argmax(logits) == prep.training.data.y_test))
    assert final["loss"] == float(np.float32(total / np.float32(len(x))))


# ---- the training program under the sanitizers ----------------------------------------------------


def test_training_program_is_clean_under_sanitizers(tmp_path):
    import subprocess

    from zoflash.monitor.telemetry import Decoder
    from zoflash.targets.host_build import run_make
    from zoflash.workflows.training import training_bundle

    opts = make_options(scheduler="critical", steps=40, eval_every=20, batch=4)
    bundle = training_bundle(compile_for_training(DIGITS, SHIFT, opts), "host", tmp_path / "bundle")
    run_make(bundle, f"build/{bundle.prefix}_train_asan")
    proc = subprocess.run(
        [str(bundle.path / "build" / f"{bundle.prefix}_train_asan")], capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    dec = Decoder()
    recs = dec.records(dec.feed(proc.stdout) + dec.flush())
    assert recs[-1]["type"] == "done" and dec.crc_errors == 0 and dec.dropped_bytes == 0


def test_test_loss_guard_and_rollback_limit_identically(tmp_path):
    """The test-loss guard rolls back after an evaluation; after guard_max_rollbacks the run
    stops (reason "guard") with the last good snapshot as its weights."""
    runs = run_both(
        tmp_path,
        DIGITS,
        SHIFT,
        scheduler="fixed",
        q=1,
        lr=3000.0,
        steps=300,
        eval_every=10,
        guard_steps=1000,
        guard_loss=1.2,
        guard_max_rollbacks=3,
    )
    assert_identical(runs)
    records = runs["c"].records
    rollbacks = [r for r in records if r["type"] == "event" and r["kind"] == "rollback"]
    assert len(rollbacks) == 3 and all(r["code"] == 1 for r in rollbacks)
    assert runs["c"].done["reason"] == "guard"
    # the weights left are the snapshot's: an evaluation of them equals the one that took it
    snap_step = rollbacks[-1]["aux"]
    snap_eval = next(r for r in runs["c"].evals if r["step"] == snap_step)
    assert runs["c"].evals[-1]["loss"] == snap_eval["loss"]


# ---- lr trial (docs/training.md "lr trial") -------------------------------------------------------


def _trial(run):
    """The trial's candidates (j, validation loss), its chosen lr_1 and its step records."""
    events = [r for r in run.records if r["type"] == "event" and r["kind"] == "lr"]
    cands = [(e["aux"] - (1 << 32) if e["aux"] >= 1 << 31 else e["aux"], e["value"]) for e in events if e["code"] == 1]
    chosen = [e for e in events if e["code"] == 2]
    return cands, chosen, [s for s in run.steps if s["trial"]]


def test_lr_trial_walks_paired_candidates_and_backs_off_from_the_best(tmp_path, mlp_data):
    """Candidates lr_1 * 2^j train T steps each from the same weights on the same minibatches:
    the same absolute rate scores the same validation loss whatever lr_1 it started from; j walks
    up from 0 while the loss falls, else down; training runs at the lowest loss's rate / 2^backoff."""
    from zoflash.spec import training as spec

    T, base = 8, 100.0
    runs = {}
    for start in (base, 4 * base):
        opts = make_options(scheduler="plateau", lr=start, lr_trial=T, steps=200, eval_every=25, batch=8)
        runs[start] = simulate(MLP, mlp_data, opts, tmp_path / f"{start:g}.jsonl", engine="c", plot=False)
    by_rate = {}
    for start, run in runs.items():
        cands, chosen, steps = _trial(run)
        assert cands[0][0] == 0 and len(chosen) == 1
        # the walk: up while it improves; if the first step up did not, down while it improves
        js = [j for j, _ in cands]
        up = [j for j in js if j > 0]
        assert up == list(range(1, len(up) + 1)) and [j for j in js if j < 0] == list(
            range(-1, -(len(js) - len(up)), -1)
        )
        losses = dict(cands)
        best_j = min(losses, key=lambda j: (losses[j], abs(j)))
        assert chosen[0]["value"] == pytest.approx(start * 2.0 ** (best_j - spec.LR_TRIAL_BACKOFF), rel=1e-6)
        assert chosen[0]["aux"] == len(steps) == T * len(cands)  # no candidate diverged here
        assert [s["step"] for s in steps] == list(range(len(steps)))  # the trial comes first
        assert all(s["q"] == 1 for s in steps)
        # every candidate starts from the same weights on the same minibatch
        firsts = {steps[k * T]["loss"] for k in range(len(cands))}
        assert len(firsts) == 1
        for j, loss in cands:
            by_rate.setdefault(round(start * 2.0**j, 3), {})[start] = loss
        regular = [s for s in run.steps if not s["trial"]]
        assert regular[0]["step"] == len(steps) and regular[0]["lr"] == pytest.approx(
            chosen[0]["value"] * regular[0]["q"]
        )
    in_both = {rate: losses for rate, losses in by_rate.items() if len(losses) == 2}
    assert in_both, "the two walks met no common rate"
    for rate, losses in in_both.items():  # paired: the same rate scores the same loss from either start
        assert losses[base] == losses[4 * base], (rate, losses)


@pytest.mark.parametrize(
    "limit, horizon",
    [(dict(budget=40_000), None), (dict(steps=1200), None), (dict(budget=40_000), 32), (dict(budget=40_000), 0)],
)
def test_lr_trial_rate_falls_with_the_run_length(tmp_path, mlp_data, limit, horizon):
    """A run longer than --lr-trial-horizon candidates (default LR_TRIAL_HORIZON) trains at the
    backed-off best rate times sqrt(horizon * candidate passes / run passes), in float32; horizon 0
    keeps the backed-off rate; C == reference."""
    from zoflash.spec import training as spec

    T, batch, start = 4, 8, 100.0
    chosen_horizon = {} if horizon is None else dict(lr_trial_horizon=horizon)
    runs = run_both(
        tmp_path,
        MLP,
        mlp_data,
        scheduler="plateau",
        lr=start,
        lr_trial=T,
        eval_every=50,
        batch=batch,
        **limit,
        **chosen_horizon,
    )
    assert_identical(runs)
    cands, chosen, steps = _trial(runs["c"])
    assert steps and len(chosen) == 1
    losses = dict(cands)
    best_j = min(losses, key=lambda j: (losses[j], abs(j)))
    per_step = batch * 3  # q = 1: b prefix passes (the MLP trains its last layer) and 2b suffix passes
    run_passes = limit.get("budget") or limit["steps"] * per_step
    knee = spec.LR_TRIAL_HORIZON if horizon is None else horizon
    ratio = np.float32(knee * T * per_step) / np.float32(run_passes)
    assert ratio < 1  # the case under test
    factor = np.sqrt(ratio) if knee else np.float32(1.0)
    want = np.float32(np.float32(start * 2.0 ** (best_j - spec.LR_TRIAL_BACKOFF)) * factor)
    assert chosen[0]["value"] == want


def test_lr_trial_defaults_and_limits(tmp_path, mlp_data):
    """On by default for the adaptive schedulers with embedded data, off for fixed q and for a
    stream; skipped when its worst case exceeds a quarter of the run; refused with a stream."""
    from zoflash.spec import training as spec
    from zoflash.training.options import OptionsError

    assert make_options().lr_trial_steps == spec.LR_TRIAL_STEPS
    assert make_options(scheduler="fixed").lr_trial_steps == 0
    assert make_options(data_source="stream").lr_trial_steps == 0
    with pytest.raises(OptionsError, match="--lr-trial 8 needs --data-source embedded"):
        make_options(data_source="stream", lr_trial=8)
    # 64 steps x 5 candidates x 4 > 300 steps: no trial in a 300-step run
    run = simulate(
        MLP,
        mlp_data,
        make_options(steps=300, eval_every=100, batch=8),
        tmp_path / "short.jsonl",
        engine="c",
        plot=False,
    )
    assert _trial(run) == ([], [], [])
