"""`zoflash convert`: bring your own model. A float model (a Keras file, a SavedModel directory or a
float .tflite) becomes a full-integer INT8 .tflite with batch size 1, quantized by TensorFlow on
the user's calibration data; then the report says which ops it has, how big it is, whether
zoflash compiles it, and how closely the int8 model follows the float one on that data.

TensorFlow is an optional extra (`pip install 'zoflash[convert]'`), imported only here; nothing
else in zoflash needs it.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import sys
import tempfile
import warnings
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import DataError, ToolMissingError, ZoflashError

SOURCES = ("keras", "saved-model", "tflite")
IO_TYPES = ("int8", "uint8", "float")
CALIBRATION_KEYS = ("x", "x_train", "x_calibration")
REPRESENTATIVE_SAMPLES = 500  # samples the quantizer calibrates on (the first ones)
AGREEMENT_SAMPLES = 1000  # samples the float and int8 models are compared on
_TENSOR_SHAPE_SIGNATURE_SLOT = 18  # vtable offset of tflite Tensor.shape_signature


class ConvertError(ZoflashError):
    """The model cannot be converted."""


@dataclass
class Agreement:
    """The int8 model against the float model on the calibration samples (output 0)."""

    samples: int
    max_abs_error: float  # in the output's real units
    mean_abs_error: float
    output_range: float  # max - min of the float model's outputs, for scale
    top1_agreement: float | None = None  # classifiers (more than one output value per sample)


@dataclass
class ConversionReport:
    out: Path
    bytes: int
    ops: dict[str, int]
    inputs: list[str]
    outputs: list[str]
    supported: bool
    problems: list[str] = field(default_factory=list)
    agreement: Agreement | None = None

    def describe(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.ops.items()))
        lines = [
            f"wrote {self.out} ({self.bytes} bytes)",
            f"inputs:  {'; '.join(self.inputs)}",
            f"outputs: {'; '.join(self.outputs)}",
            f"ops: {ops}",
        ]
        a = self.agreement
        if a is not None:
            text = (
                f"int8 vs float on {a.samples} calibration samples: max |error| {a.max_abs_error:.4g}, "
                f"mean {a.mean_abs_error:.4g} (float outputs span {a.output_range:.4g})"
            )
            if a.top1_agreement is not None:
                text += f", top-1 agreement {100 * a.top1_agreement:.1f}%"
            lines.append(text)
        if self.supported:
            lines.append("zoflash: supported (zoflash build --model ... compiles it)")
        else:
            lines.append("zoflash: NOT SUPPORTED")
            lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def _tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines go to stderr
    try:
        with quiet():
            import tensorflow as tf
    except ImportError:
        raise ToolMissingError(
            "TensorFlow (Python module 'tensorflow')", "pip install 'zoflash[convert]' (or pip install tensorflow-cpu)"
        ) from None
    tf.get_logger().setLevel("ERROR")
    return tf


@contextlib.contextmanager
def quiet():
    """TensorFlow's C++ chatter goes to the fds directly: keep it, and show it only on failure
    (also used by the fixture scripts in tests/fixtures/)."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = [os.dup(1), os.dup(2)]
        ok = False
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
            ok = True
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            if not ok:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode(errors="replace")[-4000:])


