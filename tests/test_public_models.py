"""Public INT8 models from the TFLM repository, MLPerf Tiny, ST's model zoo and Arm's ML-zoo
(not in the repository: the model folder of tests/conftest.py, public_models(), ZOFLASH_MODEL_ZOO;
unchanged from their sources; its manifest.json records repository, path, commit, licence and sha256).

Supported models must match the tflite-micro interpreter bit for bit; the others must be
refused with a clear reason (never a traceback). `EXPECTED` is the current state, one line a
model: when a model becomes supported, its line changes."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import PUBLIC, ZOO

from zoflash import api
from zoflash.errors import UnsupportedModelError

pytestmark = pytest.mark.zoo
MANIFEST = json.loads((ZOO / "manifest.json").read_text())["models"] if ZOO else []

# file -> "bit-exact", or a phrase the refusal must contain
EXPECTED = {
    "person_detect.tflite": "bit-exact",
    "micro_speech.tflite": "bit-exact",
    "hello_world.tflite": "bit-exact",
    "mnist_lstm.tflite": "bit-exact",
    "keyword_svdf.tflite": "bit-exact",
    "audio_preprocessor.tflite": "op 0 CUSTOM:SignalWindow, op 2 CUSTOM:SignalFftAutoScale, op 3 CUSTOM:SignalRfft",
    "mlperf_resnet8.tflite": "bit-exact",
    "arm_ds_cnn_small_int16.tflite": "bit-exact",
    "mlperf_vww_mobilenetv1.tflite": "bit-exact",
    "mlperf_kws_dscnn.tflite": "bit-exact",
    "mlperf_ad_autoencoder.tflite": "bit-exact",
    "mlperf_streaming_wakeword.tflite": "bit-exact",
    "microwakeword_hey_mycroft.tflite": "bit-exact",
    "st_miniresnet_1stacks_64x50_tl_int8.tflite": "bit-exact",
    "st_miniresnetv2_1stacks_64x50_tl_int8.tflite": "bit-exact",
    "st_yamnet_256_64x96_tl_int8.tflite": "bit-exact",
    "arm_har_int8.tflite": "bit-exact",
}


def test_manifest_matches_the_files():
    assert sorted(m["file"] for m in MANIFEST) == sorted(EXPECTED)
    for m in MANIFEST:
        data = (PUBLIC / m["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == m["sha256"], m["file"]
        assert len(data) == m["bytes"]
        assert (PUBLIC / m["license_file"]).is_file()
        assert m["license"] == "Apache-2.0" and len(m["source"]["commit"]) == 40


@pytest.mark.parametrize("name", sorted(k for k, v in EXPECTED.items() if v != "bit-exact"))
def test_unsupported_models_are_refused_with_a_reason(name):
    with pytest.raises(UnsupportedModelError) as info:
        api.compile_model(api.load_model(PUBLIC / name))
    assert EXPECTED[name] in str(info.value)


@pytest.mark.cc
@pytest.mark.tflm
@pytest.mark.parametrize("name", sorted(k for k, v in EXPECTED.items() if v == "bit-exact"))
def test_supported_models_are_bit_exact_with_tflm(name):
    model = api.load_model(PUBLIC / name)
    x = api.random_inputs(model, 100, seed=1)
    x[0], x[1] = -128, 127  # the extremes too
    report = api.validate(PUBLIC / name, x)
    assert report.samples == 100
    assert report.ok, [(o.name, o.mismatches) for o in report.outputs]
    assert all(np.isfinite(o.max_abs_diff) for o in report.outputs)
