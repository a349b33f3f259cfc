"""Boards are data: one TOML file per board in `boards/`, id == file stem, strictly validated.

A board names its port (`firmware_templates/ports/<port>/`, described by the port's `port.toml`).
The port's kind decides which tables the board must have: a `host` port needs only the
toolchain; a `firmware` port also needs the CPU, the memory regions and what is placed in them,
the console UART, the boot modes and the flash methods. Every unknown or missing key is an
error naming the file and the key. Adding a board for an existing port is a new TOML file only.

Users may type a family name (`stm32n6`): it selects the family's board marked
`reference = true` (see resolve_board).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from importlib.abc import Traversable  # (only for the type: deprecated at run time from 3.12)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli is the same parser
    import tomli as tomllib


from zoflash.errors import BoardError
from zoflash.registry import Registry, UnknownName
from zoflash.targets.npu import board_types


class Enum(tuple):
    """A string key whose value must be one of these."""


LIST = "list of strings"
STR_OR_LIST = "a string or a list of strings"

# Schemas: key -> (kind, required). kind: a Python type, LIST, Enum, a nested schema (dict:
# a table) or [schema] (an array of tables). Unknown keys are errors.
_TOOLCHAIN = {
    "cc": (str, True),
    "cflags": (LIST, True),
    "ldflags": (LIST, False),
    "objcopy": (str, False),
    "size": (str, False),
    "install": (str, False),  # how to get the toolchain, shown when a tool is missing
}
_CPU = {
    "core": (str, True),
    "clock_hz": (int, True),  # the clock SysTick counts at while the firmware runs
}
_REGION = {
    "name": (str, True),
    "origin": (int, True),
    "size": (int, True),
    "kind": (Enum(("ram", "flash")), True),
    "enable": (LIST, False),  # the port's memory switches (port.toml `memories`) to turn on before use
    "description": (str, False),
}
PLACEMENT_KEYS = ("code", "rodata", "weights", "train_data", "data", "bss", "arena", "stack")
WRITABLE_PLACEMENTS = ("data", "bss", "arena", "stack")
# a region, or the regions to choose from, fastest first (the plan takes the first with room)
_PLACEMENT = {**{k: (STR_OR_LIST, True) for k in PLACEMENT_KEYS}, "stack_bytes": (int, True)}
_CONSOLE = {
    "uart": (str, True),
    "baud": (int, True),
    "clock_hz": (int, True),  # the UART's kernel clock: the baud divisor is computed from it
    "tx": (str, False),
    "rx": (str, False),
    "usb": (LIST, False),  # "VVVV:PPPP" of the USB serial adapter, to find the port
    "description": (str, False),
}
# --- flash boot ---
# [flash_boot]: the boot ROM copies a signed image from the external flash into `image` (at most
# its size); the placement keys given here replace [placement]'s candidates in flash boot, so
# large weights and data may stay in a flash region that the port maps (its `enable` switch).
BOOT_MODES = ("dev", "flash")  # --boot (the [boot] switch positions: 'development', 'flash')
_FLASH_BOOT = {
    "image": (str, True),  # the RAM region the boot ROM copies the image to (= placement code)
    "fsbl": (str, True),  # the flash region the signed image is written to
    "description": (str, False),
    **{k: (STR_OR_LIST, False) for k in PLACEMENT_KEYS},
}
# --- end flash boot ---
# --- spans ---
# [[span]]: memory regions that lie next to each other (in address order; a gap between two is
# memory of the part the board file vouches for) and that one part, the arena, may cover as a
# whole when no single region holds it, in the boot modes that leave them free (`boot`). The
# plan then keeps every other part out of them (budget.py).
_SPAN = {
    "name": (str, True),
    "regions": (LIST, True),
    "boot": (LIST, True),  # the boot modes (BOOT_MODES) in which nothing but the plan uses these regions
    "description": (str, False),
}
SPAN_PLACEMENTS = ("arena",)  # the parts a span may hold
# --- end spans ---
# --- NPU ---
# [npu]: the board's neural processing unit; `zoflash build --npu CONFIG` runs the frozen prefix on it.
# [[npu.pools]] (Neural-ART): the memory the NPU owns, the pools of ST's memory-pool profile (.mpool);
# the CPU's plan never places anything there (budget.py).
_NPU_POOL = {
    "name": (str, True),  # the pool's name in the profile; its weight blob is network_atonbuf.<name>.raw
    "region": (str, True),  # the [[memory]] region holding it
    "origin": (int, True),
    "size": (int, True),
    "use": (Enum(("activations", "constants", "cache")), True),  # cache: the NPU cache's RAM, no pool
    "boot": (Enum(("any", "flash")), False),  # flash: only in flash boot (the NOR holds the constants)
    "description": (str, False),
}
_NPU = {
    "type": (str, True),  # a type a registered NPU backend serves (npu.board_types, checked when read)
    "base": (int, True),  # register base address
    "irq": (int, True),  # device interrupt number (NVIC)
    "configs": (LIST, True),  # accelerator configurations (Vela's --accelerator-config) the part has
    "regions": (LIST, True),  # [[memory]] regions the NPU's AXI ports reach (weights, scratch, I/O)
    "verified": (bool, True),  # false: the facts are from a public example, not checked on the part
    "description": (str, False),
    "pools": ([_NPU_POOL], False),  # Neural-ART
}
# --- end NPU ---
# --- checkpoint store ---
# [checkpoint_store]: a [[memory]] region of kind 'flash' that nothing is placed in, where the
# port's checkpoint hooks (zo_port.h) keep the training checkpoints (link.ld names it
# __zo_ckpt_store); two slots of half its size, whole sectors each.
CHECKPOINT_STORE_ALIGN = 8192  # two slots of whole 4 KiB sectors
_CHECKPOINT_STORE = {
    "region": (str, True),
    "description": (str, False),
}
# --- end checkpoint store ---
# [[flash]]: the keys every entry has; each method's own keys (its `settings`) and rules come
# from its runner, registered in FLASH_METHODS by targets/runners/ (imported by the targets
# package before any board file is read, so the registry is complete when a board is checked).
_FLASH_COMMON = {
    "name": (str, True),
    "method": (str, True),  # a registered flash method (checked against FLASH_METHODS when a board is read)
    "description": (str, False),
    "boot": (str, False),  # boot mode (a key of [boot]) while loading
    "run_boot": (str, False),  # boot mode to run the loaded firmware, if different
}


class FlashMethod(Protocol):
    """A flash method as a board file sees it: a Runner class of targets/runners/."""

    settings: ClassVar[dict]  # its [[flash]] keys: key -> (kind, required), as the schemas here
    needs_boot: ClassVar[bool]  # an entry must name the boot mode while loading ('boot')

    @classmethod
    def check_entry(cls, entry: dict, where: str) -> None:
        """Rules of its entries beyond the schema (BoardError)."""


FLASH_METHODS: Registry[type[FlashMethod]] = Registry("flash method", "see docs/flashing.md")


def _flash_schema() -> dict:
    """The [[flash]] table schema over the registered methods: every method key is optional at
    first; _check_firmware checks them per method."""
    methods = {**_FLASH_COMMON, "method": (Enum(FLASH_METHODS.names()), True)}
    return {**methods, **{k: (kind, False) for m in FLASH_METHODS.values() for k, (kind, _) in m.settings.items()}}


_SCHEMA = {
    "id": (str, True),
    "name": (str, True),
    "family": (str, True),
    "port": (str, True),
    "description": (str, False),
    "reference": (bool, False),
    "emulated": (bool, False),
    "toolchain": (_TOOLCHAIN, True),
    "cpu": (_CPU, False),
    "memory": ([_REGION], False),
    "placement": (_PLACEMENT, False),
    "console": (_CONSOLE, False),
    "boot": (dict, False),  # boot mode name -> switch positions (free keys, string values)
    "flash_boot": (_FLASH_BOOT, False),
    "span": ([_SPAN], False),  # spans
    "npu": (_NPU, False),  # NPU
    "checkpoint_store": (_CHECKPOINT_STORE, False),  # checkpoint store
    "flash": ([_FLASH_COMMON], False),  # checked with _flash_schema() (the registered methods)
}


def _schema() -> dict:
    """The board schema with the registered flash methods and NPU types (the registries are complete
    once the targets package is imported, which is before this module's first use)."""
    npu = {**_NPU, "type": (Enum(board_types()), True)}
    return {**_SCHEMA, "npu": (npu, False), "flash": ([_flash_schema()], False)}


FIRMWARE_TABLES = ("cpu", "memory", "placement", "console", "flash")
_PORT_SCHEMA = {
    "kind": (Enum(("host", "firmware")), True),
    "description": (str, False),
    "base": (str, False),  # shared files (static C, Makefile and linker templates) from ports/<base>/
    "consoles": (LIST, False),  # the console UARTs the port drives
    "code_bytes": (int, False),  # pre-compile estimate: machine code + small constants,
    "code_bytes_inference": (int, False),  # of the training firmware and of the inference library
    "memories": (LIST, False),  # memory switches the start-up code turns on: bit i of __zo_enable_memories
    "device_headers": (LIST, False),  # vendor headers --device-headers must provide (device_headers.py)
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USB = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$")


def _type_name(kind) -> str:
    if isinstance(kind, Enum):
        return "one of " + ", ".join(f"'{v}'" for v in kind)
    if isinstance(kind, dict):
        return "a table"
    if isinstance(kind, list):
        return "an array of tables ([[...]])"
    return (
        kind
        if isinstance(kind, str)
        else {int: "an integer", str: "a string", bool: "true or false"}.get(kind, kind.__name__)
    )


def _check_value(value, kind, where: str, key: str) -> None:
    bad = False
    if isinstance(kind, Enum):
        bad = value not in kind
    elif isinstance(kind, dict):
        if not isinstance(value, dict):
            bad = True
        else:
            _check(value, kind, f"{where} [{key}]")
    elif isinstance(kind, list):
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            bad = True
        else:
            for i, item in enumerate(value):
                _check(item, kind[0], f"{where} [[{key}]] #{i + 1}")
    elif kind == LIST:
        bad = not isinstance(value, list) or not all(isinstance(v, str) for v in value)
    elif kind == STR_OR_LIST:
        bad = not (
            isinstance(value, str) or (isinstance(value, list) and value and all(isinstance(v, str) for v in value))
        )
    elif kind is int:
        bad = isinstance(value, bool) or not isinstance(value, int)
    else:
        bad = not isinstance(value, kind)
    if bad:
        raise BoardError(f"{where}: '{key}' must be {_type_name(kind)}, got {value!r}")


def _check(table: dict, schema: dict, where: str) -> None:
    for key in table:
        if key not in schema:
            raise BoardError(f"{where}: unknown key '{key}' (allowed: {', '.join(sorted(schema))})")
    for key, (kind, required) in schema.items():
        if key not in table:
            if required:
                raise BoardError(f"{where}: missing required key '{key}'")
            continue
        _check_value(table[key], kind, where, key)


@dataclass(frozen=True)
class Toolchain:
    cc: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...] = ()
    objcopy: str = ""
    size: str = ""
    install: str = ""


@dataclass(frozen=True)
class Region:
    name: str
    origin: int
    size: int
    kind: str
    description: str = ""
    enable: tuple[str, ...] = ()  # port memory switches it needs
    members: tuple[str, ...] = ()  # a span ([[span]]): the regions it covers
    boot: tuple[str, ...] = ()  # a span: the boot modes that leave its regions free

    @property
    def end(self) -> int:
        return self.origin + self.size


@dataclass(frozen=True)
class Port:
    name: str
    kind: str
    base: str = ""
    consoles: tuple[str, ...] = ()
    code_bytes: int = 0
    code_bytes_inference: int = 0
    description: str = ""
    memories: tuple[str, ...] = ()
    device_headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Board:
    id: str
    name: str
    family: str
    port: str
    toolchain: Toolchain
    port_kind: str = "host"
    description: str = ""
    reference: bool = False
    emulated: bool = False
    cpu: dict = field(default_factory=dict)
    memory: tuple[Region, ...] = ()
    spans: tuple[Region, ...] = ()  # [[span]]: runs of adjacent regions one part may cover
    placement: dict = field(default_factory=dict)  # key -> the region it is in (the first candidate until planned)
    candidates: dict = field(default_factory=dict)  # key -> the regions it may go to, fastest first
    console: dict = field(default_factory=dict)
    boot: dict = field(default_factory=dict)
    flash: tuple[dict, ...] = ()
    flash_boot: dict = field(default_factory=dict)
    npu: dict = field(default_factory=dict)  # [npu]
    checkpoint_store: str = ""  # [checkpoint_store] region; "" : none
    boot_mode: str = "dev"  # BOOT_MODES: the placement rules in use (for_boot)
    device_includes: tuple[str, ...] = ()  # --device-headers: include folders of the vendor headers
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_firmware(self) -> bool:
        return self.port_kind == "firmware"

    def region(self, name: str) -> Region:
        return next(r for r in self.memory + self.spans if r.name == name)

    def spans_in_use(self) -> list[Region]:
        """The spans the placement puts a part in (link.ld declares them beside the regions)."""
        used = {self.placement.get(k) for k in PLACEMENT_KEYS}
        return [s for s in self.spans if s.name in used]

    def region_of(self, what: str) -> Region:
        """The region a placement key (code, weights, arena, ...) puts its bytes in."""
        return self.region(self.placement[what])

    @property
    def usb_ids(self) -> list[tuple[int, int]]:
        pairs = (s.split(":") for s in self.console.get("usb", ()))  # 'VVVV:PPPP', checked when read
        return [(int(vendor, 16), int(product, 16)) for vendor, product in pairs]


# ------------------------------------------------------------------------------------ ports


def _ports_root():
    return resources.files("zoflash.firmware_templates") / "ports"


def load_port(name: str, board_where: str = "") -> Port:
    root = _ports_root() / name
    where = f"port file ports/{name}/port.toml"
    if not root.is_dir() or not (root / "port.toml").is_file():
        known = ", ".join(sorted(p.name for p in _ports_root().iterdir() if (p / "port.toml").is_file()))
        raise BoardError(
            f"{board_where + ': ' if board_where else ''}port '{name}' does not exist in this zoflash (ports: {known})"
        )
    try:
        data = tomllib.loads((root / "port.toml").read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BoardError(f"{where}: not valid TOML ({exc})") from None
    _check(data, _PORT_SCHEMA, where)
    if data.get("base") and not (_ports_root() / data["base"]).is_dir():
        raise BoardError(f"{where}: base '{data['base']}' is not a directory under ports/")
    return Port(
        name=name,
        kind=data["kind"],
        base=data.get("base", ""),
        consoles=tuple(data.get("consoles", ())),
        code_bytes=data.get("code_bytes", 0),
        code_bytes_inference=data.get("code_bytes_inference", 0),
        description=data.get("description", ""),
        memories=tuple(data.get("memories", ())),
        device_headers=tuple(data.get("device_headers", ())),
    )


# ------------------------------------------------------------------------------- semantics


def _check_memory(data: dict, where: str) -> tuple[Region, ...]:
    regions = []
    for i, r in enumerate(data["memory"]):
        w = f"{where} [[memory]] #{i + 1} ('{r['name']}')"
        if not _NAME.match(r["name"]):
            raise BoardError(f"{w}: 'name' must be a C-style identifier (letters, digits, _), got '{r['name']}'")
        if r["size"] <= 0 or r["origin"] < 0 or r["origin"] + r["size"] > 1 << 32:
            raise BoardError(
                f"{w}: origin 0x{r['origin']:X} and size {r['size']} must lie inside the 32-bit "
                "address space, with size > 0"
            )
        regions.append(
            Region(r["name"], r["origin"], r["size"], r["kind"], r.get("description", ""), tuple(r.get("enable", ())))
        )
    names = [r.name for r in regions]
    for n in names:
        if names.count(n) > 1:
            raise BoardError(f"{where}: [[memory]] name '{n}' is defined {names.count(n)} times")
    spans = sorted(regions, key=lambda r: r.origin)
    for a, b in zip(spans, spans[1:]):
        if b.origin < a.end:
            raise BoardError(
                f"{where}: [[memory]] regions '{a.name}' [0x{a.origin:08X}, 0x{a.end:08X}) and "
                f"'{b.name}' [0x{b.origin:08X}, 0x{b.end:08X}) overlap"
            )
    for key, choices in placement_candidates(data["placement"]).items():
        for name in choices:
            if name not in names:
                raise BoardError(
                    f"{where}: [placement] '{key}' names region '{name}', which [[memory]] does not "
                    f"define (regions: {', '.join(names)})"
                )
            if key in WRITABLE_PLACEMENTS and regions[names.index(name)].kind != "ram":
                raise BoardError(
                    f"{where}: [placement] '{key}' must be in a region of kind 'ram', but "
                    f"'{name}' is '{regions[names.index(name)].kind}'"
                )
        if key == "stack" and any(regions[names.index(n)].enable for n in choices):
            raise BoardError(f"{where}: [placement] 'stack' must be in a region that is on at reset (no 'enable')")
        if key == "code" and any(regions[names.index(n)].origin % 1024 for n in choices):
            raise BoardError(
                f"{where}: [placement] 'code' regions must start 1 KiB aligned (the image, vector table first, "
                "starts at the origin of the one the plan takes)"
            )
    place = data["placement"]
    if place["stack_bytes"] < 256 or place["stack_bytes"] % 8:
        raise BoardError(
            f"{where}: [placement] 'stack_bytes' must be a multiple of 8 and at least 256, got {place['stack_bytes']}"
        )
    return tuple(regions)


def placement_candidates(place: dict) -> dict[str, tuple[str, ...]]:
    """[placement] as key -> candidate regions (a single region is a list of one)."""
    return {k: (place[k],) if isinstance(place[k], str) else tuple(place[k]) for k in PLACEMENT_KEYS}


def _check_enables(memory: tuple[Region, ...], port: Port, where: str) -> None:
    for r in memory:
        for switch in r.enable:
            if switch not in port.memories:
                raise BoardError(
                    f"{where}: [[memory]] '{r.name}' needs memory switch '{switch}', which port "
                    f"'{port.name}' does not have (its switches: {', '.join(port.memories) or 'none'})"
                )


def _check_firmware(data: dict, port: Port, where: str) -> None:
    for table in FIRMWARE_TABLES:
        if table not in data:
            raise BoardError(
                f"{where}: missing required key '{table}' (boards of the '{port.name}' port are firmware targets)"
            )
    tc = data["toolchain"]
    for key in ("objcopy", "size"):
        if key not in tc:
            raise BoardError(f"{where} [toolchain]: missing required key '{key}' (needed for firmware)")
    if not 0 < data["cpu"]["clock_hz"] < 2**32:  # the C takes it as a 32-bit unsigned constant
        raise BoardError(f"{where} [cpu]: 'clock_hz' must be a frequency in Hz from 1 to 4294967295")
    con = data["console"]
    if port.consoles and con["uart"] not in port.consoles:
        raise BoardError(
            f"{where} [console]: 'uart' is '{con['uart']}' but port '{port.name}' drives only "
            f"{', '.join(port.consoles)}"
        )
    if con["baud"] <= 0 or con["clock_hz"] < 16 * con["baud"] or con["clock_hz"] >= 2**32:
        raise BoardError(f"{where} [console]: 'baud' must be positive and 'clock_hz' at least 16 x baud and below 2^32")
    for usb in con.get("usb", ()):
        if not _USB.match(usb):
            raise BoardError(f"{where} [console]: 'usb' entries are 'VVVV:PPPP' in hexadecimal, got '{usb}'")
    boot = data.get("boot", {})
    for mode, text in boot.items():
        if not isinstance(text, str):
            raise BoardError(f"{where} [boot]: '{mode}' must be a string (the switch positions), got {text!r}")
    if not data["flash"]:
        raise BoardError(f"{where}: [[flash]] must list at least one method")
    seen = set()
    for i, f in enumerate(data["flash"]):
        w = f"{where} [[flash]] #{i + 1} ('{f['name']}')"
        if f["name"] in seen:
            raise BoardError(f"{w}: name '{f['name']}' is used twice")
        seen.add(f["name"])
        method = FLASH_METHODS.get(f["method"])
        _check({k: v for k, v in f.items() if k not in _FLASH_COMMON}, method.settings, f"{w} (method {f['method']})")
        for key in ("boot", "run_boot"):
            if key in f and f[key] not in boot:
                raise BoardError(
                    f"{w}: '{key}' names boot mode '{f[key]}', which [boot] does not define "
                    f"(boot modes: {', '.join(boot) or 'none'})"
                )
        if method.needs_boot and "boot" not in f:
            raise BoardError(f"{w}: missing required key 'boot' (the boot mode while loading)")
        method.check_entry(f, w)


# --- flash boot ---
LOADED_PLACEMENTS = ("code", "rodata", "weights", "train_data")  # parts with contents in the image or the flash


def _check_flash_boot(data: dict, memory: tuple[Region, ...], where: str) -> None:
    """[flash_boot] names existing regions; in flash boot every part with contents is in the
    image or in a flash region (nothing else is there at run time), the image is the code region."""
    fb, w = data["flash_boot"], f"{where} [flash_boot]"
    by_name = {r.name: r for r in memory}
    for key in ("image", "fsbl"):
        if fb[key] not in by_name:
            raise BoardError(
                f"{w}: '{key}' names region '{fb[key]}', which [[memory]] does not define "
                f"(regions: {', '.join(by_name)})"
            )
    if by_name[fb["fsbl"]].kind != "flash":
        raise BoardError(
            f"{w}: 'fsbl' must be a region of kind 'flash', but '{fb['fsbl']}' is '{by_name[fb['fsbl']].kind}'"
        )
    place = {**data["placement"], **{k: v for k, v in fb.items() if k in PLACEMENT_KEYS}}
    if fb["image"] not in placement_candidates(place)["code"]:
        raise BoardError(f"{w}: the code must be placed in the image region '{fb['image']}'")
    place["code"] = fb["image"]  # the boot ROM copies the image there: the code goes nowhere else
    for key, choices in placement_candidates(place).items():
        for name in choices:
            if name not in by_name:
                raise BoardError(f"{w}: '{key}' names region '{name}', which [[memory]] does not define")
            if key in LOADED_PLACEMENTS and name != fb["image"] and by_name[name].kind != "flash":
                raise BoardError(
                    f"{w}: '{key}' may use only the image region '{fb['image']}' or flash regions "
                    f"(the boot ROM copies nothing else), but lists '{name}'"
                )


def for_boot(board: Board, mode: str) -> Board:
    """The board with the placement rules of a boot mode (BOOT_MODES): 'dev' as the board file's
    [placement]; 'flash' with [flash_boot]'s candidates instead."""
    if mode not in BOOT_MODES:
        raise BoardError(f"unknown boot mode '{mode}' (boot modes: {', '.join(BOOT_MODES)})")
    if mode == "dev":
        return board
    if not board.flash_boot:
        raise BoardError(
            f"board '{board.id}' has no flash boot ([flash_boot] in its board file): build it with --boot dev"
        )
    over = {k: v for k, v in board.flash_boot.items() if k in PLACEMENT_KEYS}
    over["code"] = board.flash_boot["image"]  # where the boot ROM copies the image
    candidates = placement_candidates({**board.candidates, **over})
    placement = {**{k: c[0] for k, c in candidates.items()}, "stack_bytes": board.placement["stack_bytes"]}
    return replace(board, candidates=candidates, placement=placement, boot_mode=mode)


# --- end flash boot ---


# --- spans ---
def _check_spans(data: dict, memory: tuple[Region, ...], where: str) -> tuple[Region, ...]:
    """[[span]]: RAM regions of the board, in address order, with no other region between them;
    the span is one region from the first one's origin to the last one's end."""
    by_name = {r.name: r for r in memory}
    spans: list[Region] = []
    for i, sp in enumerate(data.get("span", ())):
        w = f"{where} [[span]] #{i + 1} ('{sp['name']}')"
        if not _NAME.match(sp["name"]) or sp["name"] in by_name or sp["name"] in (s.name for s in spans):
            raise BoardError(f"{w}: 'name' must be a C-style identifier that no region or other span has")
        for mode in sp["boot"]:
            if mode not in BOOT_MODES:
                raise BoardError(f"{w}: 'boot' lists '{mode}' (boot modes: {', '.join(BOOT_MODES)})")
        if len(sp["regions"]) < 2:
            raise BoardError(f"{w}: 'regions' must list at least two regions")
        members = []
        for name in sp["regions"]:
            if name not in by_name or by_name[name].kind != "ram":
                raise BoardError(f"{w}: 'regions' names '{name}', which is no region of kind 'ram' in [[memory]]")
            members.append(by_name[name])
        if any(b.origin < a.end for a, b in zip(members, members[1:])):
            raise BoardError(f"{w}: 'regions' must be in address order")
        origin, end = members[0].origin, members[-1].end
        inside = [r.name for r in memory if r not in members and r.origin < end and r.end > origin]
        if inside:
            raise BoardError(f"{w}: region(s) {', '.join(inside)} lie between its regions: list them too")
        spans.append(
            Region(
                sp["name"],
                origin,
                end - origin,
                "ram",
                sp.get("description", ""),
                tuple(dict.fromkeys(e for m in members for e in m.enable)),
                members=tuple(sp["regions"]),
                boot=tuple(sp["boot"]),
            )
        )
    return tuple(spans)


# --- end spans ---


# --- NPU ---
def _check_npu(npu: dict, memory: tuple[Region, ...], where: str) -> None:
    """The regions are the board's, the configurations are of the NPU's type."""
    names = [r.name for r in memory]
    if not 0 <= npu["irq"] < 480:  # the NVIC of a Cortex-M55 numbers its device interrupts 0..479
        raise BoardError(f"{where}: 'irq' must be a device interrupt number from 0 to 479, got {npu['irq']}")
    for name in npu["regions"]:
        if name not in names:
            raise BoardError(
                f"{where}: 'regions' names '{name}', which [[memory]] does not define (regions: {', '.join(names)})"
            )
    for pool in npu.get("pools", ()):
        if pool["region"] not in names:
            raise BoardError(
                f"{where}: pool '{pool['name']}' is in region '{pool['region']}', which [[memory]] does not define"
            )
        r = memory[names.index(pool["region"])]
        if not (r.origin <= pool["origin"] and pool["origin"] + pool["size"] <= r.origin + r.size):
            raise BoardError(
                f"{where}: pool '{pool['name']}' (0x{pool['origin']:08X}, {pool['size']} bytes) is not "
                f"inside region '{r.name}'"
            )
        if pool["origin"] % 1024 or pool["size"] % 1024:
            raise BoardError(
                f"{where}: pool '{pool['name']}': origin and size must be multiples of 1 KiB "
                "(the profile gives them in KiB)"
            )
    for config in npu["configs"]:
        if config != npu["type"] and not config.startswith(npu["type"] + "-"):
            raise BoardError(
                f"{where}: configuration '{config}' is not of type '{npu['type']}' "
                f"(write it as {npu['type']}-MACS, e.g. {npu['type']}-128)"
            )


# --- end NPU ---


# --- checkpoint store ---
def _check_checkpoint_store(data: dict, memory: tuple[Region, ...], where: str) -> None:
    """The store is a flash region of whole slots that no placement (dev or flash boot) uses."""
    name, w = data["checkpoint_store"]["region"], f"{where} [checkpoint_store]"
    by_name = {r.name: r for r in memory}
    if name not in by_name:
        raise BoardError(
            f"{w}: 'region' names '{name}', which [[memory]] does not define (regions: {', '.join(by_name)})"
        )
    if by_name[name].kind != "flash":
        raise BoardError(f"{w}: 'region' must be of kind 'flash', but '{name}' is '{by_name[name].kind}'")
    if by_name[name].size == 0 or by_name[name].size % CHECKPOINT_STORE_ALIGN:
        raise BoardError(
            f"{w}: region '{name}' must be a non-zero multiple of {CHECKPOINT_STORE_ALIGN} bytes "
            "(two slots of whole 4 KiB sectors)"
        )
    for place in (data["placement"], data.get("flash_boot", {})):
        for key, choices in place.items():
            if key in PLACEMENT_KEYS and name in ((choices,) if isinstance(choices, str) else choices):
                raise BoardError(
                    f"{w}: region '{name}' is reserved for checkpoints, but the placement of '{key}' lists it"
                )


# --- end checkpoint store ---


def parse_board(text: str, where: str, expected_id: str | None = None) -> Board:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BoardError(f"{where}: not valid TOML ({exc})") from None
    _check(data, _schema(), where)
    if expected_id is not None and data["id"] != expected_id:
        raise BoardError(f"{where}: id '{data['id']}' must equal the file name '{expected_id}'")
    port = load_port(data["port"], where)
    memory: tuple[Region, ...] = ()
    spans: tuple[Region, ...] = ()
    placement: dict = {}
    candidates: dict = {}
    if port.kind == "firmware":
        _check_firmware(data, port, where)
        memory = _check_memory(data, where)
        _check_enables(memory, port, where)
        if "flash_boot" in data:
            _check_flash_boot(data, memory, where)
        if "npu" in data:
            _check_npu(data["npu"], memory, f"{where} [npu]")
        if "checkpoint_store" in data:
            _check_checkpoint_store(data, memory, where)
        spans = _check_spans(data, memory, where)
        candidates = placement_candidates(data["placement"])
        placement = {**{k: c[0] for k, c in candidates.items()}, "stack_bytes": data["placement"]["stack_bytes"]}
    else:
        for table in (*FIRMWARE_TABLES, "boot", "flash_boot", "npu", "checkpoint_store", "span"):
            if table in data:
                raise BoardError(
                    f"{where}: key '{table}' is not used by boards of the '{port.name}' port (kind {port.kind})"
                )
    tc = data["toolchain"]
    return Board(
        id=data["id"],
        name=data["name"],
        family=data["family"],
        port=data["port"],
        port_kind=port.kind,
        description=data.get("description", ""),
        reference=data.get("reference", False),
        emulated=data.get("emulated", False),
        toolchain=Toolchain(
            cc=tc["cc"],
            cflags=tuple(tc["cflags"]),
            ldflags=tuple(tc.get("ldflags", ())),
            objcopy=tc.get("objcopy", ""),
            size=tc.get("size", ""),
            install=tc.get("install", ""),
        ),
        cpu=dict(data.get("cpu", {})),
        memory=memory,
        spans=spans,
        placement=placement,
        candidates=candidates,
        console=dict(data.get("console", {})),
        boot=dict(data.get("boot", {})),
        flash=tuple(dict(f) for f in data.get("flash", ())),
        flash_boot=dict(data.get("flash_boot", {})),
        npu=dict(data.get("npu", {})),
        checkpoint_store=data.get("checkpoint_store", {}).get("region", ""),
        raw=data,
    )


# ---------------------------------------------------------------------------- finding boards


def _board_files() -> dict:
    """The board files the package holds: id (the file stem) -> file."""
    root = resources.files("zoflash.board_files")
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".toml")}


