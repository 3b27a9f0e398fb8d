"""Online placement: plan from an exponentially weighted histogram of recent overlap depths.

Each observed depth enters the histogram with weight 1 and every older one decays by
``decay`` per request, so the estimate follows a drifting law (paper Section 4.2). Every
``refresh_every`` requests the estimate is compared with the one the current plan was made
from; when they differ by more than ``replan_threshold`` in total variation, the planner
re-solves. Planning happens off the serving path; a request is served by the plan in force.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.planners import DpPlanner, Plan, Planner, check_budget
from lcr.errors import LcrInputError

# Weights grow as decay**-t instead of decaying the whole histogram each step (O(1) per
# request); they are rescaled before they could overflow.
_RESCALE_AT = 1e150


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


class OnlinePlanner:
    def __init__(
        self,
        length: int,
        budget: int,
        *,
        decay: float = 0.995,
        refresh_every: int = 10,
        replan_threshold: float = 0.1,
        planner: Planner | None = None,
    ):
        if length < 1:
            raise LcrInputError(f"prefix length L must be >= 1, got {length}")
        if not 0 < decay <= 1:
            raise LcrInputError(f"decay must be in (0, 1], got {decay}")
        if refresh_every < 1:
            raise LcrInputError(f"refresh interval must be >= 1 request, got {refresh_every}")
        self.length = int(length)
        self.budget = check_budget(budget)
        self.decay = float(decay)
        self.refresh_every = int(refresh_every)
        self.replan_threshold = float(replan_threshold)
        self.planner = planner or DpPlanner()
        self.plan = Plan((), float("nan"))  # nothing stored until the first refresh
        self.replans = 0
        self._hist = np.zeros(self.length + 1)
        self._weight = 1.0
        self._seen = 0
        self._planned_from: np.ndarray | None = None

    def estimate(self) -> OverlapLaw:
        """The current exponentially weighted overlap law."""
        return OverlapLaw(self._hist)

    def resume_depth(self, depth: int) -> int:
        """Where the plan in force resumes a request of this depth (0: replay from scratch)."""
        i = bisect_right(self.plan.positions, depth)
        return self.plan.positions[i - 1] if i else 0

    def observe(self, depth: int) -> bool:
        """Record one request's overlap depth; True when this triggered a new plan."""
        if not 0 <= depth <= self.length:
            raise LcrInputError(f"overlap depth {depth} is outside 0..{self.length}")
        self._weight /= self.decay
        self._hist[depth] += self._weight
        if self._weight > _RESCALE_AT:
            self._hist /= self._weight
            self._weight = 1.0
        self._seen += 1
        if self._seen % self.refresh_every:
            return False
        moved = self._planned_from is None or (
            total_variation(self._hist, self._planned_from) > self.replan_threshold
        )
        if moved:
            law = self.estimate()
            self.plan = self.planner.plan(law, self.budget)
            self._planned_from = law.weights.copy()
            self.replans += 1
        return moved


def replay_online(depths: Iterable[int], length: int, budget: int, **options) -> tuple[float, OnlinePlanner]:
    """Mean blocks recomputed per request when each is served by the plan in force before it."""
    online = OnlinePlanner(length, budget, **options)
    recomputed, count = 0, 0
    for d in depths:
        d = int(d)
        recomputed += d - online.resume_depth(d)
        count += 1
        online.observe(d)
    return recomputed / max(count, 1), online
