"""`zoflash profile`: where one inference spends its instructions on the emulated Cortex-M55.

The model's inference bundle for an emulated board is linked with the emulated-run harness built
to trace (zo_infer_main.c with -DZO_INFER_TRACE: one inference of a sample between two calls of
a marker), and QEMU logs the address of every instruction executed in between
(targets/exec_trace.py). Attribution follows the generated code's own dispatch: `<prefix>_invoke`
calls one kernel function per op, in op order (the same calls as the `case k:` lines of
`<prefix>_run_steps`), so the k-th time execution leaves `_invoke` for the entry of op k's kernel
function, op k starts, and all it executes until execution is back in `_invoke` is op k's,
whatever the kernel calls and however the compiler shaped it. The addresses are then named with
the ELF's symbol table (the kernel variant: the function where the op spent most instructions).
What `_invoke` executes itself (argument set-up, calls and returns), and the harness around it
between the marks, is the run's overhead.

The cycle estimate is the one of docs/benchmarks.md: every instruction one cycle, an MVE (Helium)
instruction two (the M55 executes a 128-bit vector instruction in two beats). It cannot see memory
wait states, caches, pipeline stalls or MVE/scalar overlap: real silicon differs.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zoflash.errors import BoardError, BuildError, DataError
from zoflash.targets import boards as boards_mod
from zoflash.targets import emulated, emulated_train, exec_trace
from zoflash.targets.host_build import require
from zoflash.targets.project import Bundle
from zoflash.training.options import make_options
from zoflash.workflows.generate import compile_for, configured_board, load_model, on_emulator, place, render
from zoflash.workflows.inference import random_inputs

SCHEMA = "zoflash.profile/1"
CYCLE_MODEL = (
    "instructions + MVE instructions (an MVE instruction takes two beats); no memory wait states, caches or stalls"
)
TRACE_CFLAGS = "-DZO_INFER_TRACE"
_CASE = re.compile(r"^\s*case (\d+):\s*\n\s*(\w+)\(", re.M)


def step_macs(kernel: str, p: dict) -> int:
    """Multiply-accumulates of one kernel call, from its shapes (conv, depthwise and FC; 0 for the rest)."""
    if kernel in ("conv2d", "conv2d_s16"):
        return p["output_h"] * p["output_w"] * p["output_c"] * p["filter_h"] * p["filter_w"] * p["filter_c"]
    if kernel in ("depthwise_conv2d", "depthwise_conv2d_s16"):
        return p["output_h"] * p["output_w"] * p["output_c"] * p["filter_h"] * p["filter_w"]
    if kernel in ("fully_connected", "fully_connected_s16"):
        return p["rows"] * p["units"] * p["depth"]
    return 0


@dataclass
class Cost:
    """Executed instructions, of which MVE, and what they give: the estimated cycles, MAC/cycle."""

    instructions: int = 0
    mve: int = 0
    macs: int = 0

    @property
    def cycles(self) -> int:
        return self.instructions + self.mve

    @property
    def macs_per_cycle(self) -> float:
        return self.macs / self.cycles if self.cycles else 0.0

    def add(self, other: Cost) -> None:
        self.instructions += other.instructions
        self.mve += other.mve
        self.macs += other.macs

    def as_dict(self) -> dict:
        return {
            "instructions": self.instructions,
            "mve": self.mve,
            "cycles": self.cycles,
            "macs": self.macs,
            "macs_per_cycle": round(self.macs_per_cycle, 4),
        }


@dataclass
class OpProfile:
    index: int
    type: str  # the TFLite operator
    kernel: str  # the C function the generated code calls
    variant: str  # the function where the call spent most instructions
    cost: Cost
    functions: dict[str, int] = field(default_factory=dict)  # instructions by function

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "type": self.type,
            "kernel": self.kernel,
            "variant": self.variant,
            **self.cost.as_dict(),
            "functions": self.functions,
        }


@dataclass
class Profile:
    model: str
    board: str
    ops: list[OpProfile]
    overhead: Cost  # what the model's invoke executed outside its kernel calls
    total: Cost  # the whole traced inference: the ops and the overhead
    step: StepProfile | None = None  # one training step by phase (with training data)

    def by_type(self) -> dict[str, tuple[int, Cost]]:
        """Calls and summed cost of each op type, costliest first."""
        out: dict[str, tuple[int, Cost]] = {}
        for op in self.ops:
            calls, cost = out.get(op.type, (0, Cost()))
            cost.add(op.cost)
            out[op.type] = (calls + 1, cost)
        return dict(sorted(out.items(), key=lambda kv: -kv[1][1].cycles))

    def as_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "board": self.board,
            "cycle_model": CYCLE_MODEL,
            "ops": [op.as_dict() for op in self.ops],
            "by_type": [{"type": t, "calls": n, **c.as_dict()} for t, (n, c) in self.by_type().items()],
            "overhead": self.overhead.as_dict(),
            "total": self.total.as_dict(),
            **({"step": self.step.as_dict()} if self.step else {}),
        }


PHASES = ("prefix", "perturb", "suffix", "loss", "update", "telemetry", "other")
LOSSES = ("zo_cross_entropy_s8", "zo_cross_entropy_s16", "zo_sigmoid_bce", "zo_mse_s8", "zo_mse_s16")
STEP_LR = 0.01  # the profiled step's fixed lr: no calibration steps first (they do not update)


@dataclass
class StepProfile:
    """One training step by phase: calls (passes for prefix and suffix) and cost of each."""

    batch: int
    q: int
    split: int  # the first step of the suffix
    phases: dict[str, tuple[int, Cost]]  # phase: (calls entering it; passes for prefix and suffix), cost
    total: Cost
    functions: dict[str, dict[str, int]] = field(default_factory=dict)  # phase: instructions by function

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "q": self.q,
            "split": self.split,
            "phases": [
                {"phase": k, "calls": n, **c.as_dict(), "functions": self.functions.get(k, {})}
                for k, (n, c) in self.phases.items()
            ],
            "total": self.total.as_dict(),
        }


def phase_of(prefix: str, batch: int):
    """The phase a call opens (exec_trace.split_by_phase), by the trainer's own functions and its
    dispatch order: zo_run_step first runs the minibatch's b prefixes (run_prefix: the model's
    run_steps(0, split), even when split is 0; an emulated port keeps no prefix memo), so the first
    b calls of run_steps are the prefix passes and every later one a suffix pass."""
    run_steps, passes = f"{prefix}_run_steps", [0]

    def classify(name: str) -> str | None:
        if name == run_steps:
            passes[0] += 1
            return "prefix" if passes[0] <= batch else "suffix"
        if name in LOSSES:
            return "loss"
        if name.startswith("zo_perturb_"):
            return "perturb"
        if name.startswith("zo_update_") or name in ("zo_f16_from_f32", "zo_f32_from_f16"):
            return "update"
        if name.startswith(("zo_tm_", "zo_wire_")) or name == "zo_send_event":
            return "telemetry"
        return None

    return classify


STEP_TEST_SAMPLES = 4  # the test set kept for the profiled step (evaluated once before it, untraced but slow)


def step_data(data_path: Path, out: Path, batch: int) -> Path:
    """A copy of the training data cut for the profiled step: the firmware evaluates the validation
    and test sets once before the step, and under the trace QEMU logs every instruction, so they
    are cut to a few samples (4 minibatches of training samples, from which the validation split is
    carved, and STEP_TEST_SAMPLES test samples). A step's instructions do not depend on the set sizes."""
    try:
        with np.load(data_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read '{data_path}' as an .npz dataset: {exc}") from None
    keep = {"_train": 4 * batch, "_test": STEP_TEST_SAMPLES}
    for key, a in arrays.items():
        n = next((v for suffix, v in keep.items() if key.endswith(suffix)), None)
        if n is not None and a.ndim > 0:
            arrays[key] = a[:n]
    np.savez(out, **arrays)
    return out


def trace_step(bundle: Bundle, macs: list[int], timeout_s: float = 1800) -> StepProfile:
    """Build the training bundle with the one-step main (targets/emulated_train.py), trace the step
    under QEMU and attribute its instructions to the phases (phase_of)."""
    board = boards_mod.load_board(bundle.board)
    entry = emulated.emulator(board)
    program = require(entry["program"], "install QEMU 7.2 or newer (Debian/Ubuntu: apt-get install qemu-system-arm)")
    elf = emulated_train.build_step_harness(bundle)
    cc = bundle.manifest["toolchain"]["cc"]
    symbols = exec_trace.Symbols.read(elf, exec_trace.binutil(cc, "nm"))
    mve = exec_trace.mve_addresses(elf, exec_trace.binutil(cc, "objdump"))
    mark = symbols.address(exec_trace.MARK)
    if mark is None:
        raise BuildError(f"{elf.name}: no {exec_trace.MARK}")
    pcs = exec_trace.traced_pcs(elf, mark, program, entry["machine"], entry.get("args", ()), timeout_s)
    training = bundle.manifest["training"]
    trace = exec_trace.split_by_phase(pcs, symbols, phase_of(bundle.prefix, training["options"]["batch"]))
    split, end = training["split_step"], training["logits_end_step"]
    per_pass = {"prefix": sum(macs[:split]), "suffix": sum(macs[split:end])}
    phases: dict[str, tuple[int, Cost]] = {}
    functions: dict[str, dict[str, int]] = {}
    total = Cost()
    for name in PHASES:
        counts = trace.phases.get(name)
        if counts is None and name not in ("prefix", "suffix"):
            continue
        s = exec_trace.summarize(counts or Counter(), symbols, mve)
        calls = trace.calls.get(name, 0)
        cost = Cost(s["instructions"], s["mve"], per_pass.get(name, 0) * calls)
        phases[name] = (calls, cost)
        functions[name] = s["functions"]
        total.add(cost)
    if total.instructions != trace.total:
        raise BuildError(f"attributed {total.instructions} of {trace.total} traced instructions")
    options = training["options"]
    b, suffix = options["batch"], phases["suffix"][0]
    if phases["prefix"][0] != b or suffix == 0 or suffix % b or trace.calls.get("loss", 0) != suffix:
        raise BuildError(
            f"the traced step ran {phases['prefix'][0]} prefix and {suffix} suffix passes with "
            f"{trace.calls.get('loss', 0)} losses: not the trainer's order (b = {b} prefixes, then a loss "
            "per suffix pass), so its phases cannot be told apart"
        )
    return StepProfile(options["batch"], options["q"], split, phases, total, functions)


def emulated_board(board_id: str):
    """The board, which must be one QEMU emulates (a clear BoardError naming the way otherwise)."""
    board, _ = boards_mod.resolve_board(board_id)
    try:
        emulated.emulator(board)
    except BoardError:
        hint = (
            f"for {board.family} (also a Cortex-M55, the same kernels) profile with --board mps3-an547: the "
            "instruction counts carry over, its cycles on silicon differ (wait states, caches)"
            if board.family == "stm32n6"
            else "give --board mps3-an547"
        )
        raise BoardError(
            f"profile runs on the emulated board mps3-an547 (the Cortex-M55 under QEMU); '{board.id}' is not "
            f"emulated: {hint}"
        ) from None
    return board


def dispatch_order(bundle: Bundle) -> list[str]:
    """The kernel function of each op, in op order: the `case k:` calls of the generated run_steps."""
    text = (bundle.path / f"{bundle.prefix}.c").read_text()
    body = text[text.find(f"void {bundle.prefix}_run_steps(") :]
    calls = {int(k): fn for k, fn in _CASE.findall(body)}
    n = len(bundle.manifest["ops"])
    if sorted(calls) != list(range(n)):
        raise BuildError(f"{bundle.prefix}.c dispatches {len(calls)} kernel calls, the model has {n} ops")
    return [calls[k] for k in range(n)]


def trace_bundle(bundle: Bundle, xs, macs: list[int], timeout_s: float = 1800) -> Profile:
    """Build the traced harness of an inference bundle, run one inference of xs' first sample under
    QEMU and attribute its instructions to the ops (see the module's docstring)."""
    board = boards_mod.load_board(bundle.board)
    entry = emulated.emulator(board)
    program = require(entry["program"], "install QEMU 7.2 or newer (Debian/Ubuntu: apt-get install qemu-system-arm)")
    elf = emulated.build_harness(bundle, xs, TRACE_CFLAGS)
    cc = bundle.manifest["toolchain"]["cc"]
    symbols = exec_trace.Symbols.read(elf, exec_trace.binutil(cc, "nm"))
    mve = exec_trace.mve_addresses(elf, exec_trace.binutil(cc, "objdump"))
    functions = dispatch_order(bundle)
    entries: list[int] = []
    for fn in functions:
        start = symbols.address(fn)
        if start is None:
            raise BuildError(f"{elf.name} has no function '{fn}' (op {len(entries)}'s kernel): it cannot be attributed")
        entries.append(start)
    mark = symbols.address(exec_trace.MARK)
    if mark is None:
        raise BuildError(f"{elf.name}: no {exec_trace.MARK} (the harness must be built with {TRACE_CFLAGS})")
    pcs = exec_trace.traced_pcs(elf, mark, program, entry["machine"], entry.get("args", ()), timeout_s)
    # main: the harness calling _invoke between the marks, where a tail-called last kernel returns
    home = [symbols.span(f"{bundle.prefix}_invoke"), symbols.span("main")]
    trace = exec_trace.split_by_calls(pcs, home, entries)
    ops = []
    for k, (spec, fn, counts) in enumerate(zip(bundle.manifest["ops"], functions, trace.calls)):
        s = exec_trace.summarize(counts, symbols, mve)
        variant = next(iter(s["functions"]), fn)
        ops.append(OpProfile(k, spec["type"], fn, variant, Cost(s["instructions"], s["mve"], macs[k]), s["functions"]))
    over = exec_trace.summarize(trace.overhead, symbols, mve)
    overhead = Cost(over["instructions"], over["mve"])
    total = Cost()
    for op in ops:
        total.add(op.cost)
    total.add(overhead)
    if total.instructions != trace.total:  # every traced instruction is attributed exactly once
        raise BuildError(f"attributed {total.instructions} of {trace.total} traced instructions")
    return Profile(bundle.prefix, board.id, ops, overhead, total)


def profile(
    model_path: str | Path,
    board_id: str = "mps3-an547",
    x=None,
    seed: int = 0,
    data_path: str | Path | None = None,
    options=None,
) -> Profile:
    """Profile one inference of the model on an emulated board: per kernel call, executed instructions,
    MVE instructions, estimated cycles, MACs and MAC/cycle (see the module's docstring). x: the
    sample to run ([1, *input shape], or one such array per input); a random one (seed) if None.
    With training data (a .npz as for build), also one training step by phase (.step): the
    options' (TrainOptions, defaults if None) with a fixed lr and no lr trial, so that the step
    profiled is the first one and it updates."""
    board = emulated_board(board_id)
    path = Path(model_path)
    if not path.is_file():
        raise DataError(f"model '{path}' does not exist: give a .tflite file")
    step_options = None
    if data_path is not None:  # checked before the inference's trace
        step_options = dataclasses.replace(options or make_options(), lr=STEP_LR, lr_trial=0)
        if step_options.data_source != "embedded":
            raise DataError(
                "profile --data runs the step on the training data embedded in the firmware; the options "
                f"say data_source = '{step_options.data_source}': set it to 'embedded' (zoflash.toml) to profile"
            )
    configured = configured_board(board.id)
    compiled = compile_for(path)
    steps = compiled.model.program.steps
    if x is None:
        x = random_inputs(load_model(path), 1, seed=seed)
    macs = [step_macs(s.kernel, s.params) for s in steps]

    def trace(bundle: Bundle) -> Profile:
        if len(steps) != len(bundle.manifest["ops"]):
            raise BuildError(
                f"the compiled program has {len(steps)} steps, the bundle {len(bundle.manifest['ops'])} ops"
            )
        xs, _ = emulated.samples(bundle, x)
        return trace_bundle(bundle, [a[:1] for a in xs], macs)

    with tempfile.TemporaryDirectory(prefix="zoflash-profile-") as tmp:
        result = on_emulator(compiled, configured, Path(tmp) / "bundle", trace)
        if step_options is not None and data_path is not None:
            cut = step_data(Path(data_path), Path(tmp) / "step_data.npz", step_options.batch)
            trained = compile_for(path, cut, step_options)
            train_bundle = render(
                trained, place(trained, configured_board(board.id, data_path=cut)), Path(tmp) / "train"
            )
            result.step = trace_step(train_bundle, macs)
    result.model = path.name
    return result
