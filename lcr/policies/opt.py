"""OPT (Belady, demand paging): always admit; evict the item requested furthest in the future.

Offline: it reads ``next_use[t]``, the index of the next request to the key
requested at ``t`` (``lcr.traces.NEVER`` if none). Items never requested again tie;
among them the least recently used goes first.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from lcr.policies.base import Policy


class OPT(Policy):
    name = "opt"
    uses_future = True

    def __init__(self, capacity: int, next_use: Sequence[int]):
        super().__init__(capacity)
        self.next_use = next_use
        self._cached: dict[int, tuple[int, int]] = {}  # key -> (next use, last access)
        self.resident = self._cached
        # Max-heap on next use (ties: oldest access first), with stale entries skipped lazily.
        self._heap: list[tuple[int, int, int]] = []

    def native_args(self) -> dict:
        return {}  # the engine adds the trace's next uses

    def _access(self, key, t):
        hit = key in self._cached
        if not hit and self.full:
            self.last_evicted = self._pop_furthest()
        nxt = int(self.next_use[t])
        self._cached[key] = (nxt, t)
        heapq.heappush(self._heap, (-nxt, t, key))
        return hit

    def _pop_furthest(self) -> int:
        while True:
            neg_next, last, key = heapq.heappop(self._heap)
            if self._cached.get(key) == (-neg_next, last):
                del self._cached[key]
                return key
