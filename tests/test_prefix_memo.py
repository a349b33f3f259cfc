"""The host simulation's prefix memo (zo_port.h; zo_port_host.c): the frozen prefix's boundary of
each embedded sample is computed once per run.  It must change nothing but the time: a simulation
with it and one without (ZOFLASH_NO_PREFIX_MEMO) give identical records; its table finds what was
added, under any number of samples."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest
from ccompile import PORT, build_shared
from conftest import FIXTURES, ROOT

from zoflash.cli import main

HOST_PORT = ROOT / "firmware_templates" / "ports" / "host" / "zo_port_host.c"


@pytest.mark.cc
def test_the_memo_table_finds_every_sample_added(tmp_path, monkeypatch):
    monkeypatch.delenv("ZOFLASH_NO_PREFIX_MEMO", raising=False)
    lib = build_shared(
        [HOST_PORT], tmp_path, "memo", flags=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{PORT}"]
    )
    lib.zo_port_prefix_memo_find.restype = ctypes.POINTER(ctypes.c_int8)
    lib.zo_port_prefix_memo_add.restype = ctypes.POINTER(ctypes.c_int8)
    samples = ctypes.create_string_buffer(40 * 5000)  # 5000 samples of 40 bytes: the table grows 4 times
    base = ctypes.addressof(samples)
    key = [ctypes.c_void_p(base + 40 * k) for k in range(5000)]
    assert not lib.zo_port_prefix_memo_find(key[0], 12)
    for k in range(5000):
        slot = lib.zo_port_prefix_memo_add(key[k], 12)
        for i in range(12):
            slot[i] = (k * 7 + i) % 251 - 125
    for k in range(5000):
        got = lib.zo_port_prefix_memo_find(key[k], 12)
        assert [got[i] for i in range(12)] == [(k * 7 + i) % 251 - 125 for i in range(12)], k
    assert not lib.zo_port_prefix_memo_find(ctypes.c_void_p(base + 1), 12)  # not a sample's address
    again = lib.zo_port_prefix_memo_add(key[3], 12)  # the same storage
    assert ctypes.addressof(again.contents) == ctypes.addressof(lib.zo_port_prefix_memo_find(key[3], 12).contents)


@pytest.mark.cc
@pytest.mark.parametrize(
    "model, data, extra",
    [
        ("digits_cnn.tflite", "digits_shift.npz", ["--scheduler", "plateau"]),
        ("motions_cnn.tflite", "motions_shift.npz", ["--scheduler", "critical", "--val-fraction", "0.2"]),
    ],
)
def test_a_simulation_with_the_memo_equals_one_without(tmp_path, capsys, monkeypatch, model, data, extra):
    common = [
        "-q",
        "simulate",
        "--model",
        str(FIXTURES / model),
        "--data",
        str(FIXTURES / data),
        "--budget",
        "60000",
        "--eval-every",
        "10",
        "--no-plot",
        *extra,
    ]
    monkeypatch.delenv("ZOFLASH_NO_PREFIX_MEMO", raising=False)
    monkeypatch.setenv("ZOFLASH_PREFIX_MEMO_STATS", str(tmp_path / "stats.txt"))
    assert main([*common, "--log", str(tmp_path / "memo.jsonl")]) == 0
    monkeypatch.setenv("ZOFLASH_NO_PREFIX_MEMO", "1")
    monkeypatch.delenv("ZOFLASH_PREFIX_MEMO_STATS")
    assert main([*common, "--log", str(tmp_path / "plain.jsonl")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "memo.jsonl"), str(tmp_path / "plain.jsonl")]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    # the memo was used: every prefix the run counted (training and evaluation passes) was either
    # computed once per sample and stored, or found; each sample stored at most once
    _, hits, _, stored = (tmp_path / "stats.txt").read_text().split()
    last = [json.loads(line) for line in (tmp_path / "memo.jsonl").read_text().splitlines()]
    last = [r for r in last if r["type"] == "eval"][-1]
    with np.load(FIXTURES / data) as d:
        samples = len(d["x_train"]) + len(d["x_test"])  # the validation split is carved from x_train
    assert int(hits) + int(stored) == last["prefix_passes"] + last["eval_passes"]
    assert 0 < int(stored) <= samples < int(hits)
