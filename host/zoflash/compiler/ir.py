"""The intermediate representation: a dataflow graph of tensors and ops (subgraph 0; the others are
kept for CALL_ONCE, whose init subgraph the compiler folds into the initial state).

The importer builds it from a .tflite file; passes read it; nothing in it knows about C.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Bytes per element of the tensor types zoflash understands.
DTYPE_SIZES = {
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float32": 4,
    "float16": 2,
    "float64": 8,
    "bool": 1,
}


@dataclass(frozen=True)
class Quantization:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per channel along `axis`."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1

    @property
    def scale(self) -> float:
        """The single scale of a per-tensor quantization."""
        if self.per_channel:
            raise ValueError("per-channel quantization has no single scale")
        return self.scales[0]

    @property
    def zero_point(self) -> int:
        return self.zero_points[0]


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: Quantization | None = None
    data: np.ndarray | None = None  # constant contents, already shaped
    shape_signature: tuple[int, ...] | None = None  # -1 marks a dynamic dimension
    is_variable: bool = False
    sparse: bool = False
    # A resource variable's value after CALL_ONCE's init subgraph (None: it is never initialised).
    initial: np.ndarray | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def dynamic_batch(self) -> bool:
        """A dynamic leading batch (-1 in the signature, 1 in the shape), as every Keras export
        writes: TFLM runs such a model with batch 1, and so does zoflash."""
        sig = self.shape_signature
        return bool(sig) and sig[0] == -1 and bool(self.shape) and self.shape[0] == 1

    @property
    def dynamic_dims(self) -> list[int]:
        """The dynamic dimensions other than a dynamic batch (those zoflash cannot compile)."""
        sig = self.shape_signature or ()
        return [k for k, d in enumerate(sig) if d < 0 and not (k == 0 and self.dynamic_batch)]

    @property
    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.num_elements * DTYPE_SIZES.get(self.dtype, 0)

    def describe(self) -> str:
        q = ""
        if self.quant is not None:
            if self.quant.per_channel:
                q = f" per-channel[{len(self.quant.scales)}] axis {self.quant.axis}"
            else:
                q = f" scale {self.quant.scale:.6g} zp {self.quant.zero_point}"
        return f"'{self.name}' {self.dtype}{list(self.shape)}{q}"


@dataclass
class Op:
    index: int
    type: str  # TFLite builtin name, e.g. "CONV_2D"; "CUSTOM:<code>" for custom ops
    inputs: tuple[int, ...]  # tensor indices, -1 for an omitted optional input
    outputs: tuple[int, ...]
    options: dict[str, Any] = field(default_factory=dict)
    version: int = 1

    def where(self, graph: Graph) -> str:
        """How an error message names this op: index, type and its tensors."""

        def name(i: int) -> str:  # a damaged model may name tensors that do not exist
            return graph.tensors[i].name if 0 <= i < len(graph.tensors) else f"#{i}?"

        ins = ", ".join(name(i) for i in self.inputs if i != -1)
        outs = ", ".join(name(i) for i in self.outputs)
        return f"op {self.index} {self.type} (inputs: {ins}; outputs: {outs})"


@dataclass
class Graph:
    name: str
    tensors: list[Tensor]
    ops: list[Op]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = ""
    num_subgraphs: int = 1
    subgraphs: tuple[Graph, ...] = ()  # the model's other subgraphs (k at [k - 1]): CALL_ONCE's init

    def producer(self) -> dict[int, Op]:
        """Tensor index -> the op writing it."""
        return {t: op for op in self.ops for t in op.outputs}

    def consumers(self) -> dict[int, list[Op]]:
        """Tensor index -> the ops reading it, in execution order."""
        users: dict[int, list[Op]] = {}
        for op in self.ops:
            for t in op.inputs:
                if t >= 0:
                    users.setdefault(t, []).append(op)
        return users

    def op_types(self) -> list[str]:
        return sorted({op.type for op in self.ops})
