"""Generate and build: a model compiled once, planned for its board's memory (and for training with
data), rendered into a bundle, compiled; the memory plan alone; the training plan's cut."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from zoflash.compiler.codegen import c_identifier, check_prefix
from zoflash.compiler.compiled import CompiledModel
from zoflash.compiler.ir import Graph
from zoflash.compiler.pipeline import compile_graph
from zoflash.compiler.tflite_import import load_tflite, model_sha256
from zoflash.compiler.tflite_split import split_tflite
from zoflash.errors import BoardError, BuildError, SplitError, ToolMissingError
from zoflash.targets import boards as boards_mod
from zoflash.targets.budget import BudgetError, estimate_regions, fit, placed_board
from zoflash.targets.bundle_lock import bundle_lock
from zoflash.targets.device_headers import include_dirs
from zoflash.targets.firmware_build import build_firmware, measured_sizes, overflowed_region
from zoflash.targets.host_build import BuildResult, build_host
from zoflash.targets.npu import backend_for, reserved
from zoflash.targets.project import BUNDLE_ROOT, Bundle, generate_bundle
from zoflash.training.compiled import CompiledTraining
from zoflash.training.options import make_options
from zoflash.training.plan import plan_training
from zoflash.workflows.boundary_check import simulated_crc32
from zoflash.workflows.monitor import Say, log_line
from zoflash.workflows.training import compile_for_training, training_bundle

log = logging.getLogger("zoflash")
T = TypeVar("T")


@dataclass
class LoadedModel:
    """A .tflite file read and imported: its path, its graph (zoflash's IR) and its bytes."""

    path: Path
    graph: Graph
    raw: bytes

    @property
    def sha256(self) -> str:
        """The model file's SHA-256 (hex): the firmware and the logs name the model by it."""
        return model_sha256(self.raw)


def load_model(path: str | Path) -> LoadedModel:
    """Read a .tflite file; ModelFormatError when it is not a TFLite flatbuffer zoflash can read."""
    graph, raw = load_tflite(path)
    return LoadedModel(Path(path), graph, raw)


def compile_model(model: LoadedModel) -> CompiledModel:
    """Check every op against the op registry and lower the graph to kernel calls with a memory plan;
    UnsupportedModelError lists every problem at once."""
    return compile_graph(model.graph)


def default_bundle_dir(model_path: Path, board_id: str) -> Path:
    """Where a bundle goes without --out: generated/<model>-<board>."""
    return BUNDLE_ROOT / f"{c_identifier(model_path.stem)}-{board_id}"


@dataclass
class Compiled:
    """A model compiled once, and planned for training when it came with data: what every board's
    memory plan and rendering start from."""

    path: Path
    sha256: str
    model: CompiledModel
    prep: CompiledTraining | None = None  # the training compile (model, plan, options, data), with data

    @property
    def training(self):
        return self.prep.training if self.prep is not None else None

    @property
    def warnings(self) -> list[str]:
        """The training compile's warnings about data and options (training/checks.py)."""
        return self.prep.warnings if self.prep is not None else []


def compile_for(
    model_path: str | Path, data_path: str | Path | None = None, options=None, say: Say = log_line
) -> Compiled:
    """Load the model once and compile it; with data, compile and plan it for training (options:
    TrainOptions, defaults if None; the warnings about data and options go to `say`). What trains
    is decided by the training plan, as for every engine (training/plan.py)."""
    graph, raw = load_tflite(model_path)
    if data_path is None:
        return compile_loaded(LoadedModel(Path(model_path), graph, raw))
    prep = compile_for_training(model_path, data_path, options or make_options(), (graph, raw), say)
    return Compiled(prep.path, prep.sha256, prep.model, prep)


def compile_loaded(model: LoadedModel) -> Compiled:
    """An already loaded model compiled for inference."""
    return Compiled(model.path, model.sha256, compile_graph(model.graph))


def generate(
    model_path: str | Path,
    board_id: str = "host",
    out_dir: str | Path | None = None,
    prefix: str | None = None,
    data_path: str | Path | None = None,
    options=None,
    boot: str = "dev",
    device_headers=(),
    npu=None,
    check_boundary: bool = False,
    say: Say = log_line,
) -> Bundle:
    """Compile a model and write its bundle for a board (no compiler run). With `data_path`,
    the bundle also trains (options: TrainOptions, defaults if None). `board_id` may be a family
    name (its reference board). For a board with memory regions, a plan that does not fit them
    fails here, before any file is written (budget.BudgetError). `boot` ('dev' or 'flash':
    boards.BOOT_MODES) chooses the placement rules; `device_headers` are checkouts of the vendor's
    headers the port then compiles against (device_headers.py); `npu` (an NpuRequest of
    targets/npu.py) runs the frozen prefix on the board's NPU (training bundles only);
    `check_boundary` (always with `npu`) builds in the host simulation's boundary checksum. The
    warnings about the training data and options go to `say` before anything is written."""
    if prefix is not None:
        check_prefix(prefix)  # before the compile
    board = configured_board(board_id, boot, device_headers, npu, data_path)
    compiled = compile_for(model_path, data_path, options, say)
    placed = place(compiled, board, npu)
    expected = _boundary(compiled, npu, check_boundary, say)
    with bundle_lock(_out(compiled, board, out_dir)):
        return render(compiled, placed, out_dir, prefix, npu, expected)


def configured_board(board_id: str, boot: str = "dev", device_headers=(), npu=None, data_path=None):
    """The board to build for, configured for the boot mode and the vendor headers (an --npu build
    needs data)."""
    board, note = boards_mod.resolve_board(board_id)
    if npu is not None and data_path is None:
        raise BuildError(f"--npu {npu.accelerator} runs the training plan's frozen prefix on the NPU: it needs --data")
    if note:
        log.info("board %s", note)
    return _configure(board, boot, device_headers)


def _boundary(compiled: Compiled, npu, check_boundary: bool, say: Say = log_line) -> int | None:
    """The host simulation's boundary checksum a build bakes in (with --npu or when asked)."""
    if npu is not None:  # a missing NPU tool is said before the host simulation runs
        backend = backend_for(npu.accelerator).load()
        try:
            backend.find_tools(npu)
        except ToolMissingError:
            # what can be known without the missing tool first (Ethos-U: Vela's estimates)
            preview = getattr(backend, "preview", None)
            if preview is not None and compiled.prep is not None:
                for line in preview(compiled.prep, npu):
                    say(line)
            raise
    if compiled.prep is not None and (npu is not None or check_boundary):
        return simulated_crc32(compiled.prep)
    return None


def place(compiled: Compiled, board, npu=None, measured: dict | None = None):
    """A firmware board with its memory plan for the compiled model (budget.fit; an NPU's pools set
    apart; `measured` code sizes replace the port's estimate: build's re-plan); a host board as it is."""
    if not board.is_firmware:
        return board
    return fit(board, compiled.model, compiled.training, measured, reserved(board, npu))


def render(
    compiled: Compiled,
    board,
    out_dir: str | Path | None = None,
    prefix: str | None = None,
    npu=None,
    boundary_expected: int | None = None,
) -> Bundle:
    """Write the bundle of the compiled model for the board with its memory plan (place())."""
    out = _out(compiled, board, out_dir)
    if compiled.prep is not None:
        bundle = training_bundle(compiled.prep, board, out, prefix, npu=npu, boundary_expected=boundary_expected)
        log.info("wrote training bundle %s (%d files)", out, len(bundle.manifest["files"]))
        return bundle
    bundle = generate_bundle(compiled.model, board, out, compiled.path.name, compiled.sha256, prefix=prefix)
    log.info("wrote bundle %s (%d files)", out, len(bundle.manifest["files"]))
    return bundle


def _out(compiled: Compiled, board, out_dir: str | Path | None) -> Path:
    return Path(out_dir) if out_dir is not None else default_bundle_dir(compiled.path, board.id)


def _configure(board, boot: str, device_headers):
    """The board with the boot mode's placement rules and the vendor headers' include folders."""
    board = boards_mod.for_boot(board, boot)
    dirs = include_dirs(board, device_headers)
    return replace(board, device_includes=tuple(str(d) for d in dirs)) if dirs else board


def build(
    model_path: str | Path,
    board_id: str = "host",
    out_dir: str | Path | None = None,
    prefix: str | None = None,
    data_path: str | Path | None = None,
    options=None,
    boot: str = "dev",
    device_headers=(),
    npu=None,
    check_boundary: bool = False,
    say: Say = log_line,
) -> BuildResult:
    """generate() and compile: for the host a shared library and programs, for a firmware
    board the training firmware (ELF, BIN, HEX; with data) or the model as a static library,
    with the memory used per region (BuildResult.regions)."""
    if prefix is not None:
        check_prefix(prefix)  # before the compile
    board = configured_board(board_id, boot, device_headers, npu, data_path)
    compiled = compile_for(model_path, data_path, options, say)
    return build_compiled(compiled, board, out_dir, prefix, npu, check_boundary, say)


def build_compiled(
    compiled: Compiled,
    board,
    out_dir: str | Path | None = None,
    prefix: str | None = None,
    npu=None,
    check_boundary: bool = False,
    say: Say = log_line,
) -> BuildResult:
    """Place, render and compile a compiled model for a board (a Board, configured: boards.for_boot).
    The bundle folder is locked from its writing to the end of its build (targets/bundle_lock.py)."""
    placed = place(compiled, board, npu)
    expected = _boundary(compiled, npu, check_boundary, say)
    with bundle_lock(_out(compiled, board, out_dir)):
        return _render_and_build(compiled, board, placed, out_dir, prefix, npu, expected)


def on_emulator(compiled: Compiled, board, out_dir: str | Path, link: Callable[[Bundle], T]) -> T:
    """Render the inference bundle of a compiled model for an emulated board and run `link` on it,
    which links (and runs) the emulated-run harness.  When the link overflows a region, the plan
    used the port's code estimate: plan again with the code just compiled (the kernels, the port and
    the harness; the objects are reused) and link again, as build does."""
    with bundle_lock(_out(compiled, board, out_dir)):
        bundle = render(compiled, place(compiled, board), out_dir)
        try:
            return link(bundle)
        except BuildError as err:
            if overflowed_region(err) is None:
                raise
            log.info("a region overflowed linking the emulated run: planning again with the compiled code's sizes")
            return link(render(compiled, place(compiled, board, measured=measured_sizes(bundle)), out_dir))


def _render_and_build(compiled: Compiled, board, placed, out_dir, prefix, npu, expected) -> BuildResult:
    bundle = render(compiled, placed, out_dir, prefix, npu, expected)
    if not board.is_firmware:
        return build_host(bundle)
    try:
        return build_firmware(bundle, placed_board(bundle))
    except (BuildError, BudgetError) as err:
        if isinstance(err, BuildError) and overflowed_region(err) is None:
            raise
        # The plan used the port's code estimate and the linker (or, for a library, the size
        # report) found a region too small: plan again with the code and constants just
        # compiled (the objects are reused).
        log.info("a region overflowed after compiling: planning again with the compiled code's sizes")
        placed = place(compiled, board, npu, measured=measured_sizes(bundle))
        bundle = render(compiled, placed, out_dir, prefix, npu, expected)
        return build_firmware(bundle, placed_board(bundle))


@dataclass
class MemoryPlan:
    """Where each part of a firmware goes (plan_memory): the board with its placement, and the bytes
    used in each memory region."""

    board: object  # boards.Board with the planned placement
    regions: list  # budget.RegionUse per region, estimated before compiling


def plan_memory(
    model_path: str | Path,
    board_id: str,
    data_path: str | Path | None = None,
    options=None,
    boot: str = "dev",
    npu=None,
) -> MemoryPlan:
    """The placement generate() would choose on a firmware board in boot mode `boot`, region by
    region, without writing or compiling anything; budget.BudgetError when it does not fit (with
    how many training samples would). `npu` (an NpuRequest, targets/npu.py): the NPU's pools are
    counted in the regions they occupy, so the CPU's placement keeps out of them."""
    board, _ = boards_mod.resolve_board(board_id)
    if not board.is_firmware:
        raise BoardError(f"board '{board.id}' has no memory regions to plan (a firmware board has)")
    board = boards_mod.for_boot(board, boot)
    compiled = compile_for(model_path, data_path, options)
    npu_pools = reserved(board, npu)
    placed = fit(board, compiled.model, compiled.training, reserved=npu_pools)
    return MemoryPlan(placed, estimate_regions(board, compiled.model, compiled.training, npu_pools))


@dataclass
class SplitResult:
    """The two models split_model wrote, and the ops of the original each holds."""

    tensor: str  # the cut tensor's name
    prefix_path: Path  # model inputs -> tensor
    suffix_path: Path  # tensor -> model outputs
    prefix_ops: list[int]
    suffix_ops: list[int]


def training_cut(model_path: str | Path, options=None) -> str:
    """The name of the tensor the training plan cuts the model at (options: TrainOptions, defaults if
    None): the one activation the frozen prefix writes and the trainable suffix reads."""
    compiled = compile_model(load_model(model_path))
    plan = plan_training(compiled, options or make_options())
    if plan.split == 0:
        raise SplitError(
            "the training plan trains the first layer: the frozen prefix is empty (train fewer "
            "layers with --train, or give the cut with --at)"
        )
    names = [compiled.graph.tensors[b.index].name for b in plan.boundary]
    if len(names) != 1:
        raise SplitError(
            f"the training plan's suffix reads {len(names)} activations of the prefix "
            f"({', '.join(names)}): give the cut with --at"
        )
    return names[0]


def split_model(model_path: str | Path, out_dir: str | Path, at: str | None = None, options=None) -> SplitResult:
    """Write prefix.tflite and suffix.tflite into `out_dir`: the model cut at tensor `at`, or where the
    training plan for `options` cuts it."""
    model = load_model(model_path)  # checks the file (ModelFormatError) before any surgery
    parts = split_tflite(model.raw, at if at is not None else training_cut(model_path, options))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix, suffix = out / "prefix.tflite", out / "suffix.tflite"
    prefix.write_bytes(parts.prefix)
    suffix.write_bytes(parts.suffix)
    return SplitResult(parts.tensor, prefix, suffix, parts.prefix_ops, parts.suffix_ops)
