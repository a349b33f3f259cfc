"""The memory budget of boards with memory regions (port kind "firmware"): what goes in which
region, the check that a plan fits before anything is compiled, and the size report after linking.

The board file's [placement] table gives each key (code, rodata, weights, train_data, data, bss,
arena, stack) a region or a list of candidate regions, fastest first; `fit` plans where this
model's bytes go (each key in the first candidate with room, the keys in PLAN_ORDER) and checks
the plan.  The planned placement goes into the bundle (link.ld, manifest "placement"), so the
report after linking groups the ELF's sections exactly as the estimate before compiling did.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from zoflash.errors import BuildError, ZoflashError
from zoflash.targets.boards import PLACEMENT_KEYS, Board, Region, for_boot, load_board, load_port

# The memory touched on every pass gets the first choice of the fast regions: the stack, the
# trainable weights, the training state and the arena; then code and constants; the data last.
PLAN_ORDER = ("stack", "data", "bss", "arena", "code", "rodata", "weights", "train_data")


class BudgetError(ZoflashError):
    """The model, its training state or its data do not fit the board's memory."""


@dataclass
class Use:
    label: str
    bytes: int


@dataclass
class RegionUse:
    region: Region
    items: list[Use] = field(default_factory=list)

    @property
    def used(self) -> int:
        return sum(u.bytes for u in self.items)

    @property
    def over(self) -> int:
        return self.used - self.region.size

    def describe(self, verb: str = "used") -> str:
        r = self.region
        parts = ", ".join(f"{u.label} {u.bytes}" for u in self.items if u.bytes)
        return (
            f"{r.name} ({r.kind}, {r.size} bytes at 0x{r.origin:08X}"
            + (f", spanning {' + '.join(r.members)}" if r.members else "")
            + f"): {self.used} {verb} "
            f"({100.0 * self.used / r.size:.1f}%)" + (f": {parts}" if parts else "")
        )

    def as_dict(self) -> dict:
        return {
            "region": self.region.name,
            "kind": self.region.kind,
            "origin": self.region.origin,
            "size": self.region.size,
            "used": self.used,
            **({"spans": list(self.region.members)} if self.region.members else {}),
            "items": {u.label: u.bytes for u in self.items},
        }


def _by_region(board: Board, items: list[tuple[str, str, int]]) -> list[RegionUse]:
    """(placement key or region name, label, bytes) -> per-region uses, in board order."""
    uses = {r.name: RegionUse(r) for r in board.memory + board.spans}
    for where, label, n in items:
        name = board.placement.get(where, where)
        uses[name].items.append(Use(label, n))
    return [u for u in uses.values() if u.items]


# ------------------------------------------------------------------------- before compiling


def _state(model) -> list[tuple[str, str, int]]:
    """A stateful model's variable tensors: beside the arena, never shared (<prefix>_state)."""
    return [("arena", STATE_LABEL, model.state_size)] if model.state_size else []


STATE_LABEL = "model state (variable tensors)"  # beside the arena in every size report


def _state_apart(sums: dict[tuple[str, str], int], state_bytes: int) -> None:
    """The model's state shares the arena's section (or object) in a link: report it apart, under
    the label the estimate gives it, so that 'arena' means the activations alone everywhere."""
    key = ("arena", "arena")
    if state_bytes and sums.get(key, 0) >= state_bytes:
        sums[key] -= state_bytes
        sums[("arena", STATE_LABEL)] = state_bytes


def _kernel_params(model) -> int:
    """Bytes of the kernels' parameters in the generated C's .rodata: the per-channel arrays
    (multipliers, shifts, ...) exactly, each struct field counted as 4 bytes (an estimate)."""
    return sum(v.nbytes if isinstance(v, np.ndarray) else 4 for s in model.program.steps for v in s.params.values())