def board_registry() -> Registry[Traversable]:
    """The boards by id, in id order: a board is declared by its file alone, so the registry is
    read from the files on each call (a file added or changed is seen at once)."""
    registry: Registry[Traversable] = Registry("board", "see `zoflash boards`")
    for board_id, path in sorted(_board_files().items()):
        registry.add(board_id, path)
    return registry


def list_boards() -> list[Board]:
    boards = [load_board(b) for b in board_registry()]
    refs: dict[str, list[str]] = {}
    for b in boards:
        if b.reference:
            refs.setdefault(b.family, []).append(b.id)
    for family, ids in refs.items():
        if len(ids) > 1:
            raise BoardError(
                f"family '{family}' has several reference boards ({', '.join(ids)}); "
                "mark exactly one with reference = true"
            )
    return boards


def load_board(board_id: str) -> Board:
    try:
        path = board_registry().get(board_id)
    except UnknownName as exc:  # the registry's message, as the board error callers expect
        raise BoardError(str(exc)) from None
    return parse_board(path.read_text(), f"board file {board_id}.toml", expected_id=board_id)


def resolve_board(name: str) -> tuple[Board, str | None]:
    """A board id, or a family name standing for the family's reference board. Returns the board
    and, for a family name, the sentence saying which board it chose."""
    if name in board_registry():
        return load_board(name), None
    boards = list_boards()
    members = [b for b in boards if b.family == name]
    if not members:
        families = sorted({b.family for b in boards})
        raise BoardError(
            f"unknown board '{name}' (known boards: {', '.join(b.id for b in boards)}; families: "
            f"{', '.join(families)}; see `zoflash boards`)"
        )
    refs = [b for b in members if b.reference]
    if refs:
        chosen = refs[0]
    elif len(members) == 1:
        chosen = members[0]
    else:
        raise BoardError(
            f"'{name}' is a family with several boards ({', '.join(b.id for b in members)}) and none "
            "is marked reference = true; name the board"
        )
    return chosen, f"{name} -> {chosen.id} (the {name} family's reference board: {chosen.name})"


