"""The training spec is the one source of ids, names and limits: the C headers agree with it value
by value, and the import boundaries hold (the product never uses the Python reference, which
sees only the spec and the wire format)."""

from __future__ import annotations

import ast
import re
import struct
import subprocess
import sys
from pathlib import Path

from ccompile import TRAINING, ZO_MATH

from zoflash.spec import training as spec
from zoflash.spec import wire as protocol
from zoflash.spec import wire_c

PACKAGE = Path(spec.__file__).resolve().parent.parent
HEADERS = (
    TRAINING / "zo_sched.h",
    ZO_MATH / "zo_train_math.h",
    TRAINING / "zo_trainer.h",
    TRAINING / "zo_telemetry.h",
    TRAINING / "zo_wire.h",
    TRAINING / "zo_command.h",
)
_NUMBER = r"(?:0x[0-9A-Fa-f]+|\d+)u?"


def _c_constants() -> dict[str, int]:
    """Every `#define NAME number` and enum member `NAME = number` / `NAME = 1u << k` of the headers."""
    out: dict[str, int] = {}
    for header in HEADERS:
        text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.S)
        for name, value in re.findall(rf"^#define\s+(ZO_\w+)\s+\(?(-?{_NUMBER})\)?\s*$", text, flags=re.M):
            out[name] = int(value.rstrip("u"), 0)
        for body in re.findall(r"(?:typedef\s+)?enum\s*\w*\s*\{(.*?)\}", text, flags=re.S):
            for name, value, shift in re.findall(rf"(ZO_\w+)\s*=\s*({_NUMBER})(?:\s*<<\s*(\d+))?", body):
                out[name] = int(value.rstrip("u"), 0) << int(shift or 0)
    return out


def _ids(table) -> dict[str, int]:
    return dict(table) if isinstance(table, dict) else {name: i for i, name in enumerate(table)}


def _expected() -> dict[str, int]:
    want = {}
    for table in spec.C_PREFIX:
        ids = spec.ACTION_BITS if table == "ACTIONS" else _ids(getattr(spec, table))
        want.update((spec.c_name(table, name), v) for name, v in ids.items())
    want.update((f"ZO_DONE_{name.upper().replace('-', '_')}", i) for i, name in enumerate(spec.DONE_REASONS))
    want.update(
        ZO_SCHED_Q_LIMIT=spec.Q_LIMIT,
        ZO_SCHED_N_KINDS=len(spec.SCHEDULERS),
        ZO_SCHED_N_STATES=len(spec.STATES),
        ZO_SCHED_N_EVENTS=len(spec.EVENTS),
        ZO_TRAIN_EPS_MIN=spec.EPS_RANGE[0],
        ZO_TRAIN_EPS_MAX=spec.EPS_RANGE[1],
        ZO_W_MAX=spec.INT8_WEIGHT_LIMIT - spec.EPS_RANGE[0],
        ZO_CMD_FIRST=spec.COMMAND_FIRST,
        ZO_LR_W_RMS_DIV=spec.LR_W_RMS_DIV,
        ZO_LR_TRIAL_MAX_MOVES=spec.LR_TRIAL_MAX_MOVES,
        ZO_LR_TRIAL_SHARE=spec.LR_TRIAL_SHARE,
        ZO_LR_TRIAL_BACKOFF=spec.LR_TRIAL_BACKOFF,
        ZO_LR_DECAY_TAIL_DIV=spec.LR_DECAY_TAIL_DIV,
        ZO_TM_VERSION=protocol.VERSION,
        ZO_TM_SYNC0=protocol.SYNC[0],
        ZO_TM_SYNC1=protocol.SYNC[1],
        ZO_TM_MAX_PAYLOAD=protocol.MAX_PAYLOAD,
        ZO_TM_WEIGHTS_CHUNK=protocol.WEIGHTS_CHUNK,
    )
    want.update((f"ZO_TM_{kind.upper()}", tid) for kind, (tid, _) in protocol.LAYOUTS.items())
    want.update((f"ZO_TM_SIZE_{kind.upper()}", st.size) for kind, st in protocol.STRUCTS.items())
    want.update(ZO_TM_HEAD=protocol.HEAD, ZO_TM_FIXED_MAX=max(st.size for st in protocol.STRUCTS.values()))
    want.update((f"ZO_CMD_SIZE_{kind.upper()}", st.size) for kind, st in protocol.COMMAND_STRUCTS.items())
    return want


