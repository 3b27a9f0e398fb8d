"""The O(m L^2) reference DP: the specification the C++ convex-hull-trick solver must match.

F_0(b) = C(0, b); F_j(b) = min_{0 <= a < b} F_{j-1}(a) + C(a, b), over b = 0..L+1, where
C(a, b) = Q(b) - Q(a) - a (P(b) - P(a)) is the weight-times-replay of depths [a, b) served
from a checkpoint at a. Choosing a = 0 spends no checkpoint, so F_m is "at most m".
Ties go to the smallest a (``argmin`` takes the first), as in the C++ solver.
"""
from __future__ import annotations

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.planners import check_budget


def reference_dp(law: OverlapLaw, budget: int) -> tuple[float, list[int]]:
    """(optimal expected recompute, its positions) with at most ``budget`` checkpoints."""
    w = law.weights
    n = w.size + 1  # b = 0..L+1
    P = np.concatenate(([0.0], np.cumsum(w)))
    Q = np.concatenate(([0.0], np.cumsum(np.arange(w.size) * w)))
    a = np.arange(n)[:, None]
    b = np.arange(n)[None, :]
    cost = (Q[b] - Q[a]) - a * (P[b] - P[a])  # cost[a, b] = C(a, b)
    cost = np.where(a < b, cost, np.inf)

    F = Q.copy()  # F_0(b) = C(0, b)
    choices = []
    for _ in range(min(check_budget(budget), law.length)):
        total = F[:, None] + cost
        arg = np.argmin(total, axis=0)  # over a; the first minimum is the smallest a
        F = total[arg, np.arange(n)]
        F[0] = 0.0
        choices.append(arg)

    positions = []
    b_idx = n - 1
    for arg in reversed(choices):
        a_idx = int(arg[b_idx])
        if a_idx == 0:
            break
        positions.append(a_idx)
        b_idx = a_idx
    return float(F[n - 1] / law.total), positions[::-1]
