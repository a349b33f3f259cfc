"""`zoflash infer --board mps3-an547` and api.infer_on_board: the firmware build of a model run on
the emulated Cortex-M55 (targets/emulated.py), against the tflite-micro interpreter; and the
refusals (a board QEMU does not emulate, inputs that do not fit the model) as clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BuildError, DataError
from zoflash.targets import emulated

STREAMING = PUBLIC / "microwakeword_hey_mycroft.tflite"  # resource variables: state across invokes


@pytest.mark.zoo
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.tflm
def test_infer_on_the_emulated_m55_carries_state_like_tflm(tmp_path, capsys):
    from zoflash.reference.tflm import TflmInterpreter

    model = api.load_model(STREAMING)
    x = api.random_inputs(model, 5, seed=3)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(
            [
                "infer",
                "--model",
                str(STREAMING),
                "--inputs",
                str(tmp_path / "x.npy"),
                "--out",
                str(tmp_path / "y.npy"),
                "--board",
                "mps3-an547",
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    y = np.load(tmp_path / "y.npy")
    tflm = TflmInterpreter(model.raw)
    tflm.reset()
    want = np.stack([tflm.invoke([s])[0] for s in x]).reshape(y.shape)
    assert y.dtype == want.dtype == np.uint8 and np.array_equal(y, want)
    fresh = []
    for s in x:  # each sample from a reset state: different outputs, so the state did carry
        tflm.reset()
        fresh.append(tflm.invoke([s])[0])
    assert not np.array_equal(y, np.stack(fresh).reshape(y.shape))


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_a_bundle_runs_new_samples_each_time(tmp_path):
    """The same bundle directory twice (the object cache and make's own objects reused): each run
    gives its own samples' outputs, equal to the host build's."""
    path = FIXTURES / "mlp.tflite"
    rng = np.random.default_rng(5)
    for n in (3, 2):
        x = rng.integers(-128, 128, (n, 64), dtype=np.int8)
        got = api.infer_on_board(path, x, "corstone-300", bundle_dir=tmp_path / "b")  # a family: its reference board
        assert got[0].shape == (n, 1, 10) and np.array_equal(got[0], api.infer(path, x))


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_samples_beyond_one_image_run_in_several(tmp_path, monkeypatch):
    monkeypatch.setattr(emulated, "samples_per_run", lambda bundle, sample_bytes, extra_cflags="": 2)
    path = FIXTURES / "mlp.tflite"
    x = np.random.default_rng(6).integers(-128, 128, (5, 64), dtype=np.int8)
    got = emulated.run_inference(api.generate(path, "mps3-an547", tmp_path / "b"), x).outputs[0]
    assert np.array_equal(got, api.infer(path, x))


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_a_link_that_overflows_the_itcm_is_planned_again_with_the_compiled_code(tmp_path, monkeypatch, caplog):
    """With a code estimate far too small, the plan puts fmnist_mbv2's 423 KB of weights in the ITCM
    beside code that does not fit there: the emulated run's link overflows, and the model is planned
    again with the objects' measured sizes (weights in the SRAM), its outputs the host build's."""
    from dataclasses import replace

    from zoflash.targets import budget

    real = budget.load_port
    monkeypatch.setattr(budget, "load_port", lambda name, *a: replace(real(name, *a), code_bytes_inference=1024))
    path = FIXTURES / "fmnist_mbv2.tflite"
    x = api.random_inputs(api.load_model(path), 2, seed=4)
    with caplog.at_level("INFO", logger="zoflash"):
        got = api.infer_on_board(path, x, "mps3-an547", bundle_dir=tmp_path / "b")
    assert "planning again with the compiled code's sizes" in caplog.text
    manifest = (tmp_path / "b" / "manifest.json").read_text()
    assert '"weights": "SRAM"' in manifest
    assert np.array_equal(got[0], api.infer(path, x))


@pytest.mark.zoo
def test_a_stateful_models_samples_must_fit_one_image(tmp_path, monkeypatch):
    monkeypatch.setattr(emulated, "samples_per_run", lambda bundle, sample_bytes, extra_cflags="": 2)
    bundle = api.generate(STREAMING, "mps3-an547", tmp_path / "b")
    with pytest.raises(DataError, match="at most 2 samples"):
        emulated.run_inference(bundle, np.zeros((3, 3, 40), np.int8))


def test_infer_refuses_a_board_that_is_not_emulated(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 64), np.int8))
    assert (
        main(
            [
                "infer",
                "--model",
                str(FIXTURES / "mlp.tflite"),
                "--inputs",
                str(tmp_path / "x.npy"),
                "--out",
                str(tmp_path / "y.npy"),
                "--board",
                "stm32n6570-dk",
            ]
        )
        == 2
    )
    assert "not emulated" in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()


def test_emulated_run_refuses_inputs_that_do_not_fit(tmp_path):
    bundle = api.generate(FIXTURES / "mlp.tflite", "mps3-an547", tmp_path / "b")  # no compiler needed
    x = np.zeros((2, 64), np.int8)
    assert emulated.samples(bundle, x)[1] == 2
    with pytest.raises(DataError, match="1 inputs"):
        emulated.samples(bundle, [x, x])
    with pytest.raises(DataError, match="shape"):
        emulated.samples(bundle, np.zeros((2, 63), np.int8))
    trains = api.generate(
        FIXTURES / "digits_cnn.tflite", "mps3-an547", tmp_path / "t", data_path=FIXTURES / "digits_shift.npz"
    )
    with pytest.raises(BuildError, match="training bundle"):
        emulated.run_inference(trains, np.zeros((1, 8, 8, 1), np.int8))
