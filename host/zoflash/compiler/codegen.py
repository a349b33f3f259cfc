"""Render a CompiledModel into C sources through Jinja2 templates.

Python makes C *tokens* here (identifiers, literals, address expressions, array bodies) and
the `.j2` templates make C *structure*. Every name that comes from the model file reaches C
only through `c_comment` or `c_string`, so no tensor name can inject code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import jinja2
import numpy as np

from zoflash import __version__
from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.ops import KERNELS
from zoflash.errors import PrefixError

_C_TYPES = {
    "int8": "int8_t",
    "int32": "int32_t",
    "float32": "float",
    "int16": "int16_t",
    "uint8": "uint8_t",
    "int64": "int64_t",
}
_IO_DTYPES = {
    "int8": "ZO_INT8",
    "float32": "ZO_FLOAT32",
    "uint8": "ZO_UINT8",
    "int32": "ZO_INT32",
    "int16": "ZO_INT16",
}  # zo_dtype_t
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


# ---- token makers (used as Jinja filters) -------------------------------------------------


def c_identifier(text: str) -> str:
    """A safe C identifier from arbitrary text: [A-Za-z0-9_], not starting with a digit."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "model"
    if ident[0].isdigit():
        ident = "m_" + ident
    return ident[:48].lower()


# A model's C prefix names its files (<prefix>.c, <prefix>_weights.c, ...) and its global symbols in
# the bundle beside the runtime's, whose files and symbols all start with "zo_".
PREFIX_MAX_LENGTH = 48
RUNTIME_PREFIX = "zo"
PREFIX_RULES = (
    f"A prefix is a C identifier (ASCII letters, digits, '_') that starts with a letter, has at most "
    f"{PREFIX_MAX_LENGTH} characters and is neither '{RUNTIME_PREFIX}' nor starts with '{RUNTIME_PREFIX}_'"
)


def _reserved(prefix: str) -> bool:
    low = prefix.lower()  # file names differ only in case on some file systems
    return low == RUNTIME_PREFIX or low.startswith(RUNTIME_PREFIX + "_")


def check_prefix(prefix: str) -> str:
    """`prefix` when it can name a model's C files and symbols, else PrefixError saying why."""
    bad = sorted({c for c in prefix if not (c.isascii() and (c.isalnum() or c == "_"))})
    if not prefix:
        why = "it is empty"
    elif bad:
        why = (
            "it has "
            + " ".join(repr(c) for c in bad[:5])
            + (" (not ASCII)" if any(not c.isascii() for c in bad) else "")
        )
    elif prefix[0].isdigit():
        why = "it starts with a digit"
    elif not prefix[0].isalpha():
        why = f"it starts with {prefix[0]!r}"
    elif len(prefix) > PREFIX_MAX_LENGTH:
        why = f"it has {len(prefix)} characters"
    elif _reserved(prefix):
        why = f"'{RUNTIME_PREFIX}_' starts the names of the runtime's own files and functions (zo_trainer.c, ...)"
    else:
        return prefix
    raise PrefixError(f"prefix '{prefix}' cannot name the model's C files and functions: {why}. {PREFIX_RULES}")


def default_prefix(model_file: str) -> str:
    """The prefix a model gets from its file name when none is given: the stem as a C identifier,
    with 'm_' in front when it would start with the runtime's 'zo_'."""
    ident = c_identifier(Path(model_file).stem)
    return check_prefix(("m_" + ident)[:PREFIX_MAX_LENGTH] if _reserved(ident) else ident)


def c_comment(text: str) -> str:
    """Text safe inside /* */: printable ASCII only, no comment terminator, one line."""
    clean = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in str(text))
    return clean.replace("*/", "* /").replace("/*", "/ *")


