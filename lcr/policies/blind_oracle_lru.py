"""BlindOracle&LRU (Wei, APPROX 2020): follow the better of two experts.

BlindOracle (FPB) and LRU both run in simulation on the same requests. The cache
follows whichever has made fewer misses so far (ties keep the current one), and it
follows lazily: a miss evicts the least recently used key that the followed expert
does not hold (one always exists when the cache is full, since the expert holds the
requested key and we do not). This deterministic combination is O(min(k, 1 + eta/OPT))
-competitive, the best possible for deterministic algorithms.
"""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.fpb import FPB
from lcr.policies.lru import LRU
from lcr.policies.predictions import NextAccessPredictor
from lcr.policies.recency import RecencyOrder


class BlindOracleLRU(Policy):
    name = "blind_oracle_lru"
    uses_predictions = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync"):
        super().__init__(capacity)
        self.blind = FPB(capacity, predictor, mode)
        self.lru = LRU(capacity)
        self.following: Policy = self.blind
        self.recency = self.resident = RecencyOrder()
        self.stats.extra["switches"] = 0

    def _access(self, key, t):
        self.blind.access(key, t)
        self.lru.access(key, t)
        self.stats.predictor_calls = self.blind.stats.predictor_calls
        self.stats.predicted_keys = self.blind.stats.predicted_keys
        other = self.lru if self.following is self.blind else self.blind
        if other.stats.misses < self.following.stats.misses:
            self.following = other
            self.stats.extra["switches"] += 1

        hit = key in self.recency
        if not hit and self.full:
            victim = next(k for k in self.recency if k not in self.following)
            self.recency.remove(victim)
            self.last_evicted = victim
            if self.following is self.blind:
                self.stats.prediction_evictions += 1
            else:
                self.stats.lru_evictions += 1
        self.recency.touch(key)
        return hit