def plan_placement(board: Board, items: list[tuple[str, str, int]]) -> Board:
    """The board with a placement for these (key, label, bytes): each key in the first of its
    candidate regions that still has room for all of its bytes; a key that fits none goes where
    it misses by least (check_fit then reports it).  When that plan does not fit and the board
    has spans ([[span]]) free in its boot mode, the arena may cover one of them whole: the first
    span (in the board file's order) with which everything fits, the other parts kept out of its
    regions.  A plan that fits without a span is never changed."""
    placed = _plan(board, items, board.candidates)
    if _fits(placed, items):
        return placed
    reserved = {key for key, _, _ in items if key not in PLACEMENT_KEYS}
    for span in board.spans:
        if board.boot_mode not in span.boot or reserved & set(span.members):
            continue  # used by the boot, or memory set apart (an NPU's pools) lies in it
        rest = {k: tuple(c for c in v if c not in span.members) for k, v in board.candidates.items()}
        if not all(rest.values()):
            continue  # a part has no region outside the span
        spanned = _plan(board, items, {**rest, "arena": (span.name,)})
        if _fits(spanned, items):
            return spanned
    return placed


def _plan(board: Board, items: list[tuple[str, str, int]], candidates: dict) -> Board:
    need = {k: 0 for k in PLACEMENT_KEYS}
    free = {r.name: r.size for r in board.memory + board.spans}
    for key, _, n in items:
        if key in need:
            need[key] += n
        else:  # a region by name: memory set apart (an NPU's pools, `reserved`)
            free[key] -= n
    chosen = {}
    for key in PLAN_ORDER:
        choices = candidates[key]
        name = next((c for c in choices if need[key] <= free[c]), None) or max(choices, key=free.__getitem__)
        chosen[key] = name
        free[name] -= need[key]
    return replace(board, placement={**chosen, "stack_bytes": board.placement["stack_bytes"]})


def _fits(board: Board, items: list[tuple[str, str, int]]) -> bool:
    return all(u.over <= 0 for u in _by_region(board, items))


def enable_mask(board: Board) -> int:
    """Bit i set when the placement uses a region that needs the port's memory switch i."""
    port = load_port(board.port)
    used = {board.placement[k] for k in PLACEMENT_KEYS}
    switches = {s for r in board.memory + board.spans if r.name in used for s in r.enable}
    return sum(1 << i for i, s in enumerate(port.memories) if s in switches)


def placed_board(bundle) -> Board:
    """The board of a bundle with the placement its plan chose (manifest "placement")."""
    board = for_boot(load_board(bundle.board), bundle.manifest.get("boot", "dev"))
    place = bundle.manifest.get("placement")
    return replace(board, placement=dict(place)) if place else board


def fit(board: Board, model, training=None, measured: dict | None = None, reserved=()) -> Board:
    """Plan the placement of the model (with its training state and data) on the board and
    check it fits; returns the board with that placement.  BudgetError says what does not fit,
    by how much, and how many training samples would.  `measured` (measured_code) replaces the
    port's code estimate with the sizes of objects already compiled.  `reserved`: (region, label,
    bytes) set apart before anything is placed (an NPU's pools: targets/npu.py reserved)."""
    items = _measured_items(_items(board, model, training), measured) + list(reserved)
    placed = plan_placement(board, items)
    what = "the model with its training state and data" if training is not None else "the model"
    check_fit(placed, _by_region(placed, items), what, hint=_samples_hint(board, placed, items, training))
    return placed


def _samples_hint(board: Board, placed: Board, items, training) -> str:
    """How many training samples would fit where the data may go, when the data is what overflows."""
    if training is None:
        return ""
    data = training.data
    # the file's training samples: the validation split is carved from them and embedded likewise
    n = len(data.x_train) + (len(data.x_val) if data.x_val is not None else 0)
    train_bytes = sum(
        a.nbytes
        for split in ("train", "val")
        for a in (
            getattr(data, f"x_{split}"),
            getattr(data, f"y_{split}") if data.labels else None,
            getattr(data, f"t_{split}"),
        )
        if a is not None
    )
    per_sample = train_bytes // max(n, 1)
    test_bytes = data.nbytes - train_bytes
    others = [it for it in items if it[0] != "train_data"]
    without = _by_region(plan_placement(board, others), others)
    free = {u.region.name: u.region.size - u.used for u in without}
    for r in board.memory:
        free.setdefault(r.name, r.size)
    room = max(free[c] for c in board.candidates["train_data"]) - test_bytes
    fits = max(room, 0) // max(per_sample, 1)
    if fits >= n:
        return ""
    return (
        f"At most {fits} of the {n} training samples ({per_sample} bytes each, with the "
        f"{len(data.x_test)} test samples; the validation split is carved from them) fit in the regions the data "
        f"may use ({', '.join(board.candidates['train_data'])})."
    )