def test_c_headers_match_the_spec():
    got = _c_constants()
    want = _expected()
    missing = sorted(set(want) - set(got))
    assert not missing, f"not in the C headers: {missing}"
    wrong = {name: (got[name], v) for name, v in want.items() if got[name] != v}
    assert not wrong, f"C value != spec value: {wrong}"
    # ... and the C has no id the spec lacks
    enumerated = tuple(spec.C_PREFIX.values()) + ("ZO_DONE_",)
    not_parser_limits = {"ZO_CMD_MAX_PAYLOAD", "ZO_CMD_POLL_BYTES"}
    extra = sorted(n for n in got if n.startswith(enumerated) and n not in want and n not in not_parser_limits)
    assert not extra, f"C ids the spec does not have: {extra}"


def test_generated_wire_files_are_current():
    """zo_wire.h/.c are committed renderings of protocol.LAYOUTS: regenerate them after a layout change."""
    for name, text in wire_c.render().items():
        assert (TRAINING / name).read_bytes() == text.encode(), f"{name} is stale: run {wire_c.COMMAND}"


def test_generated_structs_follow_the_layouts():
    """Each fixed frame's C struct declares the layout's fields in wire order with their C types, and
    its encoder writes them in that order, each with its size."""
    header, source = (TRAINING / "zo_wire.h").read_text(), (TRAINING / "zo_wire.c").read_text()
    sizes = {"B": 1, "H": 2, "I": 4, "Q": 8}
    ctype = {"B": "uint8_t", "H": "uint16_t", "I": "uint32_t", "Q": "uint64_t", "f": "float", "8s": "uint8_t"}
    for kind in ("hello", "step", "eval", "event", "done", "status", "ack", "need", "boundary"):
        body = re.search(r"typedef struct \{([^}]*)\} zo_tm_%s_t;" % kind, header).group(1)
        fields = re.findall(r"^\s*(\w+) (\w+)(?:\[(\d+)\])?;", body, flags=re.M)
        want = protocol.LAYOUTS[kind][1]
        assert [(t, n) for t, n, _ in fields] == [(ctype[c], n) for n, c in want], kind
        assert [int(k) for _, n, k in fields if k] == [8 for _, c in want if c == "8s"], kind
        enc = re.search(r"void zo_tm_%s\(const zo_tm_%s_t \*m\)\n\{(.*?)\n\}" % (kind, kind), source, flags=re.S)
        puts = re.findall(r"zo_tm_put(\w*)\(&f, m->(\w+)(?:, (\d)u)?", enc.group(1))
        assert [n for _, n, _ in puts] == [n for n, _ in want], kind
        for (fn, n, k), (_, c) in zip(puts, want):
            assert (fn, k) == (("_f32", "") if c == "f" else ("_bytes", "") if c == "8s" else ("", str(sizes[c]))), n


def test_parser_reads_every_kind_of_constant():
    got = _c_constants()
    assert got["ZO_ACT_WINDOW_RESET"] == 1 << 10 and got["ZO_TM_SYNC0"] == 0xA5 and got["ZO_SCHED_Q_LIMIT"] == 64
    assert got["ZO_ROUND_STOCHASTIC"] == 2 and got["ZO_DONE_GUARD"] == 5 and got["ZO_EV_EPOCH_DOWN"] == 16


