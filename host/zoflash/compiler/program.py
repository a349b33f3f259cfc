"""The lowered program: the kernel calls and aliases that lowering makes of a graph.

Planning, code generation, the reference executor and the training plan all read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zoflash.compiler.ir import Graph, Op


@dataclass
class Step:
    """One kernel call: `kernel` names an entry of zoflash.compiler.ops.KERNELS."""

    op: Op
    kernel: str
    params: dict
    # C arguments after the params pointer: a tensor index, None for NULL, or a tuple of tensor
    # indices (passed as an array of pointers). The output comes last: one tensor, or a tuple when
    # the kernel writes several (SPLIT, UNPACK).
    args: list = field(default_factory=list)
    inputs: tuple[int, ...] = ()  # activation tensors read (for lifetimes)
    outputs: tuple[int, ...] = ()

    @property
    def written(self) -> tuple[int, ...]:
        """The tensors of the last argument, which the kernel writes."""
        last = self.args[-1]
        return last if isinstance(last, tuple) else (last,)


@dataclass
class Alias:
    """The output tensor is the input tensor's bytes under another shape (no code)."""

    op: Op
    source: int
    target: int


@dataclass
class Program:
    graph: Graph
    steps: list[Step]
    aliases: list[Alias]
