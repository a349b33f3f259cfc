"""Read a .tflite flatbuffer into the IR, without tensorflow.

Every failure of the flatbuffer accessors on a damaged file becomes a ModelFormatError that
says what was being read; the caller never sees an IndexError or struct.error.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import tflite

from zoflash.compiler.ir import Graph, Op, Quantization, Tensor
from zoflash.errors import ModelFormatError

_TENSOR_TYPES = {
    tflite.TensorType.FLOAT32: "float32",
    tflite.TensorType.FLOAT16: "float16",
    tflite.TensorType.INT32: "int32",
    tflite.TensorType.UINT8: "uint8",
    tflite.TensorType.INT64: "int64",
    tflite.TensorType.STRING: "string",
    tflite.TensorType.BOOL: "bool",
    tflite.TensorType.INT16: "int16",
    tflite.TensorType.INT8: "int8",
    tflite.TensorType.FLOAT64: "float64",
    tflite.TensorType.RESOURCE: "resource",  # a resource variable's handle (VAR_HANDLE's output)
}
_NUMPY_TYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int32": np.int32,
    "uint8": np.uint8,
    "int64": np.int64,
    "bool": np.bool_,
    "int16": np.int16,
    "int8": np.int8,
    "float64": np.float64,
}
_OPTION_TYPE_NAMES = {v: k for k, v in vars(tflite.BuiltinOptions).items() if isinstance(v, int)}
_PADDING = {v: k for k, v in vars(tflite.Padding).items() if isinstance(v, int)}
_ACTIVATION = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if isinstance(v, int)}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _decode_options(op) -> dict:
    """Decode an op's builtin options table generically into {snake_case_field: value}."""
    kind = op.BuiltinOptionsType()
    if kind == 0:
        return {}
    cls_name = _OPTION_TYPE_NAMES.get(kind)
    cls = getattr(tflite, cls_name, None) if cls_name else None
    table = op.BuiltinOptions()
    if cls is None or table is None:
        return {}
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    methods = {m for m in vars(cls) if not m.startswith("_")}
    vectors = {m[: -len("Length")] for m in methods if m.endswith("Length")}
    options = {}
    for m in sorted(methods):
        if (
            m in ("Init",)
            or m.startswith("GetRootAs")
            or m.endswith(("BufferHasIdentifier", "AsNumpy", "Length", "IsNone"))
        ):
            continue
        if m in vectors:
            n = getattr(obj, m + "Length")()
            value = [getattr(obj, m)(j) for j in range(n)]
        else:
            value = getattr(obj, m)()
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        options[_snake(m)] = value
    if "padding" in options:
        options["padding"] = _PADDING.get(options["padding"], options["padding"])
    if "fused_activation_function" in options:
        options["fused_activation_function"] = _ACTIVATION.get(
            options["fused_activation_function"], options["fused_activation_function"]
        )
    return options


def _op_type(code) -> str:
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    if builtin == tflite.BuiltinOperator.CUSTOM:
        custom = code.CustomCode()
        return "CUSTOM:" + (custom.decode("utf-8", "replace") if custom else "?")
    return tflite.BUILTIN_OPCODE2NAME.get(builtin, f"BUILTIN_{builtin}")


def _quantization(t) -> Quantization | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scales = tuple(float(s) for s in q.ScaleAsNumpy().astype(np.float32))
    zps = tuple(int(z) for z in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else (0,) * len(scales)
    return Quantization(scales=scales, zero_points=zps, axis=int(q.QuantizedDimension()))


def _buffer_bytes(model, raw: bytes, index: int) -> bytes | None:
    if index == 0:  # buffer 0 is the empty buffer of every tensor without data
        return None
    buf = model.Buffers(index)
    offset, size = buf.Offset(), buf.Size()
    if offset > 1:  # large models keep buffer data after the flatbuffer
        if offset + size > len(raw):
            raise ModelFormatError(f"buffer {index} points past the end of the file")
        return raw[offset : offset + size]
    if buf.DataLength() == 0:
        return None
    return buf.DataAsNumpy().tobytes()


def _read_tensor(model, raw: bytes, t, index: int) -> Tensor:
    dtype = _TENSOR_TYPES.get(t.Type(), f"type{t.Type()}")
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    sig = tuple(int(d) for d in t.ShapeSignatureAsNumpy()) if t.ShapeSignatureLength() else None
    name = (t.Name() or b"").decode("utf-8", "replace") or f"tensor{index}"
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"tensor {index} '{name}' has a negative dimension in its shape {list(shape)}")
    buffer = t.Buffer()
    if buffer >= model.BuffersLength():
        raise ModelFormatError(
            f"tensor {index} '{name}' refers to buffer {buffer}, but the model has only "
            f"{model.BuffersLength()} buffers (0 to {model.BuffersLength() - 1})"
        )
    data = None
    payload = _buffer_bytes(model, raw, buffer)
    if payload is not None and dtype in _NUMPY_TYPES:
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        arr = np.frombuffer(payload, dtype=_NUMPY_TYPES[dtype])
        if arr.size != count:
            raise ModelFormatError(
                f"tensor {index} '{name}' holds {arr.size} values but its shape {list(shape)} needs {count}"
            )
        data = arr.reshape(shape).copy()
    return Tensor(
        index=index,
        name=name,
        shape=shape,
        dtype=dtype,
        quant=_quantization(t),
        data=data,
        shape_signature=sig,
        is_variable=bool(t.IsVariable()),
        sparse=t.Sparsity() is not None,
    )


