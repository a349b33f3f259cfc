"""The library API: load, compile, generate, build, infer, validate, inspect.

The CLI is a thin layer over these functions; everything here is usable from Python.
"""
from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoflash.compiler.bundle import Bundle, generate_bundle
from zoflash.compiler.codegen import c_identifier
from zoflash.compiler.ir import Graph
from zoflash.compiler.pipeline import CompiledModel, collect_buffers, compile_graph
from zoflash.compiler.quant import as_samples
from zoflash.compiler.tflite_import import load_tflite, model_sha256
from zoflash.errors import BoardError, BuildError, UnsupportedModelError
from zoflash.targets import boards as boards_mod
from zoflash.targets.host_build import BuildResult, build_host
from zoflash.targets.host_runner import HostModel

log = logging.getLogger("zoflash")


@dataclass
class LoadedModel:
    path: Path
    graph: Graph
    raw: bytes

    @property
    def sha256(self) -> str:
        return model_sha256(self.raw)


def load_model(path: str | Path) -> LoadedModel:
    graph, raw = load_tflite(path)
    return LoadedModel(Path(path), graph, raw)


def compile_model(model: LoadedModel) -> CompiledModel:
    return compile_graph(model.graph)


def default_bundle_dir(model_path: Path, board_id: str) -> Path:
    return Path("generated") / f"{c_identifier(model_path.stem)}-{board_id}"


def generate(model_path: str | Path, board_id: str = "host", out_dir: str | Path | None = None,
             prefix: str | None = None, data_path: str | Path | None = None, options=None,
             boot: str = "dev", device_headers=(), measured: dict | None = None, npu=None,
             check_boundary: bool = False) -> Bundle:
    """Compile a model and write its bundle for a board (no compiler run). With `data_path`,
    the bundle also trains (options: train_options.TrainOptions, defaults if None). `board_id`
    may be a family name (its reference board). For a board with memory regions, a plan that
    does not fit them fails here, before any file is written (budget.BudgetError). `boot`
    ('dev' or 'flash': boards.BOOT_MODES) chooses the placement rules; `device_headers` are
    checkouts of the vendor's headers the port then compiles against (device_headers.py);
    `measured` code sizes replace the port's estimate in the plan (build's re-plan); `npu`
    (an NpuRequest of targets/npu.py) runs the frozen prefix on the board's NPU (training bundles only);
    `check_boundary` (always with `npu`) builds in the host simulation's boundary checksum."""
    board, note = boards_mod.resolve_board(board_id)
    if npu is not None and data_path is None:
        raise BuildError(f"--npu {npu.accelerator} runs the training plan's frozen prefix on the NPU: it needs --data")
    if note:
        log.info("board %s", note)
    board = _configure(board, boot, device_headers)
    if data_path is not None:
        from zoflash.training.options import make_options
        from zoflash.training.pipeline import compile_training, training_bundle

        _refuse_stateful_training(model_path)
        prep = compile_training(model_path, data_path, options or make_options())
        board = _fit(board, prep.model, prep.training, measured, npu)
        out = Path(out_dir) if out_dir is not None else default_bundle_dir(prep.path, board.id)
        expected = None
        if npu is not None:  # --- NPU: a missing tool is said before the host simulation runs
            from zoflash.targets.npu import backend_for

            backend_for(npu.accelerator).load().find_tools(npu)
        if npu is not None or check_boundary:  # --- boundary checksum ---
            from zoflash.targets.boundary_check import simulated_crc32

            expected = simulated_crc32(prep)
        bundle = training_bundle(prep, board, out, prefix, npu=npu, boundary_expected=expected)
        log.info("wrote training bundle %s (%d files)", out, len(bundle.manifest["files"]))
        return bundle
    model = load_model(model_path)
    compiled = compile_model(model)
    board = _fit(board, compiled, None, measured)
    out = Path(out_dir) if out_dir is not None else default_bundle_dir(model.path, board.id)
    bundle = generate_bundle(compiled, board, out, model.path.name, model.sha256, prefix=prefix)
    log.info("wrote bundle %s (%d files)", out, len(bundle.manifest["files"]))
    return bundle


