"""One training decision for the three engines: `build --data` (the bundle's compile), `simulate`
(the C on the host) and `simulate --engine reference` accept or refuse every model alike, with the
same reason (they all plan through training/plan.py); every accepted model gives identical
records in the C and the reference on a short run with random data.  Stateful models train when
their state is in the frozen prefix, which then runs sample by sample in both engines.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest
from conftest import FIXTURES, PUBLIC, need_module, need_public_models, zoo_param

from zoflash import api
from zoflash.compiler.convert import quiet
from zoflash.compiler.pipeline import compile_graph
from zoflash.errors import InternalError, UnsupportedModelError, ZoflashError
from zoflash.monitor.session import comparable, read_log
from zoflash.training.options import make_options
from zoflash.training.pipeline import trainable_start
from zoflash.training.plan import plan_training
from zoflash.workflows.generate import compile_for
from zoflash.workflows.simulate import simulate

FIXTURE_MODELS = sorted(p.name for p in FIXTURES.glob("*.tflite"))
PUBLIC_MODELS = sorted(p.name for p in PUBLIC.glob("*.tflite"))
# The reference runs their convolutions per sample in NumPy: over 15 s each, in the slow tier.
SLOW = {
    "standin_mobilenet_v2_0.35_128.tflite",
    "mlperf_vww_mobilenetv1.tflite",
    "person_detect.tflite",
    "st_yamnet_256_64x96_tl_int8.tflite",
}
STATEFUL_TRAINED = ("microwakeword_hey_mycroft.tflite", "mnist_lstm.tflite")
OPTIONS = dict(steps=3, batch=2, eval_every=2, q_max=2)
N_TRAIN, N_TEST = 12, 6


def _param(name: str, public: bool):
    marks = [pytest.mark.cc] + ([pytest.mark.slow] if name in SLOW else [])
    value = PUBLIC / name if public else FIXTURES / name
    return pytest.param(value, marks=marks + ([pytest.mark.zoo] if public else []), id=name)


MODELS = [_param(n, False) for n in FIXTURE_MODELS] + [_param(n, True) for n in PUBLIC_MODELS]


def random_data(path, model_path, n_train: int = N_TRAIN, n_test: int = N_TEST):
    """Random samples of the model's input type and shape; labels or targets as its default loss
    wants (any labels when the model does not plan: the refusal comes before the data)."""
    model = api.load_model(model_path)
    t = model.graph.tensors[model.graph.inputs[0]]
    rng = np.random.default_rng(0)
    n = n_train + n_test
    shape = (n, *t.shape[1:]) if t.shape and t.shape[0] == 1 else (n, *t.shape)
    if t.dtype == "float32":
        x = rng.uniform(-1, 1, shape).astype(np.float32)
    else:
        info = np.iinfo(t.dtype)
        x = rng.integers(info.min, info.max, shape, endpoint=True).astype(t.dtype)
    y = np.zeros(n, np.int64)
    try:
        compiled = api.compile_model(model)
        plan = plan_training(compiled, make_options(**OPTIONS))
    except ZoflashError:
        plan = None
    if plan is not None and plan.loss == "mse":
        y = rng.uniform(-0.1, 0.1, (n, *compiled.storage(plan.logits).shape[1:])).astype(np.float32)
    elif plan is not None:
        y = rng.integers(0, 2 if plan.loss == "sigmoid-bce" else plan.classes, n)
    np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])
    return path


def _decision(run) -> str:
    """'accepted', or the refusal's one line."""
    try:
        run()
    except ZoflashError as exc:
        return f"refused: {exc}"
    return "accepted"


@pytest.mark.parametrize("model", MODELS)
def test_engines_decide_alike_and_accepted_models_train_identically(tmp_path, model):
    data = random_data(tmp_path / "data.npz", model)
    opts = make_options(**OPTIONS)
    runs = {}

    def engine(name):
        def run():
            runs[name] = simulate(
                model, data, opts, tmp_path / f"{name}.jsonl", engine=name, plot=False, say=lambda _: None
            )

        return run

    decisions = {
        "build --data": _decision(lambda: compile_for(model, data, opts, say=lambda _: None)),
        "simulate": _decision(engine("c")),
        "simulate --engine reference": _decision(engine("reference")),
    }
    assert len(set(decisions.values())) == 1, decisions
    if decisions["simulate"] != "accepted":
        assert "Traceback" not in decisions["simulate"] and "internal error" not in decisions["simulate"]
        return
    c, ref = (comparable(read_log(runs[e].log_path)) for e in ("c", "reference"))
    assert len(c) == len(ref)
    for k, (a, b) in enumerate(zip(c, ref)):
        assert a == b, f"record {k} differs:\nC         {a}\nreference {b}"


