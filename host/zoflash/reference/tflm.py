"""Thin wrapper around the tflite-micro Python interpreter: zoflash's golden reference.

The generated C must be bit-exact with this interpreter. tflite-micro is an optional
dependency: it is imported lazily, inside functions, so ``import zoflash`` works without it.

What the runtime offers (tflite-micro 0.dev2026, ``tflite_micro.python.tflite_micro.runtime``):

* ``Interpreter.from_bytes(model, arena_size=...)`` allocates a tensor arena of exactly
  ``arena_size`` bytes (default ``10 * len(model)``) and runs ``AllocateTensors`` (every
  kernel's Prepare) in the constructor; a too-small arena raises
  ``RuntimeError("TFLM failed to allocate tensors")`` there, never later in ``invoke``.
* ``set_input`` is strict (dtype and rank/shape must match), ``get_output`` returns a
  fresh copy (not a view into the arena).
* ``print_allocations()`` (RecordingMicroAllocator) writes the arena report from C++ to
  **stderr** (fd 2); there is no Python API returning the numbers, so we capture fds 1 and 2
  with ``os.dup``/``os.dup2`` and parse the text. It is only available in the default
  ``kAllocationRecording`` mode. The report is fixed at construction (identical before
  and after ``invoke``/``reset``).
* ``GetTensor(i, 0)`` (any tensor, e.g. intermediate activations) only works in
  ``kPreserveAllTensors`` mode and *segfaults* on an out-of-range index, hence the bound
  check in :meth:`TflmInterpreter.tensor`.
* ``reset()`` restores variable tensors / kernel state (for stateful models such as LSTMs).
  Resource variables are filled with their zero point; CALL_ONCE does not run its init
  subgraph again (it runs at the first invoke after construction, a reset before it or not).
  The fixture models are stateless: repeated invokes with the same input give identical
  output whatever ran in between, with or without ``reset()`` (checked in tests/test_tflm.py).

Arena numbers (:meth:`TflmInterpreter.arena_usage`), all in bytes:

* ``head``: the non-persistent section, i.e. the memory-planned buffer holding every
  activation tensor (model input and output included) plus kernel scratch buffers, sized
  by TFLM's greedy planner for the peak of simultaneously live tensors. This is the
  number a static C arena for activations should be compared against.
* ``tail``: persistent allocations made by the TFLM runtime itself: TfLiteEvalTensor
  array, NodeAndRegistration structs, kernel OpData (per-channel output multipliers and
  shifts live here), persistent TfLiteTensor structs for I/O and their quantization data.
  Mostly interpreter overhead that generated C does not need (it keeps such constants in flash).
* ``total = head + tail``: what the RecordingMicroAllocator reports as used. It can vary
  by a few bytes with the arena's address alignment.
* ``records``: the per-kind breakdown of the tail lines of the report
  (``{kind: {"used", "requested", "count"}}``).
* ``arena_size``: the arena this interpreter was created with.

The *minimal* arena that constructs (:func:`minimal_arena_size`, a binary search) can be
larger than ``total``: during ``AllocateTensors`` TFLM also needs temporary memory (memory
planner bookkeeping, temporary TfLiteTensors for Prepare) that is released afterwards and
therefore not counted in ``total``. E.g. the 3-layer MLP fixture reports total 2224 B but
needs a 2672 B arena.

Output capture at the file-descriptor level is process-wide: do not call these from
several threads at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np

# Upper bound for the automatic arena growth when arena_size is None.
_MAX_AUTO_ARENA = 256 * 1024 * 1024


def _runtime():
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:  # pragma: no cover - depends on the environment
        from zoflash.errors import ToolMissingError

        raise ToolMissingError("tflite-micro", "pip install tflite-micro (or pip install 'zoflash[tflm]')") from None
    return runtime


def available() -> bool:
    """True when the tflite-micro interpreter can be imported."""
    try:
        _runtime()
    except Exception:
        return False
    return True


# --------------------------------------------------------------------------- #
# fd-level capture of C/C++ output
# --------------------------------------------------------------------------- #
_LIBC = None


def _c_fflush() -> None:
    """Flush C stdio buffers so captured/restored fds get the bytes in order."""
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL(None)
        _LIBC.fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
        pass


class _Captured:
    text: str = ""


@contextlib.contextmanager
def capture_fds(fds: Sequence[int] = (1, 2)) -> Iterator[_Captured]:
    """Capture everything written to the given file descriptors (C printf/fprintf included).

    ``sys.stdout`` redirection does not see output of C++ code; this swaps the descriptors
    themselves for a temporary file and restores them afterwards. The captured text (all fds
    interleaved in write order) is in ``.text`` once the block exits, also on exceptions.
    """
    cap = _Captured()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _c_fflush()
    with tempfile.TemporaryFile() as tmp:
        saved = {fd: os.dup(fd) for fd in fds}
        try:
            for fd in fds:
                os.dup2(tmp.fileno(), fd)
            yield cap
        finally:
            _c_fflush()
            for fd, keep in saved.items():
                os.dup2(keep, fd)
                os.close(keep)
            tmp.seek(0)
            cap.text = tmp.read().decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- #
# flatbuffer facts the runtime does not expose (input/output/tensor counts)
# --------------------------------------------------------------------------- #
def _graph_counts(model_bytes: bytes) -> tuple[int, int, int]:
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema_fb

    if len(model_bytes) < 8 or model_bytes[4:8] != b"TFL3":
        raise ValueError("not a TFLite flatbuffer (missing TFL3 identifier)")
    m = schema_fb.Model.GetRootAsModel(model_bytes, 0)
    if m.SubgraphsLength() < 1:
        raise ValueError("model has no subgraph")
    g = m.Subgraphs(0)
    return g.InputsLength(), g.OutputsLength(), g.TensorsLength()


def _details(d: dict) -> dict:
    q = d.get("quantization_parameters", {})
    scales = np.asarray(q.get("scales", []), np.float32)
    zps = np.asarray(q.get("zero_points", []), np.int64)
    return {
        "shape": tuple(int(s) for s in d["shape"]),
        "dtype": np.dtype(d["dtype"]),
        "scale": float(scales[0]) if scales.size == 1 else (scales if scales.size else None),
        "zero_point": int(zps[0]) if zps.size == 1 else (zps if zps.size else None),
    }


_TOTAL_RE = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")
_REC_RE = re.compile(
    r"'([^']+)' used (\d+) bytes with alignment overhead "
    r"\(requested (\d+) bytes for (\d+) "
)


def parse_allocations(text: str) -> dict:
    """Parse the RecordingMicroAllocator report printed by ``print_allocations()``."""
    out: dict = {"records": {}}
    for kind, n in _TOTAL_RE.findall(text):
        out[kind] = int(n)
    for kind, used, req, count in _REC_RE.findall(text):
        out["records"][kind] = {"used": int(used), "requested": int(req), "count": int(count)}
    missing = {"total", "head", "tail"} - out.keys()
    if missing:
        raise RuntimeError(f"could not parse the TFLM allocation report (no {sorted(missing)}): {text!r}")
    return out


# --------------------------------------------------------------------------- #
# the interpreter
# --------------------------------------------------------------------------- #
class TflmInterpreter:
    """One tflite-micro interpreter instance for one model.

    ``arena_size=None`` starts at max(10 x model size, 64 KiB) and doubles until allocation
    succeeds; an explicit ``arena_size`` is used as is (too small -> RuntimeError carrying
    TFLM's own message). ``preserve_all_tensors=True`` enables :meth:`tensor` (intermediate
    activations after ``invoke``) but disables :meth:`arena_usage`.
    """

    def __init__(self, model_bytes: bytes, arena_size: int | None = None, *, preserve_all_tensors: bool = False):
        runtime = _runtime()
        self.model_bytes = bytes(model_bytes)
        self.num_inputs, self.num_outputs, self.num_tensors = _graph_counts(self.model_bytes)
        self.preserve_all_tensors = preserve_all_tensors
        config = (
            runtime.InterpreterConfig.kPreserveAllTensors
            if preserve_all_tensors
            else runtime.InterpreterConfig.kAllocationRecording
        )
        if arena_size is None:
            size = max(10 * len(self.model_bytes), 64 * 1024)
            while True:
                try:
                    self._it = self._create(runtime, size, config)
                    break
                except RuntimeError:
                    if size >= _MAX_AUTO_ARENA:
                        raise
                    size = min(size * 2, _MAX_AUTO_ARENA)
        else:
            size = int(arena_size)
            self._it = self._create(runtime, size, config)
        self.arena_size = size
        self.inputs = [_details(self._it.get_input_details(i)) for i in range(self.num_inputs)]
        self.outputs = [_details(self._it.get_output_details(i)) for i in range(self.num_outputs)]

    def _create(self, runtime, size: int, config):
        try:
            with capture_fds() as cap:
                return runtime.Interpreter.from_bytes(self.model_bytes, arena_size=size, intrepreter_config=config)
        except RuntimeError as exc:
            msg = " ".join(cap.text.split())
            raise RuntimeError(f"{exc} (arena_size={size})" + (f": {msg}" if msg else "")) from exc

    # -- running ------------------------------------------------------------ #
    def invoke(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run one sample. ``inputs[i]`` must have input i's exact shape (batch 1 included)
        and dtype. Returns one array per model output (copies, exact output shape)."""
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if len(inputs) != self.num_inputs:
            raise ValueError(f"model has {self.num_inputs} input(s), got {len(inputs)}")
        for i, (x, d) in enumerate(zip(inputs, self.inputs)):
            x = np.asarray(x)
            if x.dtype != d["dtype"]:
                raise TypeError(f"input {i}: expected dtype {d['dtype']}, got {x.dtype}")
            if tuple(x.shape) != d["shape"]:
                raise ValueError(f"input {i}: expected shape {d['shape']}, got {tuple(x.shape)}")
            self._it.set_input(np.ascontiguousarray(x), i)
        # No fd capture here (it costs ~1 ms per call); on failure TFLM prints its reason
        # on stderr and the runtime raises RuntimeError.
        self._it.invoke()
        return [np.array(self._it.get_output(i), copy=True) for i in range(self.num_outputs)]

    def run_batch(
        self,
        x: np.ndarray,
        input_index: int = 0,
        *,
        output_index: int = 0,
        other_inputs: Sequence[np.ndarray] | None = None,
        keep_batch_dim: bool = False,
    ) -> np.ndarray:
        """Run N samples stacked on axis 0 and stack output ``output_index``.

        ``x`` is ``[N, *input_shape]`` or, when the model's input has a leading batch dim of
        1, ``[N, *input_shape[1:]]``. Output is ``[N, *output_shape[1:]]`` (the model's batch
        dim of 1 dropped) or ``[N, *output_shape]`` with ``keep_batch_dim=True``. For
        multi-input models the other inputs are held fixed: pass ``other_inputs`` (a full
        list of per-input arrays; the entry at ``input_index`` is ignored).
        """
        x = np.asarray(x)
        d = self.inputs[input_index]
        shape = d["shape"]
        if x.ndim == len(shape) + 1 and tuple(x.shape[1:]) == shape:
            per = x
        elif shape and shape[0] == 1 and x.ndim == len(shape) and tuple(x.shape[1:]) == shape[1:]:
            per = x.reshape((x.shape[0],) + shape)
        else:
            raise ValueError(
                f"input {input_index}: expected [N, *{list(shape)}] or [N, *{list(shape[1:])}], got {list(x.shape)}"
            )
        if x.dtype != d["dtype"]:
            raise TypeError(
                f"input {input_index}: expected dtype {d['dtype']}, got {x.dtype} (use quantize_input() for float data)"
            )
        if self.num_inputs > 1 and other_inputs is None:
            raise ValueError(f"model has {self.num_inputs} inputs: pass other_inputs")
        feeds = list(other_inputs) if other_inputs is not None else [None]
        oshape = self.outputs[output_index]["shape"]
        drop = (not keep_batch_dim) and len(oshape) > 0 and oshape[0] == 1
        out_shape = oshape[1:] if drop else oshape
        out = np.empty((per.shape[0],) + tuple(out_shape), self.outputs[output_index]["dtype"])
        for n in range(per.shape[0]):
            feeds[input_index] = per[n]
            out[n] = self.invoke(feeds)[output_index].reshape(out_shape)
        return out

    def reset(self) -> None:
        """Reset variable tensors / kernel state (no effect on stateless models)."""
        self._it.reset()

    def tensor(self, index: int) -> np.ndarray:
        """Any tensor of subgraph 0 after invoke (needs ``preserve_all_tensors=True``)."""
        if not self.preserve_all_tensors:
            raise RuntimeError("tensor() needs TflmInterpreter(..., preserve_all_tensors=True)")
        if not 0 <= index < self.num_tensors:  # the runtime segfaults out of range
            raise IndexError(f"tensor index {index} out of range (model has {self.num_tensors})")
        t = self._it.GetTensor(int(index), 0)
        return np.array(t["tensor_data"], copy=True)

    # -- quantization helpers ---------------------------------------------------- #
    def quantize_input(self, x: np.ndarray, index: int = 0) -> np.ndarray:
        """Float data in the model's input units -> the input dtype (round half away from
        zero like TFLite's quantizer, then saturate). Float-input models pass through."""
        d = self.inputs[index]
        if d["dtype"].kind == "f" or d["scale"] is None:
            return np.asarray(x, d["dtype"])
        info = np.iinfo(d["dtype"])
        q = np.round(np.asarray(x, np.float64) / d["scale"]) + d["zero_point"]
        return np.clip(q, info.min, info.max).astype(d["dtype"])

    def dequantize_output(self, y: np.ndarray, index: int = 0) -> np.ndarray:
        d = self.outputs[index]
        if d["dtype"].kind == "f" or d["scale"] is None:
            return np.asarray(y, np.float32)
        return ((np.asarray(y, np.float32) - d["zero_point"]) * d["scale"]).astype(np.float32)

    # -- memory -------------------------------------------------------------------- #
    def arena_usage(self) -> dict:
        """Arena bytes actually used, from the RecordingMicroAllocator report.

        Returns ``{"total", "head", "tail", "arena_size", "records"}``; see the module
        docstring for what each number means (``head`` = activations + scratch).
        """
        if self.preserve_all_tensors:
            raise RuntimeError("arena_usage() is only recorded in the default mode (preserve_all_tensors=False)")
        with capture_fds() as cap:
            self._it.print_allocations()
        usage = parse_allocations(cap.text)
        usage["arena_size"] = self.arena_size
        return usage


