"""The resource variables' params (READ_VARIABLE / ASSIGN_VARIABLE: a copy)."""

from __future__ import annotations

from zoflash.compiler.ops.params_common import checked_int


def copy_params(*, size) -> dict:
    """A variable's bytes copied whole (TFLM's MicroResourceVariables::Read and Assign)."""
    return dict(size=checked_int("size", size, 1))
