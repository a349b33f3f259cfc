"""Inference on the generated C: on the host (a shared library), on an emulated board (QEMU), and
checked bit for bit against the tflite-micro interpreter."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoflash.compiler.ir import Graph
from zoflash.compiler.quant import as_samples
from zoflash.errors import DataError, TflmError
from zoflash.targets import boards as boards_mod
from zoflash.targets import emulated
from zoflash.targets.host_runner import HostModel
from zoflash.workflows.generate import (
    LoadedModel,
    build_compiled,
    compile_for,
    compile_loaded,
    configured_board,
    load_model,
    on_emulator,
)


@contextmanager
def host_model(model: str | Path | LoadedModel, bundle_dir: str | Path | None = None):
    """Generate and build the model (a file, or one already loaded) for the host in a scratch
    directory, yield it loaded."""
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    board = configured_board("host")
    with tempfile.TemporaryDirectory(prefix="zoflash-") as tmp:
        out = Path(bundle_dir) if bundle_dir else Path(tmp) / "bundle"
        yield HostModel(build_compiled(compile_loaded(loaded), board, out).bundle)


def infer(model_path: str | Path, x: np.ndarray) -> np.ndarray:
    """Run the generated C on every sample of x ([N, *input shape], leading batch 1 optional), data of
    the model's input type (int8, int16, uint8 or float32) or float in its real units; returns output 0 of
    the model's output type."""
    with host_model(model_path) as m:
        return m.run(x)


def infer_on_board(
    model_path: str | Path, x, board_id: str = "mps3-an547", bundle_dir: str | Path | None = None
) -> list[np.ndarray]:
    """Run the model's inference build for an emulated board (QEMU) on the samples of x, in order
    (a stateful model's state carries from one to the next), as for infer(); returns every output,
    [N, *output shape] each. A board QEMU does not emulate is refused (BoardError); so are more
    samples of a stateful model than one image holds (DataError, see emulated.run_inference)."""
    board, _ = boards_mod.resolve_board(board_id)
    emulated.emulator(board)
    compiled = compile_for(model_path)
    with tempfile.TemporaryDirectory(prefix="zoflash-") as tmp:
        out = Path(bundle_dir) if bundle_dir else Path(tmp) / "bundle"
        return on_emulator(compiled, configured_board(board.id), out, lambda b: emulated.run_inference(b, x).outputs)


@dataclass
class OutputComparison:
    """One output of validate: the largest difference from TFLM and how many elements differ."""

    name: str
    max_abs_diff: float
    mismatches: int
    elements: int


@dataclass
class ValidationReport:
    """What validate compared: the number of input samples, and each output's comparison."""

    samples: int
    outputs: list[OutputComparison]

    @property
    def ok(self) -> bool:
        return all(o.mismatches == 0 for o in self.outputs)


def input_quantization(graph: Graph, index: int = 0):
    """Input `index`'s quantization; a float input has none of its own, so the QUANTIZE reading it gives it."""
    i = graph.inputs[index]
    t = graph.tensors[i]
    if t.quant is None and t.dtype == "float32" and graph.consumers().get(i):
        return graph.tensors[graph.consumers()[i][0].outputs[0]].quant
    return t.quant


RANDOM_INPUTS_BYTES = 256 << 20  # random inputs are held in memory, run by the C and by tflite-micro


def random_inputs(model: LoadedModel, n: int, seed: int = 0) -> np.ndarray | list[np.ndarray]:
    """n random samples of the model's input type: int8, uint8 or int16 uniform over the whole range, float32
    uniform over the range the model's QUANTIZE represents widened by a quarter each side (values it
    saturates), every tenth value at (or next to) a rounding tie x / scale = k + 0.5. A model with several
    inputs gets a list, one [n, *shape] array per input, each of its own type and shape."""
    if seed < 0:
        raise DataError(f"seed {seed} for random inputs: give a seed of 0 or more")
    per_sample = sum(
        int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in (model.graph.tensors[i] for i in model.graph.inputs)
    )
    if n < 1 or n * per_sample > RANDOM_INPUTS_BYTES:
        raise DataError(
            f"{n} random samples: give from 1 to {max(1, RANDOM_INPUTS_BYTES // max(per_sample, 1))} "
            f"(this model's inputs take {per_sample} bytes a sample; at most {RANDOM_INPUTS_BYTES >> 20} MiB in all)"
        )
    rng = np.random.default_rng(seed)
    xs = [_random_input(model.graph, k, n, rng) for k in range(len(model.graph.inputs))]
    return xs[0] if len(xs) == 1 else xs


