"""The C side of the telemetry wire format, rendered from its one declaration (wire.LAYOUTS).

Writes firmware_templates/runtime/training/zo_wire.h (the wire constants, frame type ids, payload
sizes and the zo_tm_<frame>_t payload structs; the fixed head of the sample and restore commands,
wire.COMMAND_LAYOUTS) and zo_wire.c (one zo_tm_<frame> encoder per fixed-layout frame, writing the
fields in wire order with zo_telemetry.c's frame helpers; a reader and a writer per command head).  Both
are committed static runtime files; tests/test_spec.py fails when they differ from this output:

    python -m zoflash.spec.wire_c firmware_templates/runtime/training

Frames with a variable tail (weights, log, checkpoint, updates) get their type id and fixed-part size
here; their encoders stay hand-written in zo_telemetry.c.
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
from pathlib import Path

from zoflash.spec import wire

COMMAND = "python -m zoflash.spec.wire_c firmware_templates/runtime/training"
VARIABLE = ("weights", "log", "checkpoint", "updates")  # a data or text tail follows the fixed fields

# struct code -> C type; 'Ns' is uint8_t[N]
C_TYPES = {
    "B": "uint8_t",
    "H": "uint16_t",
    "I": "uint32_t",
    "Q": "uint64_t",
    "b": "int8_t",
    "h": "int16_t",
    "i": "int32_t",
    "q": "int64_t",
    "f": "float",
}

# What the ids and fields mean, as comments in the header (the layout itself is LAYOUTS).
FRAME_NOTES = {
    "status": "answer to a status command (zo_command.h)",
    "ack": "one per command received",
    "need": "--data-source stream: the device asks for samples (zo_stream.h)",
    "checkpoint": "a chunk of a checkpoint image (zo_trainer.h, ZO_CKPT_*)",
    "boundary": "CRC-32 of the boundary activations of the first test sample, once after hello",
    "updates": "the applied updates of consecutive steps (update log, zoflash replay)",
    "crc": "CRC-32 of the trainable tensors' values, before done and at the end of a push (zoflash push)",
    "continual": "--mode continual: a decision or a serving window (zo_continual.h, ZO_CL_EV_*)",
}
STRUCT_NOTES = {
    "need": "--data-source stream: the samples the device asks for (zo_stream.h).",
    "boundary": "Boundary checksum: the first test sample's boundary activations, once after hello.",
}
FIELD_NOTES = {
    "hello": {
        "scheduler": "0 fixed, 1 plateau, 2 critical, 3 adazeta",
        "rounding": "zo_rounding_t: 0 split16, 1 nearest, 2 stochastic",
        "lr_auto": "1: lr = auto (calibrated on the device)",
        "budget": "prefix + suffix sample-passes",
        "n_tensors": "trainable tensors",
        "model_sha256": "first 8 bytes of the model file's SHA-256",
        "loss_kind": "zo_loss_t: 0 softmax-ce, 1 sigmoid-bce, 2 mse",
        "headroom": "bits the trained layers were re-quantized with at build time (--headroom)",
    },
    "step": {"state": "scheduler state id (docs/training.md, Schedulers)", "flags": "ZO_TM_FLAG_*"},
    "eval": {"val_correct": "the validation split (correct, count, accuracy, loss above: the test set)"},
    "event": {"kind": "ZO_TM_EV_*", "code": "scheduler event code"},
    "done": {"reason": "ZO_TM_DONE_*"},
    "status": {
        "step": "steps completed",
        "q": "q of the next step",
        "state": "scheduler state id",
        "paused": "1 while paused by a command",
        "calibrating": "1 while the next step calibrates lr",
        "lr": "lr of the next step (0 while calibrating), as in step frames",
        "model_sha256": "as in hello: identifies the model after a late attach",
        "headroom": "as in hello: the scales of a weights dump after a late attach",
    },
    "ack": {
        "step": "steps completed when the command was handled",
        "command_seq": "the command frame's seq",
        "command": "its type",
        "result": "ZO_TM_ACK_*",
    },
    "need": {
        "cursor": "the stream index of the sample wanted next",
        "offset": "bytes of it already received",
        "count": "samples wanted before the next step, that one included",
        "total": "bytes of one sample record",
        "window": "bytes the device can take in flight (its receive buffer)",
    },
    "boundary": {
        "crc32": "zlib's CRC-32 of the boundary bytes (feature-cache order)",
        "expected_crc32": "the host simulation's (zoflash's C prefix), with ZO_TM_BOUNDARY_EXPECTED",
        "bytes": "boundary bytes per sample",
        "boundary_flags": "ZO_TM_BOUNDARY_*",
    },
}


def _banner(name: str, what: str) -> str:
    return (
        f"/* {name} - {what}\n"
        f" *\n"
        f" * GENERATED from host/zoflash/spec/wire.py (LAYOUTS) by\n"
        f" *     {COMMAND}\n"
        f" * Do not edit: change LAYOUTS and regenerate (tests/test_spec.py fails when this file is stale).\n"
        f" * Static file, copied verbatim into each bundle; the frame format is in zo_telemetry.h.\n"
        f" */\n"
    )


def _array(code: str) -> int | None:
    """N of an 'Ns' code (bytes), None for a scalar code."""
    m = re.fullmatch(r"(\d+)s", code)
    return int(m.group(1)) if m else None


def _declaration(field: str, code: str) -> str:
    n = _array(code)
    if n is not None:
        return f"uint8_t {field}[{n}];"
    if code not in C_TYPES:
        raise ValueError(f"no C type for struct code '{code}' (field {field})")
    return f"{C_TYPES[code]} {field};"


def _put(field: str, code: str) -> str:
    if _array(code) is not None:
        return f"zo_tm_put_bytes(&f, m->{field}, sizeof m->{field});"
    if code == "f":
        return f"zo_tm_put_f32(&f, m->{field});"
    # signed fields go out as their two's complement bytes (the cast sign-extends, put keeps the low bytes)
    value = f"(uint64_t)m->{field}" if code.islower() else f"m->{field}"
    return f"zo_tm_put(&f, {value}, {struct.calcsize('<' + code)}u);"


def _define(name: str, value: str, note: str = "") -> str:
    line = f"#define {name:<24} {value}"
    return f"{line} /* {note} */" if note else line


def fixed_frames() -> list[str]:
    return [k for k in wire.LAYOUTS if k not in VARIABLE]


def render_header() -> str:
    out = [
        _banner("zo_wire.h", "the telemetry frame layouts: ids, payload sizes, payload structs."),
        "#ifndef ZO_WIRE_H",
        "#define ZO_WIRE_H",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        _define("ZO_TM_VERSION", f"{wire.VERSION}u"),
        _define("ZO_TM_SYNC0", f"0x{wire.SYNC[0]:02X}u"),
        _define("ZO_TM_SYNC1", f"0x{wire.SYNC[1]:02X}u"),
        _define("ZO_TM_HEAD", f"{wire.HEAD}u", "sync, version, type, seq, len"),
        _define("ZO_TM_MAX_PAYLOAD", f"{wire.MAX_PAYLOAD}u", "bytes; longer log text is truncated"),
        _define("ZO_TM_WEIGHTS_CHUNK", f"{wire.WEIGHTS_CHUNK}u", "data bytes per weights frame, at most"),
        _define("ZO_TM_UPDATES_CHUNK", f"{wire.UPDATES_CHUNK}u", "tail bytes per updates frame, at most"),
        "",
        "/* Update log: the header byte of each step in an updates frame's tail. */",
        *[
            _define(f"ZO_TM_UPDATE_{k}", f"0x{getattr(wire, 'UPDATE_' + k):02X}u")
            for k in ("APPLIED", "Q", "RESTORE", "SNAPSHOT", "TRIAL", "FACTORY", "PACKED")
        ],
        _define("ZO_TM_UPDATE_RICE_K", f"{wire.UPDATE_RICE_K}u", "packed coefficients: the exponent offset's low bits"),
        "",
        "/* Frame types. */",
    ]
    out += [_define(f"ZO_TM_{k.upper()}", f"{tid}u", FRAME_NOTES.get(k, "")) for k, (tid, _) in wire.LAYOUTS.items()]
    out += ["", "/* Payload bytes of each frame (of the fields before the tail, for weights, log and checkpoint). */"]
    out += [_define(f"ZO_TM_SIZE_{k.upper()}", f"{wire.STRUCTS[k].size}u") for k in wire.LAYOUTS]
    out += [
        _define("ZO_TM_FIXED_MAX", f"{max(s.size for s in wire.STRUCTS.values())}u", "the largest of them"),
        "",
        "/* Payload structs: fields in wire order (the struct layout itself is never sent).",
        " * Times are zo_port_time_us() values filled in by the caller. */",
    ]
    for k in fixed_frames():
        if k in STRUCT_NOTES:
            out.append(f"/* {STRUCT_NOTES[k]} */")
        out.append("typedef struct {")
        for field, code in wire.LAYOUTS[k][1]:
            note = FIELD_NOTES.get(k, {}).get(field)
            decl = f"    {_declaration(field, code)}"
            out.append(f"{decl:<26} /* {note} */" if note else decl)
        out += [f"}} zo_tm_{k}_t;", ""]
    out.append("/* One frame each, fields in wire order (zo_wire.c). */")
    out += [f"void zo_tm_{k}(const zo_tm_{k}_t *m);" for k in fixed_frames()]
    out += [""] + render_commands_header()
    out += ["#ifdef __cplusplus", "}", "#endif", "", "#endif /* ZO_WIRE_H */", ""]
    return "\n".join(out)


def _get(field: str, code: str, offset: int) -> str:
    if _array(code) is not None or code not in ("B", "H", "I", "Q"):
        raise ValueError(f"command field {field}: only unsigned integers are read ({code})")
    return f"out->{field} = ({C_TYPES[code]})zo_cmd_get(p + {offset}, {struct.calcsize('<' + code)}u);"


def _set(field: str, code: str, offset: int) -> str:
    return f"zo_cmd_set(p + {offset}, m->{field}, {struct.calcsize('<' + code)}u);"


def _offsets(layout) -> list[tuple[str, str, int]]:
    out, at = [], 0
    for field, code in layout:
        out.append((field, code, at))
        at += struct.calcsize("<" + code)
    return out


def render_commands_header() -> list[str]:
    out = [
        "/* Command payloads that begin with fixed fields (a data tail after them): their sizes, the",
        " * fields, and a reader and a writer each (zo_wire.c). */",
    ]
    for k in wire.COMMAND_LAYOUTS:
        out.append(_define(f"ZO_CMD_SIZE_{k.upper()}", f"{wire.COMMAND_STRUCTS[k].size}u", "the data tail follows"))
    for k, layout in wire.COMMAND_LAYOUTS.items():
        out.append("typedef struct {")
        out += [f"    {_declaration(field, code)}" for field, code in layout]
        out.append(f"}} zo_cmd_{k}_t;")
    for k in wire.COMMAND_LAYOUTS:
        out.append(
            f"void zo_cmd_{k}_read(const uint8_t *p, zo_cmd_{k}_t *out);  /* p: ZO_CMD_SIZE_{k.upper()} bytes */"
        )
        out.append(f"void zo_cmd_{k}_write(uint8_t *p, const zo_cmd_{k}_t *m);")
    return out + [""]


def render_commands_source() -> list[str]:
    out = [
        "",
        "static uint64_t zo_cmd_get(const uint8_t *p, uint32_t bytes)",
        "{",
        "    uint64_t v = 0u;",
        "    for (uint32_t i = bytes; i-- > 0u;) {",
        "        v = (v << 8) | p[i];",
        "    }",
        "    return v;",
        "}",
        "",
        "static void zo_cmd_set(uint8_t *p, uint64_t v, uint32_t bytes)",
        "{",
        "    for (uint32_t i = 0u; i < bytes; ++i) {",
        "        p[i] = (uint8_t)(v >> (8u * i));",
        "    }",
        "}",
    ]
    for k, layout in wire.COMMAND_LAYOUTS.items():
        fields = _offsets(layout)
        out += ["", f"void zo_cmd_{k}_read(const uint8_t *p, zo_cmd_{k}_t *out)", "{"]
        out += [f"    {_get(f, c, o)}" for f, c, o in fields]
        out += ["}", "", f"void zo_cmd_{k}_write(uint8_t *p, const zo_cmd_{k}_t *m)", "{"]
        out += [f"    {_set(f, c, o)}" for f, c, o in fields]
        out.append("}")
    return out


def render_source() -> str:
    out = [
        _banner("zo_wire.c", "the fixed-layout frame encoders (see zo_wire.h)."),
        "#include <stddef.h>",
        "",
        '#include "zo_telemetry.h"',
    ]
    for k in fixed_frames():
        out += [
            "",
            f"void zo_tm_{k}(const zo_tm_{k}_t *m)",
            "{",
            "    zo_tm_frame_t f;",
            f"    zo_tm_begin(&f, ZO_TM_{k.upper()});",
        ]
        out += [f"    {_put(field, code)}" for field, code in wire.LAYOUTS[k][1]]
        out += ["    zo_tm_finish(&f, NULL, 0u);", "}"]
    out += render_commands_source()
    return "\n".join(out) + "\n"


def render() -> dict[str, str]:
    """File name -> text of the generated C files."""
    return {"zo_wire.h": render_header(), "zo_wire.c": render_source()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zoflash.spec.wire_c", description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="firmware_templates/runtime/training")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    args = ap.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = args.out_dir / name
        if args.check:
            if not path.exists() or path.read_bytes() != text.encode():
                stale.append(name)
        else:
            path.write_bytes(text.encode())
    if stale:
        print(f"stale: {', '.join(stale)} (run {COMMAND})", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
