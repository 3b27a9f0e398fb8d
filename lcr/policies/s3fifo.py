"""S3-FIFO (Yang et al., SOSP 2023), as libCacheSim 0.3.5 runs it with unit sizes.

Three FIFO queues: a small one S (10% of k), a main one M (the rest) and a ghost queue G
of keys recently evicted from S (at most 90% of k keys). Every resident key carries a
frequency counter, raised by each hit. A missed key found in G leaves G and enters M;
any other missed key enters S, with frequency 0 (while the cache fills up for the first
time and S is full, it enters M instead).

To free a slot: when M holds more than its share or S is empty, M evicts, else S does.
S looks at its oldest key: with frequency >= ``move_to_main`` (default 2, libCacheSim's
threshold) the key moves to M with frequency 0 and S looks again; otherwise it is
evicted into G (G drops its own oldest when full). M reinserts its oldest key at the
new end with frequency min(f, 3) - 1 while f >= 1 and evicts the first with f = 0.

Differs from libCacheSim only below k = 20: there S gets at least one slot and always
admits (libCacheSim's small queue of int(0.1 k) <= 1 slots admits nothing, so it
caches nothing at all).
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.policies.base import Policy


class S3FIFO(Policy):
    name = "s3fifo"

    def __init__(self, capacity: int, small_ratio: float = 0.1, ghost_ratio: float = 0.9,
                 move_to_main: int = 2):
        super().__init__(capacity)
        if not 0 < small_ratio < 1 or ghost_ratio < 0 or move_to_main < 1:
            raise ValueError("s3fifo needs 0 < small_ratio < 1, ghost_ratio >= 0, move_to_main >= 1")
        self.small_size = max(1, int(self.capacity * small_ratio))
        self.main_size = self.capacity - self.small_size
        self.ghost_size = int(self.capacity * ghost_ratio)
        self.move_to_main = int(move_to_main)
        # key -> frequency, oldest first.
        self.small: OrderedDict[int, int] = OrderedDict()
        self.main: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.resident = _Union(self.small, self.main)
        self.warm = False  # whether anything was evicted yet

    def native_args(self) -> dict:
        return {"small_size": self.small_size, "ghost_size": self.ghost_size,
                "move_to_main": self.move_to_main}

    def _access(self, key, t):
        if key in self.small:
            self.small[key] += 1
            return True
        if key in self.main:
            self.main[key] += 1
            return True
        to_main = self.ghost.pop(key, False) is None
        if self.full:
            self.warm = True
            while self.full:  # S may only have moved its keys to M
                if len(self.main) > self.main_size or not self.small:
                    self._evict_main()
                else:
                    self._evict_small()
        elif not self.warm and len(self.small) >= self.small_size:
            to_main = True  # filling up: once S is full, new keys go straight to M
        (self.main if to_main else self.small)[key] = 0
        return False

    def _evict_small(self) -> None:
        while self.small:
            key, freq = self.small.popitem(last=False)
            if freq >= self.move_to_main:
                self.main[key] = 0
                continue
            if self.ghost_size:
                if len(self.ghost) >= self.ghost_size:
                    self.ghost.popitem(last=False)
                self.ghost[key] = None
            self._evict(key)
            return

    def _evict_main(self) -> None:
        while self.main:
            key, freq = self.main.popitem(last=False)
            if freq >= 1:
                self.main[key] = min(freq, 3) - 1
                continue
            self._evict(key)
            return


class _Union:
    """Membership, size and iteration over two disjoint dicts (S then M)."""

    def __init__(self, first: dict, second: dict):
        self.parts = (first, second)

    def __contains__(self, key) -> bool:
        return any(key in part for part in self.parts)

    def __len__(self) -> int:
        return sum(map(len, self.parts))

    def __iter__(self):
        for part in self.parts:
            yield from part
