"""LARU's experts (lcr's extension, not in the paper): rankings of the cached keys, four
that need no model, for what a boundary classifier is blind to, and the model's answers
followed blindly.

- ``intervals``: each key is expected back one interval after its last access (last
  access + its smoothed interval, +inf after a single access). That is what OPT does on
  a loop and on any key that repeats its interval, and what a relaxed-Belady classifier
  cannot say once every key of a loop is "back after the boundary". The interval is
  smoothed exponentially (the newest weighs 1/4, about the last four intervals), so
  that one irregular return does not reorder a loop's keys.
- ``first`` (LIRS's bet on a loop): as ``intervals``, but the keys seen once go newest
  first (after every key with an interval), so that a cache keeps the first keys of a
  pass longer than itself, which a loop requests first again; LRU over the keys seen once
  keeps the pass's last keys, all gone before the next pass reaches them. A key seen once
  that this expert's own shadow has dropped ranks first instead (+inf): the ranking never
  ages, so a cache that followed another leader before would otherwise keep one-time keys
  forever that the shadow made no room for (on a scan, 61% -> 22% of the gap closed).
  The newest first accesses first wait in a probation of LIRS's resident HIR size (1% of
  the cache), oldest out first and below every key seen once before them, so that a key
  requested again soon after its first access is not the bet's first victim.
  It also breaks the predictions' ties among keys seen once while its shadow keeps up
  (``lcr.policies.laru``).
- ``decay`` (frequency with aging, as LRFU's combined recency and frequency): each access
  adds 1 to a count that halves every 10 k requests (TinyLFU's aging period, 10 x the
  cache size); the lowest count goes first. The order of two decayed counts never changes
  while neither key is requested, so the rank, -(log count + last access / tau) with
  tau = 10 k / ln 2, is fixed at the access.
- ``model`` (the predictions followed blindly, FPB's order): each key ranked by the
  model's answer at its latest access, over the whole cache. LARU's own use of the
  answers shrinks its window at every induced miss, so where a model is right on most
  keys but wrong on enough to induce misses (a noisy model), LARU drifts to recency
  while blind following still gains; this expert's shadow shows when it does.
- ``frequency`` (LFU): each key ranked by its count of accesses, never aged; the fewest
  go first, the oldest on equal counts. What ``decay`` forgets: popular keys that return
  after a long gap (beyond its 10 k aging period). Which of the two a trace wants (aging
  where popularity shifts, none where it does not) is for their shadows to show.

Each expert is a ``NextAccessPredictor`` whose rank for a key is fixed at the key's
access (read, never computed, at ``predict``; the model expert asks the model then, so
a sync LARU queries its model at every access too): the LARU that owns it reports every
request through ``on_access``, and every key the expert's shadow evicts through
``on_shadow_eviction`` (where ``first`` re-ranks it; ``first`` also re-ranks the key an
access pushes out of its probation). A rank that changes only at those events is what
lets the native core keep each expert's order in a tree.

Not thread-safe (neither is a policy).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

from lcr.policies.lirs import resident_hir_slots
from lcr.policies.predictions import NextAccessPredictor


class ExpertRanks:
    """A ranking fixed at each key's access; the largest rank is evicted first."""

    name: str

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        """``predictor``: the cache's model (only the ``model`` expert reads it)."""
        self._rank: dict[int, float] = {}

    def on_access(self, key: int, t: int) -> None:
        """Record request ``t`` of ``key``."""
        self._rank[key] = self.rank(key, t)

    def rank(self, key: int, t: int) -> float:
        raise NotImplementedError

    def on_shadow_eviction(self, key: int) -> None:
        """The expert's shadow evicted ``key`` (nothing changes, unless an expert says so)."""

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        get, inf = self._rank.get, math.inf
        return [get(key, inf) for key in keys]

    def pick_victim(self, candidates: Sequence[int]) -> int:
        """The candidate ranked largest; the first one (least recent) on ties."""
        get, inf = self._rank.get, math.inf
        return max(candidates, key=lambda key: get(key, inf))