# ---------------------------------------------------------------------------- describing


def _size(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def describe(board: Board) -> str:
    """Everything a board file says, for `zoflash boards show ID`."""
    tc = board.toolchain
    lines = [
        f"{board.id}: {board.name}",
        f"  family     {board.family}{' (reference board)' if board.reference else ''}",
        f"  port       {board.port}{'  [emulated]' if board.emulated else ''}",
    ]
    if board.description:
        lines.append(f"  about      {board.description}")
    lines += [f"  compiler   {tc.cc} {' '.join(tc.cflags)}"]
    if tc.ldflags:
        lines.append(f"  ldflags    {' '.join(tc.ldflags)}")
    if tc.install:
        lines.append(f"  install    {tc.install}")
    if board.cpu:
        lines.append(f"  cpu        {board.cpu['core']}, SysTick clock {board.cpu['clock_hz'] / 1e6:g} MHz")
    if board.memory:
        lines.append("  memory")
        for r in board.memory:
            used = [
                k if board.candidates[k][0] == r.name else f"({k})"
                for k in PLACEMENT_KEYS
                if r.name in board.candidates[k]
            ]
            lines.append(
                f"    {r.name:<14} {r.kind:<5} 0x{r.origin:08X}-0x{r.end - 1:08X} {_size(r.size):>8}  "
                f"{', '.join(used) or '-'}" + (f"  ({r.description})" if r.description else "")
            )
        if any(len(c) > 1 for c in board.candidates.values()):
            lines.append("    (key): used when the key's earlier regions are full (the plan takes the first with room)")
        lines.append(f"  stack      {board.placement['stack_bytes']} bytes in {board.placement['stack']}")
        for sp in board.spans:
            lines.append(
                f"  span       {sp.name} 0x{sp.origin:08X}-0x{sp.end - 1:08X} {_size(sp.size)} "
                f"({' + '.join(sp.members)}): the arena when no region holds it, boot {', '.join(sp.boot)}"
                + (f"  ({sp.description})" if sp.description else "")
            )
    if board.console:
        c = board.console
        pins = f" (TX {c['tx']}, RX {c['rx']})" if "tx" in c and "rx" in c else ""
        lines.append(f"  console    {c['uart']}{pins} {c['baud']} baud, 8N1, kernel clock {c['clock_hz'] / 1e6:g} MHz")
        if c.get("usb"):
            lines.append(
                f"  usb serial {', '.join(c['usb'])}" + (f"  ({c['description']})" if "description" in c else "")
            )
    if board.flash_boot:  # --- flash boot ---
        fb = for_boot(board, "flash")
        moved = ", ".join(
            f"{k} {' or '.join(fb.candidates[k])}" for k in PLACEMENT_KEYS if fb.candidates[k] != board.candidates[k]
        )
        lines.append(
            f"  flash boot --boot flash: the boot ROM copies the signed image from {board.flash_boot['fsbl']} to "
            f"{board.flash_boot['image']}; {moved}"
        )
    if board.npu:  # --- NPU ---
        n = board.npu
        lines.append(
            f"  npu        {n['type']} at 0x{n['base']:08X}, IRQ {n['irq']}{'' if n['verified'] else ' (unverified)'}; "
            f"--npu {' | '.join(n['configs'])}; reaches {', '.join(n['regions'])}"
        )
    if board.boot:
        lines.append("  boot modes")
        for mode, text in board.boot.items():
            lines.append(f"    {mode:<12} {text}")
    if board.flash:
        lines.append("  flash methods")
        for f in board.flash:
            head = f"    {f['name']:<12} {f['method']}"
            if "boot" in f:
                head += f"; load in boot mode '{f['boot']}'"
                if f.get("run_boot"):
                    head += f", run in '{f['run_boot']}'"
            lines.append(head)
            if f.get("description"):
                lines.append(f"                 {f['description']}")
            for k, v in f.items():
                if k in _FLASH_COMMON:
                    continue
                shown = " ".join(v) if isinstance(v, list) else (f"0x{v:08X}" if k == "address" else v)
                lines.append(f"                 {k} = {shown}")
    return "\n".join(lines)


def markdown() -> str:
    """docs/reference/boards.md: every board file, as `zoflash boards show` prints it."""
    boards = list_boards()
    lines = [
        "# Boards",
        "",
        "<!-- generated by `make docs` from the board files (boards/*.toml); do not edit -->",
        "",
        "A board is one TOML file in `boards/`; `zoflash boards` lists them, `zoflash boards show ID` prints one "
        "as below, and `--board` takes a board id or a family name (the family's reference board). "
        "How to add a board: [architecture](../architecture.md); flashing: [boards and flashing](../flashing.md).",
        "",
        "| id | family | name | notes |",
        "|---|---|---|---|",
    ]
    for b in boards:
        notes = [m for m, on in (("family reference", b.reference), ("emulated (QEMU)", b.emulated)) if on]
        lines.append(f"| [{b.id}](#{b.id}) | {b.family} | {b.name} | {', '.join(notes) or '-'} |")
    for b in boards:
        lines += ["", f"## {b.id}", "", "```text", describe(b), "```"]
    return "\n".join(lines) + "\n"
