"""CAST: the C kernel against NumPy on random data for every supported pair of types, the builder
against the C struct and enum, the fixture models (tests/fixtures/ops/cast.json) bit for bit against
the tflite-micro interpreter through the generated C and the reference forward pass, and what
legality refuses."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from zoflash import api  # noqa: E402
from zoflash.compiler.ops import (
    KERNELS,  # noqa: E402
    cast_params,  # noqa: E402
)
from zoflash.compiler.ops.cast import CASTS  # noqa: E402
from zoflash.compiler.pipeline import compile_graph  # noqa: E402
from zoflash.errors import UnsupportedModelError  # noqa: E402
from zoflash.reference.forward import ReferenceForward  # noqa: E402
from zoflash.reference.ops import cast as ref_cast  # noqa: E402

OPS_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ops"
INDEX = json.loads((OPS_FIXTURES / "cast.json").read_text())
NP = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "float32": np.float32}


def _random(rng, dtype: str, n: int) -> np.ndarray:
    if dtype == "float32":
        return (rng.normal(size=n) * 1e3).astype(np.float32)
    info = np.iinfo(NP[dtype])
    x = rng.integers(info.min, info.max, n, endpoint=True).astype(NP[dtype])
    x[:2] = (info.min, info.max)[:n]
    return x


@pytest.mark.cc
def test_cast_kernel_against_numpy():
    K = cbuild.Kernels()
    rng = np.random.default_rng(41)
    assert len(CASTS) == 13
    for (src, dst), kernel in CASTS.items():
        for n in (1, 7, 300):
            x = _random(rng, src, n)
            p = cast_params.cast_params(size=n, input_dtype=src, output_dtype=dst)
            out = np.zeros(n, NP[dst])
            K.call(kernel.function, kernel.struct, p, x, out)
            want = ref_cast.cast(p, x)
            assert want.dtype == NP[dst]
            assert np.array_equal(out.view(np.uint8), want.view(np.uint8)), f"{src} -> {dst}, {n} elements"
    # Independently of NumPy: narrowing keeps the low bits.
    p = cast_params.cast_params(size=3, input_dtype="int32", output_dtype="int8")
    assert ref_cast.cast(p, np.array([200, -129, 65535], np.int32)).tolist() == [-56, 127, -1]


def test_builder_matches_the_c_struct_and_enum():
    kernel = KERNELS.get("cast_int32_int8")
    fields = [f for f, _ in cbuild.parse_structs()[kernel.struct]]
    assert list(cast_params.cast_params(size=4, input_dtype="int32", output_dtype="int8")) == fields
    header = cbuild.header_text()
    enum = dict(re.findall(r"ZO_CAST_(\w+) = (\d+)", header))
    assert {k: int(v) for k, v in enum.items()} == {"S8": 0, "S16": 1, "S32": 2, "F32": 3}
    assert [cast_params.CAST_TYPES[t] for t in ("int8", "int16", "int32", "float32")] == [0, 1, 2, 3]
    for bad in (
        dict(input_dtype="float32", output_dtype="int8"),
        dict(input_dtype="int64", output_dtype="int8"),
        dict(input_dtype="int8", output_dtype="bool"),
    ):
        with pytest.raises(ValueError):
            cast_params.cast_params(size=4, **bad)


def test_fixture_index_matches_the_files():
    for f in INDEX:
        assert hashlib.sha256((OPS_FIXTURES / f["file"]).read_bytes()).hexdigest() == f["sha256"], f["file"]
        assert "CAST" in f["ops"]


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("name", [f["file"] for f in INDEX])
def test_fixture_bit_exact_against_tflm(name, tmp_path):
    path = OPS_FIXTURES / name
    x = api.random_inputs(api.load_model(path), 120, seed=3)
    x[0], x[1], x[2] = -128, 127, 0
    report = api.validate(path, x)
    assert report.ok and report.samples == 120, report
    from zoflash.reference.tflm import TflmInterpreter

    golden = TflmInterpreter(path.read_bytes()).run_batch(x)
    ours = ReferenceForward(compile_graph(api.load_model(path).graph)).forward(x)
    assert np.array_equal(ours.reshape(golden.shape), golden)
    assert len(np.unique(golden)) > 3


def test_float_to_integer_is_refused():
    g = api.load_model(OPS_FIXTURES / "cast_argmax_s8.tflite").graph
    cast = next(op for op in g.ops if op.type == "CAST")
    tensors = list(g.tensors)
    tensors[cast.inputs[0]] = replace(tensors[cast.inputs[0]], dtype="float32")
    with pytest.raises(UnsupportedModelError) as info:
        compile_graph(replace(g, tensors=tensors))
    assert "CAST must convert between int8, int16, int32 and float32" in str(info.value)
    assert "(float32 -> int8)" in str(info.value)
    tensors[cast.inputs[0]] = replace(tensors[cast.inputs[0]], dtype="uint8")  # TFLM: "UINT8 not supported"
    with pytest.raises(UnsupportedModelError, match=r"reads no uint8\), and not float32 .* \(uint8 -> int8\)"):
        compile_graph(replace(g, tensors=tensors))