# --- flash boot and device headers ---
def _configure(board, boot: str, device_headers):
    """The board with the boot mode's placement rules and the vendor headers' include folders."""
    from dataclasses import replace

    from zoflash.targets.device_headers import include_dirs

    board = boards_mod.for_boot(board, boot)
    dirs = include_dirs(board, device_headers)
    return replace(board, device_includes=tuple(str(d) for d in dirs)) if dirs else board
# --- end flash boot and device headers ---


def _refuse_stateful_training(model_path: str | Path) -> None:
    graph = load_model(model_path).graph
    if any(t.is_variable for t in graph.tensors) or any(op.type == "VAR_HANDLE" for op in graph.ops):
        raise UnsupportedModelError(str(model_path), [
            "the model keeps state across invokes (variable tensors, e.g. SVDF, or resource variables); "
            "training a stateful model is not supported yet: build it without --data for inference"])


def _fit(board, compiled: CompiledModel, training, measured=None, npu=None):
    """A firmware board with its memory plan for this model (budget.fit; an NPU's pools set apart);
    a host board as it is."""
    if not board.is_firmware:
        return board
    from zoflash.targets.budget import fit
    from zoflash.targets.npu import reserved

    return fit(board, compiled, training, measured, reserved(board, npu))


def build(model_path: str | Path, board_id: str = "host", out_dir: str | Path | None = None,
          prefix: str | None = None, data_path: str | Path | None = None, options=None,
          boot: str = "dev", device_headers=(), npu=None, check_boundary: bool = False) -> BuildResult:
    """generate() and compile: for the host a shared library and programs, for a firmware
    board the training firmware (ELF, BIN, HEX; with data) or the model as a static library,
    with the memory used per region (BuildResult.regions)."""
    bundle = generate(model_path, board_id, out_dir, prefix, data_path, options, boot, device_headers, npu=npu,
                      check_boundary=check_boundary)
    board = boards_mod.load_board(bundle.board)
    if board.is_firmware:
        from zoflash.targets.budget import BudgetError, placed_board
        from zoflash.targets.firmware_build import build_firmware

        try:
            return build_firmware(bundle, placed_board(bundle))
        except (BuildError, BudgetError) as err:  # --- re-plan after an overflow ---
            from zoflash.targets.firmware_build import measured_sizes, overflowed_region

            if isinstance(err, BuildError) and overflowed_region(err) is None:
                raise
            # The plan used the port's code estimate and the linker (or, for a library, the size
            # report) found a region too small: plan again with the code and constants just
            # compiled (the objects are reused).
            log.info("a region overflowed after compiling: planning again with the compiled code's sizes")
            bundle = generate(model_path, board_id, out_dir, prefix, data_path, options, boot, device_headers,
                              measured=measured_sizes(bundle), npu=npu, check_boundary=check_boundary)
            return build_firmware(bundle, placed_board(bundle))
    return build_host(bundle)


@contextmanager
def host_model(model_path: str | Path, bundle_dir: str | Path | None = None):
    """Generate and build the model for the host in a scratch directory, yield it loaded."""
    with tempfile.TemporaryDirectory(prefix="zoflash-") as tmp:
        result = build(model_path, "host", Path(bundle_dir) if bundle_dir else Path(tmp) / "bundle")
        yield HostModel(result.bundle)


def infer(model_path: str | Path, x: np.ndarray) -> np.ndarray:
    """Run the generated C on every sample of x ([N, *input shape], leading batch 1 optional), data of
    the model's input type (int8, int16, uint8 or float32) or float in its real units; returns output 0 of
    the model's output type."""
    with host_model(model_path) as m:
        return m.run(x)


