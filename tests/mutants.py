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


# ------------------------------------------------------------------- the other inputs users give
# Datasets (.npz), telemetry byte streams, zoflash.toml project files, board files, command lines:
# each mutant is (bytes or arguments, what changed), drawn from a seeded random.Random.

ODD_NUMBERS = (0, -1, 1, 2**31, -(2**63), 1e30, -1e-30, float("nan"), float("inf"))


def damaged_bytes(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The bytes cut short, flipped, with a run repeated or random bytes inserted."""
    kind = rng.choice(("truncate", "flip", "duplicate", "insert"))
    if kind == "truncate" or not raw:
        k = rng.randrange(len(raw) + 1)
        return raw[:k], f"cut to {k} of {len(raw)} bytes"
    if kind == "flip":
        return flip_bytes(raw, rng)
    start = rng.randrange(len(raw))
    if kind == "duplicate":
        end = min(len(raw), start + rng.randrange(1, 64))
        return raw[:end] + raw[start:end] + raw[end:], f"bytes {start}..{end} repeated"
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
    return raw[:start] + junk + raw[start:], f"{len(junk)} random bytes inserted at {start}"


def npz_bytes(arrays: dict) -> bytes:
    """The arrays as an .npz file's bytes (object arrays pickled, as numpy.savez writes them)."""
    import io

    import numpy as np

    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _odd_array(a, rng: random.Random):
    """`a` with another dtype, rank, size or content: what a user's own dataset script may save."""
    import numpy as np

    kind = rng.choice(
        ("object", "complex", "bool", "str", "uint64", "float16", "flat", "extra axis", "transposed", "fewer",
         "empty", "one", "nan", "inf", "huge", "negative", "float labels", "scalar", "bytes")
    )  # fmt: skip
    if kind == "object":
        return np.array(list(a.reshape(len(a), -1)[:4]) + [None], dtype=object), kind
    if kind == "complex":
        return a.astype(np.complex64) + 1j, kind
    if kind == "bool":
        return a.astype(bool), kind
    if kind == "str":
        return a.astype(str), kind
    if kind == "uint64":
        return np.abs(a).astype(np.uint64) + np.uint64(2**63), kind
    if kind == "float16":
        return a.astype(np.float16), kind
    if kind == "flat":
        return a.reshape(-1), kind
    if kind == "extra axis":
        return a[..., None], kind
    if kind == "transposed":
        return a.T, kind
    if kind == "fewer":
        return a[: max(1, len(a) // 3)], kind
    if kind == "empty":
        return a[:0], kind
    if kind == "one":
        return a[:1], kind
    if kind == "scalar":
        return np.asarray(a.reshape(-1)[0]), kind
    if kind == "bytes":
        return np.frombuffer(a.tobytes()[:64], np.uint8), kind
    b = a.astype(np.float64).copy()
    k = rng.randrange(b.size) if b.size else 0
    if b.size:
        b.flat[k] = {"nan": np.nan, "inf": -np.inf, "huge": 1e300, "negative": -b.flat[k] - 1, "float labels": 0.5}[
            kind
        ]
    return (b.astype(a.dtype) if kind in ("negative",) else b), f"{kind} at {k}"


def dataset_mutants(files: list[Path], count: int, seed: int):
    """`count` (source, .npz bytes, what changed) mutants of dataset files, seeded: keys dropped or
    renamed, an array of another dtype, rank, size or content, labels out of range, a training
    split of one sample, or the file's bytes cut short or damaged."""
    import numpy as np

    rng = random.Random(seed)
    sources = {}
    for f in files:
        with np.load(f, allow_pickle=False) as npz:
            sources[f] = {k: npz[k] for k in npz.files}
    raw = {f: f.read_bytes() for f in files}
    for _ in range(count):
        f = rng.choice(files)
        arrays = dict(sources[f])
        kind = rng.choice(("drop", "rename", "array", "array", "array", "labels", "one sample", "bytes", "bytes"))
        key = rng.choice(sorted(arrays))
        if kind == "bytes":
            data, what = damaged_bytes(raw[f], rng)
            yield f, data, f"file {what}"
            continue
        if kind == "drop":
            del arrays[key]
            what = f"{key} dropped"
        elif kind == "rename":
            arrays[rng.choice((key.upper(), key + "_", "arr_0"))] = arrays.pop(key)
            what = f"{key} renamed"
        elif kind == "labels":
            y = arrays["y_train"].copy()
            value = rng.choice((-1, 2, 10, 65535, 2**40))
            y[rng.randrange(len(y))] = value
            arrays["y_train"], what = y, f"a y_train label = {value}"
        elif kind == "one sample":
            arrays["x_train"], arrays["y_train"] = arrays["x_train"][:1], arrays["y_train"][:1]
            what = "x_train, y_train of 1 sample"
        else:
            arrays[key], how = _odd_array(arrays[key], rng)
            what = f"{key} {how}"
        yield f, npz_bytes(arrays), what


def random_chunks(data: bytes, rng: random.Random) -> list[bytes]:
    """`data` cut at random places (chunks of 0 to 300 bytes, as a serial port hands them over)."""
    out, pos = [], 0
    while pos < len(data):
        n = rng.choice((0, 1, 2, 7, 64, rng.randrange(300)))
        out.append(data[pos : pos + n])
        pos += n
    return out


def stream_mutants(frames: list[bytes], count: int, seed: int):
    """`count` (stream bytes, what changed) mutants of a telemetry stream given as its chunks (whole
    frames and text): bit flips, truncation, duplication, random bytes inserted, chunks swapped or
    lost, seeded."""
    rng = random.Random(seed)
    for _ in range(count):
        parts = list(frames)
        kind = rng.choice(("damage", "damage", "swap", "lose", "repeat", "several"))
        if kind == "swap":
            i, j = rng.randrange(len(parts)), rng.randrange(len(parts))
            parts[i], parts[j] = parts[j], parts[i]
            yield b"".join(parts), f"chunks {i} and {j} swapped"
        elif kind == "lose":
            i = rng.randrange(len(parts))
            del parts[i]
            yield b"".join(parts), f"chunk {i} lost"
        elif kind == "repeat":
            i = rng.randrange(len(parts))
            parts.insert(i, parts[i])
            yield b"".join(parts), f"chunk {i} repeated"
        elif kind == "several":
            data, whats = b"".join(parts), []
            for _ in range(rng.randrange(2, 8)):
                data, what = damaged_bytes(data, rng)
                whats.append(what)
            yield data, "; ".join(whats)
        else:
            data, what = damaged_bytes(b"".join(parts), rng)
            yield data, what


def toml_mutants(texts: list[str], count: int, seed: int, known: dict[str, list[str]]):
    """`count` (source index, file bytes, what changed, the key changed or None) mutants of TOML files, seeded: a key
    unknown, misspelled or of another type, a value out of range, a table renamed, broken
    syntax, a huge file, bytes that are not UTF-8. `known`: table -> keys to draw from."""
    rng = random.Random(seed)
    odd_values = ("-1", "0", "1e400", "-2147483649", "9223372036854775807", '""', '"auto"', '"x"', "true",
                  "[1, 2]", "{ a = 1 }", "1979-05-27", "nan", "inf", "0.5", '"\u00e9\u4e2d"')  # fmt: skip
    for _ in range(count):
        i = rng.randrange(len(texts))
        text = texts[i]
        table = rng.choice(sorted(known))
        key = rng.choice(known[table]) if known[table] else "x"
        kind = rng.choice(("value", "value", "value", "unknown key", "table", "syntax", "huge", "utf8", "bytes"))
        changed = None
        if kind == "value":
            value = rng.choice(odd_values)
            out, what, changed = _set_key(text, table, key, value), f"[{table}] {key} = {value}", key
        elif kind == "unknown key":
            name = rng.choice([n for n in (key + "s", key.replace("_", "-"), "stepz", "\u00e9t\u00e9") if n != key])
            out, what, changed = _set_key(text, table, f'"{name}"', "1"), f"[{table}] unknown key {name}", name
        elif kind == "table":
            name = rng.choice((table + "s", table.upper(), f"{table}.extra", "[x]"))
            out, what = text.replace(f"[{table}]", f"[{name}]", 1), f"[{table}] renamed [{name}]"
        elif kind == "syntax":
            k = rng.randrange(len(text) + 1)
            junk = rng.choice(("=", "[", '"', "]]", "\n= 1\n", "\x00", "a = 1\na = 2\n"))
            out, what = text[:k] + junk + text[k:], f"{junk!r} inserted at {k}"
        elif kind == "huge":
            out, what = text + "\n# " + "x" * 2_000_000 + "\n", "a 2 MB comment appended"
        elif kind == "utf8":
            k = rng.randrange(len(text) + 1)
            data = text.encode()
            yield i, data[:k] + b"\xff\xfe" + data[k:], f"bytes ff fe at {k}", None
            continue
        else:
            data, what = damaged_bytes(text.encode(), rng)
            yield i, data, what, None
            continue
        yield i, out.encode(), what, changed


def _set_key(text: str, table: str, key: str, value: str) -> str:
    """`text` with `key = value` in [table] (the first line of the key replaced, else one added)."""
    lines = text.splitlines()
    header = f"[{table}]" if table else None  # "": the top-level keys, before the first table
    start = -1 if header is None else next((n for n, line in enumerate(lines) if line.strip() == header), None)
    if start is None:
        return text + f"\n[{table}]\n{key} = {value}\n"
    for n in range(start + 1, len(lines)):
        if lines[n].startswith("["):
            break
        if lines[n].split("=")[0].strip() == key:
            lines[n] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    lines.insert(start + 1, f"{key} = {value}")
    return "\n".join(lines) + "\n"
