"""`zoflash build --data` (training bundles and their memory report) and `zoflash simulate`
(JSONL log, weights file, plot), through zoflash.cli.main. Expected numbers are recomputed here
from the model and the data, and from the rules in docs/training.md."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.compiler.tflite_import import load_tflite
from zoflash.monitor.session import comparable, read_log
from zoflash.training.weights_file import load_weights

CNN = FIXTURES / "digits_cnn.tflite"
DATA = FIXTURES / "digits_shift.npz"
MLP = FIXTURES / "mlp.tflite"
N_TRAIN, N_TEST = 1000, 497  # digits_shift.npz

# docs/training.md, "Telemetry" (as decoded by telemetry.decode: time_us -> time_s, flags -> booleans)
FIELDS = {
    "hello": {
        "seed",
        "batch",
        "classes",
        "n_train",
        "n_test",
        "trainable_params",
        "scheduler",
        "rounding",
        "density_log2",
        "lr_auto",
        "lr",
        "max_steps",
        "budget",
        "q_max",
        "n_tensors",
        "model_sha256_prefix",
        "loss_kind",
        "headroom",
    },
    "step": {
        "step",
        "q",
        "state",
        "calibrating",
        "centre",
        "diverged",
        "trial",
        "lr",
        "loss",
        "m2",
        "v",
        "zero_frac",
        "sat_frac",
        "prefix_passes",
        "suffix_passes",
        "time_s",
    },
    "eval": {
        "step",
        "correct",
        "count",
        "accuracy",
        "loss",
        "prefix_passes",
        "suffix_passes",
        "eval_passes",
        "time_s",
        "val_correct",
        "val_count",
        "val_accuracy",
        "val_loss",
    },
    "event": {"step", "kind", "code", "state_from", "state_to", "q_from", "q_to", "value", "aux"},
    "done": {"steps", "reason", "prefix_passes", "suffix_passes", "time_s"},
    "boundary": {"crc32", "expected_crc32", "bytes", "expected", "npu", "agree"},
    "updates": {"step", "steps", "eps", "entries"},  # the update log (zoflash replay)
    "crc": {"step", "crc32", "bytes", "pushed"},  # the trained tensors' checksum
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./zoflash.toml from elsewhere; relative outputs land here


def cnn_last_layer():
    """digits_cnn's last dense layer: (weights int8 [10, 256], bias int32 [10])."""
    g, _ = load_tflite(CNN)
    fc = [op for op in g.ops if op.type == "FULLY_CONNECTED"][-1]
    return g.tensors[fc.inputs[1]].data, g.tensors[fc.inputs[2]].data


def expected_memory(batch: int, q_buffer: int) -> dict:
    """digits_cnn, default --train last:1: the dense layer reads the 256-byte flattened conv output."""
    w, b = cnn_last_layer()
    return {
        "trainable_bytes_in_ram": w.size + 4 * b.size,
        "residual_bytes": w.size,
        "feature_cache_bytes": batch * 256,
        "statistics_bytes": 3 * 4 * batch + 3 * batch + 2 * 4 * q_buffer,
        "snapshot_bytes": 2 * w.size + 4 * b.size,
        "eps_bytes": 4 * b.size,
    }


def c_arrays(text: str) -> dict[str, tuple[str, int]]:
    """name -> (C type, length) of the arrays a generated training file declares."""
    out = {}
    for m in re.finditer(
        r"^(?:static |extern )?(?:const )?(int8_t|uint8_t|uint16_t|int32_t|float) ([^=;{]*)", text, re.M
    ):
        for name, n in re.findall(r"(\w+)\[(\d+)\]", m.group(2)):  # `float a[4], b[4];` declares two
            out[name] = (m.group(1), int(n))
    return out


# ------------------------------------------------------------------------------------- build


