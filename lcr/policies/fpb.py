"""FPB (follow the predicted Belady, a.k.a. BlindOracle): evict the cached item with the
largest predicted next-request time, trusting predictions blindly."""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.recency import RecencyOrder


class FPB(Policy):
    name = "fpb"
    uses_predictions = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync"):
        super().__init__(capacity)
        self.recency = self.resident = RecencyOrder()
        self.table = PredictionTable(predictor, mode, self.stats)

    def native_args(self) -> dict:
        return {"async_mode": self.table.mode == "async"}

    def _access(self, key, t):
        hit = key in self.recency
        if not hit and self.full:
            candidates = list(self.recency.evictable())
            self.table.before_eviction(candidates, t)
            victim = self.table.pick_victim(candidates)
            self.recency.remove(victim)
            self.table.forget(victim)
            self.last_evicted = victim
            self.stats.prediction_evictions += 1
        self.recency.touch(key)
        self.table.on_access(key, t)
        return hit