def load_calibration(path: str | Path) -> np.ndarray:
    """Float samples [N, ...] from an .npy, or an .npz holding one of CALIBRATION_KEYS (or one array)."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with np.load(path, allow_pickle=False) as npz:
                keys = [k for k in CALIBRATION_KEYS if k in npz.files] or (npz.files if len(npz.files) == 1 else [])
                if not keys:
                    raise DataError(
                        f"'{path}' holds {', '.join(npz.files) or 'no arrays'}; a calibration .npz "
                        f"needs one of {', '.join(CALIBRATION_KEYS)} (float samples [N, ...])"
                    )
                x = npz[keys[0]]
        else:
            x = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"calibration data '{path}' does not exist") from None
    except EOFError:  # an empty file (click would take it for Ctrl-D and say "aborted")
        raise DataError(f"cannot read calibration data '{path}': the file is empty") from None
    except (OSError, ValueError, zipfile.BadZipFile, zlib.error) as exc:  # pickled objects, damage
        raise DataError(f"cannot read calibration data '{path}': {exc}") from None
    x = np.asarray(x)
    if x.dtype.kind not in "fiu" or x.ndim < 1 or x.shape[0] == 0:
        raise DataError(
            f"calibration data '{path}' must be numeric samples [N, ...] with N >= 1, got {x.dtype} {list(x.shape)}"
        )
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        raise DataError(f"calibration data '{path}' contains NaN or infinity")
    return x.astype(np.float32)


def _samples_for(x: np.ndarray, shape: tuple[int, ...], where: str) -> np.ndarray:
    """[N, *shape] (shape[0] == 1, so x[i] is one model input): samples given with or without the
    batch dimension."""
    if tuple(x.shape[1:]) == tuple(shape):
        return x
    if tuple(x.shape[1:]) == tuple(shape[1:]):
        return x.reshape((x.shape[0],) + tuple(shape))
    raise DataError(
        f"calibration samples have shape {list(x.shape)}; the model's input {where} is "
        f"{list(shape)} (give [N, {', '.join(map(str, shape[1:]))}])"
    )


def _batch_one(shape, where: str) -> tuple[int, ...]:
    dims = [None if d is None else int(d) for d in shape]
    if not dims:
        raise ConvertError(f"the model's input {where} is a scalar; zoflash needs [batch, ...] inputs")
    if any(d is None or d < 0 for d in dims[1:]):
        raise ConvertError(
            f"the model's input {where} has a dynamic dimension {dims}; give the model fixed "
            "input sizes (tf.keras.Input(shape=...)) before converting"
        )
    return (1, *dims[1:])


def _keras_as_saved_model(tf, path: Path, out_dir: Path) -> Path:
    """A Keras model saved as a SavedModel whose serving signature has batch size 1."""
    problem: Exception | None = None
    with quiet():  # a failure is reported below, in one message: TensorFlow's chatter says nothing more
        try:
            model = tf.keras.models.load_model(str(path), compile=False)
        except Exception as exc:  # Keras raises many kinds (ValueError, TypeError, OSError, ...)
            problem = exc
    if problem is not None:
        raise ConvertError(keras_load_problem(path, problem)) from None
    if len(model.inputs) != 1:
        raise ConvertError(f"the model has {len(model.inputs)} inputs; zoflash convert handles one")
    spec = tf.TensorSpec(_batch_one(model.inputs[0].shape, f"'{model.inputs[0].name}'"), model.inputs[0].dtype)
    try:
        with quiet():
            serve = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
            tf.saved_model.save(model, str(out_dir), signatures={"serving_default": serve})
    except Exception as exc:  # a layer TensorFlow cannot trace or save: its message, not a traceback
        raise ConvertError(
            f"Keras loaded '{path}' but TensorFlow could not trace and save it for conversion "
            f"({_last_line(exc)}); export it as a SavedModel yourself (model.export('dir')) and use --saved-model"
        ) from None
    return out_dir


def _last_line(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[-1] if text else repr(exc)}"


def keras_load_problem(path: Path, exc: Exception) -> str:
    """What Keras could not load, why, and what to do, in one message."""
    text = " ".join(str(exc).split())
    if "Lambda" in text:
        return (
            f"Keras could not load '{path}': it has a Lambda layer, whose Python code Keras does not load "
            "from a file (safe mode). Replace the Lambda by built-in layers, or, where the model is built "
            "from your own code, export it as a SavedModel (model.export('dir')) and convert that with --saved-model"
        )
    first = text.split(". ")[0].rstrip(".") if text else repr(exc)
    return (
        f"Keras could not load '{path}' ({type(exc).__name__}: {first}). --keras takes a model saved by "
        "Keras' model.save() (.keras or .h5); for a SavedModel directory use --saved-model, for a float "
        ".tflite --tflite"
    )


def _concrete_function(tf, path: Path):
    """The SavedModel's serving function with a fixed batch size of 1 (no dynamic batch is written),
    the object that keeps its variables alive, and the input shape."""
    with quiet():
        loaded = tf.saved_model.load(str(path))
    if "serving_default" not in loaded.signatures:
        raise ConvertError(f"the SavedModel '{path}' has no serving_default signature")
    sig = loaded.signatures["serving_default"]
    specs = sig.structured_input_signature[1]
    if len(specs) != 1:
        raise ConvertError(f"the SavedModel's signature has {len(specs)} inputs; zoflash convert handles one")
    ((name, spec),) = specs.items()
    shape = _batch_one(spec.shape, f"'{name}'")
    outputs = sorted(sig.structured_outputs)
    fn = tf.function(lambda x: [sig(**{name: x})[k] for k in outputs])
    return fn.get_concrete_function(tf.TensorSpec(shape, spec.dtype)), loaded, shape


def _tf_types(tf, io_type: str):
    return {"int8": (tf.int8, tf.int8), "uint8": (tf.uint8, tf.uint8), "float": (tf.float32, tf.float32)}[io_type]


def _quantize_function(tf, cf, trackable, x: np.ndarray, io_type: str) -> bytes:
    conv = tf.lite.TFLiteConverter.from_concrete_functions([cf], trackable)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.representative_dataset = lambda: ([x[i]] for i in range(min(len(x), REPRESENTATIVE_SAMPLES)))
    conv.inference_input_type, conv.inference_output_type = _tf_types(tf, io_type)
    with quiet():
        return conv.convert()


def _quantize_tflite(tf, float_model: bytes, x: np.ndarray, io_type: str) -> bytes:
    """A float .tflite is quantized by TensorFlow Lite's calibrator, the converter's own last stage
    (a TensorFlow-internal module: the only way to quantize a .tflite without its source model)."""
    try:
        from tensorflow.lite.python.optimize import calibrator
    except ImportError:
        raise ConvertError(
            "this TensorFlow has no tflite calibrator; convert the Keras model or SavedModel "
            "instead (--keras / --saved-model)"
        ) from None
    in_type, out_type = _tf_types(tf, io_type)

    def gen():
        for i in range(min(len(x), REPRESENTATIVE_SAMPLES)):
            yield [x[i]]

    with quiet():
        return calibrator.Calibrator(float_model).calibrate_and_quantize(gen, in_type, out_type, False)


def fixed_batch(model: bytes) -> bytes:
    """The same flatbuffer with a dynamic leading batch (-1 in shape_signature) set to 1."""
    import tflite

    data = bytearray(model)
    m = tflite.Model.GetRootAsModel(data, 0)
    for s in range(m.SubgraphsLength()):
        sub = m.Subgraphs(s)
        for t in range(sub.TensorsLength()):
            tab = sub.Tensors(t)._tab
            slot = tab.Offset(_TENSOR_SHAPE_SIGNATURE_SLOT)
            if slot and tab.VectorLen(slot) and struct.unpack_from("<i", data, tab.Vector(slot))[0] == -1:
                struct.pack_into("<i", data, tab.Vector(slot), 1)
    return bytes(data)


def _float_outputs(tf, kind: str, path: Path, x: np.ndarray, shape) -> np.ndarray:
    """Output 0 of the float model for each sample."""
    if kind == "tflite":
        return _tflite_outputs(tf, path.read_bytes(), x, shape)
    cf, _, _ = _concrete_function(tf, path)
    outs = []
    for i in range(len(x)):
        y = cf(tf.constant(x[i]))
        y = y[0] if isinstance(y, (list, tuple)) else y
        outs.append(np.asarray(y, np.float32).reshape(-1))
    return np.stack(outs)


def _tflite_outputs(tf, model: bytes, x: np.ndarray, shape) -> np.ndarray:
    """Output 0 in real units, for each sample, from TensorFlow Lite's interpreter."""
    with quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice: it is TensorFlow's own reference here
        it = tf.lite.Interpreter(model_content=model)
        inp = it.get_input_details()[0]
        it.resize_tensor_input(inp["index"], list(shape))
        it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    s_in, z_in = inp["quantization"]
    s_out, z_out = out["quantization"]
    ys = []
    for i in range(len(x)):
        v = x[i]
        if inp["dtype"] != np.float32:
            info = np.iinfo(inp["dtype"])
            v = np.clip(np.round(v / s_in) + z_in, info.min, info.max)
        it.set_tensor(inp["index"], v.astype(inp["dtype"]))
        it.invoke()
        y = it.get_tensor(out["index"]).astype(np.float32)
        if out["dtype"] != np.float32:
            y = (y - z_out) * s_out
        ys.append(y.reshape(-1))
    return np.stack(ys)


