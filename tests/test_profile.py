"""`zoflash profile`: one inference traced on the emulated Cortex-M55, its instructions attributed to
the kernel calls (workflows/profile.py, targets/exec_trace.py). The per-call counts must add up to
the whole inference as the benchmarks measure it (QEMU -icount), the MACs must be the analytic
count from the model's tensor shapes, the JSON must keep its schema, and bad requests must end in
one clear message."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.cli import main
from zoflash.targets import emulated
from zoflash.workflows import profile as profile_mod

MODEL = FIXTURES / "digits_cnn.tflite"  # conv, max pool, conv, (reshape: no call), FC, softmax

pytestmark = [pytest.mark.cc, pytest.mark.cross, pytest.mark.qemu]


def analytic_macs(path) -> list[int]:
    """MACs of each conv, depthwise and FC op, from the TFLite tensor shapes alone."""
    g = api.load_model(path).graph
    out = []
    for op in g.ops:
        shape_out = g.tensors[op.outputs[0]].shape
        w = g.tensors[op.inputs[1]].shape if len(op.inputs) > 1 else ()
        if op.type == "CONV_2D":  # filter [out_c, kh, kw, in_c]
            out.append(math.prod(shape_out) * w[1] * w[2] * w[3])
        elif op.type == "DEPTHWISE_CONV_2D":  # filter [1, kh, kw, out_c]
            out.append(math.prod(shape_out) * w[1] * w[2])
        elif op.type == "FULLY_CONNECTED":  # weights [units, depth]
            out.append(math.prod(shape_out) * w[1])
    return out


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "p.json"
    assert main(["profile", "--model", str(MODEL), "--json", str(out), "--top", "2"]) == 0
    return json.loads(out.read_text())


def test_the_calls_add_up_to_the_inference_measured_by_icount(profiled, tmp_path):
    """The benchmarks' measure (virtual time under -icount, 1 ns per instruction, input copy
    subtracted) of the same input counts what the traced calls count, plus the invoke's own
    overhead the profile states, plus the timing loop's few instructions per repetition."""
    ops = profiled["ops"]
    calls = sum(o["instructions"] for o in ops)
    assert calls + profiled["overhead"]["instructions"] == profiled["total"]["instructions"]
    assert 0 < profiled["overhead"]["instructions"] < 100
    model = api.load_model(MODEL)
    bundle = api.generate(MODEL, "mps3-an547", tmp_path / "b")
    run = emulated.run_inference(bundle, api.random_inputs(model, 1, seed=0), time_us=5000)
    reps, us = run.timing["invoke"]
    _, copy_us = run.timing["copy"]
    measured = (us - copy_us) * 1000 / reps
    clock = 2 * 1000 / reps  # the clock's 1 us resolution, on both readings
    loop = 8  # the repetition loop and the call of invoke, per repetition
    assert abs(measured - profiled["total"]["instructions"]) <= clock + loop, (measured, profiled["total"])
    assert abs(measured - calls) <= profiled["overhead"]["instructions"] + clock + loop


