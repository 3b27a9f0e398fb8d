"""How much traffic each prefix block draws, as a router sees it (LBGR's view of a group).

Per block (its path id, as in ``lcr.kv.requests``): how many routed requests went through
it, and at what rate, in requests per second averaged exponentially over ``horizon``
seconds. Bounded: past ``limit`` blocks the least recently routed are forgotten, so a
long-running router does not grow without end. Not thread-safe (its router's event loop
calls it).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Iterable

from lcr.errors import LcrInputError


class PrefixDemand:
    def __init__(self, horizon: float = 10.0, limit: int = 1 << 20):
        if not (math.isfinite(horizon) and horizon > 0) or limit < 1:
            raise LcrInputError("prefix demand: horizon must be > 0 seconds and limit >= 1")
        self.horizon = horizon
        self.limit = limit
        self._paths: OrderedDict[int, tuple[int, float, float]] = OrderedDict()  # count, rate, at

    def record(self, paths: Iterable[int], now: float) -> None:
        """One request routed through ``paths`` at ``now`` (seconds)."""
        blocks = self._paths
        for path in paths:
            entry = blocks.get(path)
            count, rate = (0, 0.0) if entry is None else (entry[0], self._decayed(entry, now))
            blocks[path] = (count + 1, rate + 1.0 / self.horizon, now)
            blocks.move_to_end(path)
        while len(blocks) > self.limit:
            blocks.popitem(last=False)

    def count(self, path: int | None) -> int:
        entry = self._paths.get(path)
        return 0 if entry is None else entry[0]

    def rate(self, path: int | None, now: float) -> float:
        """Requests per second through ``path`` lately (each one adds 1 / horizon, decaying
        by e every horizon seconds: a steady stream of r per second reads r)."""
        entry = self._paths.get(path)
        return 0.0 if entry is None else self._decayed(entry, now)

    def _decayed(self, entry: tuple[int, float, float], now: float) -> float:
        _, rate, at = entry
        return rate * math.exp(-max(0.0, now - at) / self.horizon)