def _agreement(reference: np.ndarray, quantized: np.ndarray) -> Agreement:
    err = np.abs(reference.astype(np.float64) - quantized.astype(np.float64))
    top1 = None
    if reference.shape[1] > 1:
        top1 = float(np.mean(np.argmax(reference, axis=1) == np.argmax(quantized, axis=1)))
    return Agreement(
        samples=int(reference.shape[0]),
        max_abs_error=float(err.max()),
        mean_abs_error=float(err.mean()),
        output_range=float(reference.max() - reference.min()),
        top1_agreement=top1,
    )


def convert(
    kind: str, source: str | Path, calibration: str | Path, out: str | Path, io_type: str = "int8", compare: bool = True
) -> ConversionReport:
    """Quantize a float model to full INT8 with batch size 1 and write it to `out`."""
    if kind not in SOURCES:
        raise ConvertError(f"unknown source kind '{kind}' (use one of {', '.join(SOURCES)})")
    if io_type not in IO_TYPES:
        raise ConvertError(f"--io {io_type}: use one of {', '.join(IO_TYPES)}")
    source, out = Path(source), Path(out)
    if not source.exists():
        raise ConvertError(f"'{source}' does not exist")
    if kind == "saved-model" and not source.is_dir():
        raise ConvertError(f"'{source}' is not a SavedModel directory")
    x = load_calibration(calibration)
    tf = _tensorflow()
    with tempfile.TemporaryDirectory(prefix="zoflash-convert-") as tmp:
        if kind == "keras":  # through a SavedModel with a batch-1 signature: the converter freezes its variables
            source, kind = _keras_as_saved_model(tf, source, Path(tmp) / "saved_model"), "saved-model"
        return _convert(tf, kind, source, x, out, io_type, compare)


