"""--mode continual across a reset of the whole firmware: the host port keeps the A/B weight slots
in the file ZOFLASH_CL_SLOTS_FILE names, as a board's NOR keeps them (zo_port_host.c), so a
program killed mid-run and started again boots with the deployed slot it left; an episode in
training is lost, the promoted weights are not; a promotion cut short (a slot's header erased)
is reported and the other slot serves."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import continual as bench  # noqa: E402
import continual_streams as streams  # noqa: E402

from zoflash.training.options import TrainOptions  # noqa: E402
from zoflash.training.weights_file import load_weights  # noqa: E402
from zoflash.workflows.continual import simulate_continual  # noqa: E402

pytestmark = pytest.mark.cc

SEED = 31
HEADER = 16  # ZO_SLOT_HEADER_BYTES


def _run(stream: dict, tmp: Path, name: str):
    path = tmp / f"{name}.npz"
    np.savez(path, x=stream["x"], y=stream["y"])
    model, data, _ = bench.TASKS["digits"]
    r = simulate_continual(
        model,
        data,
        path,
        TrainOptions(**bench.OPTIONS),
        log_path=tmp / f"{name}.jsonl",
        plot=False,
        say=lambda *_: None,
    )
    cl = [x for x in r.records if x.get("type") == "continual"]
    return cl, load_weights(r.weights_path).tensors


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The first half of a quick digits stream, with at least one promotion, its slots kept in a file."""
    tmp = tmp_path_factory.mktemp("cl-reset")
    stream = streams.digits_stream(SEED, quick=True)
    half = len(stream["y"]) // 2
    slots = tmp / "slots.bin"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ZOFLASH_CL_SLOTS_FILE", str(slots))
        cl, weights = _run({"x": stream["x"][:half], "y": stream["y"][:half]}, tmp, "first")
    accepted = [r for r in cl if r["decision"] == "accepted" and r["count"]]
    assert accepted, "the first half promoted no candidate: the test needs one"
    # a quiet tail after the reset: unlabelled samples, so no episode can start
    tail = {"x": stream["x"][half : half + 300], "y": np.full(300, -1)}
    return tmp, slots, cl, weights, accepted[-1]["generation"], tail


def test_a_restart_boots_with_the_deployed_slot_it_left(first_run, monkeypatch):
    tmp, slots, cl, weights, generation, tail = first_run
    deployed = [r for r in cl if r["decision"] in ("accepted", "rollback", "boot")][-1]["generation"]
    kept = slots.read_bytes()
    monkeypatch.setenv("ZOFLASH_CL_SLOTS_FILE", str(slots))
    again, after = _run(tail, tmp, "restart")
    boot = [r for r in again if r["decision"] in ("boot", "rollback")][0]
    assert boot["decision"] == "boot" and boot["generation"] == deployed >= generation
    assert _same(after, weights)  # what the first run deployed, not the built-in weights
    assert slots.read_bytes() == kept  # nothing promoted in the quiet tail: the slots as left


def test_without_the_slots_a_restart_serves_the_built_in_weights(first_run, monkeypatch):
    tmp, _, _, weights, _, tail = first_run
    monkeypatch.delenv("ZOFLASH_CL_SLOTS_FILE", raising=False)
    again, after = _run(tail, tmp, "fresh")
    assert [r for r in again if r["decision"] == "boot"][0]["generation"] == 1
    assert not _same(after, weights)


def test_a_promotion_cut_short_leaves_the_deployed_slot(first_run, monkeypatch):
    tmp, slots, _, weights, _, tail = first_run
    image = bytearray(slots.read_bytes())
    half = len(image) // 2
    gens = [int.from_bytes(image[k * half + 4 : k * half + 8], "little") for k in (0, 1)]
    other = 0 if gens[0] < gens[1] else 1  # the slot a promotion writes: its header erased first
    image[other * half : other * half + HEADER] = b"\xff" * HEADER
    cut = tmp / "cut.bin"
    cut.write_bytes(bytes(image))
    monkeypatch.setenv("ZOFLASH_CL_SLOTS_FILE", str(cut))
    again, after = _run(tail, tmp, "cut")
    first = [r for r in again if r["decision"] in ("boot", "rollback")][0]
    assert first["decision"] == "rollback" and first["sample"] == 0
    assert _same(after, weights)
