"""How much traffic each prefix block draws, as a router sees it (LBGR's view of a group).

Per block (its path id, as in ``lcr.kv.requests``): the rate of routed requests through it,
in requests per second averaged exponentially over ``horizon`` seconds. Bounded: past ``limit`` blocks the least recently routed are forgotten, so a
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
        self._paths: OrderedDict[int, tuple[float, float]] = OrderedDict()  # rate, at

    def record(self, paths: Iterable[int], now: float) -> None:
        """One request routed through ``paths`` at ``now`` (seconds)."""
        blocks = self._paths
        for path in paths:
            entry = blocks.get(path)
            rate = 0.0 if entry is None else self._decayed(entry, now)
            blocks[path] = (rate + 1.0 / self.horizon, now)
            blocks.move_to_end(path)
        while len(blocks) > self.limit:
            blocks.popitem(last=False)

    def rate(self, path: int | None, now: float) -> float:
        """Requests per second through ``path`` lately (each one adds 1 / horizon, decaying
        by e every horizon seconds: a steady stream of r per second reads r)."""
        entry = self._paths.get(path)
        return 0.0 if entry is None else self._decayed(entry, now)

    def _decayed(self, entry: tuple[float, float], now: float) -> float:
        rate, at = entry
        return rate * math.exp(-max(0.0, now - at) / self.horizon)
