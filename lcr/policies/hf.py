"""HF (heuristic filtering, as in HALP): among the ``window`` least recently used items,
evict the one with the largest predicted next-request time. The window is fixed."""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.recency import RecencyOrder


class HF(Policy):
    name = "hf"
    uses_predictions = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync",
                 window: int = 4):
        super().__init__(capacity)
        if window < 1:
            raise ValueError(f"hf window must be at least 1, got {window}")
        self.window = window
        self.recency = RecencyOrder()
        self.table = PredictionTable(predictor, mode, self.stats)

    def _access(self, key, t):
        hit = key in self.recency
        if not hit and self.full:
            candidates = self.recency.oldest(self.window)
            if len(candidates) == 1:
                victim = candidates[0]
                self.stats.lru_evictions += 1
            else:
                self.table.before_eviction(candidates, t)
                victim = self.table.pick_victim(candidates)
                self.stats.prediction_evictions += 1
            self.recency.remove(victim)
            self.table.forget(victim)
            self.last_evicted = victim
        self.recency.touch(key)
        self.table.on_access(key, t)
        return hit

    def __contains__(self, key):
        return key in self.recency

    def __len__(self):
        return len(self.recency)

    def __iter__(self):
        return iter(self.recency)
