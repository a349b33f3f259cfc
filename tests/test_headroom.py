"""--headroom: the re-quantization pass, its output-change report, C == reference with it, the
weights file's scales and the export (tflite-micro == generated C == reference forward)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.compiler.pipeline import compile_graph
from zoflash.compiler.tflite_import import load_tflite
from zoflash.reference.forward import ReferenceForward
from zoflash.training.headroom import apply_headroom, divide_by_pow2
from zoflash.training.options import OptionsError, make_options
from zoflash.training.plan import plan_training
from zoflash.training.weights_file import load_weights, save_weights
from zoflash.workflows.headroom import output_change
from zoflash.workflows.simulate import simulate
from zoflash.workflows.training import compile_for_training

DIGITS = FIXTURES / "digits_cnn.tflite"
MLP = FIXTURES / "mlp.tflite"
FC_PER_TENSOR = FIXTURES / "fc_per_tensor.tflite"
SHIFT = FIXTURES / "digits_shift.npz"


def _trainable(path, train="last:1"):
    graph, _ = load_tflite(path)
    model = compile_graph(graph)
    plan = plan_training(model, make_options(train=train))
    return graph, model, plan


def test_divide_by_pow2():
    v = np.array([-128, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 127])
    np.testing.assert_array_equal(divide_by_pow2(v, 2), [-32, -2, -1, -1, -1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 32])
    np.testing.assert_array_equal(divide_by_pow2(v, 0), v)
    big = np.array([2**31 - 1, -(2**31), 2**31 - 3, 3 - 2**31], np.int64)  # int32 biases: exact in float64
    np.testing.assert_array_equal(divide_by_pow2(big, 2), np.sign(big) * ((np.abs(big) + 2) // 4))


@pytest.mark.parametrize("path,train", [(DIGITS, "last:1"), (MLP, "all"), (FC_PER_TENSOR, "last:1")])
@pytest.mark.parametrize("bits", [1, 2, 4])
def test_pass_rescales_exactly(path, train, bits):
    graph, model, plan = _trainable(path, train)
    weights = [t.index for t in plan.tensors if not t.is_bias]
    biases = {t.index for t in plan.tensors if t.is_bias}
    before = {t.index: (t.data.copy() if t.data is not None else None, t.quant) for t in graph.tensors}
    new, changed = apply_headroom(graph, weights, bits, eps=1, root=model.root)
    assert set(changed) == set(weights) | biases
    d = 1 << bits
    for t, u in zip(graph.tensors, new.tensors):
        data, quant = before[t.index]
        assert t.quant is quant and (data is None or np.array_equal(t.data, data))  # input untouched
        if t.index not in changed:
            assert u.quant == t.quant and (t.data is None or np.array_equal(u.data, t.data))
            continue
        assert u.dtype == t.dtype and u.data.shape == t.data.shape
        assert u.quant.scales == tuple(s * d for s in t.quant.scales)
        assert u.quant.zero_points == t.quant.zero_points and u.quant.axis == t.quant.axis
        exact = np.sign(t.data.astype(np.int64)) * np.floor(np.abs(t.data.astype(np.float64)) / d + 0.5)
        if t.dtype == "int8":
            exact = np.clip(exact, -126, 126)
        np.testing.assert_array_equal(u.data.astype(np.int64), exact.astype(np.int64))


def test_zero_bits_is_the_identity():
    graph, model, plan = _trainable(DIGITS)
    new, changed = apply_headroom(graph, [t.index for t in plan.tensors if not t.is_bias], 0, root=model.root)
    assert changed == [] and new is not graph
    for t, u in zip(graph.tensors, new.tensors):
        assert u.quant == t.quant and (t.data is None or np.array_equal(u.data, t.data))


def test_options():
    assert make_options().headroom == "auto"
    assert make_options(headroom=3).headroom == 3 and make_options(headroom="3").headroom == 3
    assert make_options(headroom="AUTO").headroom == "auto"
    with pytest.raises(OptionsError, match=r"--headroom \(headroom=\) 5"):
        make_options(headroom=5)
    with pytest.raises(OptionsError, match="headroom"):
        make_options(headroom="lots")
    with pytest.raises(OptionsError, match="biases-only"):
        make_options(headroom=1, biases_only=True)
    assert make_options(biases_only=True).headroom == "auto"  # auto resolves to 0 there


def _rms_bits(rms_lsb_values):
    """The auto rule worked by hand: the most bits h <= 4 with rms / 2^h >= 6 LSB."""
    out = []
    for rms in rms_lsb_values:
        h = 0
        while h < 4 and rms / 2 ** (h + 1) >= 6.0:
            h += 1
        out.append(h)
    return out


@pytest.mark.parametrize(
    "path, train",
    [
        (DIGITS, "last:1"),
        (DIGITS, "last:2"),
        (MLP, "last:1"),
        (FIXTURES / "motions_cnn.tflite", "last:1"),
        (FIXTURES / "fmnist_mbv2.tflite", "last:1"),
        (FIXTURES / "fmnist_mbv2.tflite", "last:2"),
    ],
)
def test_auto_bits_from_the_weights_rms(path, train):
    from zoflash.training.headroom import auto_bits

    graph, model, plan = _trainable(path, train)
    ws = [t.index for t in plan.tensors if not t.is_bias]
    values = np.concatenate([graph.tensors[w].data.ravel().astype(np.float64) for w in ws])
    rms = float(np.sqrt(np.mean(values**2)))
    assert auto_bits(model.graph, ws, root=model.root) == _rms_bits([rms])[0]


def test_auto_bits_edges():
    from zoflash.training.headroom import auto_bits

    assert _rms_bits([5.9, 6.0, 11.9, 12.0, 24.0, 48.0, 96.0, 127.0]) == [0, 0, 0, 1, 2, 3, 4, 4]
    graph, model, plan = _trainable(DIGITS)
    assert auto_bits(model.graph, [], root=model.root) == 0  # biases only: nothing to re-quantize
    # known cases (research/2026-11-29-scheduler-grid-digits-400k.md): the digits head RMS 29.5 LSB -> 2 bits
    ws = [t.index for t in plan.tensors if not t.is_bias]
    assert auto_bits(model.graph, ws, root=model.root) == 2
    # the same head with smaller weights (RMS 14.8, 7.4 LSB): 1 bit, then none
    from dataclasses import replace

    for shift, bits in ((1, 1), (2, 0)):
        tensors = list(model.graph.tensors)
        for w in ws:
            tensors[w] = replace(tensors[w], data=divide_by_pow2(tensors[w].data, shift).astype(np.int8))
        assert auto_bits(replace(model.graph, tensors=tensors), ws, root=model.root) == bits
    # a weight tensor another layer reads as well (the first conv pointed at the head's weights): none
    ops = list(model.graph.ops)
    conv = ops[0]
    assert conv.type == "CONV_2D" and ops[4].type == "FULLY_CONNECTED" and ops[4].inputs[1] in ws
    ops[0] = replace(conv, inputs=(conv.inputs[0], ops[4].inputs[1]) + tuple(conv.inputs[2:]))
    assert auto_bits(replace(model.graph, ops=ops), ws, root=model.root) == 0


@pytest.mark.cc
def test_auto_resolves_at_build_time(tmp_path):
    """The default: compile_training resolves auto to bits, which the manifest, the C and the hello carry."""
    prep = compile_for_training(DIGITS, SHIFT, make_options())
    assert prep.training.options.headroom == 2 and prep.training.headroom["bits"] == 2
    none = compile_for_training(DIGITS, SHIFT, make_options(biases_only=True))
    assert none.training.options.headroom == 0 and none.training.headroom is None


def test_toml_key(tmp_path):
    f = tmp_path / "zoflash.toml"
    f.write_text("[train]\nheadroom = 2\n")
    assert make_options(f).headroom == 2


@pytest.mark.cc  # the report runs the generated C of both models
def test_output_change_report():
    opts = make_options(headroom=2)
    prep = compile_for_training(DIGITS, SHIFT, opts)
    hr = prep.training.headroom
    assert hr["bits"] == 2 and {t["kind"] for t in hr["tensors"]} == {"weights", "bias"}
    assert {t["index"] for t in hr["tensors"]} == {t.index for t in prep.training.plan.tensors}
    out = hr["outputs"]
    assert out["n_test"] == len(prep.training.data.y_test)
    for k in ("accuracy_before", "accuracy_after", "changed_predictions"):
        assert 0 <= out[k] <= 1
    # the report (the generated C) matches the independent reference forward pass on both compiled graphs
    base = compile_for_training(DIGITS, SHIFT, make_options(headroom=0))
    x, y = base.training.data.x_test, base.training.data.y_test
    again = output_change(base.model, prep.model, base.training.plan.logits, x, y)
    assert again == out
    fa, fb = ReferenceForward(base.model), ReferenceForward(prep.model)
    inp = base.model.graph.inputs[0]
    la = fa.run({inp: x}, 0, fa.logits_end)[fa.logits_index].astype(int)
    lb = fb.run({inp: x}, 0, fb.logits_end)[fb.logits_index].astype(int)
    assert out["max_abs_logit_change"] == np.abs(la - lb).max()
    assert out["accuracy_before"] == np.mean(la.argmax(1) == y)
    # 2 bits lose little: most predictions stay
    assert out["changed_predictions"] < 0.2
    # the requantized model starts training from the new scales and values
    plan = prep.training.plan
    w = next(t for t in plan.tensors if not t.is_bias)
    assert np.abs(w.values).max() <= 32 and prep.model.graph.tensors[w.index].quant.scales == tuple(
        4 * s for s in base.model.graph.tensors[w.index].quant.scales
    )


@pytest.mark.cc
def test_manifest_and_build_output(tmp_path):
    from click.testing import CliRunner

    from zoflash.cli import cli

    res = CliRunner().invoke(
        cli,
        [
            "build",
            "--model",
            str(DIGITS),
            "--data",
            str(SHIFT),
            "--headroom",
            "2",
            "--out",
            str(tmp_path / "b"),
            "--no-compile",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "headroom 2 bit(s)" in res.output and "predictions changed" in res.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    tr = manifest["training"]
    assert tr["options"]["headroom"] == 2 and tr["headroom"]["bits"] == 2
    assert "max_abs_logit_change" in tr["headroom"]["outputs"]
    res = CliRunner().invoke(
        cli,
        [
            "build",
            "--model",
            str(DIGITS),
            "--data",
            str(SHIFT),
            "--headroom",
            "0",
            "--out",
            str(tmp_path / "c"),
            "--no-compile",
        ],
    )
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["training"]["headroom"] is None
    res = CliRunner().invoke(
        cli, ["build", "--model", str(DIGITS), "--data", str(SHIFT), "--out", str(tmp_path / "d"), "--no-compile"]
    )
    assert res.exit_code == 0, res.output
    tr = json.loads((tmp_path / "d" / "manifest.json").read_text())["training"]
    assert tr["options"]["headroom"] == 2 and tr["headroom"]["bits"] == 2  # auto, resolved
    assert ".headroom_bits = 2u" in (tmp_path / "d" / "digits_cnn_train.c").read_text()


def test_weights_file_scales(tmp_path):
    p = save_weights(
        tmp_path / "w.npz",
        "a" * 64,
        [(3, "w", np.zeros((2, 2), np.int8), None), (4, "b", np.zeros(2, np.int32), None)],
        scales={3: [0.5, 0.25], 4: [0.125, 0.0625]},
        headroom=2,
    )
    w = load_weights(p)
    assert w.headroom == 2 and w.scales[3].tolist() == [0.5, 0.25] and w.scales[4].tolist() == [0.125, 0.0625]
    plain = load_weights(save_weights(tmp_path / "v.npz", "a" * 64, [(3, "w", np.zeros(2, np.int8), None)]))
    assert plain.scales == {} and plain.headroom == 0
    from zoflash.errors import DataError

    with pytest.raises(DataError, match="not in the file"):
        save_weights(tmp_path / "x.npz", "a" * 64, [(3, "w", np.zeros(2, np.int8), None)], scales={5: [1.0]})


# ---- C == reference with --headroom 2 ---------------------------------------------------------------


@pytest.mark.cc
def test_c_identical_to_reference_with_headroom(tmp_path):
    from test_training import assert_identical, run_both

    runs = run_both(tmp_path, DIGITS, SHIFT, scheduler="fixed", q=2, steps=120, eval_every=40, headroom=2)
    assert_identical(runs)
    w = load_weights(runs["c"].weights_path)
    assert w.headroom == 2 and set(w.scales) == set(w.tensors)
    assert runs["c"].headroom["bits"] == 2
    assert runs["c"].records[0]["type"] == "hello" and runs["c"].records[0]["headroom"] == 2  # the C's own hello


def test_monitor_takes_the_bits_from_the_device():
    """A weights dump gets the scales of the headroom the device reports (hello, else status)."""
    from zoflash.monitor.serial_monitor import Monitor

    mon = Monitor(opener=lambda: None)
    assert mon.headroom_bits() == 0  # nothing heard yet
    mon.last_status = {"type": "status", "headroom": 3}
    assert mon.headroom_bits() == 3
    mon.hello = {"type": "hello", "headroom": 2}
    assert mon.headroom_bits() == 2
    assert Monitor(opener=lambda: None, headroom=1).headroom_bits() == 1  # given: it wins


# ---- export: tflite-micro == generated C == reference forward ------------------------------------------


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("path,train", [(DIGITS, "last:1"), (MLP, "all")])
def test_export_with_headroom(tmp_path, path, train):
    from zoflash import api
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.training.export import export_weights

    data = SHIFT
    if path == MLP:
        d = np.load(SHIFT)
        data = tmp_path / "flat.npz"
        np.savez(
            data,
            x_train=d["x_train"].reshape(len(d["x_train"]), -1),
            y_train=d["y_train"],
            x_test=d["x_test"].reshape(len(d["x_test"]), -1)[:200],
            y_test=d["y_test"][:200],
        )
    opts = make_options(scheduler="fixed", q=4, rho=1.0, steps=100, eval_every=100, headroom=2, train=train)
    run = simulate(path, data, opts, tmp_path / "run.jsonl", engine="c", plot=False)
    out = tmp_path / "trained.tflite"
    report = export_weights(path, run.weights_path, out)
    trained = load_weights(run.weights_path)
    assert sorted(report.requantized) == sorted(trained.tensors)
    prep = compile_for_training(path, data, opts)
    # the exported model reads back with the re-quantized scales
    graph, _ = load_tflite(out)
    for i in trained.tensors:
        assert graph.tensors[i].quant.scales == prep.model.graph.tensors[i].quant.scales
    x = prep.training.data.x_test
    golden = TflmInterpreter(out.read_bytes()).run_batch(x)
    np.testing.assert_array_equal(api.infer(out, x).reshape(golden.shape), golden)
    fwd = ReferenceForward(prep.model)
    np.testing.assert_array_equal(fwd.forward(x, weights=trained.tensors).reshape(golden.shape), golden)
    # the training program's final evaluation saw exactly these predictions
    logits = fwd.run({prep.model.graph.inputs[0]: x}, 0, fwd.logits_end, weights=trained.tensors)[fwd.logits_index]
    assert run.evals[-1]["correct"] == int(np.count_nonzero(logits.argmax(1) == prep.training.data.y_test))
    # a dump without scales (monitor) exports the same model with --headroom
    plain = save_weights(
        tmp_path / "plain.npz",
        trained.model_sha256,
        [(i, trained.names[i], v, None) for i, v in trained.tensors.items()],
    )
    out2 = tmp_path / "trained2.tflite"
    export_weights(path, plain, out2, headroom=2)
    assert out2.read_bytes() == out.read_bytes()
    # the monitor's dump of the same weights, told the bits, records the scales itself
    from zoflash.monitor import telemetry
    from zoflash.monitor.serial_monitor import save_dumped

    asm = telemetry.WeightsAssembler()  # as if the device had sent the trained bytes
    for i, v in trained.tensors.items():
        data = np.ascontiguousarray(v, v.dtype.newbyteorder("<")).tobytes()
        asm.add({"tensor": i, "part": 0, "total": len(data), "offset": 0, "data": data})
    dumped = save_dumped(asm, path, tmp_path / "dump.npz", trained.model_sha256[:16], headroom=2)
    assert load_weights(dumped).scales.keys() == trained.tensors.keys()
    out4 = tmp_path / "trained4.tflite"
    export_weights(path, dumped, out4)
    assert out4.read_bytes() == out.read_bytes()
    out3 = tmp_path / "trained3.tflite"
    export_weights(path, plain, out3)  # no headroom: old scales, a different model
    assert out3.read_bytes() != out.read_bytes()


@pytest.mark.cc
def test_the_stream_ring_is_counted_with_headroom():
    """The re-plan after re-quantization keeps the RAM ring of a stream data source (it was lost)."""
    rings = [
        compile_for_training(
            DIGITS, SHIFT, make_options(headroom=h, data_source="stream", buffer=32)
        ).training.plan.stream_buffer_bytes
        for h in (0, 2, "auto")
    ]
    assert rings == [32 * (64 + 2)] * 3  # 8x8 int8 image and a u16 label per slot