def estimate_regions(board: Board, model, training=None, reserved=()) -> list[RegionUse]:
    """Estimated bytes per region under the planned placement: exact for data, weights, arena,
    training state and stack; the machine code is the port's estimate (port.toml code_bytes);
    `reserved` as for fit."""
    items = _items(board, model, training) + list(reserved)
    placed = plan_placement(board, items)
    return _by_region(placed, items)


# --- measured code ---
def _measured_items(items, measured: dict | None):
    """The plan's items with the code estimate replaced by measured bytes ({"code": n, "rodata": n})."""
    if not measured:
        return items
    kept = [it for it in items if it[1] != "code (estimate)"]
    return [
        ("code", "code (measured)", measured["code"]),
        ("rodata", "read-only data (measured)", measured["rodata"]),
        *kept,
    ]


def measured_code(size_tool: str, objects: list[Path]) -> dict:
    """Machine code (.text, .ARM.ex*) and read-only data (.rodata) of compiled objects, from
    `size -A`: at least what the link keeps of them (--gc-sections only removes)."""
    out = {"code": 0, "rodata": 0}
    for obj in objects:
        for name, size, _ in section_sizes(size_tool, obj):
            if name.startswith((".text", ".ARM.ex")):
                out["code"] += size
            elif name.startswith(".rodata"):
                out["rodata"] += size
    return out


# --- end measured code ---


def _items(board: Board, model, training=None) -> list[tuple[str, str, int]]:
    port = load_port(board.port)
    items: list[tuple[str, str, int]] = []
    if training is None:  # the model as a library: the application brings its own code and stack
        items += [
            ("code", "code (estimate)", port.code_bytes_inference),
            ("weights", "constant weights", model.weights_bytes),
            ("rodata", "kernel parameters", _kernel_params(model)),
            ("arena", "arena", model.arena_size),
        ] + _state(model)
        return items
    mem = training.plan.memory()
    trainable = mem["trainable_bytes_in_ram"]
    work = mem["residual_bytes"] + mem["feature_cache_bytes"] + mem["statistics_bytes"] + mem["snapshot_bytes"]
    items += [
        ("code", "code (estimate)", port.code_bytes),
        ("weights", "constant weights", model.weights_bytes),
        ("train_data", "training data", _embedded_data_bytes(training)),
        ("rodata", "bias perturbation sizes", mem["eps_bytes"]),
        ("rodata", "kernel parameters", _kernel_params(model)),
        ("data", "trainable weights", trainable),
        ("arena", "arena", model.arena_size),
        *_state(model),
        (
            "bss",
            f"training state (residuals {mem['residual_bytes']}, feature cache "
            f"{mem['feature_cache_bytes']}, snapshot {mem['snapshot_bytes']}, statistics "
            f"{mem['statistics_bytes']})",
            work,
        ),
        ("stack", "stack", board.placement["stack_bytes"]),
    ]
    if mem.get("stream_buffer_bytes"):  # --data-source stream: the ring of fed samples
        ring = 1 if training.options.mode == "continual" else training.options.buffer
        items.insert(-1, ("bss", f"stream ring ({ring} samples)", mem["stream_buffer_bytes"]))
    if mem.get(
        "ab_slots_bytes"
    ):  # --mode continual: rings, candidate, A/B slots (RAM; in the NOR store on a board with one: zo_bundle.h)
        o = training.options
        slots_in_nor = bool(board.checkpoint_store)
        items.insert(
            -1,
            (
                "bss",
                f"continual (training ring {o.buffer} samples {mem['training_ring_bytes']}, held-back ring "
                f"{o.holdout} samples {mem['holdout_ring_bytes']}, candidate {mem['candidate_bytes']}, "
                f"factory {mem['factory_bytes']}, A/B slots {mem['ab_slots_bytes']}"
                + (" in the NOR's checkpoint store, not RAM)" if slots_in_nor else ")"),
                sum(mem[k] for k in ("training_ring_bytes", "holdout_ring_bytes", "candidate_bytes", "factory_bytes"))
                + (0 if slots_in_nor else mem["ab_slots_bytes"]),
            ),
        )
    return items


def _embedded_data_bytes(training) -> int:
    """The data built into the firmware: with --data-source stream or app only the test split."""
    d = training.data
    if training.options.data_source == "embedded":
        return d.nbytes
    return sum(
        a.nbytes
        for a in (d.x_test,) + ((d.y_test,) if d.labels else ()) + ((d.t_test,) if d.t_test is not None else ())
    )