# --- inference on an emulated board (targets/emulated.py) -------------------------------------
def infer_on_board(model_path: str | Path, x, board_id: str = "mps3-an547",
                   bundle_dir: str | Path | None = None) -> list[np.ndarray]:
    """Run the model's inference build for an emulated board (QEMU) on the samples of x, in order
    (a stateful model's state carries from one to the next), as for infer(); returns every output,
    [N, *output shape] each. A board QEMU does not emulate is refused (BoardError); so are more
    samples of a stateful model than one image holds (DataError, see emulated.run_inference)."""
    from zoflash.targets import emulated

    board, _ = boards_mod.resolve_board(board_id)
    emulated.emulator(board)
    with tempfile.TemporaryDirectory(prefix="zoflash-") as tmp:
        bundle = generate(model_path, board.id, Path(bundle_dir) if bundle_dir else Path(tmp) / "bundle")
        return emulated.run_inference(bundle, x).outputs
# --- end of inference on an emulated board -----------------------------------------------------


@dataclass
class OutputComparison:
    name: str
    max_abs_diff: float
    mismatches: int
    elements: int


@dataclass
class ValidationReport:
    samples: int
    outputs: list[OutputComparison]

    @property
    def ok(self) -> bool:
        return all(o.mismatches == 0 for o in self.outputs)


def input_quantization(graph: Graph):
    """Input 0's quantization; a float input has none of its own, so the QUANTIZE reading it gives it."""
    i = graph.inputs[0]
    t = graph.tensors[i]
    if t.quant is None and t.dtype == "float32" and graph.consumers().get(i):
        return graph.tensors[graph.consumers()[i][0].outputs[0]].quant
    return t.quant


def random_inputs(model: LoadedModel, n: int, seed: int = 0) -> np.ndarray:
    """n random samples of the model's input type: int8, uint8 or int16 uniform over the whole range, float32
    uniform over the range the model's QUANTIZE represents widened by a quarter each side (values it
    saturates), every tenth value at (or next to) a rounding tie x / scale = k + 0.5."""
    t = model.graph.tensors[model.graph.inputs[0]]
    rng = np.random.default_rng(seed)
    size = (n,) + t.shape
    if t.dtype == "uint8":
        return rng.integers(0, 256, size=size, dtype=np.uint8)
    if t.dtype == "int16":
        return rng.integers(-32768, 32768, size=size, dtype=np.int16)
    if t.dtype != "float32":
        return rng.integers(-128, 128, size=size, dtype=np.int8)
    q = input_quantization(model.graph)
    steps = rng.uniform(-128 - 64, 127 + 64, size=size)
    steps = np.where(rng.random(size) < 0.1, np.floor(steps) + 0.5, steps)
    return (np.float32(q.scale) * (steps - q.zero_point).astype(np.float32)).astype(np.float32)


def validate(model_path: str | Path, x: np.ndarray) -> ValidationReport:
    """Run the generated C and the tflite-micro interpreter on the same inputs (of the model's input
    type, or float in its real units, quantized once here for an integer input) and compare every
    output. The samples are a sequence: a stateful model's state carries from one to the next in both."""
    from zoflash.reference.tflm import TflmInterpreter  # optional dependency, loaded only here

    model = load_model(model_path)
    t_in = model.graph.tensors[model.graph.inputs[0]]
    q = input_quantization(model.graph)
    x = as_samples(x, t_in.shape, q.scale if q else None, q.zero_point if q else None, dtype=t_in.dtype)
    # Both engines start from a reset state and keep it across the samples, so a stateful model
    # (SVDF) is checked on the whole sequence, its state's evolution included.
    with host_model(model_path) as m:
        m.reset()
        ours = m.run_outputs(x)
    interpreter = TflmInterpreter(model.raw)
    interpreter.reset()
    shape = interpreter.inputs[0]["shape"]
    golden = [interpreter.invoke([sample.reshape(shape)]) for sample in x]  # every output of each sample
    return ValidationReport(samples=x.shape[0], outputs=[
        _compare(model.graph.tensors[t].name, y, np.stack([g[k] for g in golden]).reshape(y.shape))
        for k, (t, y) in enumerate(zip(model.graph.outputs, ours))])