def check_training_bundle(out, text, batch):
    manifest = json.loads((out / "manifest.json").read_text())
    tr = manifest["training"]
    w, b = cnn_last_layer()
    mem = expected_memory(batch, 64)
    assert tr["memory"] == mem
    beyond = sum(v for k, v in mem.items() if k != "eps_bytes")  # eps tables are constant (flash)
    assert tr["memory_beyond_inference_bytes"] == beyond
    assert f"training beyond inference {beyond} bytes" in text
    assert tr["trainable_params"] == w.size + b.size == 2570
    assert [(t["kind"], t["dtype"], t["shape"], t["stream"]) for t in tr["tensors"]] == [
        ("weights", "int8", [10, 256], 0),
        ("bias", "int32", [10], 1),
    ]
    h = tr["options"]["headroom"]  # the clamp applies to the weights re-quantized with the headroom (auto: 2)
    wq = np.sign(w) * ((np.abs(w.astype(np.int64)) + ((1 << h) >> 1)) >> h)
    assert tr["clamped_weights"] == int(((wq > 126) | (wq < -126)).sum())
    assert tr["boundary_bytes"] == 256 and tr["classes"] == 10
    steps = [o["type"] for o in manifest["ops"]]  # kernel calls (the reshape has none)
    assert steps[tr["split_step"]] == "FULLY_CONNECTED" and steps[tr["logits_end_step"]] == "SOFTMAX"
    # the default validation split: 0.1 of each class, rounded (100 of the 1000 training samples)
    assert tr["data"] == {
        "source": "digits_shift.npz",
        "n_train": N_TRAIN - 100,
        "n_val": 100,
        "n_test": N_TEST,
        "bytes": (N_TRAIN + N_TEST) * (64 + 2),
    }
    assert tr["options"]["batch"] == batch
    # the generated work memory is what the manifest reports
    prefix = manifest["prefix"]
    arrays = c_arrays((out / f"{prefix}_train.c").read_text())
    size = {"int8_t": 1, "uint8_t": 1, "uint16_t": 2, "int32_t": 4, "float": 4}
    nbytes = {name: size[t] * n for name, (t, n) in arrays.items()}
    residuals = sum(n for name, n in nbytes.items() if re.fullmatch(rf"{prefix}_r\d+", name))
    eps = sum(n for name, n in nbytes.items() if re.fullmatch(rf"{prefix}_eps\d+", name))
    stats = sum(nbytes[f"{prefix}_{k}"] for k in ("lp", "lm", "l0", "labels", "settled", "delta", "c"))
    assert (residuals, eps, stats) == (mem["residual_bytes"], mem["eps_bytes"], mem["statistics_bytes"])
    assert nbytes[f"{prefix}_feature_cache"] == mem["feature_cache_bytes"]
    assert nbytes[f"{prefix}_snapshot"] == mem["snapshot_bytes"]
    return manifest


