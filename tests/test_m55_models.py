"""Every model zoflash compiles runs on the emulated Cortex-M55 and gives TFLM's outputs bit for bit.

The models: every fixture of tests/fixtures (but the negative ones), every public model that
test_public_models.EXPECTED says is bit-exact, and (slow tier) every op fixture of
tests/fixtures/ops. Each is built as a user builds it (api.generate for mps3-an547, the bundle's
Makefile) and linked with zoflash's emulated-run harness (targets/emulated.py), which runs
several inputs embedded in the image in order, one init before them (so a stateful model carries
its state from one to the next) and prints every output tensor. The tflite-micro interpreter runs
the same inputs on the host in the same order after a reset. Inputs: all minimum (-128 for int8),
all maximum, random with runs of both extremes, uniform random.

Default tier: the Helium kernels (the board's build). Slow tier: the same with -DZO_NO_MVE (the
portable kernels on the M55), and the op fixtures with both kernel sets.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC, derived_op_fixture, derived_op_fixtures, fixture_index, zoo_param
from test_public_models import EXPECTED

from zoflash import api
from zoflash.targets import emulated

pytestmark = [pytest.mark.cross, pytest.mark.qemu, pytest.mark.tflm]

NEGATIVE = {f["file"] for f in fixture_index() if f["kind"] == "negative"}
MODELS = sorted(p.name for p in FIXTURES.glob("*.tflite") if p.name not in NEGATIVE) + [
    zoo_param(f"public/{name}") for name, v in sorted(EXPECTED.items()) if v == "bit-exact"
]
OPS = FIXTURES / "ops"


def _op_fixtures() -> list:
    """The op fixtures but those the compiler refuses: marked negative in their index (ops/*.json)
    or listed as refused by their own tests; those cut from public models need the zoo."""
    from test_kernels_int16 import REFUSED

    negative = set(REFUSED)
    for index in OPS.glob("*.json"):
        entries = json.loads(index.read_text())
        entries = entries.get("fixtures", []) if isinstance(entries, dict) else entries
        negative |= {e["file"] for e in entries if e.get("kind") == "negative"}
    derived = set(derived_op_fixtures())
    names = sorted({p.name for p in OPS.glob("*.tflite")} | derived)
    return [zoo_param(n) if n in derived else n for n in names if n not in negative]


def _model_path(name: str):
    """A fixture's path: public/<file> is in the zoo folder."""
    return PUBLIC / name.removeprefix("public/") if name.startswith("public/") else FIXTURES / name


def _op_path(name: str):
    return derived_op_fixture(name) if name in derived_op_fixtures() else OPS / name


N_INPUTS = 4
# The kernels the zo_kernels_<family>_mve.c files replace (zo_kernels_base.h), and those whose row
# products (and the int16 -> int8 QUANTIZE) have Helium paths on the M55; no other kernel calls them.
HELIUM_KERNELS = (
    {"conv2d", "depthwise_conv2d", "fully_connected", "add", "mul", "max_pool"}
    | {k + "_s16" for k in ("conv2d", "depthwise_conv2d", "fully_connected")}
    | {"lstm_s8_s16", "svdf_s8", "svdf_s8_s16", "requantize_s16_s8"}
)


def inputs_for(model, n: int, seed: int) -> np.ndarray:
    """n samples of the model's input type: all minimum, all maximum, random with runs of both, random."""
    x = api.random_inputs(model, n, seed=seed)
    if x.dtype.kind in "iu":
        lo, hi = np.iinfo(x.dtype).min, np.iinfo(x.dtype).max
        x[0], x[1] = lo, hi
        mask = np.random.default_rng(seed).random(x[2:3].shape)
        x[2:3][mask < 0.2], x[2:3][mask > 0.8] = lo, hi
    return x


def tflm_outputs(model, x: np.ndarray) -> list[np.ndarray]:
    """Every output of the tflite-micro interpreter for the samples of x in order, from a reset state."""
    from zoflash.reference.tflm import TflmInterpreter

    interpreter = TflmInterpreter(model.raw)
    interpreter.reset()
    shape = interpreter.inputs[0]["shape"]
    runs = [interpreter.invoke([sample.reshape(shape)]) for sample in x]
    return [np.stack([r[k] for r in runs]) for k in range(len(runs[0]))]


def check_on_m55(tmp_path, path, n: int, seed: int, extra_cflags: str = ""):
    model = api.load_model(path)
    x = inputs_for(model, n, seed)
    want = tflm_outputs(model, x)
    bundle = api.generate(path, "mps3-an547", tmp_path / "bundle")
    # The inputs go to a region the plan leaves empty (the SRAM or the DDR), beside any model's weights.
    got = emulated.run_inference(bundle, x, extra_cflags=extra_cflags).outputs
    assert len(got) == len(want)
    bad = []
    for k, (g, w) in enumerate(zip(got, want)):
        w = w.reshape(g.shape)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        for s in range(n):  # bit for bit: floats by their bytes
            if g[s].tobytes() != w[s].tobytes():
                diff = np.abs(g[s].astype(np.float64) - w[s].astype(np.float64))
                bad.append(
                    f"input {s}, output {k}: {int(np.count_nonzero(g[s] != w[s]))} of {g[s].size} "
                    f"elements differ (max {diff.max():g})"
                )
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", MODELS)
def test_model_bit_exact_on_m55(tmp_path, name):
    """The board's build (Helium kernels)."""
    check_on_m55(tmp_path, _model_path(name), N_INPUTS, seed=11)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_model_bit_exact_on_m55_portable_kernels(tmp_path, name):
    """-DZO_NO_MVE: the portable kernels on the M55."""
    check_on_m55(tmp_path, _model_path(name), 3, seed=12, extra_cflags="-DZO_NO_MVE")


@pytest.mark.slow
@pytest.mark.parametrize("cflags", ["", "-DZO_NO_MVE"])
@pytest.mark.parametrize("name", _op_fixtures())
def test_op_fixture_bit_exact_on_m55(tmp_path, name, cflags):
    path = _op_path(name)
    steps = api.compile_model(api.load_model(path)).program.steps
    if cflags and not {s.kernel for s in steps} & HELIUM_KERNELS:
        pytest.skip("no kernel with a Helium version: the -DZO_NO_MVE build is the same code")
    check_on_m55(tmp_path, path, 4, seed=13, extra_cflags=cflags)
