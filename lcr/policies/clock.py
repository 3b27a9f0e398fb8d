"""CLOCK (Corbató 1968), as libCacheSim's ``Clock`` with its default 1-bit counter: a FIFO
queue in which a hit sets the key's reference bit. To evict, take the oldest key; while
its bit is set, clear it and move the key to the head (a second chance), then look at
the new oldest. New keys enter at the head with the bit clear.

Unlike SIEVE, a key given its second chance moves to the head, so the scan always
starts from the oldest key instead of from a hand left where it stopped.
"""
from __future__ import annotations

from lcr.policies.base import Policy


class Clock(Policy):
    name = "clock"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        # Reference bit per cached key; the dict's insertion order is the FIFO queue.
        self.referenced: dict[int, bool] = {}
        self.resident = self.referenced

    def native_args(self) -> dict:
        return {}

    def _access(self, key, t):
        if key in self.referenced:
            self.referenced[key] = True
            return True
        if self.full:
            self.last_evicted = self._evict()
        self.referenced[key] = False
        return False

    def _evict(self) -> int:
        while True:
            oldest = next(iter(self.referenced))
            if not self.referenced.pop(oldest):
                return oldest
            self.referenced[oldest] = False  # re-enters at the head
