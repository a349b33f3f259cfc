"""Run a host-built bundle in-process through ctypes."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zoflash.compiler.quant import as_samples
from zoflash.errors import DataError, ZoflashError
from zoflash.targets.project import Bundle

_NP_TYPES = {"int8": np.int8, "uint8": np.uint8, "float32": np.float32, "int32": np.int32, "int16": np.int16}


class HostModel:
    """The generated C model of a host bundle, loaded as a shared library."""

    def __init__(self, bundle: Bundle):
        self.bundle = bundle
        lib_path = Path(bundle.path) / "build" / f"lib{bundle.prefix}.so"
        if not lib_path.exists():
            raise ZoflashError(f"{lib_path} does not exist: build the bundle first (`zoflash build`)")
        self.lib = ctypes.CDLL(str(lib_path.resolve()))
        p = bundle.prefix
        self._init = getattr(self.lib, f"{p}_init")
        self._invoke = getattr(self.lib, f"{p}_invoke")
        self._input = getattr(self.lib, f"{p}_input")
        self._output = getattr(self.lib, f"{p}_output")
        self._input.restype = ctypes.c_void_p
        self._output.restype = ctypes.c_void_p
        self._input.argtypes = [ctypes.c_int32]
        self._output.argtypes = [ctypes.c_int32]
        self._reset = getattr(self.lib, f"{p}_reset")
        self._init()
        self.inputs = bundle.manifest["inputs"]
        self.outputs = bundle.manifest["outputs"]

    def run(self, x: np.ndarray) -> np.ndarray:
        """Run input 0 for each of N samples (of the input's type, or float in its real units);
        returns output 0 as [N, *output shape], of the output's type."""
        return self.run_outputs(x)[0]

    def run_outputs(self, x: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
        """As `run`, but every output of the model, in its order: one [N, *output shape] array each.
        A model with several inputs takes a list, one [N, *input shape] array per input."""
        given: list[np.ndarray] = [np.asarray(a) for a in x] if isinstance(x, (list, tuple)) else [np.asarray(x)]
        if len(given) != len(self.inputs):
            raise DataError(
                f"the model has {len(self.inputs)} input(s) but {len(given)} array(s) of samples were given: "
                "give one per input, in the model's input order"
            )
        xs = [
            as_samples(xk, s["shape"], s["scale"], s["zero_point"], dtype=s["dtype"])
            for xk, s in zip(given, self.inputs)
        ]
        n = xs[0].shape[0]
        if any(xk.shape[0] != n for xk in xs):
            raise DataError(
                f"the inputs have different sample counts {[xk.shape[0] for xk in xs]}; give as many of each"
            )
        ys = [np.empty((n,) + tuple(o["shape"]), dtype=_NP_TYPES[o["dtype"]]) for o in self.outputs]
        in_ptrs = [self._input(k) for k in range(len(self.inputs))]
        out_ptrs = [self._output(k) for k in range(len(self.outputs))]
        for i in range(n):
            for xk, ptr, s in zip(xs, in_ptrs, self.inputs):
                ctypes.memmove(ptr, xk[i].ctypes.data, s["bytes"])
            self._invoke()
            for y, ptr, o in zip(ys, out_ptrs, self.outputs):
                ctypes.memmove(y[i].ctypes.data, ptr, o["bytes"])
        return ys

    def reset(self) -> None:
        """Re-initialise the model's state (variable tensors), as TFLM's interpreter reset does;
        `run` keeps it from one sample to the next, so a stateful model sees a sequence."""
        self._reset()

    def invoke(self) -> None:
        """Run once on the data already at input 0 (for benchmarks)."""
        self._invoke()
