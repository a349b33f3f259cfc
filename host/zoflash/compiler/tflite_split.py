"""Cut a .tflite model in two at one tensor, by flatbuffer surgery (no TensorFlow).

The prefix is every op the cut tensor depends on, the suffix every other op, both in the file's
order. Each part is rebuilt with the flatbuffers builder keeping only its own ops, tensors,
buffers and operator codes (renumbered); the cut tensor, quantization and all, is the prefix's
only output and the suffix's only input. Signature defs and metadata are dropped (they name
tensors of the whole model). A tensor is a cut when nothing else crosses it: the suffix reads no
other tensor of the prefix, no model input, and every model output comes from the suffix.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import flatbuffers
import numpy as np
import tflite

from zoflash.errors import SplitError

_VERSION = 3  # the TFLite schema version every converter writes
_BUFFER_ALIGN = 16  # constant data aligned as the converter aligns it (TFLM reads it in place)
_OPTION_CLASSES = {v: k for k, v in vars(tflite.BuiltinOptions).items() if isinstance(v, int)}


@dataclass
class SplitModel:
    tensor: str  # the cut tensor's name
    prefix: bytes  # .tflite: model inputs -> tensor
    suffix: bytes  # .tflite: tensor -> model outputs
    prefix_ops: list[int]  # op indices of the whole model, per part
    suffix_ops: list[int]


def _ints(obj, field: str) -> list[int]:
    return [int(v) for v in getattr(obj, field + "AsNumpy")()] if getattr(obj, field + "Length")() else []


def _parts(sub, cut: int) -> tuple[list[int], list[int]]:
    """(prefix op indices, suffix op indices) for a cut at tensor index `cut`."""
    ops = [sub.Operators(i) for i in range(sub.OperatorsLength())]
    producer = {t: i for i, op in enumerate(ops) for t in _ints(op, "Outputs")}
    names = _names(sub)
    name = names[cut]
    if cut not in producer:
        raise SplitError(
            f"tensor '{name}' is not computed by any op (a model input or a constant): nothing to put in the prefix"
        )
    prefix, todo = set(), [producer[cut]]
    while todo:
        i = todo.pop()
        if i not in prefix:
            prefix.add(i)
            todo += [producer[t] for t in _ints(ops[i], "Inputs") if t in producer]
    suffix = [i for i in range(len(ops)) if i not in prefix]
    if not suffix:
        raise SplitError(f"tensor '{name}' is the model's output: the suffix would be empty")
    crossing = {t for i in prefix for t in _ints(ops[i], "Outputs")} | set(_ints(sub, "Inputs"))
    crossing |= {t for i in prefix for t in _ints(ops[i], "Inputs") if _is_state(sub, t, producer)}
    for i in suffix:
        for t in _ints(ops[i], "Inputs"):
            if t != cut and t in crossing:
                raise SplitError(
                    f"tensor '{name}' is not a cut: op {i}, in the suffix, also reads '{names[t]}', "
                    "which the prefix computes or the model takes as input"
                )
    for t in _ints(sub, "Outputs"):
        if t in producer and producer[t] in prefix:
            raise SplitError(f"tensor '{name}' is not a cut: the model output '{names[t]}' is computed before it")
    return sorted(prefix), suffix


def _is_state(sub, t: int, producer: dict) -> bool:
    """A variable tensor (an op's state, e.g. SVDF's): it belongs to the part whose op reads it."""
    return t >= 0 and t not in producer and sub.Tensors(t).IsVariable()


class _Writer:
    """Rebuilds one part as a new model: the tensors it names, renumbered in first-use order."""

    def __init__(self, model, raw: bytes):
        self.model, self.raw = model, raw
        self.b = flatbuffers.Builder(1024)

    def _vector(self, values, dtype) -> int:
        return self.b.CreateNumpyVector(np.asarray(values, dtype=dtype))

    def _string(self, data: bytes | None) -> int | None:
        return self.b.CreateString(data) if data else None

    def _buffer(self, index: int) -> int:
        buf = self.model.Buffers(index)
        if buf.Offset() > 1:  # data stored after the flatbuffer (models past 2 GB)
            data = self.raw[buf.Offset() : buf.Offset() + buf.Size()]
        else:
            data = buf.DataAsNumpy().tobytes() if buf.DataLength() else b""
        vec = None
        if data:
            self.b.StartVector(1, len(data), _BUFFER_ALIGN)
            self.b.head -= len(data)
            self.b.Bytes[self.b.head : self.b.head + len(data)] = data
            vec = self.b.EndVector()
        tflite.BufferStart(self.b)
        if vec is not None:
            tflite.BufferAddData(self.b, vec)
        return tflite.BufferEnd(self.b)

    def _quantization(self, q) -> int:
        if q.DetailsType() != 0:
            raise SplitError("a tensor has custom quantization details, which the split does not copy")
        fields = [
            (f, self._vector(getattr(q, f + "AsNumpy")(), dt))
            for f, dt in (("Min", np.float32), ("Max", np.float32), ("Scale", np.float32), ("ZeroPoint", np.int64))
            if getattr(q, f + "Length")()
        ]
        tflite.QuantizationParametersStart(self.b)
        for f, vec in fields:
            getattr(tflite, "QuantizationParametersAdd" + f)(self.b, vec)
        tflite.QuantizationParametersAddQuantizedDimension(self.b, q.QuantizedDimension())
        return tflite.QuantizationParametersEnd(self.b)

    def _tensor(self, t, buffer: int) -> int:
        if t.Sparsity() is not None:
            raise SplitError(f"tensor '{(t.Name() or b'').decode()}' is sparse, which the split does not copy")
        name = self._string(t.Name())
        shape = self._vector(t.ShapeAsNumpy(), np.int32) if t.ShapeLength() else None
        sig = self._vector(t.ShapeSignatureAsNumpy(), np.int32) if t.ShapeSignatureLength() else None
        quant = self._quantization(t.Quantization()) if t.Quantization() is not None else None
        tflite.TensorStart(self.b)
        if shape is not None:
            tflite.TensorAddShape(self.b, shape)
        tflite.TensorAddType(self.b, t.Type())
        tflite.TensorAddBuffer(self.b, buffer)
        if name is not None:
            tflite.TensorAddName(self.b, name)
        if quant is not None:
            tflite.TensorAddQuantization(self.b, quant)
        tflite.TensorAddIsVariable(self.b, t.IsVariable())
        if sig is not None:
            tflite.TensorAddShapeSignature(self.b, sig)
        tflite.TensorAddHasRank(self.b, t.HasRank())
        return tflite.TensorEnd(self.b)

    def _options(self, op) -> int | None:
        """The builtin options table, copied field by field through its generated accessors."""
        kind = op.BuiltinOptionsType()
        if kind == 0 or op.BuiltinOptions() is None:
            return None
        cls_name = _OPTION_CLASSES.get(kind)
        if cls_name is None:
            raise SplitError(f"an op has builtin options of type {kind}, which this tflite schema does not know")
        functions = importlib.import_module(f"tflite.{cls_name}")  # the class and its builder functions
        table = op.BuiltinOptions()
        obj = getattr(functions, cls_name)()
        obj.Init(table.Bytes, table.Pos)
        adders = sorted(n[len(cls_name) + 3 :] for n in vars(functions) if n.startswith(cls_name + "Add"))
        values = {}
        for field in adders:
            if hasattr(obj, field + "AsNumpy"):  # a vector: written before the table starts
                if getattr(obj, field + "Length")():
                    values[field] = self.b.CreateNumpyVector(getattr(obj, field + "AsNumpy")())
            else:
                values[field] = getattr(obj, field)()
                if not isinstance(values[field], (bool, int, float)):  # no option table holds more today
                    raise SplitError(f"{cls_name}.{field} is neither a number nor a vector: the split cannot copy it")
        getattr(functions, cls_name + "Start")(self.b)
        for field, value in values.items():
            getattr(functions, f"{cls_name}Add{field}")(self.b, value)
        return getattr(functions, cls_name + "End")(self.b)

    def _operator(self, op, opcode: int, tensor_map: dict) -> int:
        if op.BuiltinOptions2Type() != 0 or op.LargeCustomOptionsSize():
            raise SplitError("an op has options the split does not copy (builtin_options_2 or large custom options)")
        remap = [tensor_map[t] if t >= 0 else -1 for t in _ints(op, "Inputs")]
        inputs = self._vector(remap, np.int32)
        outputs = self._vector([tensor_map[t] for t in _ints(op, "Outputs")], np.int32)
        inter = (
            self._vector([tensor_map[t] for t in _ints(op, "Intermediates")], np.int32)
            if op.IntermediatesLength()
            else None
        )
        custom = self._vector(op.CustomOptionsAsNumpy(), np.uint8) if op.CustomOptionsLength() else None
        options = self._options(op)
        tflite.OperatorStart(self.b)
        tflite.OperatorAddOpcodeIndex(self.b, opcode)
        tflite.OperatorAddInputs(self.b, inputs)
        tflite.OperatorAddOutputs(self.b, outputs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(self.b, op.BuiltinOptionsType())
            tflite.OperatorAddBuiltinOptions(self.b, options)
        if custom is not None:
            tflite.OperatorAddCustomOptions(self.b, custom)
            tflite.OperatorAddCustomOptionsFormat(self.b, op.CustomOptionsFormat())
        if inter is not None:
            tflite.OperatorAddIntermediates(self.b, inter)
        return tflite.OperatorEnd(self.b)

    def _opcode(self, code) -> int:
        custom = self._string(code.CustomCode())
        tflite.OperatorCodeStart(self.b)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(self.b, code.DeprecatedBuiltinCode())
        if custom is not None:
            tflite.OperatorCodeAddCustomCode(self.b, custom)
        tflite.OperatorCodeAddVersion(self.b, code.Version())
        tflite.OperatorCodeAddBuiltinCode(self.b, code.BuiltinCode())
        return tflite.OperatorCodeEnd(self.b)

    def _table_vector(self, start, offsets: list[int]) -> int:
        start(self.b, len(offsets))
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def build(self, sub, op_indices: list[int], inputs: list[int], outputs: list[int]) -> bytes:
        ops = [sub.Operators(i) for i in op_indices]
        order: list[int] = []  # old tensor indices in first-use order
        for t in (
            inputs
            + [t for op in ops for t in _ints(op, "Inputs") + _ints(op, "Outputs") + _ints(op, "Intermediates")]
            + outputs
        ):
            if t >= 0 and t not in order:
                order.append(t)
        tensor_map = {t: k for k, t in enumerate(order)}
        buffer_map: dict[int, int] = {}  # old buffer -> new; 0 stays the empty buffer
        for t in order:
            old = sub.Tensors(t).Buffer()
            if old != 0 and old not in buffer_map:
                buffer_map[old] = len(buffer_map) + 1
        code_map: dict[int, int] = {}
        for op in ops:
            code_map.setdefault(op.OpcodeIndex(), len(code_map))

        buffers = [self._buffer(0)] + [self._buffer(old) for old in buffer_map]
        tensors = [self._tensor(sub.Tensors(t), buffer_map.get(sub.Tensors(t).Buffer(), 0)) for t in order]
        operators = [self._operator(op, code_map[op.OpcodeIndex()], tensor_map) for op in ops]
        codes = [self._opcode(self.model.OperatorCodes(old)) for old in code_map]
        tensors_vec = self._table_vector(tflite.SubGraphStartTensorsVector, tensors)
        ops_vec = self._table_vector(tflite.SubGraphStartOperatorsVector, operators)
        in_vec = self._vector([tensor_map[t] for t in inputs], np.int32)
        out_vec = self._vector([tensor_map[t] for t in outputs], np.int32)
        name = self._string(sub.Name())
        tflite.SubGraphStart(self.b)
        tflite.SubGraphAddTensors(self.b, tensors_vec)
        tflite.SubGraphAddInputs(self.b, in_vec)
        tflite.SubGraphAddOutputs(self.b, out_vec)
        tflite.SubGraphAddOperators(self.b, ops_vec)
        if name is not None:
            tflite.SubGraphAddName(self.b, name)
        subgraph = tflite.SubGraphEnd(self.b)
        subgraphs_vec = self._table_vector(tflite.ModelStartSubgraphsVector, [subgraph])
        codes_vec = self._table_vector(tflite.ModelStartOperatorCodesVector, codes)
        buffers_vec = self._table_vector(tflite.ModelStartBuffersVector, buffers)
        desc = self._string(self.model.Description())
        tflite.ModelStart(self.b)
        tflite.ModelAddVersion(self.b, _VERSION)
        tflite.ModelAddOperatorCodes(self.b, codes_vec)
        tflite.ModelAddSubgraphs(self.b, subgraphs_vec)
        if desc is not None:
            tflite.ModelAddDescription(self.b, desc)
        tflite.ModelAddBuffers(self.b, buffers_vec)
        self.b.Finish(tflite.ModelEnd(self.b), file_identifier=b"TFL3")
        return bytes(self.b.Output())


def tensor_names(raw: bytes) -> list[str]:
    """Subgraph 0's tensor names as zoflash shows them: an unnamed tensor is 'tensor<index>'."""
    return _names(tflite.Model.GetRootAs(raw, 0).Subgraphs(0))


