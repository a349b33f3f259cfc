"""The op registry's entry types and the helpers op modules share.

Every supported TFLite op is one `OpEntry`, registered by the module of its family
(compiler/ops/convolution.py, fully_connected.py, pooling.py, binary.py, data_movement.py,
reduction.py, activation.py). An entry says which tensors the op takes (`Arg`), which options it
accepts (`Option`), the constraints it must meet and how it lowers to kernel calls (`Kernel`).

A constraint is a small function `(graph, op) -> str | None`: None when the op meets it,
otherwise a detail with the actual values. Its docstring is the rule the user reads, in the error
message and in `zoflash ops`. The legality pass (compiler/legality.py) runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zoflash.compiler.ir import Graph, Op, Tensor
from zoflash.registry import Registry

Constraint = Callable[[Graph, Op], "str | None"]

ACTIVATION = "activation"  # int8 (or the Arg's dtypes), quantized per tensor; computed at run time or constant
CONSTANT = "constant"  # a constant tensor of one of `dtypes`
DATA = "data"  # any bytes (the RESHAPE family moves no data)


class Problem(Exception):
    """One reason the model cannot be compiled; str() is the user-facing sentence."""


@dataclass(frozen=True)
class Kernel:
    """A static C kernel of firmware_templates/runtime/inference/zo_kernels_<family>.c."""

    name: str  # what Step.kernel says
    function: str
    struct: str  # its params struct, whose fields `build` returns
    build: Callable[..., dict]  # compiler/ops/<family>_params.py: the params TFLM computes at prepare time
    arg_dtypes: tuple[str, ...]  # the element type of each C argument after the params pointer
    # Bytes the C function reads or writes through each argument, computed from the params (an
    # int, a list of ints for an array of pointers, None where it touches nothing): the verifier
    # checks that they fit in the tensors the step passes.
    extents: Callable[[dict], tuple]
    # The C files (firmware_templates/runtime/inference/) that define `function`: its family's
    # zo_kernels_<family>.c and, where it has one, the Helium variant beside it. A bundle copies
    # only the files of the kernels its model calls.
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Arg:
    """One input or output of an op."""

    role: str  # how messages name it
    kind: str = ACTIVATION
    dtypes: tuple[str, ...] = ("int8",)
    optional: bool = False
    variadic: bool = False  # one or more (CONCATENATION's inputs, SPLIT's outputs)
    hint: str = ""  # what to do when the dtype is wrong

    def describe(self) -> str:
        what = {
            ACTIVATION: f"{'/'.join(self.dtypes)} per-tensor",
            CONSTANT: f"constant {'/'.join(self.dtypes)}",
            DATA: "/".join(self.dtypes) or "any type",
        }[self.kind]
        return f"{self.role}{'...' if self.variadic else ''} ({what}{', optional' if self.optional else ''})"


REQUIRED = object()  # an Option without a default must be in the model


@dataclass(frozen=True)
class Option:
    """A builtin option the op reads, and the values zoflash accepts."""

    name: str
    accepted: str  # the accepted values, as the docs state them
    accepts: Callable[[Any], bool]
    default: Any = REQUIRED


def one_of(name: str, *values, default=REQUIRED) -> Option:
    return Option(name, ", ".join(str(v) for v in values), lambda v: v in values, default)


def at_least(name: str, minimum: int, default=REQUIRED) -> Option:
    def accepts(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= minimum

    return Option(name, f"integer >= {minimum}", accepts, default)


def in_range(name: str, minimum: int, maximum: int, default=REQUIRED) -> Option:
    """An integer option with both bounds: the maximum is what TFLM's own fields hold (see its users)."""

    def accepts(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and minimum <= v <= maximum

    return Option(name, f"integer from {minimum} to {maximum}", accepts, default)


def positive(name: str, default=REQUIRED) -> Option:
    def accepts(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0

    return Option(name, "number > 0", accepts, default)


def any_value(name: str, accepted: str, default=REQUIRED) -> Option:
    return Option(name, accepted, lambda v: True, default)


ACTIVATIONS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")
FUSED_ACTIVATION = one_of("fused_activation_function", *ACTIVATIONS, default="NONE")


@dataclass(frozen=True)
class OpEntry:
    types: tuple[str, ...]  # the TFLite builtins this entry handles
    summary: str  # one line for the op table
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    lower: Callable  # (graph, op) -> Step | Alias | None (no code); runs only when every constraint holds
    kernels: tuple[Kernel, ...] = ()  # none: the op aliases its input
    options: tuple[Option, ...] = ()
    constraints: tuple[Constraint, ...] = ()

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)


# TFLite builtin name -> entry, in registration (documentation) order
OPS: Registry[OpEntry] = Registry("op", "see `zoflash ops` or docs/ops.md")
# Step.kernel -> the C kernel; filled by `register` from the entries' kernels
KERNELS: Registry[Kernel] = Registry("kernel", "an OpEntry's kernels in compiler/ops/<family>.py")


def register(entry: OpEntry) -> OpEntry:
    """Declare an op entry (in its family module): under each of its TFLite builtins, and its
    kernels by name (a kernel several entries share is declared once)."""
    for t in entry.types:
        OPS.add(t, entry)
    for k in entry.kernels:
        if k.name not in KERNELS or KERNELS.get(k.name) is not k:
            KERNELS.add(k.name, k)
    return entry


def message(constraint: Constraint) -> str:
    """The rule a constraint checks: the first paragraph of its docstring, on one line."""
    return " ".join((constraint.__doc__ or constraint.__name__).strip().split("\n\n")[0].split())


# ------------------------------------------------------------- helpers for constraints and lowerings


def input_tensor(graph: Graph, op: Op, pos: int) -> Tensor | None:
    """Input `pos` of the op, None when it is omitted."""
    if pos >= len(op.inputs) or op.inputs[pos] < 0:
        return None
    return graph.tensors[op.inputs[pos]]


def output_tensor(graph: Graph, op: Op, pos: int = 0) -> Tensor:
    return graph.tensors[op.outputs[pos]]


def option(op: Op, name: str):
    """The op's value of an option, or the entry's default when the model leaves it out."""
    return op.options.get(name, OPS.get(op.type).option(name).default)


def shape(t: Tensor) -> list[int]:
    """A shape as messages print it."""
    return list(t.shape)


def build(graph: Graph, op: Op, kernel: Kernel, **kw) -> dict:
    """The kernel's params; a builder's ValueError (what TFLM cannot run either) becomes a Problem."""
    try:
        return kernel.build(**kw)
    except ValueError as exc:
        raise Problem(f"{op.where(graph)}: {exc}") from None
