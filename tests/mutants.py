"""Mutated model files for the robustness tests: byte flips anywhere in the file, and fields of the
flatbuffer (op options, tensor shapes, quantization) set to odd values, written back with the TFLite
schema of tflite-micro (its flatbuffers object API). Seeded: the same seed gives the same mutants."""

from __future__ import annotations

import random
import struct
from pathlib import Path

ODD_INTS = (-1, 0, 2, 3, 7, 255, 32767, 32768, 65536, 524288, 2**31 - 1, -(2**31))


def schema():
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated

    return schema_py_generated


def unpack(raw: bytes):
    return schema().ModelT.InitFromPackedBuf(bytearray(raw), 0)


def pack(model) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def op_names(model) -> list[str]:
    """Each op's builtin name (DEPTHWISE_CONV_2D, ...), in order."""
    names = {v: k for k, v in vars(schema().BuiltinOperator).items() if not k.startswith("_")}
    codes = model.operatorCodes
    out = []
    for op in model.subgraphs[0].operators:
        code = codes[op.opcodeIndex]
        out.append(names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?"))
    return out


def with_option(raw: bytes, op_index: int, field: str, value) -> bytes:
    """The model with one builtin option of one op changed (field: the schema's camelCase name)."""
    model = unpack(raw)
    options = model.subgraphs[0].operators[op_index].builtinOptions
    if not hasattr(options, field):
        raise KeyError(f"op {op_index} has no option {field}")
    setattr(options, field, value)
    return pack(model)


def flip_bytes(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    data = bytearray(raw)
    changes = []
    for _ in range(rng.choice((1, 1, 2, 4))):
        k = rng.randrange(len(data))
        data[k] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256), data[k] ^ (1 << rng.randrange(8))))
        changes.append(f"byte {k} = {data[k]:#04x}")
    return bytes(data), ", ".join(changes)


def mutate_field(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One op option, tensor shape dimension or quantization parameter set to an odd value (drawn
    again when the value does not fit the field's type)."""
    for _ in range(20):
        try:
            return _mutate_field(raw, rng)
        except (TypeError, struct.error, OverflowError):  # e.g. 524288 for an int8 field
            continue
    return flip_bytes(raw, rng)


def _mutate_field(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    model = unpack(raw)
    graph = model.subgraphs[0]
    kind = rng.choice(("option", "option", "shape", "quantization"))
    if kind == "option":
        with_options = [i for i, op in enumerate(graph.operators) if op.builtinOptions is not None]
        if with_options:
            i = rng.choice(with_options)
            options = graph.operators[i].builtinOptions
            fields = sorted(k for k, v in vars(options).items() if isinstance(v, (int, float)))
            if fields:
                name = rng.choice(fields)
                old = getattr(options, name)
                if isinstance(old, bool):
                    new = not old
                elif isinstance(old, float):
                    new = rng.choice((0.0, -1.0, 1e-30, 1e30, old * 3))
                else:
                    new = rng.choice((*ODD_INTS, old + 1, old * 2))
                setattr(options, name, new)
                return pack(model), f"op {i} option {name} = {new!r}"
    if kind == "shape":
        t = rng.choice([t for t in graph.tensors if t.shape is not None and len(t.shape)])
        k = rng.randrange(len(t.shape))
        t.shape[k] = rng.choice((0, 1, 2, int(t.shape[k]) + 1, int(t.shape[k]) * 2, 65536))
        return pack(model), f"tensor '{t.name.decode()}' shape {list(t.shape)}"
    quantized = [t for t in graph.tensors if t.quantization is not None and t.quantization.scale is not None]
    t = rng.choice(quantized)
    q = t.quantization
    if rng.random() < 0.5:
        q.zeroPoint = [rng.choice((-129, 128, 255, -(2**31), 5)) for _ in q.zeroPoint]
        return pack(model), f"tensor '{t.name.decode()}' zero points {list(q.zeroPoint)[:3]}"
    q.scale = [rng.choice((0.0, -1.0, 1e-30, 1e30, float("inf"))) for _ in q.scale]
    return pack(model), f"tensor '{t.name.decode()}' scales {list(q.scale)[:3]}"


def mutants(files: list[Path], count: int, seed: int):
    """`count` (path, raw bytes, what changed) mutants of the given model files, seeded."""
    rng = random.Random(seed)
    sources = {f: f.read_bytes() for f in files}
    for _ in range(count):
        f = rng.choice(files)
        raw = sources[f]
        data, what = flip_bytes(raw, rng) if rng.random() < 0.4 else mutate_field(raw, rng)
        yield f, data, what
