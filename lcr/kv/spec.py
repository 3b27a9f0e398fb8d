"""Reference implementations kept as specifications: simple, slow, obviously right.

``RadixLARUSpec`` makes LARU's decisions the direct way: at every pick it sorts the
evictable leaves by recency, takes the l oldest and asks the predictor about them.
``lcr.kv.laru.RadixLARU`` must make the same decision at every pick (tests compare them);
both share ``LARURules`` (phases, induced misses, lambda), so only the window search
differs.
"""
from __future__ import annotations

from lcr.kv.laru import LARURules


class RadixLARUSpec(LARURules):
    def __init__(self, predictor, **options):
        super().__init__(predictor, **options)
        self._l = 1

    def begin_round(self, now):
        self._l = self.window

    def window_choice(self, leaves, now):
        candidates = self.lru_order(leaves)[:self._l]
        if len(candidates) <= 1:
            return None, candidates[0]
        return self.predicted_victim(candidates, now), candidates[0]


LARUSpec = RadixLARUSpec  # temporary alias: other modules still import LARUSpec
