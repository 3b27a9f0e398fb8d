"""Checkpoint planners: given an overlap law and a budget of ``m`` slots, pick positions in 1..L.

Every planner has a ``name`` and ``plan(law, budget) -> Plan``; a plan's cost is always
measured by :func:`lcr.checkpoints.cost.expected_recompute`, so planners compare on one ruler.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lcr.checkpoints.cost import expected_recompute, validate_positions
from lcr.checkpoints.law import OverlapLaw
from lcr.errors import LcrInputError


@dataclass(frozen=True)
class Plan:
    positions: tuple[int, ...]  # increasing, in 1..L
    expected_recompute: float  # E[d - c(d)] in blocks


class Planner(Protocol):
    name: str

    def plan(self, law: OverlapLaw, budget: int) -> Plan: ...


def check_budget(budget: int) -> int:
    if isinstance(budget, bool) or int(budget) != budget or budget < 1:
        raise LcrInputError(f"checkpoint budget must be an integer >= 1, got {budget!r}")
    return int(budget)


def make_plan(law: OverlapLaw, positions: Sequence[int]) -> Plan:
    s = validate_positions(positions, law.length)
    return Plan(tuple(int(p) for p in s), expected_recompute(law, s))


def balanced_positions(length: int, budget: int) -> list[int]:
    """min(m, L) positions whose gaps (with 0 and L+1 as ends) differ by at most one."""
    k = min(check_budget(budget), length)
    return [i * (length + 1) // (k + 1) for i in range(1, k + 1)]


def balanced_uniform_cost(length: int, budget: int) -> float:
    """Optimal E[d - c(d)] under the uniform law on 0..L (paper Theorem 1).

    ``k = min(m, L)`` checkpoints split the L+1 depths into k+1 gaps; a gap of g depths
    replays 0+1+...+(g-1). Write L+1 = q(k+1) + r: r gaps of q+1 and k+1-r gaps of q.
    """
    k = min(check_budget(budget), length)
    q, r = divmod(length + 1, k + 1)
    replayed = r * (q + 1) * q // 2 + (k + 1 - r) * q * (q - 1) // 2
    return replayed / (length + 1)


class BalancedPlanner:
    """Evenly spaced: optimal when every depth is equally likely, blind to the law otherwise."""

    name = "balanced"

    def plan(self, law: OverlapLaw, budget: int) -> Plan:
        return make_plan(law, balanced_positions(law.length, budget))


class BlockPlanner:
    """A checkpoint every ``interval`` blocks from the start, until the budget runs out."""

    name = "block"

    def __init__(self, interval: int = 1):
        if int(interval) != interval or interval < 1:
            raise LcrInputError(f"block interval must be an integer >= 1, got {interval!r}")
        self.interval = int(interval)

    def plan(self, law: OverlapLaw, budget: int) -> Plan:
        count = min(check_budget(budget), law.length // self.interval)
        return make_plan(law, [self.interval * i for i in range(1, count + 1)])


class LastPlanner:
    """Only the full prefix: right for append-only chats, where each turn extends the last."""

    name = "last"

    def plan(self, law: OverlapLaw, budget: int) -> Plan:
        check_budget(budget)
        return make_plan(law, [law.length])


class DpPlanner:
    """The exact optimum: the convex-hull-trick DP in C++ (``lcr._native.checkpoint_dp``).

    One solve for budget m yields the optimal plan for every budget up to m, which
    :meth:`plan_many` uses for budget sweeps. Time O(min(m, L) L); memory 4 bytes per
    (layer, depth) for the argmin table the plans are read back from (~100 MB at
    L = 100,000, m = 256). Ties go to the smallest resume point (see ckpt_dp.cpp).
    """

    name = "dp"

    def plan(self, law: OverlapLaw, budget: int) -> Plan:
        return self.plan_many(law, [budget])[0]

    def plan_many(self, law: OverlapLaw, budgets: Sequence[int]) -> list[Plan]:
        budgets = [check_budget(b) for b in budgets]
        _, plans = solve_native(law, max(budgets))
        return [make_plan(law, plans[b]) for b in budgets]


def solve_native(law: OverlapLaw, max_budget: int) -> tuple[np.ndarray, list[list[int]]]:
    """(expected cost per budget 0..m, optimal positions per budget 0..m) from the C++ DP."""
    from lcr import _native

    costs, plans = _native.checkpoint_dp(law.weights, check_budget(max_budget))
    return np.asarray(costs) / law.total, plans


PLANNERS = {"balanced": BalancedPlanner, "block": BlockPlanner, "last": LastPlanner, "dp": DpPlanner}


def get_planner(name: str, *, block_interval: int = 1) -> Planner:
    if name not in PLANNERS:
        raise LcrInputError(f"unknown planner {name!r}; choose from {', '.join(PLANNERS)}")
    return BlockPlanner(block_interval) if name == "block" else PLANNERS[name]()
