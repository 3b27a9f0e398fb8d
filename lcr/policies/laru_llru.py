"""LARU over LLRU's order: LARU (Algorithm 1 of the LCR paper) with LLRU's eviction
order in place of plain recency.

Its robust fallbacks (l = 1, prediction-induced misses) evict LLRU's choice, and its
candidate window is the first l = max(floor(lambda * k), 1) pages of LLRU's order.
Takes ``layers``, ``experts`` and ``native_rounds`` like LLRU, and Algorithm 1's
parameters (``mode``, ``b``, ``shrink_every``, ``record``); b defaults to the paper's 2.
It is always the paper's rule: LARU's own extensions compare with plain LRU (``credit``,
``guard``) or replay plain LARU (``intervals``' shadows), not LLRU's order, so they are
off here and refused as unknown arguments.
"""
from __future__ import annotations

from typing import MutableSet

from lcr.policies.laru import LARU, PAPER_RULE
from lcr.policies.layered import LayeredRecency, LayerShape
from lcr.policies.predictions import NextAccessPredictor


class LaruLLRU(LARU):
    name = "laru_llru"
    layered = True

    def __init__(self, capacity: int, predictor: NextAccessPredictor, layers: int = 1,
                 experts: int | None = None, native_rounds: bool = False, mode: str = "sync",
                 b: float = PAPER_RULE["b"], shrink_every: int = 1, record: MutableSet[int] | None = None):
        super().__init__(capacity, predictor, mode, shrink_every=shrink_every, record=record, **{**PAPER_RULE, "b": b})
        self.recency = self.resident = LayeredRecency(LayerShape(layers, experts), native_rounds)

    def _access(self, key, t):
        self.recency.arrive(key)
        return super()._access(key, t)
