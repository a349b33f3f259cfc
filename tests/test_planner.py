"""Memory planner: every strategy yields a valid plan; the verifier catches overlaps."""

import random

import pytest

from zoflash.compiler.planner import ALIGNMENT, PLANNERS, Buffer, MemoryPlan, PlanError, align, plan_memory, verify_plan
from zoflash.registry import UnknownName


def random_buffers(rng: random.Random, n: int) -> list[Buffer]:
    out = []
    for i in range(n):
        first = rng.randrange(-1, 30)
        out.append(
            Buffer(
                name=f"b{i}",
                size=rng.choice([1, 7, 16, 100, 1000, 4096]) * rng.randrange(1, 5),
                first=first,
                last=first + rng.randrange(0, 8),
            )
        )
    return out


def peak_live_bytes(buffers: list[Buffer]) -> int:
    """A lower bound for any arena: the most bytes alive at one step."""
    steps = {s for b in buffers for s in range(b.first, b.last + 1)}
    return max(sum(align(b.size) for b in buffers if b.first <= s <= b.last) for s in steps)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("strategy", sorted(PLANNERS))
def test_every_strategy_gives_valid_plans(seed, strategy):
    buffers = random_buffers(random.Random(seed), 25)
    offsets, size = PLANNERS.get(strategy)(buffers)
    plan = MemoryPlan(strategy, offsets, size)
    verify_plan(buffers, plan)
    assert size >= peak_live_bytes(buffers)
    assert all(off % ALIGNMENT == 0 for off in offsets.values())


def test_best_plan_is_no_worse_than_each_strategy():
    buffers = random_buffers(random.Random(7), 40)
    best = plan_memory(buffers)
    assert best.arena_size == min(PLANNERS.get(s)(buffers)[1] for s in PLANNERS)


def test_chain_reuses_memory():
    # a -> b -> c -> d, each consumed by the next step only: two buffers' worth is enough.
    chain = [Buffer(f"t{i}", 1024, i - 1, i) for i in range(4)]
    assert plan_memory(chain).arena_size == 2048


def test_verifier_rejects_overlap():
    a, b = Buffer("a", 64, 0, 3), Buffer("b", 64, 2, 5)
    with pytest.raises(PlanError, match="overlap"):
        verify_plan([a, b], MemoryPlan("bad", {"a": 0, "b": 32}, 128))
    verify_plan([a, b], MemoryPlan("good", {"a": 0, "b": 64}, 128))
    c = Buffer("c", 64, 4, 5)  # a is dead when c is born: sharing bytes is fine
    verify_plan([a, c], MemoryPlan("reuse", {"a": 0, "c": 0}, 64))


def test_verifier_rejects_spill_and_misalignment():
    a = Buffer("a", 64, 0, 1)
    with pytest.raises(PlanError):
        verify_plan([a], MemoryPlan("spill", {"a": 16}, 64))
    with pytest.raises(PlanError):
        verify_plan([a], MemoryPlan("misaligned", {"a": 4}, 128))


def test_the_planners_are_tried_in_their_declared_order_and_unknown_ones_named():
    # ties keep the earlier strategy: the order is part of the output (goldens)
    assert PLANNERS.names() == ("greedy_by_size", "greedy_by_area", "greedy_by_lifetime", "greedy_by_first_use")
    buffers = [Buffer("a", 64, 0, 1), Buffer("b", 64, 2, 3)]
    assert plan_memory(buffers).strategy == "greedy_by_size"  # all four give 64 bytes
    with pytest.raises(UnknownName, match=r"unknown memory planner 'best_fit' \(known: greedy_by_size, "):
        plan_memory(buffers, ("best_fit",))
