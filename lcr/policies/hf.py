"""HF (heuristic filtering, as in HALP): among the ``window`` least recently used items,
evict the one with the largest predicted next-request time. The window is fixed."""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.recency import RecencyOrder
from lcr.policies.window import choose_in_window


class HF(Policy):
    name = "hf"
    uses_predictions = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync",
                 window: int = 4):
        super().__init__(capacity)
        if window < 1:
            raise ValueError(f"hf window must be at least 1, got {window}")
        self.window = window
        self.recency = self.resident = RecencyOrder()
        self.table = PredictionTable(predictor, mode, self.stats)

    def native_args(self) -> dict:
        return {"async_mode": self.table.mode == "async", "window": self.window}

    def _access(self, key, t):
        hit = key in self.recency
        if not hit and self.full:
            victim, _ = choose_in_window(self.recency, self.table, self.stats, self.window, t)
            self.recency.remove(victim)
            self.table.forget(victim)
            self.last_evicted = victim
        self.recency.touch(key)
        self.table.on_access(key, t)
        return hit
