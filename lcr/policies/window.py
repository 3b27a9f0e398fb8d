"""The candidate window shared by HF and LARU (Algorithm 1, lines 18-25)."""
from __future__ import annotations

from lcr.policies.base import PolicyStats
from lcr.policies.predictions import PredictionTable
from lcr.policies.recency import RecencyOrder


def choose_in_window(recency: RecencyOrder, table: PredictionTable, stats: PolicyStats,
                     window: int, t: int) -> tuple[int, bool]:
    """Among the ``window`` least recently used keys, the one predicted to return last.

    A window of one is a plain LRU eviction and asks the predictor nothing.
    Returns the victim and whether a prediction chose it.
    """
    candidates = recency.oldest(window)
    if len(candidates) == 1:
        stats.lru_evictions += 1
        return candidates[0], False
    table.before_eviction(candidates, t)
    stats.prediction_evictions += 1
    return table.pick_victim(candidates), True
