"""Predictive Marker (Lykouris & Vassilvitskii, ICML 2018).

Marking phases as in Marker, but evictions follow predictions while they are
trustworthy. Each clean miss (a key not cached when the phase began) opens a chain;
the key it evicts joins that chain. A stale miss (a key evicted earlier in the phase)
extends the chain its key belongs to. While a chain is at most H_k long, evictions
take the unmarked key with the largest predicted next-request time; beyond that they
are uniformly random among the unmarked keys, which bounds the damage of bad
predictions to O(log k).
"""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.marking import MarkedCache
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.rng import SplitMix64


def harmonic(k: int) -> float:
    return sum(1.0 / i for i in range(1, k + 1))


class PredictiveMarker(Policy):
    name = "predictive_marker"
    uses_predictions = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync",
                 seed: int = 0):
        super().__init__(capacity)
        self.cache = self.resident = MarkedCache(capacity)
        self.table = PredictionTable(predictor, mode, self.stats)
        self.rng = SplitMix64(seed)
        self.chain_limit = harmonic(capacity)
        self._chain_of: dict[int, int] = {}  # key evicted in this phase -> its chain
        self._chain_len: list[int] = []

    def _access(self, key, t):
        hit = key in self.cache
        if hit:
            self.cache.mark(key)
        elif not self.full:
            self.cache.add(key)
        else:
            if self.cache.start_phase_if_all_marked():
                self._chain_of.clear()
                self._chain_len.clear()
                self.stats.extra["phases"] = self.cache.phases
            chain = self._chain_of.pop(key, None)
            if chain is None:  # clean miss: a new chain
                chain = len(self._chain_len)
                self._chain_len.append(1)
            else:              # stale miss: the chain grows
                self._chain_len[chain] += 1
            victim = self._choose_victim(chain, t)
            self._chain_of[victim] = chain
            self.cache.replace(victim, key)
            self.table.forget(victim)
            self.last_evicted = victim
        self.table.on_access(key, t)
        return hit

    def _choose_victim(self, chain: int, t: int) -> int:
        unmarked = self.cache.unmarked
        if self._chain_len[chain] <= self.chain_limit:
            self.table.before_eviction(unmarked, t)
            self.stats.prediction_evictions += 1
            return self.table.pick_victim(unmarked)
        return unmarked[self.rng.below(len(unmarked))]