def _read_subgraph(model, raw: bytes, codes: list[str], k: int, name: str) -> Graph:
    sub = model.Subgraphs(k)
    where = name if k == 0 else f"{name} subgraph {k}"
    tensors = [_read_tensor(model, raw, sub.Tensors(i), i) for i in range(sub.TensorsLength())]
    ops = []
    for i in range(sub.OperatorsLength()):
        o = sub.Operators(i)
        idx = o.OpcodeIndex()
        if idx >= len(codes):
            raise ModelFormatError(f"{where}: op {i} uses operator code {idx}, which does not exist")
        ins = tuple(int(x) for x in o.InputsAsNumpy()) if o.InputsLength() else ()
        outs = tuple(int(x) for x in o.OutputsAsNumpy()) if o.OutputsLength() else ()
        for tix in ins + outs:
            if tix >= len(tensors) or tix < -1:
                raise ModelFormatError(f"{where}: op {i} refers to tensor {tix}, which does not exist")
        ops.append(
            Op(
                index=i,
                type=codes[idx],
                inputs=ins,
                outputs=outs,
                options=_decode_options(o),
                version=model.OperatorCodes(idx).Version(),
            )
        )
    inputs = tuple(int(x) for x in sub.InputsAsNumpy()) if sub.InputsLength() else ()
    outputs = tuple(int(x) for x in sub.OutputsAsNumpy()) if sub.OutputsLength() else ()
    for tix in inputs + outputs:
        if not 0 <= tix < len(tensors):
            raise ModelFormatError(f"{where}: graph input/output refers to tensor {tix}, which does not exist")
    return Graph(name=name, tensors=tensors, ops=ops, inputs=inputs, outputs=outputs)


def parse_tflite(raw: bytes, name: str = "model") -> Graph:
    """Parse flatbuffer bytes into a Graph: subgraph 0, the others beside it (`Graph.subgraphs`)."""
    if len(raw) < 8:
        raise ModelFormatError(f"{name}: the file is {len(raw)} bytes, too short to be a TFLite model")
    if raw[4:8] != b"TFL3":
        raise ModelFormatError(
            f"{name}: not a TFLite flatbuffer (expected the identifier 'TFL3' at byte 4, found {raw[4:8]!r})"
        )
    try:
        model = tflite.Model.GetRootAs(raw, 0)
        if model.SubgraphsLength() < 1:
            raise ModelFormatError(f"{name}: the model has no subgraph")
        codes = [_op_type(model.OperatorCodes(i)) for i in range(model.OperatorCodesLength())]
        graphs = [_read_subgraph(model, raw, codes, k, name) for k in range(model.SubgraphsLength())]
        desc = (model.Description() or b"").decode("utf-8", "replace")
    except ModelFormatError:
        raise
    except Exception as exc:  # damaged offsets make the generated accessors fail in many ways
        raise ModelFormatError(
            f"{name}: the flatbuffer is damaged or truncated ({type(exc).__name__}: {exc}); "
            "re-export the model with the TFLite converter"
        ) from None
    main = graphs[0]
    main.description, main.num_subgraphs, main.subgraphs = desc, len(graphs), tuple(graphs[1:])
    return main


def load_tflite(path: str | Path) -> tuple[Graph, bytes]:
    """Read a .tflite file; returns the graph and the raw bytes (kept for hashing and export)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelFormatError(f"cannot read model file '{path}': {exc.strerror}") from None
    return parse_tflite(raw, name=path.name), raw


def model_sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()