def test_build_with_data_no_compile(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert (
        main(
            [
                "build",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--out",
                str(out),
                "--no-compile",
                "--batch",
                "8",
                "--steps",
                "10",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    manifest = check_training_bundle(out, text, batch=8)
    assert manifest["training"]["options"]["steps"] == 10
    assert not (out / "build").exists()


@pytest.mark.cc
def test_build_with_data_compiles(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert main(["build", "--model", str(CNN), "--data", str(DATA), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    manifest = check_training_bundle(out, text, batch=16)
    assert "code" in text
    assert (out / "build" / f"{manifest['prefix']}_train").exists()


def test_build_options_from_a_project_file(tmp_path, capsys):
    (tmp_path / "zoflash.toml").write_text("[train]\nbatch = 4\nseed = 9\n")
    out = tmp_path / "bundle"
    assert (
        main(["build", "--model", str(CNN), "--data", str(DATA), "--out", str(out), "--no-compile", "--batch", "2"])
        == 0
    )
    capsys.readouterr()
    options = json.loads((out / "manifest.json").read_text())["training"]["options"]
    assert (options["batch"], options["seed"]) == (2, 9)  # flag over file over default


def test_build_without_data_has_no_training(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert main(["build", "--model", str(MLP), "--out", str(out), "--no-compile"]) == 0
    assert "training beyond inference" not in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["training"] is None


@pytest.mark.parametrize(
    "flags",
    [
        ["--batch", "8"],
        ["--biases-only"],
        ["--sched-param", "tau=0.1"],
        ["--steps", "5"],
        ["--scheduler", "fixed"],
        ["--lr", "auto"],
        ["--eps", "2"],
        ["--config", "zoflash.toml"],
    ],
)
def test_training_flags_need_data(tmp_path, capsys, flags):
    out = tmp_path / "bundle"
    assert main(["build", "--model", str(MLP), "--out", str(out), "--no-compile", *flags]) == 2
    assert "training options need --data" in capsys.readouterr().err
    assert not out.exists()


def test_build_with_invalid_options_writes_nothing(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert (
        main(
            [
                "build",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--out",
                str(out),
                "--no-compile",
                "--batch",
                "0",
                "--q",
                "3",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--batch (batch=) 0" in err and "--q (q=) 3" in err
    assert not out.exists()


# ---------------------------------------------------------------------------------- simulate


def simulate(log, *extra) -> int:
    return main(
        [
            "simulate",
            "--model",
            str(CNN),
            "--data",
            str(DATA),
            "--log",
            str(log),
            "--steps",
            "40",
            "--eval-every",
            "20",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    log = tmp_path_factory.mktemp("ref") / "run.jsonl"
    assert simulate(log, "--engine", "reference") == 0
    return log


def check_run(log):
    recs = read_log(log)
    kinds = [r["type"] for r in recs]
    assert kinds[0] == "hello" and kinds[-1] == "done" and kinds.count("hello") == kinds.count("done") == 1
    assert set(kinds) <= {"hello", "boundary", "step", "eval", "event", "updates", "crc", "done"}  # weights: the .npz
    assert kinds[-2] == "crc"  # the trained tensors' checksum, just before done
    assert kinds.count("boundary") == 1 and kinds[1] == "boundary"  # the CNN has a frozen prefix
    for r in recs:
        assert set(r) - {"type"} == FIELDS[r["type"]], r["type"]
    hello = recs[0]
    w, b = cnn_last_layer()
    assert {
        k: hello[k]
        for k in (
            "seed",
            "batch",
            "classes",
            "n_train",
            "n_test",
            "trainable_params",
            "scheduler",
            "rounding",
            "density_log2",
            "lr_auto",
            "max_steps",
            "budget",
            "q_max",
            "n_tensors",
        )
    } == dict(
        seed=1,
        batch=16,
        classes=10,
        n_train=N_TRAIN - 100,
        n_test=N_TEST,
        trainable_params=w.size + b.size,
        scheduler="plateau",
        rounding="split16",
        density_log2=0,
        lr_auto=True,
        max_steps=40,
        budget=0,
        q_max=64,
        n_tensors=2,
    )
    assert hello["model_sha256_prefix"] == hashlib.sha256(CNN.read_bytes()).hexdigest()[:16]

    steps = [r for r in recs if r["type"] == "step"]
    assert [s["step"] for s in steps] == list(range(40))
    prev_suffix = 0
    for s in steps:
        assert s["prefix_passes"] == 16 * (s["step"] + 1)  # b prefix passes per step
        assert s["suffix_passes"] - prev_suffix == 2 * 16 * s["q"] + (16 if s["centre"] else 0)
        prev_suffix = s["suffix_passes"]
        assert s["calibrating"] == (s["step"] < 8)  # lr auto: calib_steps 8 ...
        if s["calibrating"]:
            assert s["q"] == 8  # ... at calib_q 8
        assert 0 <= s["zero_frac"] <= 1 and 0 <= s["sat_frac"] <= 1 and s["loss"] > 0
    lr_events = [r for r in recs if r["type"] == "event" and r["kind"] == "lr"]
    assert len(lr_events) == 1 and lr_events[0]["step"] == 7 and lr_events[0]["value"] > 0
    assert all(s["lr"] > 0 for s in steps[8:])

    evals = [r for r in recs if r["type"] == "eval"]
    assert [e["step"] for e in evals] == [0, 20, 40]
    by_step = {s["step"]: s for s in steps}
    for k, e in enumerate(evals):
        # every evaluation runs the 100 validation and the N_TEST test samples
        assert e["count"] == N_TEST and e["val_count"] == 100 and e["eval_passes"] == (100 + N_TEST) * (k + 1)
        assert e["accuracy"] == float(np.float32(e["correct"]) / np.float32(N_TEST))
        assert e["val_accuracy"] == float(np.float32(e["val_correct"]) / np.float32(100))
        before = by_step.get(e["step"] - 1, {"prefix_passes": 0, "suffix_passes": 0})
        assert (e["prefix_passes"], e["suffix_passes"]) == (before["prefix_passes"], before["suffix_passes"])
    done = recs[-1]
    assert (done["steps"], done["reason"]) == (40, "steps")
    assert (done["prefix_passes"], done["suffix_passes"]) == (steps[-1]["prefix_passes"], steps[-1]["suffix_passes"])

    weights = load_weights(log.with_name(log.stem + ".weights.npz"))
    assert weights.model_sha256 == hashlib.sha256(CNN.read_bytes()).hexdigest()
    (wi, wv), (bi, bv) = weights.tensors.items()
    assert wv.dtype == np.int8 and wv.shape == w.shape and bv.dtype == np.int32 and bv.shape == b.shape
    assert int(np.abs(wv.astype(int)).max()) <= 126
    assert not np.array_equal(wv, np.clip(w, -126, 126)) or not np.array_equal(bv, b)  # it trained
    assert set(weights.residuals) == {wi}
    return recs


def test_simulate_reference(reference_run):
    check_run(reference_run)
    png = reference_run.with_suffix(".png")
    if importlib.util.find_spec("matplotlib") is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.cc
def test_simulate_c_equals_reference(tmp_path, capsys, reference_run):
    log = tmp_path / "logs" / "c.jsonl"
    assert simulate(log) == 0
    text = capsys.readouterr().out
    assert "accuracy" in text and str(log) in text
    recs = check_run(log)
    assert comparable(recs) == comparable(read_log(reference_run))
    assert any(r["time_s"] > 0 for r in recs if "time_s" in r)
    wc = load_weights(log.with_name("c.weights.npz"))
    wr = load_weights(reference_run.with_name("run.weights.npz"))
    for i in wc.tensors:
        np.testing.assert_array_equal(wc.tensors[i], wr.tensors[i])
    if importlib.util.find_spec("matplotlib") is not None:
        assert log.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_no_plot(tmp_path):
    log = tmp_path / "r.jsonl"
    assert (
        main(
            [
                "-q",
                "simulate",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--log",
                str(log),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--engine",
                "reference",
                "--no-plot",
                "--batch",
                "2",
                "--lr",
                "0.5",
            ]
        )
        == 0
    )
    assert log.exists() and log.with_name("r.weights.npz").exists() and not log.with_suffix(".png").exists()
    recs = read_log(log)
    assert recs[0]["lr_auto"] is False and recs[0]["lr"] == 0.5 and recs[0]["batch"] == 2
    assert not any(r["type"] == "step" and r["calibrating"] for r in recs)


def _nothing_written(tmp_path):
    return sorted(p.name for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(
    "flags, texts",
    [
        (["--batch", "0", "--density", "0.3"], ["--batch (batch=) 0", "--density (density=) 0.3"]),
        (["--steps", "5", "--budget", "100"], ["not both"]),
        (["--q", "3"], ["--q (q=) 3"]),
        (["--scheduler", "fixed", "--sched-param", "tau=0.1"], ["'fixed' has no parameter tau"]),
        (["--sched-param", "tau"], ["NAME=VALUE"]),
        (["--lr", "-1"], ["--lr"]),
        (["--train", "layers:nope"], ["no layer named 'nope'"]),
    ],
)
def test_simulate_invalid_options(tmp_path, capsys, flags, texts):
    log = tmp_path / "out" / "run.jsonl"
    before = _nothing_written(tmp_path)
    assert (
        main(["simulate", "--model", str(CNN), "--data", str(DATA), "--log", str(log), "--engine", "reference", *flags])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:"), err
    for t in texts:
        assert t in err
    assert _nothing_written(tmp_path) == before


def test_simulate_data_that_does_not_fit_the_model(tmp_path, capsys):
    log = tmp_path / "run.jsonl"
    assert main(["simulate", "--model", str(MLP), "--data", str(DATA), "--log", str(log), "--engine", "reference"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "x_train" in err
    assert not log.exists() and not log.with_name("run.weights.npz").exists()


def test_simulate_bad_project_file(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text("[train]\nbatchsize = 3\n")
    log = tmp_path / "run.jsonl"
    assert (
        main(
            [
                "simulate",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--log",
                str(log),
                "--config",
                str(tmp_path / "bad.toml"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error:") and "batchsize" in err
    assert not log.exists()


def test_simulate_budget_and_steps_replacing_a_project_budget(tmp_path, capsys):
    # --budget P: stop after the first step at which prefix + suffix passes >= P
    log = tmp_path / "b.jsonl"
    assert (
        main(
            [
                "-q",
                "simulate",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--log",
                str(log),
                "--engine",
                "reference",
                "--no-plot",
                "--batch",
                "4",
                "--lr",
                "1",
                "--scheduler",
                "fixed",
                "--q",
                "2",
                "--budget",
                "100",
            ]
        )
        == 0
    )
    recs = read_log(log)
    steps = [r for r in recs if r["type"] == "step"]
    total = [s["prefix_passes"] + s["suffix_passes"] for s in steps]
    assert total == [(4 + 2 * 4 * 2) * (t + 1) for t in range(len(steps))]  # 20 passes per step
    assert total[-1] >= 100 and total[-2] < 100
    assert recs[0]["budget"] == 100 and recs[0]["max_steps"] == 0
    assert (recs[-1]["reason"], recs[-1]["steps"]) == ("budget", len(steps))
    # a project file's budget is replaced by --steps on the command line
    (tmp_path / "zoflash.toml").write_text("[train]\nbudget = 100000\nbatch = 2\n")
    log = tmp_path / "s.jsonl"
    assert (
        main(
            [
                "-q",
                "simulate",
                "--model",
                str(CNN),
                "--data",
                str(DATA),
                "--log",
                str(log),
                "--engine",
                "reference",
                "--no-plot",
                "--lr",
                "1",
                "--steps",
                "3",
                "--eval-every",
                "3",
            ]
        )
        == 0
    )
    recs = read_log(log)
    assert (recs[0]["budget"], recs[0]["max_steps"], recs[0]["batch"]) == (0, 3, 2)
    assert (recs[-1]["reason"], recs[-1]["steps"]) == ("steps", 3)