def test_macs_are_the_analytic_count(profiled):
    with_macs = [o["macs"] for o in profiled["ops"] if o["type"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]
    assert with_macs == analytic_macs(MODEL)
    assert all(o["macs"] == 0 for o in profiled["ops"] if o["type"] in ("MAX_POOL_2D", "SOFTMAX"))
    assert profiled["total"]["macs"] == sum(analytic_macs(MODEL))


def test_json_schema(profiled):
    p = profiled
    assert p["schema"] == profile_mod.SCHEMA and p["board"] == "mps3-an547" and p["model"] == MODEL.name
    assert "MVE" in p["cycle_model"]
    keys = {"instructions", "mve", "cycles", "macs", "macs_per_cycle"}
    assert [o["index"] for o in p["ops"]] == list(range(len(p["ops"])))  # every call, in order (not --top's cut)
    assert [o["type"] for o in p["ops"]] == ["CONV_2D", "MAX_POOL_2D", "CONV_2D", "FULLY_CONNECTED", "SOFTMAX"]
    for o in p["ops"]:
        assert keys | {"index", "type", "kernel", "variant", "functions"} == set(o)
        assert o["kernel"].startswith("zo_") and o["variant"] in o["functions"]
        assert o["cycles"] == o["instructions"] + o["mve"] and 0 <= o["mve"] < o["instructions"]
        assert sum(o["functions"].values()) == o["instructions"]
        assert o["macs_per_cycle"] == pytest.approx(o["macs"] / o["cycles"], abs=1e-4)
    assert any(o["mve"] > 0 for o in p["ops"])  # the Helium kernels ran
    assert set(p["total"]) == keys == set(p["overhead"])
    assert sum(t["calls"] for t in p["by_type"]) == len(p["ops"])
    assert sum(t["cycles"] for t in p["by_type"]) + p["overhead"]["cycles"] == p["total"]["cycles"]
    assert [t["cycles"] for t in p["by_type"]] == sorted((t["cycles"] for t in p["by_type"]), reverse=True)


def test_the_table_shows_the_costliest_calls(capsys):
    assert main(["profile", "--model", str(FIXTURES / "mlp.tflite"), "--top", "1"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[1].splitlines()
    assert len(table) == 3 and "SOFTMAX" in table[2]  # header, rule, the costliest call
    assert "total:" in out and "est. cycles" in out and "real silicon differs" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--board", "stm32n6"], "profile runs on the emulated board mps3-an547"),
        (["--board", "host"], "give --board mps3-an547"),
        (["--board", "nope"], "unknown board 'nope'"),
    ],
)
def test_bad_requests_are_one_clear_message(args, message, capsys):
    assert main(["profile", "--model", str(FIXTURES / "mlp.tflite"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    if "stm32n6" in args:
        assert "for stm32n6" in err and "silicon differ" in err


def test_missing_model_and_top(capsys, tmp_path):
    assert main(["profile", "--model", str(tmp_path / "none.tflite")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["profile", "--model", str(FIXTURES / "mlp.tflite"), "--top", "0"]) == 2


def test_qemu_missing_is_named(monkeypatch, capsys):
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda p, *a, **k: None if p == "qemu-system-arm" else real(p, *a, **k))
    assert main(["profile", "--model", str(FIXTURES / "mlp.tflite")]) != 0
    err = capsys.readouterr().err
    assert "qemu-system-arm" in err and "apt-get install qemu-system-arm" in err and "Traceback" not in err


def test_split_by_calls_attributes_every_address_once():
    """The attribution itself on a made-up trace: dispatcher at [100, 110), kernels at 200 and 300,
    a helper at 400 the kernels call, and memcpy (500), a call the dispatcher makes that is no op's."""
    pcs = [100, 102, 200, 202, 400, 402, 204, 104, 500, 502, 106, 300, 400, 302, 108]
    t = profile_mod.exec_trace.split_by_calls(iter(pcs), [(100, 110)], [200, 300])
    assert sum(t.calls[0].values()) == 5 and sum(t.calls[1].values()) == 3
    assert sum(t.overhead.values()) == 7 and t.total == len(pcs)
    with pytest.raises(Exception, match="made 1 of the 2 kernel calls"):
        profile_mod.exec_trace.split_by_calls(iter(pcs[:8]), [(100, 110)], [200, 300])
    assert np.sum([sum(c.values()) for c in t.calls]) + sum(t.overhead.values()) == len(pcs)


def test_a_training_step_by_phase(tmp_path):
    """--data: the first training step of the digits head (b = 16, q = 1), traced by phase. The
    passes are counted from the trainer's dispatch (b prefix passes, 2·q·b suffix passes, one loss
    each), their MACs are the analytic per-pass count times the passes, and a prefix pass costs
    what the inference profile's first three calls cost (the same frozen kernels)."""
    out = tmp_path / "step.json"
    data = FIXTURES / "digits_shift.npz"
    assert main(["profile", "--model", str(MODEL), "--data", str(data), "--json", str(out)]) == 0
    p = json.loads(out.read_text())
    step = p["step"]
    phases = {ph["phase"]: ph for ph in step["phases"]}
    assert list(phases) == list(profile_mod.PHASES)
    b, q, split = step["batch"], step["q"], step["split"]
    assert (b, q, split) == (16, 1, 3)
    assert phases["prefix"]["calls"] == b and phases["suffix"]["calls"] == 2 * q * b
    assert phases["loss"]["calls"] == 2 * q * b and phases["update"]["calls"] == 1
    assert sum(ph["instructions"] for ph in step["phases"]) == step["total"]["instructions"]
    conv1, conv2, fc = analytic_macs(MODEL)
    assert phases["prefix"]["macs"] == b * (conv1 + conv2) and phases["suffix"]["macs"] == 2 * q * b * fc
    assert set(phases["perturb"]["functions"]) == {"zo_perturb_s8", "zo_perturb_s32", "zo_perturb_bias"}
    assert "zo_update_s8" in phases["update"]["functions"] and "zo_cross_entropy_s8" in phases["loss"]["functions"]
    assert (
        phases["telemetry"]["instructions"] > 0 and phases["other"]["instructions"] < step["total"]["instructions"] / 20
    )
    per_prefix = phases["prefix"]["instructions"] / b
    inference_prefix = sum(o["instructions"] for o in p["ops"][:split])
    assert abs(per_prefix - inference_prefix) <= 0.02 * inference_prefix, (per_prefix, inference_prefix)


def test_training_data_that_cannot_be_read(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_text("not an npz")
    assert main(["profile", "--model", str(MODEL), "--data", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.npz" in err and ".npz dataset" in err and "Traceback" not in err


def test_a_streamed_run_is_refused_before_any_trace():
    from zoflash.errors import DataError

    with pytest.raises(DataError, match="set it to 'embedded'"):
        api.profile(MODEL, data_path=FIXTURES / "digits_shift.npz", options=api.make_options(data_source="stream"))
