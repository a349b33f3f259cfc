"""The NPU backends of `zoflash build --npu CONFIG`, one registry: which backend serves a
configuration and a board's [npu] type, and the calls every backend answers.

A backend module declares itself once, at its end, with `declare(name, board types, configurations,
__name__)`, and provides:
  check(board, config)                  the board has this NPU (BoardError otherwise)
  request(config, tools)                its NpuRequest from the CLI's tool paths (None: the environment)
  find_tools(request)                   the tools it runs and builds with (ToolMissingError, before any work)
  dry_run(board, request, bundle_dir)   the exact commands the build would run (and files it writes first)
  npu_sources(prep, board, request, prefix) -> NpuSources (the glue, its blobs, make variables, manifest)
  reserved(board)                       (region, label, bytes) the NPU owns: the CPU's plan keeps out of them
  describe(manifest)                    the build report's lines
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from zoflash.errors import BoardError
from zoflash.registry import Registry


@dataclass(frozen=True)
class Backend:
    name: str
    board_types: tuple[str, ...]  # the [npu] `type` values of the boards it serves
    configs: tuple[str, ...]  # --npu values (a board file lists those its part has)
    module: str

    def load(self):
        return importlib.import_module(self.module)


# The backends, each declared once at the end of its module (`declare`); the targets package
# imports them (targets/__init__.py), so the registry is complete before a board file is read.
BACKENDS: Registry[Backend] = Registry("NPU backend", "see docs/npu.md")


def declare(name: str, board_types: tuple[str, ...], configs: tuple[str, ...], module: str) -> Backend:
    """Register the backend module `module` (its __name__) under `name`."""
    return BACKENDS.add(name, Backend(name, board_types, configs, module))


def board_types() -> tuple[str, ...]:
    """The [npu] `type` values a board file may give: those the registered backends serve."""
    return tuple(t for b in BACKENDS.values() for t in b.board_types)


def backend_for(config: str) -> Backend:
    """The backend of a --npu value."""
    for b in BACKENDS.values():
        if config in b.configs or config.startswith(b.name + "-"):  # the backend names a wrong variant itself
            return b
    known = ", ".join(f"{b.name} ({b.configs[0]}{', ...' if len(b.configs) > 1 else ''})" for b in BACKENDS.values())
    raise BoardError(f"--npu {config}: not an NPU configuration zoflash knows (backends: {known})")


def backend_of_manifest(manifest: dict) -> Backend:
    """The backend that built a bundle (its manifest's training.npu)."""
    return next(b for b in BACKENDS.values() if manifest["type"] in b.board_types)


def reserved(board, request) -> list[tuple[str, str, int]]:
    """The memory the NPU of an --npu build owns, per region (none without a request)."""
    if request is None:
        return []
    return backend_for(request.accelerator).load().reserved(board)


def prefix_boundary(prep):
    """The training plan's one boundary tensor (the prefix's output) and its name; BuildError for a
    plan with no frozen prefix or several tensors crossing the cut."""
    from zoflash.errors import BuildError

    plan = prep.training.plan
    if plan.split == 0 or len(plan.boundary) != 1:
        raise BuildError(
            f"--npu needs a frozen prefix handing one tensor to the suffix; this plan has a prefix of "
            f"{plan.split} kernel calls and {len(plan.boundary)} boundary tensor(s) (choose --train)"
        )
    boundary = plan.boundary[0]
    return boundary, prep.model.graph.tensors[boundary.index].name


def pool_items(pools) -> list[tuple[str, str, int]]:
    """An NPU's memory pools (board [[npu.pools]] or a manifest's) as (region, label, bytes) for
    the memory plan and the size report."""
    return [(p["region"], f"NPU {p['use']} pool {p['name']}", p["size"]) for p in pools]
