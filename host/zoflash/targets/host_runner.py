"""Run a host-built bundle in-process through ctypes."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from zoflash.compiler.quant import as_samples
from zoflash.errors import ZoflashError
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

    def run_outputs(self, x: np.ndarray) -> list[np.ndarray]:
        """As `run`, but every output of the model, in its order: one [N, *output shape] array each."""
        spec_in = self.inputs[0]
        x = as_samples(x, spec_in["shape"], spec_in["scale"], spec_in["zero_point"], dtype=spec_in["dtype"])
        ys = [np.empty((x.shape[0],) + tuple(o["shape"]), dtype=_NP_TYPES[o["dtype"]]) for o in self.outputs]
        in_ptr = self._input(0)
        out_ptrs = [self._output(k) for k in range(len(self.outputs))]
        for i in range(x.shape[0]):
            ctypes.memmove(in_ptr, x[i].ctypes.data, spec_in["bytes"])
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
