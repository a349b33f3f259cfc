"""The training losses (--loss, --target; docs/training.md "Losses"): the C loss functions against
the NumPy mirror bit for bit and against float64; whole runs of the generated C against the Python
reference, record for record, for sigmoid-bce (a one-output binary classifier), mse (a regressor)
and mse against the input (MLPerf Tiny's FC autoencoder); the loss falls in each; the guards work;
a loss that cannot move, or data that does not fit the loss, is refused with a clear message."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from ccompile import ZO_MATH, build_shared
from conftest import FIXTURES, PUBLIC
from fixtures.make_losses import new_machine
from test_training import assert_identical, run_both

from zoflash.errors import DataError
from zoflash.monitor.live_view import LiveView
from zoflash.reference import zo_math as zm
from zoflash.training.options import OptionsError, make_options
from zoflash.workflows.simulate import simulate
from zoflash.workflows.training import compile_for_training

F32 = np.float32
BINARY = FIXTURES / "binary_clf.tflite"
BINARY_DATA = FIXTURES / "binary_shift.npz"
REGRESSOR = FIXTURES / "regressor.tflite"
REGRESS_DATA = FIXTURES / "regress_shift.npz"
AUTOENCODER = PUBLIC / "mlperf_ad_autoencoder.tflite"
MLP = FIXTURES / "mlp.tflite"

SHIM = r"""
#include <stdint.h>
#include "zo_train_math.h"

