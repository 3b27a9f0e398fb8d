"""The residual-life predictor for radix nodes (``--predictor residual``, serving's default).

It learns, online, how long nodes wait between requests, and ranks a node by what that
distribution says about a node of its age (the time since its last request). A node of
age a returns, if it returns at all, after an interval I > a; from the intervals seen so
far, among nodes with as many earlier intervals as this one (classes 0, 1, 2, 3+):

* its expected remaining wait is r(a) = E[I | I > a] - a, and
* the chance that it returns is p(a) = #(I > a) / (#(I > a) + #(open, age > a)), where an
  *open* node is one not requested since its last request (every known node, at its
  current age): nodes that reached age a and never came back count against it.

The answer is now + r(a) / p(a): the expected wait scaled by how unlikely a return is,
so a node past every interval seen answers NaN (never), the way hit density ranks objects
in LHD (Beckmann et al., NSDI '18). Where intervals cluster (a conversation's next turn
some hundred requests on, Online-QA) a fresh node answers later than one whose turn is
near, and eviction keeps the nodes about to return: what LRU cannot, and what the
intervals of one node alone cannot say before its second request. Where intervals are
memoryless r(a) is flat and p(a) falls with age, so the order is LRU's.

Intervals are counted in log-spaced bins (4 per octave); the bins halve every
``halve_every`` intervals so the model follows a changing workload. The tables behind
r and p are rebuilt every ``refresh`` observations and whenever the intervals seen have
doubled (numpy, O(bins + time buckets)); a prediction is then O(1) per key. A split's
lower part starts unknown (NaN: first out of LARU's window until requested); inheriting the
node's history measured worse in replay, and a service, which sees accesses only, cannot.
Open nodes are counted by the 16-unit bucket of their last request, over the last
``HORIZON_BUCKETS`` buckets (2^22 time units); older ones share one count, so a node
older than that sees every such node as at least as old as itself. Memory stays bounded
however long the clock runs (a service's clock can run for months).
Not thread-safe: one engine thread drives it (as every radix predictor);
``ServedResidual`` is the locked form that ``lcr serve-predictor --model residual`` hosts.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from lcr.predict.base import Predictor

CLASSES = 4             # earlier intervals of a node: 0, 1, 2, 3 or more
BINS_PER_OCTAVE = 4
BINS = 64 * BINS_PER_OCTAVE
STAMP_SHIFT = 4         # open nodes are counted by last request in buckets of 16 time units
HORIZON_BUCKETS = 1 << 18  # buckets kept apart (8 MiB of counts); older ones share column 0


def _bin(x: float) -> int:
    """The log-spaced bin of an interval or age (called per key: plain floats, no numpy)."""
    return min(int(math.log2(max(x, 0.0) + 1.0) * BINS_PER_OCTAVE), BINS - 1)


class ResidualLifePredictor(Predictor):
    name = "residual"

    def __init__(self, refresh: int = 256, halve_every: int = 1 << 16, max_keys: int = 1 << 20):
        if refresh < 1 or halve_every < 1 or max_keys < 1:
            raise ValueError("residual predictor: refresh, halve_every and max_keys must be >= 1")
        self.refresh, self.halve_every, self.max_keys = refresh, halve_every, max_keys
        self.events = np.zeros((CLASSES, BINS))     # intervals seen, per class and bin
        self.event_sums = np.zeros((CLASSES, BINS))
        self._recorded = 0
        self.nodes: dict[int, tuple[int, int]] = {}  # key -> (last request, class); oldest first
        # Open nodes per class: column 0 those stamped before bucket _base, column j > 0
        # those stamped in bucket _base + j - 1.
        self._open = np.zeros((CLASSES, 64))
        self._base = 0
        self._since = refresh
        self._built_with = 0                         # intervals recorded at the last rebuild
        self._tables = None

    # Observations -----------------------------------------------------------------------
    def observe(self, key: int, t: int) -> None:
        self.observe_node(key, t, None)

    def observe_node(self, key: int, t: int, tokens_from_root: int | None = None) -> None:
        node = self.nodes.pop(key, None)
        if node is not None:
            last, cls = node
            if last == t:  # one request reports a node once
                self.nodes[key] = node
                return
            self._close(last, cls)
            gap = t - last
            b = _bin(gap)
            self.events[cls, b] += 1
            self.event_sums[cls, b] += gap
            self._recorded += 1
            if self._recorded % self.halve_every == 0:
                self.events *= 0.5
                self.event_sums *= 0.5
            cls = min(cls + 1, CLASSES - 1)
        else:
            cls = 0
        self._add(key, t, cls)
        if len(self.nodes) > self.max_keys:
            self.forget_oldest(1)
        self._since += 1

    def forget_oldest(self, count: int) -> None:
        """Forget the ``count`` least recently requested nodes (a request moves a node last)."""
        for key in list(itertools.islice(self.nodes, count)):
            self._close(*self.nodes.pop(key))

    def _add(self, key: int, t: int, cls: int) -> None:
        self.nodes[key] = (t, cls)
        column = self._column(t)
        while column >= self._open.shape[1]:  # at most twice: fold, then grow
            self._make_room(column)
            column = self._column(t)
        self._open[cls, column] += 1

    def _close(self, last: int, cls: int) -> None:
        self._open[cls, min(self._column(last), self._open.shape[1] - 1)] -= 1

    def _column(self, t: int) -> int:
        """The column of ``_open`` that counts a node last requested at ``t``."""
        return max((t >> STAMP_SHIFT) - self._base + 1, 0)

    def _make_room(self, column: int) -> None:
        """Grow ``_open`` to hold ``column``, up to the horizon; past it, fold the oldest
        buckets into column 0 so that ``column`` lands half way through the horizon."""
        width = self._open.shape[1]
        if column < HORIZON_BUCKETS + 1:
            grown = np.zeros((CLASSES, min(max(2 * width, column + 1), HORIZON_BUCKETS + 1)))
            grown[:, :width] = self._open
            self._open = grown
            return
        shift = min(column - HORIZON_BUCKETS // 2, width - 1)  # the buckets folded
        self._open[:, 0] += self._open[:, 1:1 + shift].sum(axis=1)
        self._open[:, 1:width - shift] = self._open[:, 1 + shift:]
        self._open[:, width - shift:] = 0
        self._base += column - HORIZON_BUCKETS // 2

    # Predictions ------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Recompute the tables behind r and p from the counts now."""
        above = lambda table: np.cumsum(table[:, ::-1], axis=1)[:, ::-1]  # noqa: E731 - sums over bins >= b
        # open nodes stamped before each bucket, per class
        opened = np.concatenate([np.zeros((CLASSES, 1)), np.cumsum(self._open, axis=1)], axis=1)
        self._tables = (above(self.events), above(self.event_sums), opened)
        self._since, self._built_with = 0, self._recorded

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        # also whenever the intervals seen have doubled: a young model sharpens fast
        if self._tables is None or self._since >= self.refresh or self._recorded > 2 * self._built_with:
            self.rebuild()
        count_above, sum_above, opened = self._tables
        out = []
        for key in keys:
            node = self.nodes.get(key)
            if node is None:
                out.append(math.nan)
                continue
            last, cls = node
            age = now - last
            b = _bin(age)
            returned = count_above[cls, b]
            if returned <= 0:
                out.append(math.nan)  # older than every interval seen: never
                continue
            remaining = max(sum_above[cls, b] / returned - age, 1.0)
            # open nodes at least as old: stamped before its bucket (past the horizon: every
            # node there)
            column = self._column(last)
            still_open = opened[cls, min(max(column, 1), opened.shape[1] - 1)]
            p = returned / (returned + max(still_open, 0.0))
            out.append(now + remaining / p)
        return out