def _random_input(graph: Graph, index: int, n: int, rng: np.random.Generator) -> np.ndarray:
    t = graph.tensors[graph.inputs[index]]
    size = (n,) + t.shape
    if t.dtype == "uint8":
        return rng.integers(0, 256, size=size, dtype=np.uint8)
    if t.dtype == "int16":
        return rng.integers(-32768, 32768, size=size, dtype=np.int16)
    if t.dtype != "float32":
        return rng.integers(-128, 128, size=size, dtype=np.int8)
    q = input_quantization(graph, index)
    if q is None:  # a float input no QUANTIZE reads: values of the order of one
        return rng.uniform(-1.0, 1.0, size=size).astype(np.float32)
    steps = rng.uniform(-128 - 64, 127 + 64, size=size)
    steps = np.where(rng.random(size) < 0.1, np.floor(steps) + 0.5, steps)
    return (np.float32(q.scale) * (steps - q.zero_point).astype(np.float32)).astype(np.float32)


def model_samples(model: LoadedModel, x: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """One [N, *shape] array of its type per model input, from x: an array (a one-input model) or one
    array per input, in the model's input order (as `random_inputs` gives them)."""
    graph = model.graph
    xs: list[np.ndarray] = [np.asarray(a) for a in x] if isinstance(x, (list, tuple)) else [np.asarray(x)]
    if len(xs) != len(graph.inputs):
        names = ", ".join(graph.tensors[i].describe() for i in graph.inputs)
        raise DataError(
            f"the model has {len(graph.inputs)} inputs ({names}) but {len(xs)} array(s) were given: give one "
            "array of samples per input, in this order (on the command line: an .npz holding them in order)"
        )
    samples = []
    for k, (xk, i) in enumerate(zip(xs, graph.inputs)):
        t, q = graph.tensors[i], input_quantization(graph, k)
        what = "inputs" if len(xs) == 1 else f"samples of input {k} '{t.name}'"
        samples.append(
            as_samples(xk, t.shape, q.scale if q else None, q.zero_point if q else None, what=what, dtype=t.dtype)
        )
    counts = {s.shape[0] for s in samples}
    if len(counts) > 1:
        raise DataError(
            f"the inputs have different sample counts {[s.shape[0] for s in samples]}; give as many of each"
        )
    return samples


def validate(
    model_path: str | Path | LoadedModel, x: np.ndarray | Sequence[np.ndarray], *, timeout: float | None = None
) -> ValidationReport:
    """Run the generated C and the tflite-micro interpreter on the same inputs (of the model's input
    type, or float in its real units, quantized once here for an integer input) and compare every
    output. x is an array for a one-input model, else one array per input. The samples are a sequence:
    a stateful model's state carries from one to the next in both. The interpreter runs in a child
    process: a model it cannot load (it may abort) is a TflmError, never a crash of the caller; so is a
    run longer than `timeout` seconds (default 600 s plus 1 s per sample)."""
    from zoflash.reference import tflm  # tflite-micro is optional: loaded only here

    model = model_path if isinstance(model_path, LoadedModel) else load_model(model_path)
    xs = model_samples(model, x)
    # Both engines start from a reset state and keep it across the samples, so a stateful model
    # (SVDF) is checked on the whole sequence, its state's evolution included.
    with host_model(model) as m:
        m.reset()
        ours = m.run_outputs(xs)
    golden = tflm.run_isolated(model.raw, xs, timeout=timeout, name=f"'{model.path}'")
    if len(golden) != len(ours):
        raise TflmError(f"'{model.path}'", f"gave {len(golden)} outputs for the model's {len(ours)}")
    return ValidationReport(
        samples=xs[0].shape[0],
        outputs=[
            _compare(model.graph.tensors[t].name, y, _golden_like(g, y, str(model.path), k))
            for k, (t, y, g) in enumerate(zip(model.graph.outputs, ours, golden))
        ],
    )


def _golden_like(golden: np.ndarray, ours: np.ndarray, name: str, k: int) -> np.ndarray:
    if golden.size != ours.size:
        raise TflmError(f"'{name}'", f"gave {golden.size} values for output {k}, of {ours.size} in the model")
    return golden.reshape(ours.shape)


def _compare(name: str, ours: np.ndarray, golden: np.ndarray) -> OutputComparison:
    """Bit for bit: integers by value, floats by their bits."""
    diff = np.abs(ours.astype(np.float64) - golden.astype(np.float64))
    mismatches = (
        int(np.count_nonzero(ours != golden))
        if ours.dtype.kind != "f"
        else int(np.count_nonzero(ours.view(np.uint32) != golden.astype(ours.dtype).view(np.uint32)))
    )
    return OutputComparison(
        name=name, max_abs_diff=float(diff.max()) if diff.size else 0.0, mismatches=mismatches, elements=int(ours.size)
    )