def _compare(name: str, ours: np.ndarray, golden: np.ndarray) -> OutputComparison:
    """Bit for bit: integers by value, floats by their bits."""
    diff = np.abs(ours.astype(np.float64) - golden.astype(np.float64))
    mismatches = int(np.count_nonzero(ours != golden)) if ours.dtype.kind != "f" else \
        int(np.count_nonzero(ours.view(np.uint32) != golden.astype(ours.dtype).view(np.uint32)))
    return OutputComparison(name=name, max_abs_diff=float(diff.max()) if diff.size else 0.0,
                            mismatches=mismatches, elements=int(ours.size))


@dataclass
class Inspection:
    text: str  # the readable report
    supported: bool


def inspect(model_path: str | Path) -> Inspection:
    """A readable report: ops, tensors, quantization, the memory plan and the legality report."""
    model = load_model(model_path)
    g = model.graph
    lines = [f"model {model.path.name}  sha256 {model.sha256[:16]}...  {len(g.ops)} ops, {len(g.tensors)} tensors",
             "inputs:  " + "; ".join(g.tensors[i].describe() for i in g.inputs),
             "outputs: " + "; ".join(g.tensors[i].describe() for i in g.outputs), "", "ops:"]
    for op in g.ops:
        ins = ", ".join(f"{g.tensors[i].name}{list(g.tensors[i].shape)}" for i in op.inputs
                        if i >= 0 and not g.tensors[i].is_constant)
        outs = ", ".join(f"{g.tensors[i].name}{list(g.tensors[i].shape)}" for i in op.outputs)
        opts = ", ".join(f"{k}={v}" for k, v in sorted(op.options.items()))
        lines.append(f"  {op.index:3d} {op.type:<18} {ins} -> {outs}" + (f"  [{opts}]" if opts else ""))
    lines += ["", "tensors:"]
    for t in g.tensors:
        kind = f"const {t.nbytes} B" if t.is_constant else f"state {t.nbytes} B" if t.is_variable else "activation"
        lines.append(f"  {t.index:3d} {kind:<14} {t.describe()}")
    lines.append("")
    dynamic = sum(t.dynamic_batch for t in g.tensors)
    if dynamic:
        lines.append(f"dynamic batch: {dynamic} tensors declare a dynamic leading batch; compiled with batch 1, "
                     "as TFLM runs them")
    try:
        compiled = compile_graph(g)
    except UnsupportedModelError as err:
        lines += ["legality: NOT SUPPORTED", *[f"  - {p}" for p in err.problems]]
        return Inspection("\n".join(lines), supported=False)
    folded = len(g.ops) - len(compiled.graph.ops)
    if folded:
        lines.append(f"folded at compile time: {folded} ops computing constant shapes "
                     f"({', '.join(sorted({op.type for op in g.ops} - {op.type for op in compiled.graph.ops}))})")
    buffers = collect_buffers(compiled.program, compiled.root)
    lines.append(f"memory plan ({compiled.plan.strategy}): arena {compiled.arena_size} bytes "
                 f"(includes {compiled.io_bytes} bytes of inputs/outputs), constants {compiled.weights_bytes} bytes")
    for b in sorted(buffers, key=lambda b: compiled.plan.offsets[b.name]):
        t = g.tensors[int(b.name)]
        lines.append(f"  [{compiled.plan.offsets[b.name]:7d}, {compiled.plan.offsets[b.name] + b.size:7d})  "
                     f"steps {b.first:3d}..{b.last:3d}  '{t.name}'")
    if compiled.stateful:
        lines.append(f"state: {compiled.state_size} bytes beside the arena, never shared, kept across invokes "
                     "until <prefix>_reset()")
        for r, off in sorted(compiled.state_offset.items(), key=lambda item: item[1]):
            t = compiled.graph.tensors[r]  # a resource variable's state is a tensor the compiler added
            initial = ", initial values from CALL_ONCE" if t.initial is not None else ""
            lines.append(f"  [{off:7d}, {off + t.nbytes:7d})  '{t.name}'{initial}")
    lines.append(f"legality: supported ({len(compiled.program.steps)} kernel calls, "
                 f"{len(compiled.program.aliases)} aliases without code: reshapes, variable reads)")
    return Inspection("\n".join(lines), supported=True)


