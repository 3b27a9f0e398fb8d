"""ARC (Megiddo & Modha, FAST 2003), as libCacheSim 0.3.5 runs it with unit sizes.

Two resident LRU lists, T1 (seen once recently) and T2 (seen at least twice), and two
ghost lists of evicted keys, B1 and B2. A hit in T1 or T2 moves the key to T2's MRU end.
A miss found in a ghost list adapts the target size p of T1 (B1: grow by
max(|B2|/|B1|, 1), capped at k; B2: shrink by max(|B1|/|B2|, 1), floored at 0) and
loads the key into T2; any other miss loads it into T1.

Evicting into a full cache ("replace"): T1's LRU key goes to B1 when T1 is non-empty
and |T1| > p (or |T1| == p on a B2 hit), or when T2 is empty; otherwise T2's LRU goes
to B2. Before replacing on a miss outside the ghosts (the paper's case IV): if
|T1| + |B1| = k, B1's oldest ghost is dropped (or, with B1 empty, T1's LRU is evicted
with no ghost and no replace); else, with all four lists holding 2k keys, B2's oldest
ghost is dropped. Like libCacheSim, ghosts are trimmed only when a key is evicted.
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.policies.base import Policy


class ARC(Policy):
    name = "arc"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        # Oldest first; the last entry is the MRU end.
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.p = 0.0
        self.resident: dict[int, None] = {}

    def native_args(self) -> dict:
        return {}

    def _access(self, key, t):
        if key in self.t1:
            del self.t1[key]
            self.t2[key] = None
            return True
        if key in self.t2:
            self.t2.move_to_end(key)
            return True
        ghost = 1 if key in self.b1 else 2 if key in self.b2 else 0
        if ghost == 1:
            self.p = min(self.p + max(len(self.b2) / len(self.b1), 1.0), self.capacity)
            del self.b1[key]
        elif ghost == 2:
            self.p = max(self.p - max(len(self.b1) / len(self.b2), 1.0), 0.0)
            del self.b2[key]
        if self.full:
            if ghost:
                self._replace(ghost == 2)
            else:
                self._make_room()
        (self.t2 if ghost else self.t1)[key] = None
        self.resident[key] = None
        return False

    def _make_room(self) -> None:
        """Case IV of the paper: a miss outside the ghost lists into a full cache."""
        k = self.capacity
        if len(self.t1) + len(self.b1) + 1 > k:
            if self.b1:
                self.b1.popitem(last=False)
                self._replace(False)
            else:
                self._drop(self.t1.popitem(last=False)[0])
        else:
            if len(self.t1) + len(self.b1) + len(self.t2) + len(self.b2) >= 2 * k and self.b2:
                self.b2.popitem(last=False)
            self._replace(False)

    def _replace(self, hit_in_b2: bool) -> None:
        n1 = len(self.t1)
        if (n1 > 0 and (n1 > self.p or (n1 == self.p and hit_in_b2))) or not self.t2:
            key = self.t1.popitem(last=False)[0]
            self.b1[key] = None
        else:
            key = self.t2.popitem(last=False)[0]
            self.b2[key] = None
        self._drop(key)

    def _drop(self, key: int) -> None:
        del self.resident[key]
        self._evict(key)