def c_string(text: str) -> str:
    """A C string literal; everything outside [A-Za-z0-9 _.:/-] is an octal escape (also defeats trigraphs)."""
    out = []
    for byte in str(text).encode("utf-8"):
        ch = chr(byte)
        out.append(ch if re.match(r"[A-Za-z0-9 _.:/-]", ch) else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_int(value: int) -> str:
    value = int(value)
    if value == -(2**31):
        return "(-2147483647 - 1)"
    return str(value)


def c_float(value: float) -> str:
    """A float literal that round-trips the float32 value exactly."""
    v = float(np.float32(value))
    text = f"{v:.9g}"
    if "e" not in text and "." not in text and "inf" not in text and "nan" not in text:
        text += ".0"
    return text + "f"


def c_array(values, per_line: int = 16, indent: str = "    ") -> str:
    """The body of an array initializer, `per_line` values per line."""
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind == "f":
        items = [c_float(v) for v in flat]
    else:
        items = [c_int(v) for v in flat]
    lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
    return (",\n" + indent).join(lines)


# ---- render context -------------------------------------------------------------------------


@dataclass
class CArray:
    ctype: str
    name: str
    values: np.ndarray
    comment: str = ""
    attribute: str = "ZO_CONST_ATTR"

    @property
    def length(self) -> int:
        return int(np.asarray(self.values).size)


C_SIZES = {
    "int8_t": 1,
    "uint8_t": 1,
    "int16_t": 2,
    "uint16_t": 2,
    "int32_t": 4,
    "uint32_t": 4,
    "float": 4,
    "int64_t": 8,
}


@dataclass
class Blob:
    """A read-only array kept as a binary file of the bundle (<name>.bin) and linked as it is
    (zo_incbin.h): large data without C array text.  With an `offset` it is a slice of a file
    shared with other arrays (see pack_blobs)."""

    ctype: str
    name: str
    data: bytes
    comment: str = ""
    file: str = ""
    offset: int | None = None

    def __post_init__(self):
        self.file = self.file or f"{self.name}.bin"

    nbytes = property(lambda self: len(self.data))

    @property
    def length(self) -> int:
        return len(self.data) // C_SIZES[self.ctype]


@dataclass
class CField:
    name: str
    value: str


@dataclass
class CCall:
    comment: str
    function: str
    struct: str
    params_name: str
    fields: list[CField]
    arrays: list[CArray]
    args: list[str]
    pointer_lists: list[CArray] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)  # the large parameter arrays, linked from <prefix>_params.bin


# --- constant arrays as binary sections ---
# Constant arrays of at least this many bytes are linked from a .bin file of the bundle instead of
# C text: the generated sources stay kilobytes, the small arrays stay readable.
BLOB_MIN_BYTES = 256


def as_blob(array: CArray, prefix: str) -> Blob | None:
    """A constant array large enough to link from a binary file, as a Blob named under the model's
    prefix (a global symbol: models linked together must not clash); None to keep it as text."""
    values = np.ascontiguousarray(array.values)
    if values.nbytes < BLOB_MIN_BYTES:
        return None
    name = array.name if array.name.startswith(prefix + "_") else f"{prefix}_{array.name}"
    return Blob(array.ctype, name, values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes(), array.comment)


def pack_blobs(blobs: list[Blob], file: str) -> bytes:
    """One binary file holding these arrays one after the other; each Blob gets its slice."""
    offset = 0
    for b in blobs:
        b.file, b.offset = file, offset
        offset += b.nbytes
    return b"".join(b.data for b in blobs)


# --- end constant arrays as binary sections ---


def _ctype(dtype: str) -> str:
    if dtype not in _C_TYPES:
        raise ValueError(f"no C type for {dtype}")
    return _C_TYPES[dtype]


class _Names:
    """C names for one model, all under the model prefix."""

    def __init__(self, prefix: str):
        if not _IDENT.match(prefix):
            raise ValueError(f"invalid C prefix {prefix!r}")
        self.prefix = prefix
        self.arena = f"{prefix}_arena"
        self.state = f"{prefix}_state"

    def constant(self, index: int) -> str:
        return f"{self.prefix}_t{index}"

    def pretrained(self, index: int) -> str:
        """The read-only initial values of trainable tensor `index` (copied to RAM by <prefix>_init)."""
        return f"{self.prefix}_t{index}_pretrained"

    def params(self, step_no: int) -> str:
        return f"op{step_no}"