def minimal_arena_size(model_bytes: bytes, hi: int | None = None) -> int:
    """Smallest arena (bytes) with which TFLM can construct the interpreter and invoke.

    Binary search over construction (AllocateTensors runs every kernel's Prepare, so an
    arena that constructs also invokes). Larger than ``arena_usage()["total"]`` when the
    temporary allocations during AllocateTensors exceed the head section.
    """
    runtime = _runtime()
    model_bytes = bytes(model_bytes)

    def construct(size: int) -> bool:
        try:
            with capture_fds():
                runtime.Interpreter.from_bytes(model_bytes, arena_size=size)
        except RuntimeError:
            return False
        return True

    def ok(size: int) -> bool:
        """Each probe runs in a forked child: with some arenas that are too small, TFLM's LSTM and
        SVDF kernels crash in Prepare instead of failing; a crashed probe counts as too small."""
        if not hasattr(os, "fork"):
            return construct(size)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: report by exit status only, never return into the caller
            code = 1
            try:
                faulthandler.disable()  # a crash here is an answer, not an error to report
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                code = 0 if construct(size) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    if hi is None:
        hi = max(10 * len(model_bytes), 64 * 1024)
        while not ok(hi):
            if hi >= _MAX_AUTO_ARENA:
                raise RuntimeError(f"model does not fit a {_MAX_AUTO_ARENA} B arena")
            hi *= 2
    elif not ok(hi):
        raise RuntimeError(f"model does not fit a {hi} B arena")
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------- #
# the interpreter in a child process: what user-facing commands run
# --------------------------------------------------------------------------- #
# The default time one isolated run may take: far above what a model that fits a microcontroller
# needs (well under a second per sample), so only a hang reaches it.
DEFAULT_TIMEOUT = 600.0
SECONDS_PER_SAMPLE = 1.0