def _names(sub) -> list[str]:
    return [
        (sub.Tensors(i).Name() or b"").decode("utf-8", "replace") or f"tensor{i}" for i in range(sub.TensorsLength())
    ]


def split_tflite(raw: bytes, tensor: str) -> SplitModel:
    """Cut the model `raw` (a checked, readable .tflite) at the tensor named `tensor`."""
    model = tflite.Model.GetRootAs(raw, 0)
    if model.SubgraphsLength() != 1:
        raise SplitError(
            f"the model has {model.SubgraphsLength()} subgraphs (control flow or resource "
            "variables): only single-subgraph models can be split"
        )
    sub = model.Subgraphs(0)
    names = _names(sub)
    hits = [i for i, n in enumerate(names) if n == tensor]
    if not hits:
        raise SplitError(f"no tensor named '{tensor}' in the model (`zoflash inspect` lists the tensors)")
    if len(hits) > 1:
        raise SplitError(f"{len(hits)} tensors are named '{tensor}': the cut is ambiguous")
    cut = hits[0]
    prefix_ops, suffix_ops = _parts(sub, cut)
    prefix = _Writer(model, raw).build(sub, prefix_ops, _ints(sub, "Inputs"), [cut])
    suffix = _Writer(model, raw).build(sub, suffix_ops, [cut], _ints(sub, "Outputs"))
    return SplitModel(tensor, prefix, suffix, prefix_ops, suffix_ops)