def test_spec_is_plain_data():
    tree = ast.parse(Path(spec.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"__future__"}, imported
    for table in (
        "SCHEDULERS",
        "STATES",
        "EVENTS",
        "ACTIONS",
        "ROUNDINGS",
        "LR_SCALINGS",
        "LR_DECAYS",
        "LOSSES",
        "DONE_REASONS",
        "ACK_RESULTS",
        "ROLLBACK_CAUSES",
        "WEIGHTS_PARTS",
    ):
        names = getattr(spec, table)
        assert len(set(names)) == len(names), table
    assert len(set(spec.COMMANDS.values())) == len(spec.COMMANDS) and min(spec.COMMANDS.values()) >= spec.COMMAND_FIRST
    assert set(spec.SCHED_DEFAULTS) == set(spec.SCHEDULERS)
    # every scheduler parameter but the q range (and a flag) has its limits, and only those
    params = set().union(*spec.SCHED_DEFAULTS.values(), *spec.SCHED_TRAINER_PARAMS.values())
    assert set(spec.SCHED_LIMITS) == params - {"q0", "q_min", "q_max", "calib_q", "stop_when_capped"}


# ---------------------------------------------------------------------------- import boundaries


def _imports(path: Path, skip_type_checking: bool = True) -> list[str]:
    """Modules a file imports (anywhere, lazily too; `from zoflash.a import b` as zoflash.a.b when b is
    a module); with skip_type_checking the imports under `if TYPE_CHECKING:` are left out."""
    tree = ast.parse(path.read_text())
    skipped = set()
    if skip_type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [_module(node.module, a.name) for a in node.names]
    return out


def _module(module: str, name: str) -> str:
    """`from module import name`: module.name when that is a zoflash module, else module."""
    candidate = PACKAGE.parent / f"{module}.{name}".replace(".", "/")
    is_module = module.startswith("zoflash") and (candidate.with_suffix(".py").exists() or candidate.is_dir())
    return f"{module}.{name}" if is_module else module


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_product_never_imports_the_reference():
    # the engine registry runs the reference trainer on request; validate() runs the TFLM oracle
    allowed = {
        ("workflows/simulate.py", "zoflash.reference.trainer"),
        ("workflows/inference.py", "zoflash.reference.tflm"),
        ("workflows/replay.py", "zoflash.reference.zo_math"),  # replay applies a log's updates with the oracle's maths
    }
    found = {
        (_rel(p), m)
        for p in PACKAGE.rglob("*.py")
        if "reference" not in p.relative_to(PACKAGE).parts
        for m in _imports(p, skip_type_checking=False)
        if m == "zoflash.reference" or m.startswith("zoflash.reference.")
    }
    assert found <= allowed, sorted(found - allowed)


def test_reference_imports_only_the_spec_and_the_format():
    shared = ("zoflash.spec.training", "zoflash.spec.wire")
    for path in sorted((PACKAGE / "reference").glob("*.py")):
        for m in _imports(path):
            top = m.split(".")[0]
            if top != "zoflash":
                assert (
                    top in sys.stdlib_module_names
                    or top == "numpy"
                    or (path.name == "tflm.py" and top == "tflite_micro")
                ), f"{_rel(path)} imports {m}"
                continue
            ok = m.startswith("zoflash.reference") or m in shared or (path.name == "tflm.py" and m == "zoflash.errors")
            assert ok, f"{_rel(path)} imports {m}"
    # the format module itself reads only the spec
    assert [m for m in _imports(Path(protocol.__file__)) if m.startswith("zoflash")] == ["zoflash.spec.training"]


def test_loading_the_reference_loads_no_product_module():
    code = (
        "import sys, zoflash.reference.trainer, zoflash.reference.schedulers, zoflash.reference.forward;"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('zoflash'))))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    shared = {"zoflash", "zoflash.spec", "zoflash.spec.training", "zoflash.spec.wire"}
    assert {m for m in loaded if not m.startswith("zoflash.reference")} == shared


def test_generated_command_readers_follow_the_layouts():
    """The device reads the sample and restore heads at the offsets and widths COMMAND_LAYOUTS gives."""
    source = (TRAINING / "zo_wire.c").read_text()
    for kind, layout in protocol.COMMAND_LAYOUTS.items():
        body = re.search(
            r"void zo_cmd_%s_read\(const uint8_t \*p, zo_cmd_%s_t \*out\)\n\{(.*?)\n\}" % (kind, kind), source, re.S
        )
        got = re.findall(r"out->(\w+) = \(\w+\)zo_cmd_get\(p \+ (\d+), (\d)u\);", body.group(1))
        want, at = [], 0
        for field, code in layout:
            size = struct.calcsize("<" + code)
            want.append((field, str(at), str(size)))
            at += size
        assert got == want, kind
        assert protocol.COMMAND_STRUCTS[kind].size == at