def _address(model: CompiledModel, names: _Names, tensor: int | None, const: bool) -> str:
    """A C expression for the data of a tensor, typed for a kernel argument."""
    if tensor is None:
        return "NULL"
    root = model.root[tensor]
    t = model.graph.tensors[root]
    ctype = _ctype(model.graph.tensors[tensor].dtype)
    qual = "const " if const and not t.is_variable else ""  # a kernel updates a state in place
    if t.is_constant:
        return names.constant(root)
    array, offset = (
        (names.state, model.state_offset[root]) if t.is_variable else (names.arena, model.arena_offset[root])
    )
    if ctype == "int8_t":
        return f"&{array}[{offset}]"
    return f"({qual}{ctype} *)(void *)&{array}[{offset}]"


def _step_call(model: CompiledModel, names: _Names, n: int, step) -> CCall:
    info = KERNELS.get(step.kernel)
    pname = names.params(n)
    fields, arrays, blobs = [], [], []
    for key, value in step.params.items():
        if value is None:  # an optional pointer: NULL
            continue
        if isinstance(value, np.ndarray):
            array = CArray(_ctype(str(value.dtype)), f"{pname}_{key}", value)
            blob = as_blob(array, names.prefix)
            (blobs if blob else arrays).append(blob or array)
            fields.append(CField(key, (blob or array).name))
        elif isinstance(value, float):
            fields.append(CField(key, c_float(value)))
        else:
            fields.append(CField(key, c_int(value)))
    args, pointer_lists = [], []
    n_args = len(step.args)
    for k, arg in enumerate(step.args):
        is_output = k == n_args - 1  # by convention the output comes last
        if isinstance(arg, tuple):
            lname = f"{pname}_{'outputs' if is_output else 'inputs'}"
            base = _ctype(model.graph.tensors[arg[0]].dtype)
            ctype = f"{base} *const" if is_output else f"const {base} *const"
            pointer_lists.append(CArray(ctype, lname, [_address(model, names, t, not is_output) for t in arg]))
            args.append(lname)
        else:
            args.append(_address(model, names, arg, not is_output))
    g = model.graph
    op = step.op
    ins = ", ".join(f"'{g.tensors[i].name}'" for i in op.inputs if i >= 0 and not g.tensors[i].is_constant)
    outs = ", ".join(f"'{g.tensors[i].name}'" for i in op.outputs)
    comment = c_comment(f"op {op.index} {op.type}: {ins} -> {outs}")
    return CCall(
        comment=comment,
        function=info.function,
        struct=info.struct,
        params_name=pname,
        fields=fields,
        arrays=arrays,
        args=args,
        pointer_lists=pointer_lists,
        blobs=blobs,
    )


def _io(model: CompiledModel, names: _Names, indices) -> list[dict]:
    out = []
    for i in indices:
        t = model.graph.tensors[i]
        q = model.io_quantization(i)
        scale, zp = (q.scale, q.zero_point) if q is not None and not q.per_channel else (0.0, 0)
        out.append(
            dict(
                name=c_string(t.name),
                comment=c_comment(t.name),
                dtype=_IO_DTYPES[t.dtype],
                ctype=_ctype(t.dtype),
                rank=len(t.shape),
                shape=", ".join(str(d) for d in t.shape) or "0",
                bytes=t.nbytes,
                scale=c_float(scale),
                zero_point=zp,
                offset=model.arena_offset[model.root[i]],
            )
        )
    return out


def _reset_value(t) -> int:
    return t.quant.zero_point if t.dtype == "int8" and t.quant is not None else 0


def _state(model: CompiledModel) -> list[dict]:
    """What the reset writes into each variable tensor: TFLM's ResetVariableTensors fills an int8
    one with its zero point, any other type with zeros."""
    out = []
    for r, off in sorted(model.state_offset.items(), key=lambda item: item[1]):
        t = model.graph.tensors[r]
        out.append(dict(offset=off, bytes=t.nbytes, value=_reset_value(t), comment=c_comment(t.describe())))
    return out