@pytest.mark.parametrize("name", [zoo_param(n) for n in STATEFUL_TRAINED])
def test_a_stateful_prefix_trains(name):
    """The state in the frozen prefix: trained, the prefix run sample by sample (no memo)."""
    compiled = api.compile_model(api.load_model(PUBLIC / name))
    plan = plan_training(compiled, make_options())
    assert plan.prefix_state and plan.split > 0


@pytest.mark.zoo
def test_a_stateful_trained_part_is_refused_naming_the_op_and_the_fix():
    """microWakeWord's streaming state between its convolutions: --train all would train across it."""
    compiled = api.compile_model(api.load_model(PUBLIC / "microwakeword_hey_mycroft.tflite"))
    with pytest.raises(ZoflashError, match=r"keeps state across invokes and would be in the trained part.*--train"):
        plan_training(compiled, make_options(train="all"))


def test_a_stateless_model_keeps_its_prefix_memo():
    compiled = api.compile_model(api.load_model(FIXTURES / "digits_cnn.tflite"))
    assert not plan_training(compiled, make_options()).prefix_state


# ---- the training plan never hits an internal error ------------------------------------------

PLAN_MODELS = [pytest.param(FIXTURES / n, id=n) for n in FIXTURE_MODELS] + [
    pytest.param(PUBLIC / n, marks=pytest.mark.zoo, id=n) for n in PUBLIC_MODELS
]


@pytest.mark.parametrize("model", PLAN_MODELS)
def test_the_training_plan_of_every_model_verifies_or_is_refused(model):
    """The plan's verifier (training/plan.py verify_training_plan) runs in every plan: the default
    head, every layer, and the head re-quantized (--headroom recompiles the compiled graph)."""
    graph = api.load_model(model).graph
    for options in (dict(), dict(train="all"), dict(headroom=1)):
        try:
            trainable_start(graph, make_options(**options))
        except InternalError:
            raise
        except ZoflashError:
            pass  # a refusal: test_engines_decide_alike_... checks it is one line, alike everywhere


