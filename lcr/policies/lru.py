"""LRU: evict the least recently used item."""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.recency import RecencyOrder


class LRU(Policy):
    name = "lru"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.recency = self.resident = RecencyOrder()

    def native_args(self) -> dict:
        return {}

    def _access(self, key, t):
        if key in self.recency:
            self.recency.touch(key)
            return True
        if self.full:
            [victim] = self.recency.oldest(1)
            self.recency.remove(victim)
            self.last_evicted = victim
            self.stats.lru_evictions += 1
        self.recency.touch(key)
        return False
