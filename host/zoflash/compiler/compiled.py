"""The compiler's result: the graph, its program of kernel calls and its memory plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from zoflash.compiler.ir import Graph, Quantization, Tensor
from zoflash.compiler.planner import MemoryPlan, align
from zoflash.compiler.program import Program


@dataclass
class CompiledModel:
    graph: Graph
    program: Program
    plan: MemoryPlan
    root: dict  # tensor index -> the tensor index whose storage it uses (aliases resolved)
    arena_offset: dict  # root tensor index -> arena offset (activations only)
    constants: list  # root tensor indices of constant tensors the steps read, in first-use order
    # Variable tensors (an SVDF's activation state): root index -> offset in the persistent state
    # array, which the plan never shares, so their values survive from one invoke to the next.
    state_offset: dict = field(default_factory=dict)

    @property
    def state_size(self) -> int:
        return max((align(self.graph.tensors[r].nbytes) + off for r, off in self.state_offset.items()), default=0)

    @property
    def stateful(self) -> bool:
        return bool(self.state_offset)

    @property
    def arena_size(self) -> int:
        return self.plan.arena_size

    @property
    def arena_array_size(self) -> int:
        """The length of the generated arena array: at least 16 bytes, because C has no
        zero-length arrays and the planner aligns buffers to 16 bytes."""
        return max(self.arena_size, 16)

    def tensor(self, index: int) -> Tensor:
        return self.graph.tensors[index]

    def storage(self, index: int) -> Tensor:
        return self.graph.tensors[self.root[index]]

    def io_quantization(self, index: int) -> Quantization | None:
        """The quantization of a model input or output; a float one has none of its own, so a
        float output made by DEQUANTIZE reports its int8 input's, a float input read by QUANTIZE
        that QUANTIZE's int8 output's."""
        t = self.graph.tensors[index]
        if t.quant is None and t.dtype == "float32":
            if index in self.graph.inputs:
                return self.graph.tensors[self.graph.consumers()[index][0].outputs[0]].quant
            return self.graph.tensors[self.graph.producer()[index].inputs[0]].quant
        return t.quant

    @property
    def weights_bytes(self) -> int:
        return sum(self.graph.tensors[i].nbytes for i in self.constants)

    @property
    def io_bytes(self) -> int:
        return sum(self.storage(i).nbytes for i in self.graph.inputs + self.graph.outputs)
