"""The experiment sweep engine (benchmarks/sweep.py): a re-run skips finished runs, the cache key
follows the options and the files' bytes, and local processes and a Dask cluster give the same
results."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import shutil
import sys

import pytest
from conftest import FIXTURES, ROOT


def _load(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Dask ships the run function by value from a registered module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _specs():
    ex = _load("experiments")
    cfg = ex.Config("test", (1, 2), 3000, (1, 4), (0,), (0,), 1000)
    task = ex.TASKS["sensor"]
    return ex, [ex.make_spec(cfg, task, "fixed", 1, "auto", 1), ex.make_spec(cfg, task, "adazeta", 1, "auto", 2)]


class _NoRuns(cf.Executor):
    def submit(self, fn, /, *args, **kwargs):
        raise AssertionError("a cached run was run again")


def _strip(results: dict) -> dict:
    return {k: {f: v for f, v in r.items() if f != "wall_s"} for k, r in results.items()}


def test_hash_follows_options_and_file_bytes(tmp_path):
    sweep = _load("sweep")
    _, specs = _specs()
    spec = specs[0]
    data = tmp_path / "data.npz"
    shutil.copy(spec["data"], data)
    moved = dict(spec, data=str(data))
    assert sweep.run_hash(moved) == sweep.run_hash(spec)  # the bytes count, not the path
    assert sweep.run_hash(dict(spec, seed=3)) != sweep.run_hash(spec)
    changed = tmp_path / "changed.npz"
    changed.write_bytes(data.read_bytes() + b"\0")
    assert sweep.run_hash(dict(spec, data=str(changed))) != sweep.run_hash(spec)


@pytest.mark.cc
def test_local_and_dask_runs_agree_and_reruns_are_cached(tmp_path):
    sweep = _load("sweep")
    ex, specs = _specs()
    assert (FIXTURES / "motions_cnn.tflite").exists()
    log: list[str] = []
    with sweep.make_executor(workers=2) as executor:
        local = sweep.run_grid(specs, ex.run_one, executor, tmp_path / "local", log.append)
    assert set(local) == {s["key"] for s in specs}
    assert all(r["steps"] > 0 and 0 <= r["final_acc"] <= 1 for r in local.values())
    again = sweep.run_grid(specs, ex.run_one, _NoRuns(), tmp_path / "local", log.append)
    assert again == local and log[-1] == "  2 runs: 2 cached, 0 to run"

    try:
        from distributed import Client, LocalCluster
    except ImportError:
        pytest.skip("dask[distributed] is missing: pip install -e '.[sweep]' to test the Dask executor")
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        remote = sweep.run_grid(specs, ex.run_one, client.get_executor(), tmp_path / "dask", log.append)
    assert _strip(remote) == _strip(local)


def test_heldout_report_pairs_runs_by_seed():
    """benchmarks/heldout.py: Δ is the per-seed paired difference to the reference (mean and its
    standard error), and a seed counts as a win when the method is at least as good."""
    import numpy as np

    _load("experiments")
    ho = _load("heldout")
    assert ho.seed_range("6-9") == [6, 7, 8, 9] and ho.seed_range("3") == [3]
    assert ho.seed_range("18,20-22") == [18, 20, 21, 22]
    for bad in ("25,x", "9-6", "6-"):
        with pytest.raises(SystemExit, match=f"--seeds {bad}: .* is not a seed or a range"):
            ho.seed_range(bad)
    ref, other = np.array([80.0, 90.0, 85.0, 70.0]), np.array([81.0, 88.0, 85.0, 74.0])
    h = dict(
        task="t",
        seeds=[6, 7, 8, 9],
        ref="fixed q=4",
        finals={"fixed q=4": ref, "plateau": other},
        rollbacks={"fixed q=4": 0.0, "plateau": 1.5},
        ended_on_best={"fixed q=4": 0, "plateau": 1},
        floor=40.0,
    )
    text = ho.to_markdown(h, "cmd")
    d = other - ref  # +1, -2, 0, +4: mean +0.75, se std/sqrt(4); worst seed -2
    row = next(line for line in text.splitlines() if line.startswith("| plateau"))
    # the std over seeds is the sample std (ddof 1), as in the grid's tables
    assert row == (
        f"| plateau | {other.mean():.1f} ± {other.std(ddof=1):.1f} | {d.mean():+.1f} ± {d.std() / 2:.1f} | 3/4 "
        "| -2.0 | 0/4 | 1.5 | 1/4 |"
    )
    assert "| fixed q=4 | 81.2 ± 8.5 | – | – | – | 0/4 | 0.0 | 0/4 |" in text
    # the reference's mean gain is 41.2 points, so no run here gained less than half of it
    assert "plateau meets them" in text


@pytest.mark.cc
def test_heldout_reference_runs_the_stated_fixed_q(tmp_path, monkeypatch):
    """benchmarks/heldout.py --reference Q:K:L0 stands in for the grid's cache: the reference runs
    are fixed q = Q at lr_1 = L0·2^K, paired by seed with every adaptive scheduler's default runs."""
    import argparse
    import json

    ex, ho, sweep = _load("experiments"), _load("heldout"), _load("sweep")
    assert ho.reference_arg("4:-2:3.27") == (4, -2, 3.27)
    for bad in ("4:-2", "q:0:1", "4:0:1:2"):
        with pytest.raises(argparse.ArgumentTypeError, match="Q:K:L0"):
            ho.reference_arg(bad)
    monkeypatch.setattr(ex, "CACHE", tmp_path)
    cfg = ex.Config("test", (1,), 3000, (1,), (0,), (0,), 1000)
    with pytest.raises(SystemExit, match="--reference Q:K:L0"):
        ho.heldout("sensor", [1], _NoRuns(), cfg)  # neither a grid cache nor a reference
    with sweep.make_executor(workers=2) as executor:
        h = ho.heldout("sensor", [1, 2], executor, cfg, reference=(2, -1, 3.0))
    assert h["ref"] == "fixed q=2, tuned lr (L0·2^-1)"
    table = ho.to_markdown(h, "cmd")
    assert "reference given by --reference" in table.splitlines()[0]
    assert "paired difference to the fixed q given by --reference" in table
    assert set(h["finals"]) == {h["ref"], *ex.ADAPTIVE} and all(len(v) == 2 for v in h["finals"].values())
    runs = {r["key"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json"))}
    for seed in (1, 2):
        ref = runs[f"fixed|q2|k-1|s{seed}"]
        assert ref["final_q"] == 2 and ref["lr1"] == pytest.approx(1.5) and ref["q_changes"] == [[0, 2]]
        assert h["finals"][h["ref"]][seed - 1] == pytest.approx(ref["final_acc"] * 100)
    # --lr-decay: the schedulers' runs take it, the reference keeps the default (its runs are reused)
    with sweep.make_executor(workers=2) as executor:
        h = ho.heldout("sensor", [1], executor, cfg, reference=(2, -1, 3.0), decay="linear")
    assert "the schedulers with --lr-decay linear" in ho.to_markdown(h, "cmd").splitlines()[0]
    runs = {r["key"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*.json"))}
    assert {f"{name}+linear|q1|auto|s1" for name in ex.ADAPTIVE} <= set(runs)
    assert h["finals"]["plateau"][0] == pytest.approx(runs["plateau+linear|q1|auto|s1"]["final_acc"] * 100)


def test_a_validation_share_reaches_every_run_and_keys_its_cache(monkeypatch):
    """heldout.py / trace_runs.py --val-fraction: the spec carries it into the options of both
    benchmarks' runs (the reference's too) and into its label; without it the spec is as before,
    so cached runs stay."""
    import zoflash.training.options as options

    ex, sweep = _load("experiments"), _load("sweep")
    cfg = ex.Config("test", (1,), 3000, (1,), (0,), (0,), 1000)
    task = ex.TASKS["sensor"]
    plain = ex.make_spec(cfg, task, "fixed", 2, "k0", 1, 3.0)
    shared = ex.make_spec(cfg, task, "fixed", 2, "k0", 1, 3.0, val_fraction=0.2)
    assert "val_fraction" not in plain and shared["val_fraction"] == 0.2
    assert shared["key"] == "fixed+val0.2|q2|k0|s1" and plain["key"] == "fixed|q2|k0|s1"
    assert sweep.run_hash(shared) != sweep.run_hash(plain)
    seen = []

    def capture(**kw):
        seen.append(kw["val_fraction"])
        raise RuntimeError("captured")

    monkeypatch.setattr(options, "make_options", capture)
    for run in (ex.run_one, _load("trace_runs").trace_one):
        seen.clear()
        for spec in (plain, shared):
            with pytest.raises(RuntimeError, match="captured"):
                run(spec)
        assert seen == [None, 0.2], run.__name__


def test_heldout_trial_summary_reports_the_chosen_rates():
    """The lr_1 the trials chose: median and range per method; a method without a trial says so."""
    ho = _load("heldout")
    text = ho.trial_summary(dict(chosen={"plateau": [2.0, 8.0, 4.0, None], "critical": [None]}))
    assert "plateau: 4 (2-8), 3 runs" in text and "critical: no trial" in text


@pytest.mark.cc
def test_a_grid_without_sweep_or_decay_rows_reports_and_heldout_runs_one_scheduler(tmp_path, monkeypatch):
    """experiments.py --paper's shape (no lr sweep, no lr-decay baseline): the grid runs, analyses
    and writes its page without those sections; heldout.py --schedulers runs only the ones named."""
    ex, ho, sweep = _load("experiments"), _load("heldout"), _load("sweep")
    monkeypatch.setattr(ex, "CACHE", tmp_path)
    cfg = ex.Config("test", (1, 2), 3000, (1, 4), (0,), (), 1000, decay_rows=False)
    with sweep.make_executor(workers=2) as executor:
        data = ex.run_experiments(cfg, "sensor", executor, "2 local")
    keys = set(data["results"])
    assert not any("+" in k for k in keys), "no lr-decay rows"
    assert not any(k.startswith(ex.SWEEP_SCHEDULERS) and "|auto|" not in k for k in keys), "no sweep"
    a = ex.analyse(data)
    assert a["sweep"] == {} and all("lr decay" not in r["label"] for r in a["rows"])
    text = ex.to_markdown(a, data, "cmd", "acc.png", "grid.png")
    assert "### lr sweep" not in text and "![lr grid](grid.png)" in text
    ex.plot_sweep(a, tmp_path / "grid.png")
    assert (tmp_path / "grid.png").stat().st_size > 0
    with sweep.make_executor(workers=2) as executor:
        h = ho.heldout("sensor", [3], executor, cfg, reference=(1, 0, 3.0), schedulers=("plateau",))
    assert set(h["finals"]) == {h["ref"], "plateau"}


def test_a_task_runs_where_the_benchmarks_cannot_be_imported(tmp_path):
    """What a Dask cluster carries is `pickle.loads` of bytes: a process that cannot import a
    benchmarks/ module (a standalone scheduler, a worker started elsewhere) unpickles the call and so
    runs the function, shipped by value."""
    import subprocess

    ho, sweep = _load("heldout"), _load("sweep")
    sweep.ship_by_value(ho.seed_range)
    blob = sweep.as_call(ho.seed_range, "3-5")
    code = "import pickle, sys; print(pickle.loads(sys.stdin.buffer.read()))"
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, cwd=tmp_path, check=True)
    assert out.stdout.decode().strip() == "[3, 4, 5]"