def _convert(tf, kind: str, source: Path, x: np.ndarray, out: Path, io_type: str, compare: bool) -> ConversionReport:
    from zoflash.compiler.pipeline import compile_graph
    from zoflash.compiler.tflite_import import parse_tflite
    from zoflash.errors import UnsupportedModelError

    try:
        if kind == "tflite":
            float_model = source.read_bytes()
            with quiet(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                it = tf.lite.Interpreter(model_content=float_model)
            shape = _batch_one(it.get_input_details()[0]["shape_signature"], "0")
            x = _samples_for(x, shape, "0")
            model = _quantize_tflite(tf, float_model, x, io_type)
        else:
            cf, trackable, shape = _concrete_function(tf, source)
            x = _samples_for(x, shape, "0")
            model = _quantize_function(tf, cf, trackable, x, io_type)
    except ZoflashError:
        raise
    except Exception as exc:  # TensorFlow raises many kinds; the user needs its message, not a traceback
        raise ConvertError(
            f"TensorFlow could not convert '{source}': {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc!r}"
        ) from None
    model = fixed_batch(model)
    try:
        out.write_bytes(model)
    except OSError as exc:
        raise ConvertError(f"cannot write '{out}': {exc.strerror}") from None
    graph = parse_tflite(model, out.name)
    report = ConversionReport(
        out=out,
        bytes=len(model),
        ops=dict(Counter(op.type for op in graph.ops)),
        inputs=[graph.tensors[i].describe() for i in graph.inputs],
        outputs=[graph.tensors[i].describe() for i in graph.outputs],
        supported=True,
    )
    try:
        compile_graph(graph)
    except UnsupportedModelError as err:
        report.supported, report.problems = False, list(err.problems)
    if compare:
        n = min(len(x), AGREEMENT_SAMPLES)
        reference = _float_outputs(tf, kind, source, x[:n], shape)
        report.agreement = _agreement(reference, _tflite_outputs(tf, model, x[:n], shape))
    return report
