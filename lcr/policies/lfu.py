"""LFU: evict the cached key with the fewest requests since it was loaded, as libCacheSim
0.3.5's ``LFU`` does. Ties go to the key that reached that count first (each count keeps
a FIFO of its keys). A key's count starts at 1 when loaded and is forgotten on eviction.

``pinned`` is a hook for batched cache engines (``lcr.embedding.reference``), as in
``RecencyOrder``: keys in it stay cached but are never evicted, so the victim is the first
unpinned key of the lowest count that has one. Empty by default: libCacheSim's decisions.

``aging=N`` (default 0: off) adds aging: every N requests all counts are halved
(rounding up, so a cached key keeps count >= 1). libCacheSim's LFU has no aging; with
``aging=0`` the decisions are libCacheSim's.
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.policies.base import Policy


class LFU(Policy):
    name = "lfu"

    def __init__(self, capacity: int, aging: int = 0):
        super().__init__(capacity)
        if int(aging) < 0:
            raise ValueError(f"lfu aging must be >= 0 requests, got {aging}")
        self.aging = int(aging)
        self.count: dict[int, int] = {}
        self.resident = self.count
        # count -> keys with that count, in the order they reached it.
        self.buckets: dict[int, OrderedDict[int, None]] = {}
        self.requests = 0
        self.pinned: set[int] = set()

    def native_args(self) -> dict:
        return {"aging": self.aging}

    def _access(self, key, t):
        self.requests += 1
        hit = key in self.count
        if hit:
            self._move(key, self.count[key] + 1)
        else:
            if self.full:
                victim = self._victim()
                self._unlink(victim)
                del self.count[victim]
                self._evict(victim)
            self.count[key] = 1
            self.buckets.setdefault(1, OrderedDict())[key] = None
        if self.aging and self.requests % self.aging == 0:
            self._halve()
        return hit

    def _victim(self) -> int:
        """The first key of the lowest count, passing over pinned keys."""
        if not self.pinned:
            return next(iter(self.buckets[min(self.buckets)]))
        for count in sorted(self.buckets):
            for key in self.buckets[count]:
                if key not in self.pinned:
                    return key
        raise RuntimeError("lfu: every cached key is pinned, nothing may be evicted")

    def _unlink(self, key: int) -> None:
        """Take ``key`` out of its count's bucket, dropping the bucket once empty."""
        count = self.count[key]
        del self.buckets[count][key]
        if not self.buckets[count]:
            del self.buckets[count]

    def _move(self, key: int, count: int) -> None:
        self._unlink(key)
        self.count[key] = count
        self.buckets.setdefault(count, OrderedDict())[key] = None

    def _halve(self) -> None:
        """Halve every count; keys keep their order within and across merged counts."""
        merged: dict[int, OrderedDict[int, None]] = {}
        for count in sorted(self.buckets):
            new = (count + 1) // 2
            for key in self.buckets[count]:
                self.count[key] = new
                merged.setdefault(new, OrderedDict())[key] = None
        self.buckets = merged
