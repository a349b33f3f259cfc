"""--data-source stream: the host feeds the training samples over the serial link (need / sample
frames, docs/training.md "Data sources").  The records of a fed run depend only on the order
the samples arrive in: the host program, the Python reference and the emulated Cortex-M55 agree,
also when the link corrupts and drops the host's frames."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import FIXTURES

from zoflash.cli import main
from zoflash.errors import DataError
from zoflash.monitor.feed import Feeder
from zoflash.monitor.session import comparable, read_log
from zoflash.monitor.telemetry import Decoder, decode
from zoflash.spec import training as spec
from zoflash.spec import wire as protocol
from zoflash.training.options import OptionsError, make_options
from zoflash.workflows.simulate import simulate

MLP = str(FIXTURES / "mlp.tflite")
SHIFT = FIXTURES / "digits_shift.npz"
COMMON = ["--steps", "40", "--eval-every", "20", "--data-source", "stream", "--buffer", "32", "--refresh", "2"]


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """The shifted digits flattened for the MLP: 200 training, 100 test samples."""
    d = np.load(SHIFT)
    path = tmp_path_factory.mktemp("data") / "flat.npz"
    np.savez(
        path,
        x_train=d["x_train"].reshape(len(d["x_train"]), -1)[:200],
        y_train=d["y_train"][:200],
        x_test=d["x_test"].reshape(len(d["x_test"]), -1)[:100],
        y_test=d["y_test"][:100],
    )
    return path


def records(path) -> list[dict]:
    return comparable(read_log(path))


class FaultyFeeder(Feeder):
    """A link that damages some of the host's answers: lost, a payload byte flipped, sent twice (a
    duplicate), after garbage that looks like a frame start.  Each loss or corruption costs the
    device a need timeout."""

    def answer(self, need):
        frame = super().answer(need)
        n = self.frames_sent
        if n in (5, 41):
            return b""
        if n in (12, 60):
            frame = frame[:20] + bytes([frame[20] ^ 0x40]) + frame[21:]
        if n % 7 == 0:
            frame += frame
        if n % 4 == 0:
            frame = b"\xa5\x5a\x01garbage" + frame
        return frame


# ---- the wire format -----------------------------------------------------------------------------


def test_sample_frames_respect_the_window_and_the_payload_bound():
    records_ = [bytes(range(256)) * 10]  # a 2560-byte sample: chunked
    feeder = Feeder(records_, [7])
    for window, chunk in ((512, 512 - 12 - 14), (4096, 1024 - 14)):
        frame = feeder.answer({"cursor": 5, "offset": 100, "count": 3, "total": 2560, "window": window})
        assert len(frame) <= window
        (f,) = [x for x in Decoder().feed(frame)]
        assert f.type == spec.COMMANDS["sample"] == 21
        index, label, offset, total = struct.unpack_from("<IHII", f.payload)
        assert (index, label, offset, total) == (5, 7, 100, 2560)
        assert f.payload[14:] == records_[0][100 : 100 + chunk]
    with pytest.raises(DataError, match="expects samples of 99 bytes"):
        feeder.answer({"cursor": 0, "offset": 0, "count": 1, "total": 99, "window": 512})
    with pytest.raises(DataError, match="window of 20 bytes"):
        feeder.answer({"cursor": 0, "offset": 0, "count": 1, "total": 2560, "window": 20})


def test_need_frame_and_command_payloads():
    need = {"cursor": 70000, "offset": 486, "count": 3, "total": 784, "window": 512}
    assert decode(next(iter(Decoder().feed(protocol.encode("need", need, seq=4))))) == {"type": "need", **need}
    assert protocol.encode_command("sample", 1, b"x" * 1024)
    with pytest.raises(ValueError, match="exceeds 1024"):
        protocol.encode_command("sample", 1, b"x" * 1025)


def test_options_are_checked():
    with pytest.raises(OptionsError) as e:
        make_options(data_source="wifi", buffer=0, refresh=5)
    text = str(e.value)
    assert "--data-source (data_source=) wifi" in text and "--buffer (buffer=) 0" in text and "--refresh 5" in text


# ---- host program == reference, and == the embedded data when the ring is the whole split -------


@pytest.mark.cc
def test_stream_c_equals_reference_and_survives_a_faulty_link(tmp_path, flat, monkeypatch):
    opts = make_options(steps=40, eval_every=20, data_source="stream", buffer=32, refresh=2)
    c = simulate(MLP, flat, opts, tmp_path / "c.jsonl", plot=False)
    ref = simulate(MLP, flat, opts, tmp_path / "ref.jsonl", engine="reference", plot=False)
    assert records(c.log_path) == records(ref.log_path)
    hello = next(r for r in c.records if r["type"] == "hello")
    assert hello["n_train"] == 32  # the sampler draws from the ring
    needs = [r for r in c.records if r["type"] == "need"]
    assert needs[0] == {"type": "need", "cursor": 0, "offset": 0, "count": 32, "total": 64, "window": 4096}
    assert max(r["cursor"] for r in needs) == 32 + 39 * 2 - 1  # samples [0, 32 + 39 * 2) fed for 40 steps
    monkeypatch.setattr("zoflash.workflows.simulate.Feeder", FaultyFeeder)
    faulty = simulate(MLP, flat, opts, tmp_path / "faulty.jsonl", plot=False)
    assert records(faulty.log_path) == records(c.log_path)
    resent = [r for r in faulty.records if r["type"] == "need"]
    assert len(resent) == len(needs) + 4  # the device asked again for what was lost or damaged


@pytest.mark.cc
def test_a_ring_of_the_whole_split_refreshed_each_step_is_the_embedded_run(tmp_path, flat):
    """buffer = refresh = n (the training samples the validation split leaves): before step t the
    ring holds stream samples [t*n, (t+1)*n), slot s training sample s: the very data of an
    embedded run."""
    d = dict(np.load(flat))
    small = tmp_path / "small.npz"
    np.savez(small, **{**d, "x_train": d["x_train"][:24], "y_train": d["y_train"][:24]})
    base = dict(steps=20, eval_every=10, batch=8)
    embedded = simulate(MLP, small, make_options(**base), tmp_path / "e.jsonl", plot=False)
    n = next(r for r in embedded.records if r["type"] == "hello")["n_train"]  # what the validation split leaves
    assert n < 24
    fed = simulate(
        MLP, small, make_options(**base, data_source="stream", buffer=n, refresh=n), tmp_path / "s.jsonl", plot=False
    )
    assert records(fed.log_path) == records(embedded.log_path)


# ---- the emulated Cortex-M55 ----------------------------------------------------------------------


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
def test_run_stream_on_qemu_equals_simulate(tmp_path, flat, capsys):
    common = ["--model", MLP, "--data", str(flat), *COMMON]
    m55, host = tmp_path / "m55.jsonl", tmp_path / "host.jsonl"
    assert (
        main(
            [
                "run",
                "--board",
                "mps3-an547",
                "--out",
                str(tmp_path / "bundle"),
                "--log",
                str(m55),
                "--timeout",
                "300",
                *common,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stream ring 2112 bytes (32 samples of 66 bytes" in out and "done (steps) after 40 steps" in out
    assert main(["simulate", "--log", str(host), "--no-plot", *common]) == 0
    capsys.readouterr()
    assert main(["compare", str(m55), str(host)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    needs = [r for r in read_log(m55) if r["type"] == "need"]
    assert {r["window"] for r in needs} == {512}  # the Cortex-M port's receive buffer


@pytest.mark.cc
@pytest.mark.cross
@pytest.mark.qemu
@pytest.mark.slow
def test_qemu_stream_survives_corrupted_and_dropped_frames(tmp_path, flat):
    """A serial wrapper damages what the host sends (big samples: each needs two chunks).  Each
    fault costs the device one need timeout (ZO_STREAM_TIMEOUT_US of virtual time, seconds of
    wall time under QEMU while the core polls), hence slow."""
    from zoflash import api
    from zoflash.monitor.feed import load_feeder
    from zoflash.monitor.serial_monitor import Monitor
    from zoflash.monitor.serialport import open_port
    from zoflash.targets.runners import FlashOptions, flash_bundle
    from zoflash.targets.runners.qemu import stop_qemu

    model = FIXTURES / "kws_dscnn.tflite"  # 49x10 int8 inputs: 490 bytes, two chunks on the M55
    rng = np.random.default_rng(3)
    big = tmp_path / "kws.npz"
    np.savez(
        big,
        x_train=rng.integers(-128, 128, (20, 49, 10, 1), dtype=np.int8),
        y_train=rng.integers(0, 10, 20),
        x_test=rng.integers(-128, 128, (10, 49, 10, 1), dtype=np.int8),
        y_test=rng.integers(0, 10, 10),
    )
    opts = make_options(steps=12, eval_every=6, data_source="stream", buffer=8, refresh=1, batch=4)
    bundle = api.build(str(model), "mps3-an547", str(tmp_path / "bundle"), data_path=str(big), options=opts).bundle
    flashed = flash_bundle(bundle.path, None, FlashOptions(timeout=700), say=lambda s: None)

    class FaultyPort:
        def __init__(self, port):
            self.port, self.writes = port, 0

        def write(self, data):
            self.writes += 1
            if self.writes in (3, 17):
                return len(data)  # lost
            if self.writes in (8, 30):
                k = len(data) - 5  # the last payload byte
                data = data[:k] + bytes([data[k] ^ 1]) + data[k + 1 :]
            return self.port.write(data)

        def __getattr__(self, name):
            return getattr(self.port, name)

    try:
        mon = Monitor(
            opener=lambda: FaultyPort(open_port(flashed.serial_url, 115200)),
            log_path=tmp_path / "m55.jsonl",
            feeder=load_feeder(model, big, opts),
        )
        mon.connect(10)
        mon.run(timeout=600)
        res = mon.close()
    finally:
        stop_qemu(bundle.path, say=lambda s: None)
    assert res.done is not None
    host = simulate(model, big, opts, tmp_path / "host.jsonl", plot=False)
    assert records(tmp_path / "m55.jsonl") == records(host.log_path)
    needs = [r for r in res.records if r["type"] == "need"]
    assert {r["offset"] for r in needs} == {0, 486} and len(needs) >= 2 * (
        8 + 11
    ) + 4  # 2 chunks per sample; 4 asked again
    # (more if an answer came later than the timeout on a loaded machine: the records are the same)


def test_cli_refusals(flat, capsys):
    assert main(["monitor", "--port", "loop://", "--feed", str(flat)]) == 2
    assert "--feed quantizes the samples for the model: give --model" in capsys.readouterr().err
    assert main(["simulate", "--model", MLP, "--data", str(flat), "--data-source", "app"]) == 2
    assert "zoflash build --data-source app" in capsys.readouterr().err


@pytest.mark.cc
@pytest.mark.parametrize(
    "model, loss", [pytest.param("mbv2_block.tflite", "auto", marks=pytest.mark.slow), ("regressor.tflite", "mse")]
)
def test_chunked_samples_and_mse_targets_c_equals_reference(tmp_path, model, loss):
    """3072-byte images go as 4 chunks (host window 4096: 1010 bytes a chunk); mse records carry
    their float32 targets after the input."""
    path = FIXTURES / model
    if model == "mbv2_block.tflite":
        rng = np.random.default_rng(1)
        data = tmp_path / "img.npz"
        np.savez(
            data,
            x_train=rng.integers(-128, 128, (6, 32, 32, 3), dtype=np.int8),
            y_train=rng.integers(0, 10, 6),
            x_test=rng.integers(-128, 128, (2, 32, 32, 3), dtype=np.int8),
            y_test=rng.integers(0, 10, 2),
        )
    else:
        data = FIXTURES / "regress_shift.npz"
    opts = make_options(
        steps=6, eval_every=3, batch=2, lr=1.0, scheduler="fixed", data_source="stream", buffer=4, refresh=3, loss=loss
    )
    c = simulate(path, data, opts, tmp_path / "c.jsonl", plot=False)
    ref = simulate(path, data, opts, tmp_path / "ref.jsonl", engine="reference", plot=False)
    assert records(c.log_path) == records(ref.log_path)
    needs = [r for r in c.records if r["type"] == "need"]
    if model == "mbv2_block.tflite":
        assert needs[0]["total"] == 3072 and {r["offset"] for r in needs} == {0, 1010, 2020, 3030}
    else:
        assert needs[0]["total"] == 8 + 4  # 8 int8 inputs and one float32 target
