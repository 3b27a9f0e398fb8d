"""The interval expert of LARU's ``intervals`` option (lcr's extension, not in the paper).

It needs no model: it expects each key back one interval after its last access (last
access + the time since the access before; +inf after a single access). That is what
OPT does on a loop and on any key that repeats its interval, and what a relaxed-Belady
classifier cannot say once every key of a loop is "back after the boundary". It is a
``NextAccessPredictor`` (its answers are read, never computed, at ``predict``): the LARU
that owns it reports every access through ``on_access``.

Not thread-safe (neither is a policy).
"""
from __future__ import annotations

import math
from typing import Sequence


class IntervalRanks:
    """Per key: its last access + the interval before it (+inf after one access)."""

    name = "intervals"

    def __init__(self):
        self._last: dict[int, int] = {}
        self._rank: dict[int, float] = {}

    def on_access(self, key: int, t: int) -> None:
        previous = self._last.get(key)
        self._rank[key] = math.inf if previous is None else 2 * t - previous
        self._last[key] = t

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        get, inf = self._rank.get, math.inf
        return [get(key, inf) for key in keys]

    def pick_victim(self, candidates: Sequence[int]) -> int:
        """The candidate expected back last; the first one (least recent) on ties."""
        get, inf = self._rank.get, math.inf
        return max(candidates, key=lambda key: get(key, inf))