@pytest.mark.tf
def test_a_folded_shape_subgraph_plans_again_with_headroom(tmp_path):
    """A MobileNet-like Keras model whose batch is left open: the converter computes a RESHAPE's
    shape with SHAPE / STRIDED_SLICE / PACK, which the compiler folds away, so the RESHAPE keeps
    its model index past its new position; the headroom's recompile of that graph plans it."""
    need_module("tensorflow")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(3)
    layers = tf.keras.layers
    inp = tf.keras.Input((16, 16, 3))
    x = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
    x = layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = layers.Conv2D(16, 1, activation="relu")(x)
    x = layers.GlobalAveragePooling1D()(layers.Reshape((-1, 16))(x))
    model = tf.keras.Model(inp, layers.Softmax()(layers.Dense(4)(x)))
    rng = np.random.default_rng(0)

    def calibration():
        for _ in range(20):
            yield [rng.uniform(0, 1, (1, 16, 16, 3)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.representative_dataset = calibration
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path = tmp_path / "mobilenet_like.tflite"
    with quiet():
        path.write_bytes(conv.convert())
    loaded = api.load_model(path)
    assert [op.type for op in loaded.graph.ops][3:7] == ["SHAPE", "STRIDED_SLICE", "PACK", "RESHAPE"]
    compiled = api.compile_model(loaded)
    assert [op.index for op in compiled.graph.ops if op.type == "RESHAPE"] == [6]  # at position 3
    for headroom in (1, "auto"):
        plan, _ = trainable_start(loaded.graph, make_options(headroom=headroom))
        assert plan.layers == [8]


# ---- messages ------------------------------------------------------------------------------


def _as_tf1_uint8(graph):
    """The graph as a TF1 (legacy) converter writes it: uint8 weights and activations, zero points
    moved by 128."""
    tensors = []
    for t in graph.tensors:
        if t.dtype == "int8":
            q = t.quant
            quant = replace(q, zero_points=tuple(z + 128 for z in q.zero_points)) if q is not None else None
            data = None if t.data is None else (t.data.astype(np.int16) + 128).astype(np.uint8)
            t = replace(t, dtype="uint8", quant=quant, data=data)
        tensors.append(t)
    return replace(graph, tensors=tensors)


def test_a_tf1_uint8_model_gets_one_line_saying_how_to_reconvert():
    graph = _as_tf1_uint8(api.load_model(FIXTURES / "digits_cnn.tflite").graph)
    with pytest.raises(UnsupportedModelError) as info:
        compile_graph(graph)
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert "a TF1 uint8-quantized model" in line and "reconvert" in line and "zoflash convert" in line


def test_the_state_is_reported_apart_from_the_arena(tmp_path):
    """The estimate and the build report put the model's state beside the arena, under one label."""
    from zoflash.targets import boards
    from zoflash.targets.budget import STATE_LABEL, _state_apart, estimate_regions
    from zoflash.workflows.report import bundle_lines

    model_path = need_public_models() / "microwakeword_hey_mycroft.tflite"
    compiled = api.compile_model(api.load_model(model_path))
    assert compiled.state_size > 0
    uses = {u.label: u.bytes for r in estimate_regions(boards.load_board("mps3-an547"), compiled) for u in r.items}
    assert uses[STATE_LABEL] == compiled.state_size and uses["arena"] == compiled.arena_size
    measured = {("arena", "arena"): compiled.arena_size + compiled.state_size}
    _state_apart(measured, compiled.state_size)  # a link puts both in the model object's section
    assert measured == {("arena", "arena"): compiled.arena_size, ("arena", STATE_LABEL): compiled.state_size}
    bundle = api.generate(model_path, "host", tmp_path / "b")
    lines = bundle_lines(bundle)
    assert f"RAM     arena {compiled.arena_size} bytes" in lines[1]
    assert lines[2].startswith(f"RAM     model state {compiled.state_size} bytes")


# ---- LOG_SOFTMAX -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lenet_log_softmax(tmp_path_factory):
    """A small int8 LeNet ending in LOG_SOFTMAX (TensorFlow's converter, the tf tier)."""
    need_module("tensorflow")
    import tensorflow as tf

    tf.keras.utils.set_random_seed(11)
    layers = tf.keras.layers
    inp = tf.keras.Input((12, 12, 1), batch_size=1)
    x = layers.Conv2D(4, 3, activation="relu")(inp)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(8, 3, activation="relu")(x)
    x = layers.Dense(10)(layers.Flatten()(x))
    model = tf.keras.Model(inp, layers.Lambda(tf.nn.log_softmax)(x))
    rng = np.random.default_rng(1)

    def calibration():
        for _ in range(30):
            yield [rng.uniform(0, 1, (1, 12, 12, 1)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.representative_dataset = calibration
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("lenet") / "lenet_log_softmax.tflite"
    with quiet():
        path.write_bytes(conv.convert())
    assert api.load_model(path).graph.ops[-1].type == "LOG_SOFTMAX"
    return path


@pytest.mark.tf
@pytest.mark.tflm
@pytest.mark.cc
def test_log_softmax_model_is_bit_exact_with_tflm(lenet_log_softmax):
    model = api.load_model(lenet_log_softmax)
    assert api.validate(model, api.random_inputs(model, 64, seed=5)).ok


@pytest.mark.tf
@pytest.mark.cc
def test_log_softmax_model_trains_identically_in_both_engines(lenet_log_softmax, tmp_path):
    """The loss reads the logits before LOG_SOFTMAX: cross-entropy = -log softmax(logits)[label]."""
    test_engines_decide_alike_and_accepted_models_train_identically(tmp_path, lenet_log_softmax)
    plan = plan_training(api.compile_model(api.load_model(lenet_log_softmax)), make_options())
    assert plan.loss == "softmax-ce" and plan.classes == 10


# ---- the docs' model table ---------------------------------------------------------------------


def _model_table():
    spec = importlib.util.spec_from_file_location("model_table", FIXTURES.parent.parent / "tools" / "model_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.zoo
def test_the_model_table_is_current():
    """docs/models-table.md (tools/model_table.py --write, slow: QEMU and TFLM) has a row per fixture
    and public model, and its cheap columns (compiles, the training decision) say what zoflash does
    now."""
    need_public_models()
    table = _model_table()
    page = FIXTURES.parent.parent / "docs" / "models-table.md"
    assert table.stale_cells(page.read_text()) == [], "regenerate: python tools/model_table.py --write " + str(page)
