"""The validation split: carved from the training data at build time, seeded and
stratified; the guards, the snapshots and the best weights use it, the test set is only reported;
`export --select best|last`.  Expectations are counted by hand from the rule in docs/training.md
("Validation split"), not taken from the code."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.errors import DataError
from zoflash.monitor import session as session_mod
from zoflash.spec import training as spec
from zoflash.spec.options import TRAIN_DEFAULTS
from zoflash.training.dataset import Dataset, carve_validation
from zoflash.training.options import OptionsError, make_options


def dataset(y, x=None, labels=True, t=None) -> Dataset:
    y = np.asarray(y, np.uint16)
    x = np.arange(len(y), dtype=np.int8).reshape(-1, 1) if x is None else x  # x[i] = i: tracks each sample
    return Dataset(
        x_train=x,
        y_train=y,
        x_test=x[:2],
        y_test=y[:2],
        source="d.npz",
        labels=labels,
        t_train=t,
        t_test=None if t is None else t[:2],
    )


def test_stratified_counts_per_class():
    # 40 of class 0, 25 of class 1, 15 of class 2 at 0.2: 8, 5, 3
    y = [0] * 40 + [1] * 25 + [2] * 15
    d = carve_validation(dataset(y, x=np.arange(80, dtype=np.int8).reshape(-1, 1)), 0.2, seed=3)
    assert [int(np.sum(d.y_val == c)) for c in range(3)] == [8, 5, 3]
    assert [int(np.sum(d.y_train == c)) for c in range(3)] == [32, 20, 12]
    # every sample is in exactly one split, the training samples keep their order
    ids = np.concatenate([d.x_train[:, 0], d.x_val[:, 0]]).astype(int)
    assert sorted(ids) == list(range(80)) and list(d.x_train[:, 0]) == sorted(d.x_train[:, 0])
    assert np.array_equal(d.y_val, np.asarray(y)[d.x_val[:, 0].astype(int)])
    assert d.x_test is not None and len(d.y_test) == 2  # the test set is untouched


def test_half_rounds_up_and_seed_decides_which():
    y = [0] * 45 + [1] * 55  # 0.1 * 45 = 4.5 -> 5, 0.1 * 55 = 5.5 -> 6
    a = carve_validation(dataset(y), 0.1, seed=1)
    assert [int(np.sum(a.y_val == c)) for c in range(2)] == [5, 6]
    b = carve_validation(dataset(y), 0.1, seed=1)
    c = carve_validation(dataset(y), 0.1, seed=2)
    assert np.array_equal(a.x_val, b.x_val)  # deterministic
    assert not np.array_equal(a.x_val, c.x_val)  # seeded


def test_minimum_count_and_tiny_data():
    assert len(carve_validation(dataset([0, 1] * 50), 0.05, seed=1).y_val) == 8  # 5 -> at least 8
    assert len(carve_validation(dataset([0, 1, 0, 1, 0, 1]), 0.1, seed=1).y_val) == 3  # at most half
    assert len(carve_validation(dataset([0, 1]), 0.1, seed=1).y_val) == 1
    with pytest.raises(DataError, match="at least 2 training samples"):
        carve_validation(dataset([0]), 0.1, seed=1)


def test_targets_move_with_their_samples():
    t = np.arange(40, dtype=np.float32).reshape(20, 2)
    d = carve_validation(dataset(np.zeros(20), labels=False, t=t), 0.2, seed=4)
    assert len(d.y_val) == 8  # 0.2 * 20 = 4 -> 8 (no labels: one permutation of all samples)
    assert np.array_equal(d.t_val, t[d.x_val[:, 0].astype(int)])
    assert np.array_equal(d.t_train, t[d.x_train[:, 0].astype(int)])


@pytest.mark.parametrize("bad", [0.0, -0.1, 0.51, float("nan")])
def test_val_fraction_range(bad):
    with pytest.raises(OptionsError, match="--val-fraction"):
        make_options(project_file=None, val_fraction=bad)


def test_val_fraction_from_project_file(tmp_path):
    (tmp_path / "zoflash.toml").write_text("[train]\nval_fraction = 0.2\n")
    assert make_options(tmp_path / "zoflash.toml").val_fraction == 0.2
    assert make_options(tmp_path / "zoflash.toml", val_fraction=0.3).val_fraction == 0.3


# ------------------------------------------------------------------ the run: C against reference


# a tight loss guard and a large rho make the run roll back and take snapshots
# an explicit, high learning rate (no calibration) so that the loss guard fires several times; no
# margin (guard_loss_z 0): the records do not carry the standard error the margin needs
END = spec.ROLLBACK_CAUSE_IDS["end"]
GUARDED = dict(steps=46, eval_every=4, guard_loss=1.02, guard_loss_z=0.0, lr=150.0, lr_scaling="sqrt", seed=3)


def simulate_guarded(out, engine: str):
    from zoflash.workflows.simulate import simulate

    return simulate(
        FIXTURES / "digits_cnn.tflite",
        FIXTURES / "digits_shift.npz",
        make_options(None, **GUARDED),
        out / f"{engine}.jsonl",
        engine=engine,
        plot=False,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {"c": simulate_guarded(tmp_path_factory.mktemp("val"), "c")}


@pytest.mark.cc
@pytest.mark.slow
def test_c_and_reference_agree_with_validation(runs, tmp_path):
    ref = simulate_guarded(tmp_path, "reference")
    assert session_mod.comparable(runs["c"].records) == session_mod.comparable(ref.records)
    assert runs["c"].weights_path.read_bytes() == ref.weights_path.read_bytes()


@pytest.mark.cc
def test_guards_and_best_follow_the_validation_split(runs):
    from zoflash.training.weights_file import load_weights

    recs = runs["c"].records
    hello = next(r for r in recs if r["type"] == "hello")
    evals = [r for r in recs if r["type"] == "eval"]
    # 1000 training samples, 10 classes of about 100: 0.1 of each -> about 100 for validation
    assert all(r["val_count"] == 1000 - hello["n_train"] for r in evals) and 90 <= evals[0]["val_count"] <= 110
    assert all(r["count"] == 497 for r in evals)

    # the snapshot rule replayed on the validation losses alone (docs/training.md): a loss rollback
    # iff val_loss > best * 1.02 (no calibration with an explicit lr), else a new snapshot iff
    # val_loss < best
    def replay(key):
        best, snap, rollbacks = np.float32(evals[0][key]), 0, []
        for ev in evals[1:-1]:  # the last one is the end-of-run evaluation (step 46): no rule applies
            v = np.float32(ev[key])
            if v > best * np.float32(1.02):
                rollbacks.append((ev["step"] - 1, snap))
            elif v < best:
                best, snap = v, ev["step"]
        return rollbacks, snap

    expected, snap = replay("val_loss")
    rollbacks = [r for r in recs if r["type"] == "event" and r["kind"] == "rollback"]
    got = [(r["step"], r["aux"]) for r in rollbacks if r["code"] != END]
    assert got == expected and len(got) >= 2 and snap > 20
    # the same rule on the test losses would have rolled back elsewhere: the run tells them apart
    assert replay("loss")[0] != expected
    # the run ended after its last snapshot with a validation loss above it (guard_loss_z 0: any
    # amount), so it ends on the snapshot: the end evaluation is the snapshot's
    assert [(r["step"], r["aux"]) for r in rollbacks if r["code"] == END] == [(45, snap)]
    at_snap = next(r for r in evals if r["step"] == snap)
    assert evals[-1]["step"] == 46 and snap < 46 and evals[-1]["val_loss"] == at_snap["val_loss"]
    w = load_weights(runs["c"].weights_path)
    assert set(w.best) == set(w.tensors)
    assert all(np.array_equal(w.best[i], w.tensors[i]) for i in w.tensors)


@pytest.mark.cross
@pytest.mark.qemu
def test_the_emulated_m55_ends_on_its_best_as_the_host(runs, tmp_path, capsys):
    """The guarded run under QEMU (mps3-an547): the same records as the host's, the end's restore
    included."""
    from zoflash.cli.main import main

    log = tmp_path / "m55.jsonl"
    args = ["-q", "run", "--board", "mps3-an547", "--out", str(tmp_path / "bundle"), "--log", str(log)]
    args += ["--model", str(FIXTURES / "digits_cnn.tflite"), "--data", str(FIXTURES / "digits_shift.npz")]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in GUARDED.items()]
    assert main(args) == 0
    capsys.readouterr()
    assert main(["compare", str(runs["c"].log_path), str(log)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    m55 = session_mod.read_log(log)
    assert [r["code"] for r in m55 if r["type"] == "event" and r["kind"] == "rollback"][-1] == END


@pytest.mark.cc
def test_export_select(runs, tmp_path):
    from zoflash.training.export import export_weights
    from zoflash.training.weights_file import load_weights, save_weights

    model = FIXTURES / "digits_cnn.tflite"
    w = load_weights(runs["c"].weights_path)
    # the run ends on its best values: the last ones here are made to differ, so that the choice shows
    w.tensors = {
        i: (v + 1 if v.dtype == np.int32 else np.clip(v, -126, 126) + 1).astype(v.dtype) for i, v in w.tensors.items()
    }
    wpath = save_weights(
        tmp_path / "run.weights.npz",
        w.model_sha256,
        [(i, w.names[i], v, w.residuals.get(i)) for i, v in w.tensors.items()],
        best=w.best,
    )
    assert any(not np.array_equal(w.best[i], w.tensors[i]) for i in w.tensors)
    best = export_weights(model, wpath, tmp_path / "best.tflite")
    assert best.selected == "best"
    last = export_weights(model, wpath, tmp_path / "last.tflite", select="last")
    assert last.selected == "last"
    from zoflash.compiler.tflite_import import load_tflite

    for path, want in ((tmp_path / "best.tflite", w.best), (tmp_path / "last.tflite", w.tensors)):
        g, _ = load_tflite(path)
        for i, v in want.items():
            assert np.array_equal(g.tensors[i].data.reshape(-1), v.reshape(-1))
    # a file without best values: last by default, a clear error when best is asked for
    old = save_weights(
        tmp_path / "old.weights.npz",
        w.model_sha256,
        [(i, w.names[i], v, w.residuals.get(i)) for i, v in w.tensors.items()],
    )
    assert export_weights(model, old, tmp_path / "o.tflite").selected == "last"
    with pytest.raises(DataError, match="no best weights"):
        export_weights(model, old, tmp_path / "o2.tflite", select="best")


@pytest.mark.cc
def test_loss_guard_margin_holds_back_rollbacks_within_the_noise(tmp_path):
    """With the default margin (guard_loss_z 2 standard errors of the validation mean) the same
    run rolls back only at evaluations the plain rule (best * 1.02) would also roll back at, and
    not at all of them; C and the reference agree bit for bit on it."""
    from zoflash.workflows.simulate import simulate

    opts = make_options(None, **{**GUARDED, "guard_loss_z": TRAIN_DEFAULTS["guard_loss_z"]})
    runs = {
        e: simulate(
            FIXTURES / "digits_cnn.tflite",
            FIXTURES / "digits_shift.npz",
            opts,
            tmp_path / f"{e}.jsonl",
            engine=e,
            plot=False,
        )
        for e in ("c", "reference")
    }
    assert session_mod.comparable(runs["c"].records) == session_mod.comparable(runs["reference"].records)
    recs = runs["c"].records
    evals = {r["step"]: r for r in recs if r["type"] == "eval"}
    rolled = {r["step"] + 1 for r in recs if r["type"] == "event" and r["kind"] == "rollback"}
    best, over = np.float32(evals[0]["val_loss"]), []
    for step in sorted(evals)[1:-1]:
        v = np.float32(evals[step]["val_loss"])
        if v > best * np.float32(1.02):
            over.append(step)
        elif v < best:
            best = v
    assert rolled and rolled < set(over), (rolled, over)  # a strict subset: the margin held some back
