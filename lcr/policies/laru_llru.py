"""LARU over LLRU's order: LARU (Algorithm 1 of the LCR paper) with LLRU's eviction
order in place of plain recency.

Its robust fallbacks (l = 1, prediction-induced misses) evict LLRU's choice, and its
candidate window is the first l = max(floor(lambda * k), 1) pages of LLRU's order.
Takes ``layers``, ``experts`` and ``native_rounds`` like LLRU, and LARU's parameters.
"""
from __future__ import annotations

from lcr.policies.laru import LARU
from lcr.policies.layered import LayeredRecency, LayerShape
from lcr.policies.predictions import NextAccessPredictor


class LaruLLRU(LARU):
    name = "laru_llru"
    layered = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, layers: int = 1,
                 experts: int | None = None, native_rounds: bool = False, **laru_params):
        super().__init__(capacity, predictor, **laru_params)
        self.recency = self.resident = LayeredRecency(LayerShape(layers, experts), native_rounds)

    def _access(self, key, t):
        self.recency.arrive(key)
        return super()._access(key, t)
