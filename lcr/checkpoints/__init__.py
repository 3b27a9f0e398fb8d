"""Sparse prefix checkpoints for recurrent and hybrid models.

A recurrent layer resumes from one stored state, so a cache can keep exact states at a few
positions of a long prefix and replay the rest on a hit. Given an overlap law p(d) over
depths 0..L and a budget of m positions, the planners here choose where:

  law        OverlapLaw: weights over depths (counts stay integers)
  cost       expected_recompute(law, positions): the objective E[d - c(d)]
  planners   balanced, block, last, and the exact DP (C++ convex-hull trick)
  reference  the O(m L^2) DP that specifies the C++ solver
  online     re-planning from an exponentially weighted histogram
  traces     overlap depths from Mooncake prefix-block traces (last-K cache)
  synthetic  seeded laws: spike, short, multimodal, uniform
  sweep, report, cli   `lcr sim-ckpt`
"""
from lcr.checkpoints.cost import expected_recompute, reduction_factor
from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.online import OnlinePlanner
from lcr.checkpoints.planners import (
    BalancedPlanner,
    BlockPlanner,
    DpPlanner,
    LastPlanner,
    Plan,
    balanced_uniform_cost,
    get_planner,
)

__all__ = [
    "BalancedPlanner", "BlockPlanner", "DpPlanner", "LastPlanner", "OnlinePlanner", "OverlapLaw",
    "Plan", "balanced_uniform_cost", "expected_recompute", "get_planner", "reduction_factor",
]