def run_isolated(
    model_bytes: bytes, inputs: Sequence[np.ndarray], *, timeout: float | None = None, name: str = "the model"
) -> list[np.ndarray]:
    """Run every sample through TFLM in a child process and return every output ([N, *output shape] each).

    ``inputs[k]`` holds input k's samples, ``[N, *input shape]`` of its dtype; the timeout is
    DEFAULT_TIMEOUT plus SECONDS_PER_SAMPLE per sample unless given. The interpreter is reset
    once, then sees the samples in order (a stateful model's state carries over). TFLM aborts or
    crashes on some models it cannot load; in a child that costs the child, never the caller: any
    failure (a signal, an exception, a timeout) raises :class:`zoflash.errors.TflmError` in one
    line with the signal or exit code and the last line TFLM printed.
    """
    import subprocess

    from zoflash.errors import TflmError

    _runtime()  # a missing tflite-micro is the ToolMissingError here, not a child's failure
    if timeout is None:
        timeout = DEFAULT_TIMEOUT + SECONDS_PER_SAMPLE * (len(inputs[0]) if len(inputs) else 1)
    with tempfile.TemporaryDirectory(prefix="zoflash-tflm-") as tmp:
        work = os.path.join(tmp, "")
        with open(work + "model.tflite", "wb") as f:
            f.write(bytes(model_bytes))
        np.savez(work + "inputs.npz", *[np.ascontiguousarray(x) for x in inputs])
        # A crash is reported by its signal, not by a Python stack dump; the child imports this very
        # zoflash, installed or not.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "zoflash.reference.tflm", work],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TflmError(name, f"did not finish within {timeout:g} s") from None
        said = [line.strip() for line in done.stdout.decode("utf-8", errors="replace").splitlines() if line.strip()]
        if done.returncode != 0:
            raise TflmError(name, _death(done.returncode), said[-1] if said else "")
        try:
            with np.load(work + "outputs.npz", allow_pickle=False) as out:
                return [out[f"arr_{k}"] for k in range(len(out.files))]
        except (OSError, ValueError) as exc:  # the child exited 0 without its answer: say so, never guess
            raise TflmError(name, "exited without writing its outputs", str(exc)) from None