class IntervalRanks(ExpertRanks):
    """Per key: its last access + its smoothed interval (+inf after one access)."""

    name = "intervals"
    #: The newest interval's weight in the smoothed one.
    weight = 0.25

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        super().__init__(capacity)
        self._last: dict[int, int] = {}
        self._smoothed: dict[int, float] = {}

    def rank(self, key, t):
        previous = self._last.get(key)
        self._last[key] = t
        if previous is None:
            return math.inf
        interval = t - previous
        smoothed = self._smoothed.get(key)
        # The same operations, in the same order, as the native core: equal floats.
        smoothed = interval if smoothed is None else (1 - self.weight) * smoothed + self.weight * interval
        self._smoothed[key] = smoothed
        return t + smoothed


class FirstSeenRanks(IntervalRanks):
    """As ``IntervalRanks``, but a key seen once first waits in a probation of LIRS's
    resident HIR size (the newest first accesses, oldest out first), then ranks
    ``SEEN_ONCE`` + its access (newest first, after every key with an interval) until this
    expert's shadow drops it (+inf)."""

    name = "first"
    #: Above every interval rank (last access + smoothed interval) and every probation rank
    #: (PROBATION_TOP - access); all are exact doubles for t < 2**51, as in the native core.
    SEEN_ONCE = 2.0 ** 52
    PROBATION_TOP = 2.0 ** 52 - 1
    #: Every rank of a key seen once is at least this, every interval rank below it (t < 2**50).
    ONCE_FLOOR = 2.0 ** 51

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        super().__init__(capacity)
        self.probation_slots = resident_hir_slots(capacity)
        self._probation: OrderedDict[int, None] = OrderedDict()  # oldest first access first

    def rank(self, key, t):
        rank = super().rank(key, t)
        if rank != math.inf:
            self._probation.pop(key, None)
            return rank
        self._probation[key] = None
        if len(self._probation) > self.probation_slots:  # its oldest member leaves
            out, _ = self._probation.popitem(last=False)
            self._rank[out] = self.SEEN_ONCE + self._last[out]
        return self.PROBATION_TOP - t

    def seen_once(self, key: int) -> bool:
        """Whether ``key``'s rank is a seen-once one (the probation, the bet or +inf)."""
        return self._rank.get(key, math.inf) >= self.ONCE_FLOOR

    def on_shadow_eviction(self, key):
        if key not in self._smoothed:  # seen once: the shadow found no room for it
            self._probation.pop(key, None)
            self._rank[key] = math.inf


class DecayRanks(ExpertRanks):
    """-(log decayed count + last access / tau): the smallest decayed count ranks largest."""

    name = "decay"

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        super().__init__(capacity)
        self.tau = 10 * capacity / math.log(2)  # the count halves every 10 k requests
        self._count: dict[int, tuple[float, int]] = {}  # decayed count at the last access, and when

    def rank(self, key, t):
        count, last = self._count.get(key, (0.0, t))
        count = count * math.exp(-(t - last) / self.tau) + 1.0
        self._count[key] = (count, t)
        return -(math.log(count) + t / self.tau)


class FrequencyRanks(ExpertRanks):
    """-(accesses so far): the least frequently requested key ranks largest."""

    name = "frequency"

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        super().__init__(capacity)
        self._count: dict[int, int] = {}

    def rank(self, key, t):
        count = self._count.get(key, 0) + 1
        self._count[key] = count
        return -float(count)


class ModelRanks(ExpertRanks):
    """The model's answer for the key at its latest access (NaN, unknown: +inf, first out,
    as in LARU's prediction table)."""

    name = "model"

    def __init__(self, capacity: int, predictor: NextAccessPredictor | None = None):
        super().__init__(capacity)
        if predictor is None:
            raise ValueError("the model expert needs the cache's predictor")
        self.predictor = predictor

    def rank(self, key, t):
        value = float(self.predictor.predict([key], t)[0])
        return math.inf if value != value else value


#: LARU's experts (``intervals=1``), in the order the lead rule breaks ties.
EXPERTS: tuple[type[ExpertRanks], ...] = (IntervalRanks, DecayRanks, FirstSeenRanks, ModelRanks, FrequencyRanks)
