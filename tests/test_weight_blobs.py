"""The model's large constant arrays are linked from binary files of the bundle.

Every read-only array of at least codegen.BLOB_MIN_BYTES (constant tensors in <prefix>_weights.c,
kernel parameters in <prefix>.c) is a slice of <prefix>_weights.bin or <prefix>_params.bin
(zo_incbin.h) holding the tensor's bytes little-endian; smaller ones and the trainable tensors
(RAM) stay C text. On the Cortex-M55 each slice is 16-byte aligned and lies in the output section
the plan gives its object: the weights in .weights, the parameters in .rodata. The emulated run's
samples go to a region the plan leaves empty.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from conftest import FIXTURES
from test_golden import tiny_dataset

from zoflash import api
from zoflash.compiler.codegen import BLOB_MIN_BYTES
from zoflash.targets import emulated
from zoflash.targets.boards import load_board
from zoflash.training.options import TrainOptions, validate

SLICE = re.compile(r'ZO_INCBIN_SLICE\((\w+), "([\w.]+)", (\d+), (\d+)\);')


def slices(source: str) -> dict[str, tuple[str, int, int]]:
    return {name: (file, int(off), int(n)) for name, file, off, n in SLICE.findall(source)}


def little_endian(values) -> bytes:
    a = np.ascontiguousarray(values)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def test_large_constants_are_slices_of_the_bundles_binary_files(tmp_path):
    path = FIXTURES / "mbv2_block.tflite"
    bundle = api.generate(path, "host", tmp_path / "b", prefix="m")
    graph = api.load_model(path).graph
    weights_c = (tmp_path / "b" / "m_weights.c").read_text()
    model_c = (tmp_path / "b" / "m.c").read_text()
    blobs = slices(weights_c)
    constants = {i: t for i, t in enumerate(graph.tensors) if t.is_constant and f"m_t{i}[" in weights_c}
    assert constants
    large = {i for i, t in constants.items() if t.data.nbytes >= BLOB_MIN_BYTES}
    assert large and large != set(constants), "the fixture has large and small constants"
    for i, t in constants.items():
        if i in large:
            file, offset, n = blobs[f"m_t{i}"]
            data = (tmp_path / "b" / file).read_bytes()
            assert file == "m_weights.bin" and data[offset : offset + n] == little_endian(t.data), t.name
            assert f"m_t{i}[{t.data.size}] ZO_CONST_ATTR" not in weights_c
        else:
            assert (
                f"const {'int32_t' if t.dtype == 'int32' else 'int8_t'} m_t{i}[{t.data.size}] ZO_CONST_ATTR"
                in weights_c
            )
    params = slices(model_c)
    steps = api.compile_model(api.load_model(path)).program.steps
    big = {
        f"m_op{n}_{k}": v
        for n, s in enumerate(steps)
        for k, v in s.params.items()
        if isinstance(v, np.ndarray) and v.nbytes >= BLOB_MIN_BYTES
    }
    assert big and set(params) == set(big)
    data = (tmp_path / "b" / "m_params.bin").read_bytes()
    for name, (file, offset, n) in params.items():
        assert file == "m_params.bin" and data[offset : offset + n] == little_endian(big[name]), name
    assert sorted(n for n in bundle.manifest["files"] if n.endswith(".bin")) == sorted(
        {f for f, _, _ in [*blobs.values(), *params.values()]}
    )
    assert (
        "MODEL_BLOBS := " + " ".join(sorted({f for f, _, _ in [*blobs.values(), *params.values()]}))
        in (tmp_path / "b" / "Makefile").read_text()
    )


def test_trainable_tensors_live_in_ram_and_start_from_read_only_pretrained_values(tmp_path):
    """Each trained tensor is an uninitialised RAM array that <prefix>_init fills from a read-only
    copy of its pretrained values, linked like any constant (a slice when large): the copy goes
    with the weights, not into the code region as .data's initial values would."""
    api.generate(
        FIXTURES / "mlp.tflite",
        "host",
        tmp_path / "b",
        prefix="m",
        data_path=tiny_dataset(tmp_path / "tiny.npz"),
        options=validate(TrainOptions(train="all", headroom=0)),
    )  # the model's own values
    weights_c = (tmp_path / "b" / "m_weights.c").read_text()
    model_c = (tmp_path / "b" / "m.c").read_text()
    in_ram = dict(re.findall(r"^(?:int8_t|int32_t) (m_t\d+)\[(\d+)\] ZO_TRAIN_ATTR;$", weights_c, re.M))
    assert in_ram and "ZO_TRAIN_ATTR = {" not in weights_c
    blobs = slices(weights_c)
    data = (tmp_path / "b" / "m_weights.bin").read_bytes()
    graph = api.compile_model(api.load_model(FIXTURES / "mlp.tflite")).graph
    for name, n in in_ram.items():
        assert f"memcpy({name}, {name}_pretrained, sizeof {name});" in model_c
        t = graph.tensors[int(name[3:])]
        expected = np.clip(t.data, -126, 126) if t.dtype == "int8" else t.data  # eps = 1: +-(127 - eps)
        assert t.data.size == int(n)
        if f"{name}_pretrained" in blobs:
            _, offset, nbytes = blobs[f"{name}_pretrained"]
            assert data[offset : offset + nbytes] == little_endian(expected), name
        else:
            assert re.search(rf"^const \w+ {name}_pretrained\[{n}\] ZO_CONST_ATTR = \{{", weights_c, re.M), name
    assert any(f"{name}_pretrained" in blobs for name in in_ram)  # the 2048-weight layer is a slice


def _symbols(elf) -> dict[str, int]:
    out = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in map(str.split, out.splitlines()) if len(parts) == 3}


@pytest.mark.cross
def test_slices_are_aligned_and_in_their_sections_on_the_m55(tmp_path):
    """The emulated run's image (the model, the port and the harness with one sample)."""
    from test_cross_build import _sections

    bundle = api.generate(FIXTURES / "mbv2_block.tflite", "mps3-an547", tmp_path / "b", prefix="m")
    xs, _ = emulated.samples(bundle, api.random_inputs(api.load_model(FIXTURES / "mbv2_block.tflite"), 1, seed=1))
    elf = emulated.build_harness(bundle, xs)
    sections = {name: (addr, addr + size) for name, size, addr in _sections(elf)}
    symbols = _symbols(elf)
    for source, section in (("m_weights.c", ".weights"), ("m.c", ".rodata")):
        names = slices((bundle.path / source).read_text())
        assert names, source
        lo, hi = sections[section]
        for name, (_, _, n) in names.items():
            assert symbols[name] % 16 == 0, name  # the Helium kernels' vector loads, as ZO_CONST_ATTR aligns
            assert lo <= symbols[name] and symbols[name] + n <= hi, (name, section)
    sram = load_board("mps3-an547").region("SRAM")
    assert sections[".zo_infer_samples"][0] == sram.origin  # the samples: in the region the plan left empty


def test_emulated_samples_go_to_a_region_the_plan_leaves_empty():
    board = load_board("mps3-an547")  # train_data may use ITCM, SRAM, DDR
    place = dict(
        board.placement,
        code="ITCM",
        rodata="ITCM",
        weights="ITCM",
        train_data="ITCM",
        data="DTCM",
        bss="DTCM",
        arena="DTCM",
        stack="DTCM",
    )
    assert emulated.samples_region(replace(board, placement=place)).name == "SRAM"
    assert emulated.samples_region(replace(board, placement={**place, "weights": "SRAM"})).name == "DDR"
    full = {**place, "weights": "SRAM", "arena": "DDR"}
    assert emulated.samples_region(replace(board, placement=full)) is None
