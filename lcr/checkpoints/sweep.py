"""Budget sweeps: every planner at every budget on one overlap law, as rows for reports."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lcr.checkpoints.cost import reduction_factor
from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.online import replay_online
from lcr.checkpoints.planners import DpPlanner, Planner, check_budget


@dataclass(frozen=True)
class Point:
    budget: int
    positions: tuple[int, ...]  # the plan (a plan may use fewer than its budget)
    recompute: float  # blocks replayed per request
    reduction: float  # no-cache work / recompute work (inf when nothing is replayed)


@dataclass
class Sweep:
    source: str
    length: int
    no_cache_work: float  # E[d]: blocks replayed per request without checkpoints
    budgets: list[int]
    curves: dict[str, list[Point]] = field(default_factory=dict)


def sweep_law(source: str, law: OverlapLaw, planners: Sequence[Planner], budgets: Sequence[int]) -> Sweep:
    budgets = [check_budget(b) for b in budgets]
    result = Sweep(source, law.length, law.mean_depth(), list(budgets))
    for planner in planners:
        if isinstance(planner, DpPlanner):
            plans = planner.plan_many(law, budgets)  # one solve serves every budget
        else:
            plans = [planner.plan(law, b) for b in budgets]
        result.curves[planner.name] = [
            Point(b, p.positions, p.expected_recompute,
                  reduction_factor(result.no_cache_work, p.expected_recompute))
            for b, p in zip(budgets, plans)
        ]
    return result


def add_online_curve(result: Sweep, depths: np.ndarray, **options) -> None:
    """Replay the trace's depths in order through the online planner, one run per budget."""
    no_cache = float(np.mean(depths))
    points = []
    for b in result.budgets:
        recompute, online = replay_online(depths, result.length, b, **options)
        # The positions are the last plan in force; the recompute is over the whole replay.
        points.append(Point(b, online.plan.positions, recompute, reduction_factor(no_cache, recompute)))
    result.curves["online"] = points
