"""Bad and odd models end in one message, never a traceback, a signal death or a silent wrong answer:
`validate` runs tflite-micro in a child process, validates models with several inputs, refuses op
parameters TFLM cannot hold; `convert --keras` names what Keras could not load. A seeded mutation
fuzzer checks the whole chain: every mutant is refused in one message or bit-exact with TFLM."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, OPS_FIXTURES, ROOT

from zoflash import api
from zoflash.cli import main
from zoflash.compiler.convert import quiet
from zoflash.errors import TflmError, UnsupportedModelError

sys.path.insert(0, str(Path(__file__).parent))
import mutants  # noqa: E402  (the tests' own helper module, beside this file)

KWS = FIXTURES / "kws_dscnn.tflite"  # CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D
TCONV = OPS_FIXTURES / "tconv_same_s2.tflite"  # TRANSPOSE_CONV


def _with(path: Path, op_type: str, tmp_path: Path, **fields) -> tuple[Path, int]:
    """A copy of the model with fields of the first op_type op's options changed; returns it and the op index."""
    raw = path.read_bytes()
    index = mutants.op_names(mutants.unpack(raw)).index(op_type)
    for field, value in fields.items():
        raw = mutants.with_option(raw, index, field, value)
    out = tmp_path / f"{path.stem}-{'-'.join(f'{k}{v}' for k, v in fields.items())}.tflite"
    out.write_bytes(raw)
    return out, index


# ------------------------------------------------------------------- op parameters TFLM cannot hold

# (model, op, {option field in the file: value}, the option as zoflash names it, the words of the refusal)
OUT_OF_RANGE = [
    (KWS, "DEPTHWISE_CONV_2D", {"dilationWFactor": 524288}, "dilation_w_factor is 524288", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"dilationWFactor": 65536}, "dilation_w_factor is 65536", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"dilationHFactor": 32768}, "dilation_h_factor is 32768", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"strideW": 65537}, "stride_w is 65537", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"strideH": 2**31 - 1}, "stride_h is 2147483647", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"depthMultiplier": 65537}, "depth_multiplier is 65537", "from 1 to 32767"),
    (KWS, "DEPTHWISE_CONV_2D", {"dilationWFactor": 0}, "dilation_w_factor is 0", "from 1 to 32767"),
    (KWS, "CONV_2D", {"strideW": 32768}, "stride_w is 32768", "from 1 to 32767"),
    (KWS, "CONV_2D", {"dilationHFactor": 65536}, "dilation_h_factor is 65536", "from 1 to 32767"),
    (KWS, "CONV_2D", {"strideH": -1}, "stride_h is -1", "from 1 to 32767"),
    (TCONV, "TRANSPOSE_CONV", {"strideH": 65538}, "stride_h is 65538", "from 1 to 32767"),
    (TCONV, "TRANSPOSE_CONV", {"strideW": 0}, "stride_w is 0", "from 1 to 32767"),
    (KWS, "AVERAGE_POOL_2D", {"filterWidth": 0}, "filter_width is 0", "integer >= 1"),
    (KWS, "AVERAGE_POOL_2D", {"strideH": -5}, "stride_h is -5", "integer >= 1"),
    # A SAME window of 70001 over a width of 5 pads by 34998: more than TFLM's int16 padding holds.
    (KWS, "AVERAGE_POOL_2D", {"padding": 0, "filterWidth": 70001}, "padding of 0x34998", "at most 32767"),
]