def check_fit(board: Board, usage: list[RegionUse], what: str = "this plan", hint: str = "") -> None:
    over = [u for u in usage if u.over > 0]
    if not over:
        return
    lines = [f"{what} does not fit board '{board.id}' (sizes computed before compiling, in bytes):"]
    for u in over:
        lines.append(f"  - region {u.describe('needed')}; {u.over} bytes more than its {u.region.size}")
    for u in usage:
        if u.over <= 0:
            lines.append(f"  - fits: region {u.describe()}")
    if hint:
        lines.append(hint)
    lines += _span_hint(board, usage)
    lines.append(
        f"Use less data or fewer trainable parameters (--max-params, --train), or let the data use "
        f"a larger region ([placement] in boards/{board.id}.toml lists the regions each part may use)."
    )
    if board.flash_boot and board.boot_mode == "dev":  # --- flash boot ---
        nor = _flash_boot_only_regions(board)
        if nor:
            lines.append(
                f"Or build for flash boot (--boot flash): weights and data that do not fit the image then "
                f"stay in the external flash ({', '.join(f'{n} {board.region(n).size >> 20} MiB' for n in nor)}), "
                "read in place."
            )
    raise BudgetError("\n".join(lines))


def _span_hint(board: Board, usage: list[RegionUse]) -> list[str]:
    """When the arena is what overflows: the adjacent SRAM ([[span]]) it may cover in this boot
    mode, and in the others."""
    arena = next((it.bytes for u in usage for it in u.items if it.label == "arena"), 0)
    if not board.spans or not any(u.over > 0 and any(it.label == "arena" for it in u.items) for u in usage):
        return []
    here = [s for s in board.spans if board.boot_mode in s.boot]
    lines = [
        f"The arena ({arena} bytes) may cover adjacent SRAM regions ([[span]]) when the other parts fit "
        f"beside them: in this boot mode ({board.boot_mode}) "
        + (", ".join(f"{s.name} {s.size} bytes" for s in here) if here else "none")
        + "."
    ]
    others = [s for s in board.spans if board.boot_mode not in s.boot and s.size >= arena]
    if others:
        modes = sorted({m for s in others for m in s.boot})
        lines.append(
            f"It fits in {', '.join(f'{s.name} ({s.size} bytes)' for s in others)} with --boot {' or '.join(modes)}."
        )
    return lines


def _flash_boot_only_regions(board: Board) -> list[str]:
    """The external-flash regions flash boot may place parts in and this (development-mode) plan may not."""
    here = {r for c in board.candidates.values() for r in c}
    flash = for_boot(board, "flash").candidates
    return sorted({r for c in flash.values() for r in c if board.region(r).kind == "flash"} - here)


# --------------------------------------------------------------------------- after linking

# output section (link.ld) -> (placement key, label); .data also occupies its load image.
SECTIONS = {
    ".text": ("code", "code"),
    ".ARM.extab": ("code", "code"),
    ".ARM.exidx": ("code", "code"),
    ".weights": ("weights", "constant weights"),
    ".train_data": ("train_data", "training data"),
    ".rodata": ("rodata", "read-only data"),
    ".data": ("data", "RAM data"),
    ".trainable": ("data", "trainable weights"),
    ".arena": ("arena", "arena"),
    ".bss": ("bss", "zero-initialised RAM (training state)"),
    ".stack": ("stack", "stack"),
}
DATA_IMAGE = "RAM data initial values"
LOADED = (".text", ".ARM.extab", ".ARM.exidx", ".weights", ".train_data", ".rodata", ".data")  # with contents


def image_sections(board: Board) -> list[str]:
    """The loaded sections whose bytes lie in the code region: the raw image (.bin) a boot ROM
    copies (.data by its load address, which follows the code)."""
    return [s for s in LOADED if s == ".data" or board.placement[SECTIONS[s][0]] == board.placement["code"]]


def loaded_elsewhere(board: Board) -> list[tuple[str, str]]:
    """(section, region) of the loaded sections the plan put outside the code region and outside
    the flash: only a debugger or an emulator loads them, not a boot ROM that copies the image."""
    return [
        (s, board.placement[SECTIONS[s][0]])
        for s in LOADED
        if s not in image_sections(board) and board.region_of(SECTIONS[s][0]).kind != "flash"
    ]


