"""Boards are data: one TOML file per board in `boards/`, id == file stem, strictly validated."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources

from .errors import BoardError

# key -> (type, required); nested tables have their own schema. Unknown keys are errors.
_SCHEMA = {
    "id": (str, True),
    "name": (str, True),
    "family": (str, True),
    "port": (str, True),
    "description": (str, False),
    "toolchain": ({
        "cc": (str, True),
        "cflags": (list, True),
        "ldflags": (list, False),
    }, True),
}


@dataclass(frozen=True)
class Toolchain:
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Board:
    id: str
    name: str
    family: str
    port: str
    toolchain: Toolchain
    description: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)


def _check(table: dict, schema: dict, where: str) -> None:
    for key in table:
        if key not in schema:
            raise BoardError(f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(schema))})")
    for key, (kind, required) in schema.items():
        if key not in table:
            if required:
                raise BoardError(f"{where}: missing required key '{key}'")
            continue
        value = table[key]
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                raise BoardError(f"{where}: '{key}' must be a table")
            _check(value, kind, f"{where} [{key}]")
        elif kind is int and isinstance(value, bool) or not isinstance(value, kind):
            raise BoardError(f"{where}: '{key}' must be {kind.__name__}, got {type(value).__name__}")
        elif kind is list and not all(isinstance(v, str) for v in value):
            raise BoardError(f"{where}: '{key}' must be a list of strings")


def _board_files() -> dict:
    root = resources.files("zoflash.board_files")
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".toml")}


def parse_board(text: str, where: str, expected_id: str | None = None) -> Board:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BoardError(f"{where}: not valid TOML ({exc})") from None
    _check(data, _SCHEMA, where)
    if expected_id is not None and data["id"] != expected_id:
        raise BoardError(f"{where}: id '{data['id']}' must equal the file name '{expected_id}'")
    tc = data["toolchain"]
    return Board(id=data["id"], name=data["name"], family=data["family"], port=data["port"],
                 description=data.get("description", ""),
                 toolchain=Toolchain(cc=tc["cc"], cflags=tuple(tc["cflags"]), ldflags=tuple(tc.get("ldflags", ()))),
                 raw=data)


def list_boards() -> list[Board]:
    return [load_board(b) for b in sorted(_board_files())]


def load_board(board_id: str) -> Board:
    files = _board_files()
    if board_id not in files:
        known = ", ".join(sorted(files)) or "none"
        raise BoardError(f"unknown board '{board_id}' (known boards: {known}; see `zoflash boards`)")
    return parse_board(files[board_id].read_text(), f"board file {board_id}.toml", expected_id=board_id)
