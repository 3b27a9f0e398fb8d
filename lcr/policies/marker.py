"""Marker (Fiat et al. 1991): randomized marking, 2H_k-competitive.

Every requested key is marked. A miss into a full cache evicts an unmarked key chosen
uniformly at random; when none is left, a new phase unmarks them all first.
"""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.marking import MarkedCache
from lcr.policies.rng import SplitMix64


class Marker(Policy):
    name = "marker"

    def __init__(self, capacity: int, seed: int = 0):
        super().__init__(capacity)
        self.cache = self.resident = MarkedCache(capacity)
        self.rng = SplitMix64(seed)

    def native_args(self) -> dict:
        return {"seed": self.rng.state}

    def _access(self, key, t):
        if key in self.cache:
            self.cache.mark(key)
            return True
        if self.full:
            if self.cache.start_phase_if_all_marked():
                self.stats.extra["phases"] = self.cache.phases
            victim = self.cache.unmarked[self.rng.below(len(self.cache.unmarked))]
            self.cache.replace(victim, key)
            self.last_evicted = victim
        else:
            self.cache.add(key)
        return False