def _death(returncode: int) -> str:
    if returncode < 0:
        import signal

        try:
            return f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died of signal {-returncode}"
    if returncode == _CHILD_ERROR:  # a Python error, its line is the last one
        return "failed"
    return f"exited with code {returncode}"


_CHILD_ERROR = 3


def _child(work: str) -> int:
    """The child's side of :func:`run_isolated`: one line on stderr and exit code 3 for a Python error."""
    faulthandler.disable()
    try:
        with open(os.path.join(work, "model.tflite"), "rb") as m:
            model = m.read()
        with np.load(os.path.join(work, "inputs.npz"), allow_pickle=False) as f:
            inputs = [f[f"arr_{k}"] for k in range(len(f.files))]
        it = TflmInterpreter(model)
        if len(inputs) != it.num_inputs:
            raise ValueError(f"the model has {it.num_inputs} input(s), {len(inputs)} were given")
        it.reset()
        n = inputs[0].shape[0] if inputs else 1
        results = [
            it.invoke([np.asarray(x[i]).reshape(d["shape"]) for x, d in zip(inputs, it.inputs)]) for i in range(n)
        ]
        outputs = [np.stack([r[k] for r in results]) for k in range(it.num_outputs)]
        np.savez(os.path.join(work, "outputs.npz"), *outputs)
    except Exception as exc:  # the parent reports the last line: make it this one, never a traceback
        detail = " ".join(str(exc).split()) or repr(exc)
        sys.stdout.flush()
        print(f"{type(exc).__name__}: {detail}", file=sys.stderr, flush=True)
        return _CHILD_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
