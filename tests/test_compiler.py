"""End-to-end compiler tests on the fixture models: bit-exact against the tflite-micro
interpreter, deterministic bundles, warning-free builds (host, sanitizers, Cortex-M55)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cbuild
import numpy as np
import pytest
from conftest import FIXTURES, positive_fixtures

from zoflash import api
from zoflash.targets.host_runner import HostModel
from zoflash.targets.project import load_bundle

FIXTURE_MODELS = positive_fixtures()


def sample_inputs(model_file: str, n: int, seed: int = 0) -> np.ndarray:
    """Random int8 inputs plus structured ones (constant extremes, ramps) that reach saturation paths."""
    m = api.load_model(FIXTURES / model_file)
    x = api.random_inputs(m, n, seed)
    x[0] = -128
    x[1] = 127
    x[2] = 0
    x[3] = np.arange(x[3].size).reshape(x[3].shape) % 256 - 128
    return x


@pytest.fixture(scope="module")
def host_bundles(tmp_path_factory):
    """Each fixture compiled and built once for the host."""
    root = tmp_path_factory.mktemp("bundles")
    return {f: api.build(FIXTURES / f, "host", root / Path(f).stem).bundle for f in FIXTURE_MODELS}


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_bit_exact_against_tflm(model_file, host_bundles):
    from zoflash.reference.tflm import TflmInterpreter

    x = sample_inputs(model_file, 160)
    ours = HostModel(host_bundles[model_file]).run(x)
    golden = TflmInterpreter((FIXTURES / model_file).read_bytes()).run_batch(x).reshape(ours.shape)
    assert ours.dtype == golden.dtype
    mismatch = np.argwhere(ours != golden)
    assert mismatch.size == 0, f"{len(mismatch)} elements differ, first at {mismatch[:5].tolist()}"


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_arena_not_larger_than_tflm(model_file, host_bundles):
    from zoflash.reference.tflm import TflmInterpreter

    ours = host_bundles[model_file].manifest["memory"]["arena_bytes"]
    tflm = TflmInterpreter((FIXTURES / model_file).read_bytes()).arena_usage()
    assert ours <= tflm["head"], f"our arena {ours} B > TFLM's non-persistent arena {tflm['head']} B"


@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_generation_is_deterministic(model_file, tmp_path):
    a = api.generate(FIXTURES / model_file, "host", tmp_path / "a")
    b = api.generate(FIXTURES / model_file, "host", tmp_path / "b")
    files = sorted(a.manifest["files"])
    assert files == sorted(b.manifest["files"])
    for name in files + ["manifest.json"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_regeneration_removes_stale_files_and_refuses_foreign_dirs(tmp_path):
    out = tmp_path / "bundle"
    api.generate(FIXTURES / "mlp.tflite", "host", out, prefix="first")
    assert (out / "first.c").exists()
    api.generate(FIXTURES / "mlp.tflite", "host", out, prefix="second")
    assert not (out / "first.c").exists() and (out / "second.c").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="not a zoflash bundle"):
        api.generate(FIXTURES / "mlp.tflite", "host", foreign)
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.cc
@pytest.mark.parametrize("model_file", ["mbv2_block.tflite", "branchy.tflite", "logistic_mul.tflite"])
def test_sanitizer_build_matches(model_file, host_bundles, tmp_path):
    """AddressSanitizer + UBSan runner gives the same outputs as the optimised library."""
    bundle = host_bundles[model_file]
    subprocess.run(["make", "-s", "-C", str(bundle.path), "sanitize"], check=True, capture_output=True)
    x = sample_inputs(model_file, 12, seed=3)
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    exe = bundle.path / "build" / f"{bundle.prefix}_run_asan"
    proc = subprocess.run(
        [str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        env={**os.environ, "UBSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = HostModel(bundle).run(x)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), dtype=expected.dtype).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.cross
@pytest.mark.parametrize("model_file", FIXTURE_MODELS)
def test_cortex_m55_compile_is_warning_free(model_file, tmp_path):
    bundle = api.generate(FIXTURES / model_file, "host", tmp_path / "b")
    cbuild.cross_compile_bundle(bundle.path, tmp_path)


@pytest.mark.cc
def test_runner_accepts_inputs_with_or_without_batch_dim(host_bundles):
    bundle = host_bundles["digits_cnn.tflite"]
    model = HostModel(bundle)
    shape = tuple(bundle.manifest["inputs"][0]["shape"])
    x = sample_inputs("digits_cnn.tflite", 5)
    with_batch = model.run(x)
    without = model.run(x.reshape((5,) + shape[1:]))
    np.testing.assert_array_equal(with_batch, without)
    assert with_batch.shape == (5,) + tuple(bundle.manifest["outputs"][0]["shape"])
    with pytest.raises(Exception, match="expected"):
        model.run(np.zeros((5, 3), np.int8))


def test_bundle_manifest_round_trip(tmp_path):
    b = api.generate(FIXTURES / "mlp.tflite", "host", tmp_path / "m")
    loaded = load_bundle(tmp_path / "m")
    assert loaded.manifest == b.manifest
    assert loaded.manifest["memory"]["arena_bytes"] > 0
    assert loaded.manifest["model"]["sha256"] == api.load_model(FIXTURES / "mlp.tflite").sha256


@pytest.mark.cc
@pytest.mark.tflm
def test_expand_dims_and_squeeze_alias_like_reshape(tmp_path):
    """The converter lowers Conv1D's EXPAND_DIMS/SQUEEZE to RESHAPE, so no fixture has them: relabel
    the RESHAPEs of the Conv1D fixture (shapes unchanged) and check the result against TFLM on the
    original model, whose semantics are the same bytes."""
    from zoflash.compiler.pipeline import compile_graph
    from zoflash.reference.tflm import TflmInterpreter
    from zoflash.targets.boards import load_board
    from zoflash.targets.host_build import build_host
    from zoflash.targets.project import generate_bundle

    model = api.load_model(FIXTURES / "conv1d_ts.tflite")
    reshapes = [op for op in model.graph.ops if op.type == "RESHAPE"]
    assert len(reshapes) == 2
    reshapes[0].type, reshapes[1].type = "EXPAND_DIMS", "SQUEEZE"
    compiled = compile_graph(model.graph)
    assert {a.op.type for a in compiled.program.aliases} == {"EXPAND_DIMS", "SQUEEZE"}
    bundle = generate_bundle(compiled, load_board("host"), tmp_path / "b", "conv1d_ts.tflite", model.sha256)
    build_host(bundle)
    x = sample_inputs("conv1d_ts.tflite", 100)
    ours = HostModel(bundle).run(x)
    golden = TflmInterpreter(model.raw).run_batch(x).reshape(ours.shape)
    np.testing.assert_array_equal(ours, golden)


def test_build_path_does_not_import_tensorflow(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from zoflash import api; "
        f"api.generate({str(FIXTURES / 'mbv2_block.tflite')!r}, 'host', {str(tmp_path / 'b')!r}); "
        "bad = [m for m in ('tensorflow', 'tflite_micro', 'keras') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
