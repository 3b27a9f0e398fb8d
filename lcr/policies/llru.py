"""LLRU (layered LRU) for layered paging, from the layered-paging paper (Section 4).

Time is the step of the layer walk: the request at trace index t has step t on a
layered trace (layer t mod l), and ``tau(p, t)`` is the step of page p's latest request
before t. On a miss into a full cache at step t, LLRU evicts the page with the largest
last-round index R(p, t) = floor((t - tau(p, t)) / l); among those, the one with the
largest relative layer distance D(p, t) = (tau(p, t) - t) mod l, i.e. the page whose
layer comes round last. A page of the layer being served has D = 0. Pages that still
tie share a layer, and the least recently used of them goes first.

Constructor parameters ``layers`` and ``experts`` give the model's shape (pages are
``layer * experts + expert``); ``native_rounds=1`` treats consecutive requests to one
layer as one step (a token's top-k experts requested together, see ``LayerClock``).
"""
from __future__ import annotations

from lcr.policies.base import Policy
from lcr.policies.layered import LayeredRecency, LayerShape


class LLRU(Policy):
    name = "llru"
    layered = True

    def __init__(self, capacity: int, layers: int = 1, experts: int | None = None,
                 native_rounds: bool = False):
        super().__init__(capacity)
        self.order = self.resident = LayeredRecency(LayerShape(layers, experts), native_rounds)

    def _access(self, key, t):
        self.order.arrive(key)
        if key in self.order:
            self.order.touch(key)
            return True
        if self.full:
            [victim] = self.order.oldest(1)
            self.order.remove(victim)
            self.last_evicted = victim
        self.order.touch(key)
        return False