# --- flash boot ---
def flash_sections(board: Board) -> list[str]:
    """The loaded sections the plan put in a flash region (flash boot: read there in place); they
    form the flash data image (<prefix>_nor.bin), written at flash_data_address."""
    return [s for s in LOADED if s not in image_sections(board) and board.region_of(SECTIONS[s][0]).kind == "flash"]


def flash_data_address(board: Board) -> int | None:
    """Where the flash data image starts: the origin of the (one) flash region holding those
    sections (link.ld starts the first of them there), or None without such sections."""
    regions = {board.placement[SECTIONS[s][0]] for s in flash_sections(board)}
    if len(regions) > 1:
        raise BuildError(
            f"the plan put data in several flash regions ({', '.join(sorted(regions))}); "
            "[flash_boot] must list one flash region per board"
        )
    return board.region(regions.pop()).origin if regions else None


# --- end flash boot ---
_NOT_LOADED = (".debug", ".comment", ".ARM.attributes", ".stab", ".gnu.attributes", ".note.gnu.build-id")


def section_sizes(size_tool: str, elf: Path) -> list[tuple[str, int, int]]:
    """(name, size, address) of every section, from `size -A`."""
    proc = subprocess.run([size_tool, "-A", str(elf)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{size_tool} -A {elf} failed: {proc.stderr.strip()}")
    out = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit() and parts[2].isdigit():
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def size_report(
    board: Board, sections: list[tuple[str, int, int]], reserved=(), state_bytes: int = 0
) -> list[RegionUse]:
    """The linked ELF's sections per region, with `reserved` (region, label, bytes: an NPU's pools);
    `state_bytes` of the arena's section are the model's state, reported apart."""
    items: list[tuple[str, str, int]] = []
    sums: dict[tuple[str, str], int] = {}
    for name, size, addr in sections:
        if name in SECTIONS:
            key = SECTIONS[name]
        elif name.startswith(_NOT_LOADED) or size == 0:
            continue
        else:  # a section link.ld does not name (should not happen): count it where it landed
            region = next((r for r in board.memory if r.origin <= addr < r.end), None)
            if region is None:
                raise BuildError(f"section {name} ({size} bytes at 0x{addr:08X}) is outside every memory region")
            key = (region.name, name)
        sums[key] = sums.get(key, 0) + size
        if name == ".data":
            sums[("code", DATA_IMAGE)] = sums.get(("code", DATA_IMAGE), 0) + size
    _state_apart(sums, state_bytes)
    items = [(where, label, n) for (where, label), n in sums.items()]
    order = [label for _, label in SECTIONS.values()] + [DATA_IMAGE, STATE_LABEL]
    items.sort(key=lambda it: order.index(it[1]) if it[1] in order else len(order))
    return _by_region(board, items + list(reserved))


def library_sizes(size_tool: str, lib: Path, prefix: str, board: Board, state_bytes: int = 0) -> list[RegionUse]:
    """The inference library: sections of each object file, grouped as link.ld would place them
    (`state_bytes` of the model object's zero-initialised RAM are its state, reported apart)."""
    proc = subprocess.run([size_tool, "-A", str(lib)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{size_tool} -A {lib} failed: {proc.stderr.strip()}")
    sums: dict[tuple[str, str], int] = {}
    obj = ""
    for line in proc.stdout.splitlines():
        parts = line.split()
        if line and not line[0].isspace() and ":" in line and not line.startswith("."):
            obj = line.split()[0]
            continue
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        name, size = parts[0], int(parts[1])
        if name.startswith(".text") or name.startswith(".ARM.ex"):
            key = ("code", "code")
        elif name.startswith(".rodata"):
            key = ("weights", "constant weights") if obj == f"{prefix}_weights.o" else ("rodata", "read-only data")
        elif name.startswith(".data"):
            key = ("data", "RAM data")
        elif name.startswith(".bss") or name == "COMMON":
            key = ("arena", "arena") if obj == f"{prefix}.o" else ("bss", "zero-initialised RAM")
        else:
            continue
        if size:
            sums[key] = sums.get(key, 0) + size
    _state_apart(sums, state_bytes)
    return _by_region(board, [(w, label, n) for (w, label), n in sums.items()])