void t_bce(const int8_t *q, int32_t ns, const float *scale, const int32_t *zp, const int32_t *label, float *out) {
    for (int32_t k = 0; k < ns; ++k) out[k] = zo_sigmoid_bce(q[k], scale[k], zp[k], label[k]);
}
void t_mse(const int8_t *q, int32_t ns, int32_t n, float scale, int32_t zp, const float *t, float *out) {
    for (int32_t k = 0; k < ns; ++k) out[k] = zo_mse_s8(q + k * n, n, scale, zp, t + k * n);
}
"""


def _p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def bits(a) -> np.ndarray:
    return np.asarray(a, F32).view(np.uint32)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    lib = build_shared(
        [ZO_MATH / "zo_rng.c", ZO_MATH / "zo_train_math.c"],
        tmp_path_factory.mktemp("loss_c"),
        "zo_loss",
        {"shim.c": SHIM},
    )
    lib.t_mse.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    return lib


@pytest.fixture(scope="module")
def ad_data(tmp_path_factory):
    """Inputs only: the targets are the inputs (--target input needs no y)."""
    x = new_machine()
    path = tmp_path_factory.mktemp("ad") / "new_machine.npz"
    np.savez(path, x_train=x[:256], x_test=x[256:])
    return path


# ---- the loss functions: C == mirror, and close to float64 ---------------------------------------


@pytest.mark.cc
def test_sigmoid_bce_bit_identical(lib):
    rng = np.random.default_rng(1)
    ns = 20000
    q = rng.integers(-128, 128, ns).astype(np.int8)
    q[:4] = [-128, 127, 0, -1]
    scale = np.exp(rng.uniform(np.log(1e-3), np.log(2.0), ns)).astype(F32)
    zp = rng.integers(-128, 128, ns).astype(np.int32)
    label = rng.integers(0, 2, ns).astype(np.int32)
    out = np.zeros(ns, F32)
    lib.t_bce(_p(q), ns, _p(scale), _p(zp), _p(label), _p(out))
    assert np.array_equal(bits(out), bits(zm.sigmoid_bce(q, scale, zp, label)))
    x = (scale.astype(np.float64) * (q.astype(np.int64) - zp)).astype(F32).astype(np.float64)
    ref = np.logaddexp(0.0, x) - label * x  # -log(sigmoid(x)) for label 1, -log(1 - sigmoid(x)) for 0
    assert np.all(np.abs(out - ref) <= 2e-6 * np.maximum(1.0, np.abs(ref)))


@pytest.mark.cc
@pytest.mark.parametrize("n", [1, 7, 640])
def test_mse_bit_identical(lib, n):
    rng = np.random.default_rng(n)
    ns = 500
    q = rng.integers(-128, 128, (ns, n)).astype(np.int8)
    t = rng.normal(0, 20, (ns, n)).astype(F32)
    scale, zp = F32(0.3645), -37
    out = np.zeros(ns, F32)
    lib.t_mse(_p(q), ns, n, float(scale), zp, _p(t), _p(out))
    assert np.array_equal(bits(out), bits(zm.mse(q, scale, zp, t)))
    x = (np.float64(scale) * (q.astype(np.int64) - zp)).astype(F32).astype(np.float64)
    ref = ((x - t) ** 2).mean(axis=1)
    assert np.all(np.abs(out - ref) <= 1e-5 * ref)


# ---- whole runs: C == reference, and the loss falls ----------------------------------------------


@pytest.mark.cc
def test_binary_classifier_learns_with_sigmoid_bce(tmp_path):
    runs = run_both(tmp_path, BINARY, BINARY_DATA, steps=300, eval_every=50)  # auto: one output
    assert_identical(runs)
    hello = runs["c"].records[0]
    assert hello["type"] == "hello" and hello["loss_kind"] == "sigmoid-bce" and hello["classes"] == 1
    first, last = runs["c"].evals[0], runs["c"].evals[-1]
    assert last["loss"] < 0.8 * first["loss"], (first, last)
    # 82.5% -> 83.1% since the guards and snapshots use a validation split (32 of the 320 training
    # samples) instead of the test set (82.5% -> 87.5% before, partly test-set selection)
    assert last["accuracy"] >= first["accuracy"], (first, last)
    # the accuracy at threshold 0.5, from the exported logits, as the records say
    assert 0 < first["correct"] < first["count"]


@pytest.mark.cc
def test_regressor_learns_with_mse(tmp_path):
    runs = run_both(tmp_path, REGRESSOR, REGRESS_DATA, loss="mse", steps=200, eval_every=50)
    assert_identical(runs)
    first, last = runs["c"].evals[0], runs["c"].evals[-1]
    assert last["loss"] < 0.2 * first["loss"], (first, last)
    assert all(e["correct"] == 0 and e["accuracy"] == 0 for e in runs["c"].evals)  # mse has no accuracy


@pytest.mark.zoo
@pytest.mark.cc
def test_autoencoder_identical_to_reference(tmp_path, ad_data):
    """The reconstruction of the input: 640 outputs, the targets the dequantized int8 inputs."""
    runs = run_both(tmp_path, AUTOENCODER, ad_data, target="input", density=1 / 16, steps=24, eval_every=12)
    assert_identical(runs)
    assert runs["c"].records[0]["loss_kind"] == "mse"


@pytest.mark.zoo
@pytest.mark.cc
def test_autoencoder_adapts_to_a_new_machine(tmp_path, ad_data):
    """MLPerf Tiny's anomaly-detection autoencoder: its reconstruction error on the new machine
    falls (sparse directions: the last layer has 82k weights)."""
    opts = make_options(target="input", density=1 / 16, steps=300, eval_every=100)
    run = simulate(AUTOENCODER, ad_data, opts, tmp_path / "ad.jsonl", engine="c", plot=False)
    first, last = run.evals[0], run.evals[-1]
    assert last["loss"] < 0.85 * first["loss"], (first, last)
    lr = [r for r in run.records if r["type"] == "event" and r["kind"] == "lr"]
    assert lr and 1 < lr[0]["value"] < 1000  # calibrated on the mse's scale (softmax-ce gave 7e5)
    assert run.done["reason"] == "steps"


@pytest.mark.cc
def test_bce_guard_rolls_back_identically(tmp_path):
    """A far too large lr sends the test loss up (the one logit to the wrong side, sometimes to its
    saturation): the test-loss guard rolls back and halves lr."""
    # headroom 0: the explicit lr was chosen for the pretrained scale (with h bits it is 4^h times larger)
    runs = run_both(
        tmp_path, BINARY, BINARY_DATA, scheduler="fixed", lr=3e5, steps=80, eval_every=20, guard_steps=4, headroom=0
    )
    assert_identical(runs)
    rollbacks = [r for r in runs["c"].records if r["type"] == "event" and r["kind"] == "rollback"]
    assert rollbacks and rollbacks[0]["code"] == 1 and rollbacks[0]["value"] == 1.5e5
    assert any(s["sat_frac"] > 0 for s in runs["c"].steps)  # saturated on the wrong side, counted alike


@pytest.mark.cc
def test_saturation_towards_the_target_is_no_collapse(tmp_path):
    """mse targets beyond the output's range pin it at 127, the best it can do: the guards must
    not count those outputs (the saturation guard counts outputs saturated away from their
    target; the zero guard skips settled samples), else every step would count and roll back."""
    d = np.load(REGRESS_DATA)
    path = tmp_path / "far.npz"
    np.savez(
        path,
        x_train=d["x_train"],
        y_train=np.full_like(d["y_train"], 1e3),
        x_test=d["x_test"],
        y_test=np.full_like(d["y_test"], 1e3),
    )
    runs = run_both(
        tmp_path,
        REGRESSOR,
        path,
        loss="mse",
        scheduler="fixed",
        lr=2e4,
        steps=60,
        eval_every=20,
        guard_steps=2,
        headroom=0,
    )  # the explicit lr is for the pretrained scale
    assert_identical(runs)
    steps = runs["c"].steps
    assert not any(s["diverged"] for s in steps)
    assert all(s["sat_frac"] < 0.25 for s in steps) and all(s["zero_frac"] < 0.98 for s in steps)
    plan = _prep(REGRESSOR, path, loss="mse").training.plan
    pinned = (1e3 - plan.logits_scale * (127 - plan.logits_zp)) ** 2  # every output at 127
    # (within 2.1e-5 of it since the validation split: 60 steps on 288 samples leave a few just below)
    assert abs(runs["c"].evals[-1]["loss"] - pinned) < 1e-4 * pinned


# ---- choosing the loss, and refusing what cannot train ---------------------------------------------


def _prep(model, data, **options):
    return compile_for_training(model, data, make_options(**options))


def test_auto_picks_the_loss_from_the_output(tmp_path):
    assert _prep(BINARY, BINARY_DATA).training.plan.loss == "sigmoid-bce"
    d = np.load(FIXTURES / "digits_shift.npz")
    path = tmp_path / "flat.npz"
    np.savez(
        path,
        x_train=d["x_train"].reshape(len(d["x_train"]), -1),
        y_train=d["y_train"],
        x_test=d["x_test"].reshape(len(d["x_test"]), -1),
        y_test=d["y_test"],
    )
    plan = _prep(MLP, path).training.plan
    assert plan.loss == "softmax-ce" and plan.classes == 10


def test_sigmoid_bce_reads_the_logit_before_the_logistic():
    plan = _prep(BINARY, BINARY_DATA).training.plan
    prep = _prep(BINARY, BINARY_DATA, loss="mse")  # mse compares the output itself (the probability)
    assert plan.logits_end == prep.training.plan.logits_end - 1
    assert plan.logits_zp != -128 and prep.training.plan.logits_zp == -128


@pytest.mark.zoo
def test_a_loss_that_cannot_move_says_why():
    with pytest.raises(OptionsError, match="always 0.*--loss sigmoid-bce"):
        _prep(BINARY, BINARY_DATA, loss="softmax-ce")
    with pytest.raises(OptionsError, match="sigmoid-bce needs a model with one output"):
        _prep(AUTOENCODER, BINARY_DATA, loss="sigmoid-bce")
    with pytest.raises(OptionsError, match="--target input.*--loss mse"):
        make_options(target="input", loss="softmax-ce")


def test_data_that_does_not_fit_the_loss(tmp_path):
    d = dict(np.load(BINARY_DATA))
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{**d, "y_train": d["y_train"] * 2})
    with pytest.raises(DataError, match="labels 0/1.*--loss mse"):
        _prep(BINARY, bad)
    r = dict(np.load(REGRESS_DATA))
    np.savez(bad, **r)
    with pytest.raises(DataError, match="non-integer.*--loss mse"):
        _prep(REGRESSOR, bad, loss="sigmoid-bce")
    np.savez(bad, **{**r, "y_train": np.zeros((len(r["y_train"]), 3), F32)})
    with pytest.raises(DataError, match=r"y_train.*shape \[320, 3\].*\[320, 1\] targets"):
        _prep(REGRESSOR, bad, loss="mse")
    np.savez(bad, x_train=r["x_train"], x_test=r["x_test"])
    with pytest.raises(DataError, match="lacks y_train, y_test"):
        _prep(REGRESSOR, bad, loss="mse")
    with pytest.raises(DataError, match="--target input needs an int8 or float32 model input with as many values"):
        _prep(REGRESSOR, bad, target="input")


@pytest.mark.zoo
def test_target_input_needs_no_y(ad_data):
    data = _prep(AUTOENCODER, ad_data, target="input", steps=1).training.data
    assert data.t_train is None and not data.labels and len(data.y_train) + len(data.y_val) == 256
    assert data.t_val is None and len(data.y_val) == 26  # 0.1 of 256, rounded: the validation split


def test_live_view_shows_no_accuracy_for_mse(tmp_path):
    import io

    out = io.StringIO()
    view = LiveView(out=out)
    view.show(
        {
            "type": "hello",
            "loss_kind": "mse",
            "scheduler": "plateau",
            "batch": 16,
            "trainable_params": 33,
            "n_train": 1,
            "n_test": 1,
            "lr_auto": True,
            "lr": 0.0,
        }
    )
    view.show(
        {
            "type": "eval",
            "step": 0,
            "correct": 0,
            "count": 160,
            "accuracy": 0.0,
            "loss": 0.12,
            "prefix_passes": 0,
            "suffix_passes": 0,
        }
    )
    text = out.getvalue()
    assert "loss mse" in text and "eval after 0 steps: test loss 0.1200" in text and "accuracy" not in text


@pytest.mark.cc
def test_headroom_report_follows_the_loss():
    """The re-quantization report judges predictions as the loss does: threshold 0.5 for
    sigmoid-bce, none for mse (only how far the outputs moved)."""
    bce = _prep(BINARY, BINARY_DATA, headroom=1).training.headroom["outputs"]
    assert 0.7 < bce["accuracy_before"] < 0.95 and "changed_predictions" in bce
    mse = _prep(REGRESSOR, REGRESS_DATA, loss="mse", headroom=1).training.headroom["outputs"]
    assert "accuracy_before" not in mse and mse["max_abs_logit_change"] >= 0


@pytest.mark.zoo
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.parametrize("case", ["bce", "autoencoder"])
def test_qemu_losses_bit_identical_to_the_host(tmp_path, case):
    """The mps3-an547 firmware (Cortex-M55 under QEMU) sends the host simulation's records."""
    import subprocess

    from zoflash import api
    from zoflash.monitor.session import comparable
    from zoflash.monitor.telemetry import Decoder

    small = tmp_path / "small_machine.npz"  # the board's 512 KiB TCM holds the model and 160 samples
    x = new_machine(n=160)
    np.savez(small, x_train=x[:128], x_test=x[128:])
    model, data, options = {
        "bce": (BINARY, BINARY_DATA, dict(steps=30, eval_every=15)),
        "autoencoder": (AUTOENCODER, small, dict(steps=12, eval_every=6, target="input", density=1 / 16)),
    }[case]
    opts = make_options(**options)
    elf = api.build(model, "mps3-an547", tmp_path / "b", data_path=data, options=opts).outputs[0]
    proc = subprocess.run(
        [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-nographic",
            "-semihosting",
            "-icount",
            "shift=0",
            "-kernel",
            str(elf),
        ],
        capture_output=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    dec = Decoder()
    device = comparable(dec.records(dec.feed(proc.stdout) + dec.flush()))
    host = comparable(simulate(model, data, opts, None, engine="c", plot=False).records)
    assert dec.stats()["crc_errors"] == 0 and len(device) == len(host)
    for k, (a, b) in enumerate(zip(device, host)):
        assert a == b, f"record {k} differs:\nQEMU {a}\nhost {b}"


def test_fixtures_match_their_index():
    import hashlib
    import json

    for entry in json.loads((FIXTURES / "losses.json").read_text()):
        assert hashlib.sha256((FIXTURES / entry["file"]).read_bytes()).hexdigest() == entry["sha256"], entry["file"]