__all__ = ["load_model", "compile_model", "generate", "build", "infer", "validate", "inspect", "random_inputs",
           "input_quantization", "host_model"]


# --------------------------------------------------------------- memory plan only


@dataclass
class MemoryPlan:
    board: object  # boards.Board with the planned placement
    regions: list  # budget.RegionUse per region, estimated before compiling


def plan_memory(model_path: str | Path, board_id: str, data_path: str | Path | None = None,
                options=None, boot: str = "dev", npu=None) -> MemoryPlan:
    """The placement generate() would choose on a firmware board in boot mode `boot`, region by
    region, without writing or compiling anything; budget.BudgetError when it does not fit (with
    how many training samples would). `npu` (an NpuRequest, targets/npu.py): the NPU's pools are
    counted in the regions they occupy, so the CPU's placement keeps out of them."""
    from zoflash.targets import budget

    board, _ = boards_mod.resolve_board(board_id)
    if not board.is_firmware:
        raise BoardError(f"board '{board.id}' has no memory regions to plan (a firmware board has)")
    board = boards_mod.for_boot(board, boot)
    if data_path is None:
        model, training = compile_model(load_model(model_path)), None
    else:
        from zoflash.training.options import make_options
        from zoflash.training.pipeline import compile_training

        _refuse_stateful_training(model_path)
        prep = compile_training(model_path, data_path, options or make_options())
        model, training = prep.model, prep.training
    from zoflash.targets.npu import reserved

    npu_pools = reserved(board, npu)
    placed = budget.fit(board, model, training, reserved=npu_pools)
    return MemoryPlan(placed, budget.estimate_regions(board, model, training, npu_pools))


# --------------------------------------------------------------- zoflash split


@dataclass
class SplitResult:
    tensor: str        # the cut tensor's name
    prefix_path: Path  # model inputs -> tensor
    suffix_path: Path  # tensor -> model outputs
    prefix_ops: list[int]
    suffix_ops: list[int]


def training_cut(model_path: str | Path, options=None) -> str:
    """The name of the tensor the training plan cuts the model at (options: TrainOptions, defaults if
    None): the one activation the frozen prefix writes and the trainable suffix reads."""
    from zoflash.errors import SplitError
    from zoflash.training.options import make_options
    from zoflash.training.plan import plan_training

    compiled = compile_model(load_model(model_path))
    plan = plan_training(compiled, options or make_options())
    if plan.split == 0:
        raise SplitError("the training plan trains the first layer: the frozen prefix is empty (train fewer "
                         "layers with --train, or give the cut with --at)")
    names = [compiled.graph.tensors[b.index].name for b in plan.boundary]
    if len(names) != 1:
        raise SplitError(f"the training plan's suffix reads {len(names)} activations of the prefix "
                         f"({', '.join(names)}): give the cut with --at")
    return names[0]


def split_model(model_path: str | Path, out_dir: str | Path, at: str | None = None, options=None) -> SplitResult:
    """Write prefix.tflite and suffix.tflite into `out_dir`: the model cut at tensor `at`, or where the
    training plan for `options` cuts it."""
    from zoflash.compiler.tflite_split import split_tflite

    model = load_model(model_path)  # checks the file (ModelFormatError) before any surgery
    parts = split_tflite(model.raw, at if at is not None else training_cut(model_path, options))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix, suffix = out / "prefix.tflite", out / "suffix.tflite"
    prefix.write_bytes(parts.prefix)
    suffix.write_bytes(parts.suffix)
    return SplitResult(parts.tensor, prefix, suffix, parts.prefix_ops, parts.suffix_ops)
