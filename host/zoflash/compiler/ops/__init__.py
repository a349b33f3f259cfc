"""The op registry: one entry per supported TFLite op (registry.py has the entry types and the
registries OPS and KERNELS, zoflash.registry.Registry instances).

Each family module registers its ops when imported, in the order of FAMILIES, which is also the
order of the docs (`zoflash ops`, docs/ops.md).
"""

import importlib

from zoflash.compiler.ops.registry import KERNELS, OPS, Kernel, OpEntry, Problem

FAMILIES = (
    "convolution",
    "fully_connected",
    "pooling",
    "binary",
    "data_movement",
    "movement",
    "reduction",
    "activation",
    "resize",
    "sequence",
    "variables",
    "cast",
)
for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")

SUPPORTED_OPS = tuple(sorted(OPS))

__all__ = ["FAMILIES", "KERNELS", "OPS", "SUPPORTED_OPS", "Kernel", "OpEntry", "Problem"]
