"""Per-node features for learned next-access predictors (paper Section 5.1).

For each node key: the last ten access intervals, ten exponentially decayed access
counters (EDCs) with half-lives 1, 2, 4, ... 512 time units, and the tokens from the
root to the node's end (its position in the prompt). Engines feed it real accesses
only; ``matrix`` gives one row per key for a batch prediction. A key's history outlives
its eviction (a prefix that comes back is the case that matters), up to ``max_keys``
keys, beyond which the least recently seen key is dropped. ``edcs=False`` keeps only
the intervals and depths (what the recent-intervals estimate reads): an EDC update
costs ten exponentials per access, paid in the serving scheduler's access hooks.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

HISTORY = 10
HALF_LIVES = tuple(2.0 ** i for i in range(10))
WIDTH = HISTORY + len(HALF_LIVES) + 1


class NodeFeatures:
    def __init__(self, max_keys: int = 1 << 20, edcs: bool = True):
        self.max_keys = max_keys
        self.edcs = edcs
        self.last: dict[int, int] = {}  # insertion order = least recently seen first
        self.intervals: dict[int, list[int]] = {}
        self._edc: dict[int, list[float]] = {}
        self.depth: dict[int, int] = {}
        self._decay = [math.log(2) / h for h in HALF_LIVES]

    def observe(self, key: int, now: int, tokens_from_root: int | None = None) -> None:
        last = self.last.get(key)
        if last == now:
            return  # one request touches a node once
        if last is not None:
            gaps = self.intervals.setdefault(key, [])
            gaps.append(now - last)
            del gaps[:-HISTORY]
        if self.edcs:
            edc = self._edc.get(key)
            self._edc[key] = [1.0] * len(HALF_LIVES) if edc is None else \
                [1.0 + c * math.exp(-d * (now - last)) for c, d in zip(edc, self._decay)]
        self.last.pop(key, None)
        self.last[key] = now
        if tokens_from_root is not None:
            self.depth[key] = tokens_from_root
        if len(self.last) > self.max_keys:
            self.forget(next(iter(self.last)))

    def split(self, key: int, lower_key: int) -> None:
        """A node was cut in two: its lower part keeps the node's history and depth."""
        if key in self.last:
            self.last[lower_key] = self.last[key]
            if self.edcs:
                self._edc[lower_key] = list(self._edc[key])
            self.intervals[lower_key] = list(self.intervals.get(key, []))
        if key in self.depth:
            self.depth[lower_key] = self.depth[key]

    def forget(self, key: int) -> None:
        for table in (self.last, self.intervals, self._edc, self.depth):
            table.pop(key, None)

    def matrix(self, keys: Sequence[int], now: int) -> np.ndarray:
        """Rows of [intervals (newest first, NaN-padded), EDCs decayed to ``now``, depth]."""
        if not self.edcs:
            raise ValueError("these node features keep no EDCs (edcs=False)")
        out = np.full((len(keys), WIDTH), np.nan)
        for row, key in enumerate(keys):
            last = self.last.get(key)
            if last is None:
                continue
            gaps = self.intervals.get(key, [])[::-1]
            out[row, :len(gaps)] = gaps
            out[row, HISTORY:HISTORY + len(HALF_LIVES)] = [
                c * math.exp(-d * (now - last)) for c, d in zip(self._edc[key], self._decay)]
            out[row, -1] = self.depth.get(key, np.nan)
        return out