def _initial(model: CompiledModel, names: _Names) -> list[dict]:
    """The values CALL_ONCE's init subgraph gives the variables, where they differ from the reset's fill
    (TFLM writes them at the first invoke; its reset fills with the zero point and does not re-run it)."""
    out = []
    for r, off in sorted(model.state_offset.items(), key=lambda item: item[1]):
        t = model.graph.tensors[r]
        if t.initial is not None and (t.initial != _reset_value(t)).any():
            out.append(
                dict(
                    offset=off,
                    bytes=t.nbytes,
                    array=CArray(
                        _ctype(t.dtype), f"{names.prefix}_initial{len(out)}", t.initial, c_comment(t.describe())
                    ),
                )
            )
    return out


def render_context(
    model: CompiledModel,
    prefix: str,
    source_name: str,
    source_sha256: str,
    trainable: dict[int, np.ndarray] | None = None,
) -> dict:
    """`trainable`: root tensor index -> initial values of the tensors that train (in RAM)."""
    names = _Names(prefix)
    g = model.graph
    trainable = trainable or {}
    constants, weight_blobs, in_ram = [], [], []
    for r in model.constants:
        t = g.tensors[r]
        q = ""
        if t.quant is not None:
            q = (
                f", {len(t.quant.scales)} scale(s), axis {t.quant.axis}"
                if t.quant.per_channel
                else f", scale {t.quant.scale:.9g}, zero point {t.quant.zero_point}"
            )
        about = f"'{t.name}' {t.dtype}{list(t.shape)}{q}"
        cname, values = names.constant(r), t.data
        if r in trainable:  # in RAM, filled by <prefix>_init from a read-only copy placed with the weights
            cname, values = names.pretrained(r), trainable[r]
            ram = CArray(
                _ctype(t.dtype), names.constant(r), values, c_comment(f"{about}, trainable"), attribute="ZO_TRAIN_ATTR"
            )
            in_ram.append(dict(array=ram, pretrained=cname))
            about = f"pretrained values of {ram.name}: {about}"
        array = CArray(_ctype(t.dtype), cname, values, c_comment(about))
        blob = as_blob(array, prefix)
        (weight_blobs if blob else constants).append(blob or array)
    calls = [_step_call(model, names, n, s) for n, s in enumerate(model.program.steps)]
    param_blobs = [b for call in calls for b in call.blobs]
    blob_files = {
        name: pack_blobs(blobs, name)
        for name, blobs in ((f"{prefix}_weights.bin", weight_blobs), (f"{prefix}_params.bin", param_blobs))
        if blobs
    }
    return dict(
        prefix=prefix,
        guard=prefix.upper(),
        version=__version__,
        source=c_comment(source_name),
        source_sha256=source_sha256,
        arena_size=model.arena_array_size,
        arena_name=names.arena,
        arena_linkage="" if trainable else "static ",
        plan_strategy=model.plan.strategy,
        state_name=names.state,
        state_size=model.state_size,
        state=_state(model),
        initial=_initial(model, names),
        weights_bytes=model.weights_bytes,
        constants=constants,
        weight_blobs=weight_blobs,
        trainable=in_ram,
        blob_files=blob_files,
        calls=calls,
        inputs=_io(model, names, g.inputs),
        outputs=_io(model, names, g.outputs),
    )


# ---- templates ------------------------------------------------------------------------------


def template_env() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(resources.files("zoflash.firmware_templates")))
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(c_array=c_array, c_comment=c_comment, c_string=c_string, c_int=c_int, c_float=c_float)
    return env


MODEL_TEMPLATES = {  # template -> output file name pattern
    "model.h.j2": "{prefix}.h",
    "model.c.j2": "{prefix}.c",
    "model_weights.c.j2": "{prefix}_weights.c",
}


def render_model(
    model: CompiledModel,
    prefix: str,
    source_name: str,
    source_sha256: str,
    trainable: dict[int, np.ndarray] | None = None,
) -> dict[str, bytes]:
    """File name -> bytes of the generated model sources and of the binary files they link
    (<prefix>_weights.bin, <prefix>_params.bin: the constant arrays of at least BLOB_MIN_BYTES)."""
    env = template_env()
    ctx = render_context(model, prefix, source_name, source_sha256, trainable)
    files = {
        out.format(prefix=prefix): env.get_template(tpl).render(**ctx).encode() for tpl, out in MODEL_TEMPLATES.items()
    }
    return {**files, **ctx["blob_files"]}
