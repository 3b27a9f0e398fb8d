"""W-TinyLFU (Einziger, Friedman & Manes, ACM TOS 2017; Caffeine's design) as libCacheSim
0.3.5 runs it with unit sizes: a window LRU of w = int(0.01 k) keys in front of a
segmented-LRU main cache of k - w keys (probation 1/5, protected 4/5), admission by a
frequency sketch (``lcr.policies.sketch``).

- Every miss enters the window's MRU end and is counted in the sketch; a hit in the main
  cache is counted too (a window hit is not), and after 32 (k - w) such main hits the
  sketch halves.
- Main (SLRU): a new key takes the first segment with room (probation, else protected);
  a probation hit moves to protected's MRU end, and protected's LRU key, when over its
  share, goes back to probation's MRU end; a protected hit moves to its MRU end. Its
  victim is the LRU key of the first non-empty segment.
- To free a slot: while the window is not empty, its LRU key is the candidate: if main
  has room it moves there and the next candidate is tried; else the sketch decides: the
  candidate moves to main in place of main's victim when it is counted strictly more
  often, else the candidate itself is evicted. Every candidate is counted in the sketch
  once more. With the window empty, main evicts its victim.

Differs from libCacheSim only below k = 100, where libCacheSim's window has int(0.01 k)
= 0 slots and it caches nothing; here the window has at least one slot (for k = 1 it is
the whole cache), and at k = 2 main's one slot is probation's.
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.policies.base import Policy
from lcr.policies.s3fifo import _Union
from lcr.policies.sketch import CountingBloomSketch


class WTinyLFU(Policy):
    name = "wtinylfu"
    evicts_on_hit = True  # a promotion that overfills probation
    hashes_keys = True  # the sketch's positions (XXH64 of the key, as libCacheSim)

    def __init__(self, capacity: int, window: float = 0.01):
        super().__init__(capacity)
        if not 0 < window < 1:
            raise ValueError(f"wtinylfu window must lie in (0, 1), got {window}")
        self.window_size = max(1, int(self.capacity * window))
        self.main_size = self.capacity - self.window_size  # 0 for k = 1: the window alone
        probation, protected = int(1 / 5 * self.main_size), int(4 / 5 * self.main_size)  # libCacheSim's rounding
        if self.main_size and not probation + protected:  # k = 2: the one main slot is probation's
            probation = 1  # (with none, a hit key would be demoted from protected and evicted)
        self.segment_size = (probation, protected)
        self.window: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.probation: OrderedDict[int, None] = OrderedDict()
        self.protected: OrderedDict[int, None] = OrderedDict()
        self.resident = _Union(self.window, _Union(self.probation, self.protected))
        self.sketch = CountingBloomSketch(max(1, self.main_size))
        self.halve_every = 32 * self.main_size
        self.main_hits = 0

    def native_args(self) -> dict:
        return {"window_size": self.window_size}

    def _access(self, key, t):
        if key in self.window:
            self.window.move_to_end(key)
            return True
        if key in self.probation or key in self.protected:
            self._main_hit(key)
            self.sketch.add(key)
            self.main_hits += 1
            if self.main_hits >= self.halve_every:
                self.main_hits = 0
                self.sketch.halve()
            return True
        if self.full:
            self._free_slot()
        self.window[key] = None
        self.sketch.add(key)
        return False

    # --- main cache: segmented LRU ----------------------------------------------------
    @property
    def _main_len(self) -> int:
        return len(self.probation) + len(self.protected)

    def _main_hit(self, key: int) -> None:
        if key in self.protected:
            self.protected.move_to_end(key)
            return
        del self.probation[key]
        self.protected[key] = None
        if len(self.protected) > self.segment_size[1]:
            self.probation[self.protected.popitem(last=False)[0]] = None
            while len(self.probation) > self.segment_size[0]:  # only after an overfull insert
                self._evict(self.probation.popitem(last=False)[0])

    def _main_insert(self, key: int) -> None:
        if len(self.probation) + 1 <= self.segment_size[0] or len(self.protected) + 1 > self.segment_size[1]:
            self.probation[key] = None
        else:
            self.protected[key] = None

    def _main_victim(self) -> int:
        return next(iter(self.probation or self.protected))

    def _main_evict(self) -> None:
        segment = self.probation or self.protected
        self._evict(segment.popitem(last=False)[0])

    # --- window + admission --------------------------------------------------------------
    def _free_slot(self) -> None:
        while self.window:
            candidate = next(iter(self.window))
            if self._main_len + 1 <= self.main_size:
                del self.window[candidate]
                self._main_insert(candidate)
                self.sketch.add(candidate)
                continue
            if self.main_size and self.sketch.estimate(candidate) > self.sketch.estimate(self._main_victim()):
                self._main_evict()
                del self.window[candidate]
                self._main_insert(candidate)
            else:
                del self.window[candidate]
                self._evict(candidate)
            self.sketch.add(candidate)
            return
        self._main_evict()
