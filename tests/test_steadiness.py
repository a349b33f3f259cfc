"""The steadiness statistics of the experiments (benchmarks/experiments.py): what a single run can
cost against the tuned fixed q, on known inputs with numbers worked by hand."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from conftest import ROOT


def _experiments():
    if "experiments" not in sys.modules:
        spec = importlib.util.spec_from_file_location("experiments", ROOT / "benchmarks" / "experiments.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["experiments"] = module
        spec.loader.exec_module(module)
    return sys.modules["experiments"]


# four paired seeds; the reference (the tuned fixed q) has mean 81, sample std sqrt(20 / 3) = 2.582
REF = [82.0, 78.0, 80.0, 84.0]
FLOOR = 20.0  # its mean gain is 61 points: a run gaining less than 30.5 (below 50.5%) collapsed


def test_steadiness_of_a_method_with_one_collapsed_seed():
    ex = _experiments()
    s = ex.steadiness([80.0, 70.0, 85.0, 40.0], REF, FLOOR)
    assert s["mean"] == pytest.approx(68.75)
    assert s["std"] == pytest.approx(np.sqrt(1218.75 / 3))  # deviations 11.25, 1.25, 16.25, -28.75
    assert s["worst_gap"] == pytest.approx(-44.0)  # seed 4: 40 against 84 (paired, not against the mean)
    assert s["collapsed"] == 1
    assert ex.goal_misses([80.0, 70.0, 85.0, 40.0], REF, FLOOR) == ["mean -12.2", "std 20.2 > 3.9", "1 collapsed"]


def test_collapse_threshold_is_half_the_reference_gain():
    ex = _experiments()
    # 50.4 gained 30.4 (< 30.5): collapsed; 50.6 gained 30.6: not
    assert ex.steadiness([50.4, 81.0, 81.0, 81.0], REF, FLOOR)["collapsed"] == 1
    assert ex.steadiness([50.6, 81.0, 81.0, 81.0], REF, FLOOR)["collapsed"] == 0


def test_goals_met_and_the_std_floor():
    ex = _experiments()
    assert ex.goal_misses([81.5, 78.5, 80.5, 84.5], REF, FLOOR) == []  # the reference + 0.5 on every seed
    assert ex.steadiness(REF, REF, FLOOR) == dict(
        mean=81.0, std=pytest.approx(np.sqrt(20 / 3)), worst_gap=0.0, collapsed=0
    )
    # a steady reference (std 0): the std goal is the floor of 2.5 points, not 1.5 x 0
    flat = [81.0, 81.0, 81.0, 81.0]
    assert ex.goal_misses([78.0, 84.0, 81.0, 81.0], flat, FLOOR) == []  # std sqrt(6) = 2.45
    assert ex.goal_misses([77.0, 85.0, 81.0, 81.0], flat, FLOOR) == ["std 3.3 > 2.5"]
    # mean 1 point below is still within the goal; 1.25 below is not
    assert ex.goal_misses([80.0, 80.0, 80.0, 80.0], flat, FLOOR) == []
    assert ex.goal_misses([79.75, 79.75, 79.75, 79.75], flat, FLOOR) == ["mean -1.2"]


def test_unpaired_inputs_are_refused():
    ex = _experiments()
    with pytest.raises(ValueError, match="paired by seed"):
        ex.steadiness([80.0, 81.0], REF, FLOOR)
