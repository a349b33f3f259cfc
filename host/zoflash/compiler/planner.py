"""Static memory planning: every activation buffer gets an offset in one arena.

Buffers whose lifetimes overlap must not overlap in memory. Several placement strategies sit
behind one interface (`PLANNERS`); `plan_memory` runs them all, keeps the smallest arena
(ties go to the earlier strategy, so the output is deterministic) and verifies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zoflash.registry import Registry

ALIGNMENT = 16  # bytes: Helium loads and the int32/float views of buffers want it


def align(n: int, a: int = ALIGNMENT) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True)
class Buffer:
    """A block of bytes needed from step `first` to step `last` inclusive."""

    name: str
    size: int
    first: int
    last: int

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class MemoryPlan:
    strategy: str
    offsets: dict  # buffer name -> offset
    arena_size: int


class PlanError(AssertionError):
    """A plan that places two live buffers in the same bytes: a bug in a planner."""


def _place(buffers: list[Buffer]) -> tuple[dict, int]:
    """First fit: each buffer goes to the lowest aligned offset free during its whole lifetime."""
    placed: list[tuple[Buffer, int]] = []
    offsets = {}
    for buf in buffers:
        busy = sorted((off, off + align(b.size)) for b, off in placed if b.overlaps_in_time(buf))
        offset = 0
        for start, end in busy:
            if offset + align(buf.size) <= start:
                break
            offset = max(offset, end)
        placed.append((buf, offset))
        offsets[buf.name] = offset
    size = max((off + align(b.size) for b, off in placed), default=0)
    return offsets, size


# The strategies, in the order plan_memory tries them (a tie keeps the earlier one): registering
# one is its decorated function here.
PLANNERS: Registry[Callable[[list[Buffer]], tuple[dict, int]]] = Registry("memory planner")


@PLANNERS.register("greedy_by_size")
def greedy_by_size(buffers: list[Buffer]) -> tuple[dict, int]:
    """Largest first, the order TFLM's greedy planner uses."""
    return _place(sorted(buffers, key=lambda b: (-b.size, b.first, b.name)))


@PLANNERS.register("greedy_by_area")
def greedy_by_area(buffers: list[Buffer]) -> tuple[dict, int]:
    """Largest size x lifetime first."""
    return _place(sorted(buffers, key=lambda b: (-b.size * (b.last - b.first + 1), b.first, b.name)))


@PLANNERS.register("greedy_by_lifetime")
def greedy_by_lifetime(buffers: list[Buffer]) -> tuple[dict, int]:
    """Longest-lived first: pins skip connections low, then packs short-lived buffers above."""
    return _place(sorted(buffers, key=lambda b: (-(b.last - b.first), -b.size, b.name)))


@PLANNERS.register("greedy_by_first_use")
def greedy_by_first_use(buffers: list[Buffer]) -> tuple[dict, int]:
    """In execution order: good for long chains where sizes alternate."""
    return _place(sorted(buffers, key=lambda b: (b.first, -b.size, b.name)))


def verify_plan(buffers: list[Buffer], plan: MemoryPlan) -> None:
    """Raise PlanError if two buffers live at the same time in overlapping bytes, or spill out."""
    items = [(b, plan.offsets[b.name]) for b in buffers]
    for b, off in items:
        if off < 0 or off % ALIGNMENT or off + b.size > plan.arena_size:
            raise PlanError(
                f"buffer {b.name} at {off}+{b.size} is outside or misaligned in a {plan.arena_size}-byte arena"
            )
    for i, (a, oa) in enumerate(items):
        for b, ob in items[i + 1 :]:
            if a.overlaps_in_time(b) and oa < ob + b.size and ob < oa + a.size:
                raise PlanError(
                    f"buffers {a.name} [{oa}, {oa + a.size}) and {b.name} [{ob}, {ob + b.size}) "
                    f"overlap while both live (steps {a.first}-{a.last} and {b.first}-{b.last})"
                )


def plan_memory(buffers: list[Buffer], strategies: tuple[str, ...] | None = None) -> MemoryPlan:
    best = None
    for name in strategies or PLANNERS.names():
        offsets, size = PLANNERS.get(name)(buffers)
        if best is None or size < best.arena_size:
            best = MemoryPlan(strategy=name, offsets=offsets, arena_size=size)
    verify_plan(buffers, best)
    return best