@pytest.mark.tflm  # the flatbuffer schema of tflite-micro writes the mutants
@pytest.mark.parametrize(
    "model, op_type, fields, named, allowed",
    OUT_OF_RANGE,
    ids=[f"{c[1]}-{'-'.join(f'{k}={v}' for k, v in c[2].items())}" for c in OUT_OF_RANGE],
)
def test_out_of_range_parameter_is_refused_in_one_line(model, op_type, fields, named, allowed, tmp_path, capsys):
    path, index = _with(model, op_type, tmp_path, **fields)
    with pytest.raises(UnsupportedModelError) as info:
        api.compile_model(api.load_model(path))
    lines = [p for p in info.value.problems if named in p]
    assert len(lines) == 1, info.value.problems
    assert lines[0].startswith(f"op {index} {op_type} (") and allowed in lines[0] and "\n" not in lines[0]
    # the command line: the same line, exit code 2, no traceback
    assert main(["build", "--model", str(path), "--out", str(tmp_path / "bundle")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and lines[0] in err


@pytest.mark.parametrize(
    "builder, kw, words",
    [
        ("depthwise_conv2d_params", {"dilation_hw": (1, 524288)}, "dilation_hw[1] must be <= 32767"),
        ("depthwise_conv2d_params", {"stride_hw": (32768, 1)}, "stride_hw[0] must be <= 32767"),
        ("depthwise_conv2d_params", {"depth_multiplier": 40000}, "depth_multiplier must be <= 32767"),
        ("conv2d_params", {"dilation_hw": (65536, 1)}, "dilation_hw[0] must be <= 32767"),
        ("conv2d_params", {"stride_hw": (1, 2**20)}, "stride_hw[1] must be <= 32767"),
    ],
)
def test_params_builders_refuse_what_tflm_cannot_hold(builder, kw, words):
    """The builders are the last guard: they check what the op table checks, for any caller."""
    from zoflash.compiler.ops import convolution_params

    base = dict(
        input_hwc=(8, 8, 4),
        output_hwc=(8, 8, 4),
        stride_hw=(1, 1),
        dilation_hw=(1, 1),
        padding="SAME",
        input_scale=0.5,
        input_zp=0,
        filter_scales=[0.01],
        output_scale=0.5,
        output_zp=0,
        activation="NONE",
    )
    if builder == "conv2d_params":
        base["filter_ohwi"] = (4, 3, 3, 4)
    else:
        base.update(filter_1hwo=(1, 3, 3, 4), depth_multiplier=1)
    getattr(convolution_params, builder)(**base)  # the unchanged arguments build
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        getattr(convolution_params, builder)(**dict(base, **kw))


def test_padding_beyond_int16_is_refused_by_the_builder():
    from zoflash.compiler.ops import pooling_params

    kw = dict(input_hwc=(1, 8, 4), filter_hw=(1, 8), stride_hw=(1, 1), padding="SAME")
    kw.update(output_scale=0.5, output_zp=0, activation="NONE")
    pooling_params.pool_params(output_hwc=(1, 8, 4), **kw)
    with pytest.raises(ValueError, match="exceeds 32767"):
        pooling_params.pool_params(output_hwc=(1, 8, 4), **dict(kw, filter_hw=(1, 70001)))


@pytest.mark.cc
@pytest.mark.tflm
def test_largest_accepted_dilation_is_bit_exact(tmp_path, capsys):
    """32767, the largest dilation TFLM holds, is accepted and computes what TFLM computes."""
    path, _ = _with(KWS, "DEPTHWISE_CONV_2D", tmp_path, dilationWFactor=32767, dilationHFactor=32767)
    assert main(["validate", "--model", str(path), "--random", "3"]) == 0
    assert capsys.readouterr().out.startswith("OK")


# ------------------------------------------------------------------- tflite-micro in a child process


def _aborting(raw: bytes) -> bytes:
    """The model with SOFTMAX's beta so small that TFLM's Prepare aborts (a failed TFLITE_CHECK)."""
    return mutants.with_option(raw, mutants.op_names(mutants.unpack(raw)).index("SOFTMAX"), "beta", 1e-30)


@pytest.mark.tflm
def test_a_tflm_abort_is_one_line_naming_the_signal():
    from zoflash.reference.tflm import run_isolated

    raw = _aborting((FIXTURES / "mlp.tflite").read_bytes())
    with pytest.raises(TflmError) as info:
        run_isolated(raw, [np.zeros((1, 1, 64), np.int8)], name="'mlp-beta.tflite'")
    assert "died of SIGABRT" in str(info.value) and "\n" not in str(info.value)
    assert "'mlp-beta.tflite'" in str(info.value)


@pytest.mark.tflm
def test_a_python_error_of_the_wrapper_is_one_line_with_its_reason():
    """An op code index past the model's table: the wrapper's IndexError, its type and words, not a traceback."""
    from zoflash.reference.tflm import run_isolated

    model = mutants.unpack((FIXTURES / "mlp.tflite").read_bytes())
    model.subgraphs[0].operators[0].opcodeIndex = 99
    with pytest.raises(TflmError) as info:
        run_isolated(mutants.pack(model), [np.zeros((1, 1, 64), np.int8)])
    assert "interpreter failed on" in str(info.value) and "IndexError" in info.value.last_line
    assert "Traceback" not in str(info.value)


@pytest.mark.tflm
def test_a_hang_is_cut_by_the_timeout():
    from zoflash.reference.tflm import run_isolated

    with pytest.raises(TflmError, match=r"did not finish within 0\.01 s"):
        run_isolated((FIXTURES / "mlp.tflite").read_bytes(), [np.zeros((1, 1, 64), np.int8)], timeout=0.01)


@pytest.mark.cc
@pytest.mark.tflm
def test_validate_survives_a_reference_that_aborts(capsys):
    """The generated C of the model, the reference given a file TFLM aborts on: validate reports it
    (before, the abort killed the caller's process)."""
    model = api.load_model(FIXTURES / "mlp.tflite")
    broken = dataclasses.replace(model, raw=_aborting(model.raw))
    with pytest.raises(TflmError, match="died of SIGABRT"):
        api.validate(broken, api.random_inputs(model, 2))
    assert api.validate(model, api.random_inputs(model, 2)).ok  # the same path, a model TFLM runs


# ------------------------------------------------------------------- several inputs


@pytest.fixture(scope="module")
def four_inputs(tmp_path_factory) -> Path:
    """An int8 model of four inputs of different shapes (TensorFlow's converter, the tf tier)."""
    from conftest import need_module

    need_module("tensorflow")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(5)
    shapes = [(4,), (4,), (6,), (2, 3)]
    ins = [tf.keras.Input(s, batch_size=1, name=f"in{k}") for k, s in enumerate(shapes)]
    flat = [tf.keras.layers.Flatten()(i) for i in ins]
    mixed = [tf.keras.layers.Dense(5, activation="relu")(f) for f in flat]
    out = tf.keras.layers.Dense(3)(tf.keras.layers.Add()(mixed))
    model = tf.keras.Model(ins, out)
    rng = np.random.default_rng(0)

    def calibration():
        for _ in range(50):
            # by name: the converter's signature does not keep the Keras input order
            yield {f"in{k}": rng.uniform(-1, 1, (1, *s)).astype(np.float32) for k, s in enumerate(shapes)}

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.representative_dataset = calibration
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("multi") / "four_inputs.tflite"
    with quiet():
        path.write_bytes(conv.convert())
    return path


@pytest.mark.tf
@pytest.mark.cc
@pytest.mark.tflm
def test_validate_random_fills_every_input(four_inputs, capsys):
    model = api.load_model(four_inputs)
    xs = api.random_inputs(model, 5, seed=2)
    assert isinstance(xs, list) and len(xs) == 4
    for x, i in zip(xs, model.graph.inputs):
        t = model.graph.tensors[i]
        assert x.dtype == np.int8 and x.shape == (5, *t.shape)
        assert x.min() < -64 and x.max() > 64  # the whole int8 range, not a corner of it
    assert api.validate(model, xs).ok
    assert main(["validate", "--model", str(four_inputs), "--random", "4"]) == 0
    assert capsys.readouterr().out.startswith("OK")


@pytest.mark.tf
@pytest.mark.cc
@pytest.mark.tflm
def test_validate_takes_one_array_per_input_from_an_npz(four_inputs, tmp_path, capsys):
    model = api.load_model(four_inputs)
    np.savez(tmp_path / "x.npz", *api.random_inputs(model, 3, seed=9))
    assert main(["validate", "--model", str(four_inputs), "--inputs", str(tmp_path / "x.npz")]) == 0
    assert "3 samples" in capsys.readouterr().out
    np.save(tmp_path / "one.npy", np.zeros((3, 1, 4), np.int8))  # one array for four inputs: one message
    assert main(["validate", "--model", str(four_inputs), "--inputs", str(tmp_path / "one.npy")]) == 2
    err = capsys.readouterr().err
    assert "the model has 4 inputs" in err and "one array of samples per input" in err and "Traceback" not in err


# ------------------------------------------------------------------- convert --keras


@pytest.mark.tf
def test_keras_lambda_layer_is_named_with_what_to_do(tmp_path, capsys):
    from conftest import need_module

    need_module("tensorflow")
    import tensorflow as tf

    i = tf.keras.Input((4,))
    tf.keras.Model(i, tf.keras.layers.Dense(2)(tf.keras.layers.Lambda(lambda t: t * 2.0)(i))).save(
        tmp_path / "lambda.keras"
    )
    np.save(tmp_path / "cal.npy", np.zeros((4, 4), np.float32))
    args = ["convert", "--calibration", str(tmp_path / "cal.npy"), "--out", str(tmp_path / "o.tflite")]
    assert main([*args, "--keras", str(tmp_path / "lambda.keras")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Keras could not load") and "Lambda layer" in err and "--saved-model" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    (tmp_path / "junk.keras").write_bytes(b"not a model at all")
    assert main([*args, "--keras", str(tmp_path / "junk.keras")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Keras could not load") and "junk.keras" in err and "model.save()" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------- the mutation fuzzer

FUZZ_SEED = 20261205
FUZZ_FILES = [FIXTURES / n for n in ("mlp.tflite", "digits_cnn.tflite", "kws_dscnn.tflite", "mbv2_block.tflite")]
FUZZ_TIMEOUT = 300  # seconds for one `zoflash validate` of a small mutant (a build and two runs)


@pytest.fixture
def fuzz_count(request) -> int:
    """--fuzz-count N, or ZOFLASH_FUZZ_COUNT (a nightly run sets a larger count); 60 by default."""
    return int(request.config.getoption("--fuzz-count") or os.environ.get("ZOFLASH_FUZZ_COUNT") or 60)


@pytest.mark.slow
@pytest.mark.cc
@pytest.mark.tflm
def test_mutants_are_refused_in_one_message_or_bit_exact(fuzz_count, tmp_path):
    """Seeded mutants of small models (byte flips; options, shapes, quantization set to odd values)
    through `zoflash validate` as a user runs it: no traceback, no hang, no crash; an accepted
    mutant is bit-exact with TFLM, or TFLM's own failure is reported in one message."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "host"))
    failures = []
    for n, (source, data, what) in enumerate(mutants.mutants(FUZZ_FILES, fuzz_count, FUZZ_SEED)):
        path = tmp_path / f"mutant{n}.tflite"
        path.write_bytes(data)
        label = f"mutant {n} of {source.name} ({what})"
        try:
            done = subprocess.run(
                [sys.executable, "-m", "zoflash", "validate", "--model", str(path), "--random", "2"],
                capture_output=True,
                text=True,
                timeout=FUZZ_TIMEOUT,
                env=env,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"{label}: no answer within {FUZZ_TIMEOUT} s")
            continue
        if done.returncode < 0 or "Traceback" in done.stderr:
            failures.append(f"{label}: exit {done.returncode}, {done.stderr.strip()[-400:]}")
        elif done.returncode == 0:
            if not all(line.startswith("OK ") for line in done.stdout.strip().splitlines()):
                failures.append(f"{label}: accepted but not bit-exact: {done.stdout.strip()}")
        elif done.returncode != 2 or not done.stderr.startswith("error: "):
            failures.append(f"{label}: exit {done.returncode}: {(done.stdout + done.stderr).strip()[-400:]}")
    assert not failures, "\n".join(failures)
