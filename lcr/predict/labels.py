"""Training samples drawn online from the access stream, and their labels.

``SampledHistory`` keeps up to ``capacity`` samples: key, time and the key's feature row
right after that access. Each access is sampled with probability ``rate``, which the
model sets so that the samples span a multiple of the label horizon: long enough to
label reuse intervals as long as the ones that decide evictions at the cache's size,
with memory bounded by ``capacity`` whatever the trace length.

A sample's label is the time until the same key's next access. It is recorded when that
access happens (one pending sample per key), and it is *ripe* once known for certain:
only samples at least ``horizon`` old are handed to training, their interval capped at
the horizon ("beyond"). Using only ripe samples keeps future information out (the model
at time t sees only labels known by t) and keeps young samples, which have not had time
to be re-accessed, from teaching the model that recent keys are never reused.
"""
from __future__ import annotations

import random

import numpy as np


class _Draws:
    """The numbers ``random.Random(seed).random()`` draws, one or a batch at a time (both
    are MT19937 with 53-bit doubles; the state is Python's), drawn ahead in numpy blocks."""

    _BLOCK = 1024

    def __init__(self, seed: int):
        state = random.Random(seed).getstate()[1]
        self._generator = np.random.RandomState()
        self._generator.set_state(("MT19937", np.array(state[:624], dtype=np.uint32), state[624]))
        self._ahead: list[float] = []  # drawn, not yet taken, reversed (the next one last)

    def one(self) -> float:
        if not self._ahead:
            self._ahead = self._generator.random_sample(self._BLOCK)[::-1].tolist()
        return self._ahead.pop()

    def many(self, n: int) -> np.ndarray:
        ahead = self._ahead[::-1][:n]
        del self._ahead[len(self._ahead) - len(ahead):]
        return np.concatenate([ahead, self._generator.random_sample(n - len(ahead))])


def next_access_labels(keys: np.ndarray, times: np.ndarray,
                       horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """``(intervals, censored)`` for accesses listed in time order.

    ``intervals[i]`` is ``times[j] - times[i]`` for the next access j > i to the same
    key, capped at ``horizon``; ``censored[i]`` when that is horizon or more (or there
    is no next access), and then ``intervals[i] == horizon``.
    """
    keys = np.asarray(keys)
    times = np.asarray(times, dtype=np.float64)
    n = len(keys)
    # Sort by key, ties kept in time order: consecutive entries of one key are
    # an access and its successor.
    order = np.argsort(keys, kind="stable")
    same = keys[order[1:]] == keys[order[:-1]]
    successor = np.full(n, -1, dtype=np.int64)
    successor[order[:-1][same]] = order[1:][same]
    intervals = np.full(n, float(horizon))
    seen = successor >= 0
    intervals[seen] = np.minimum(times[successor[seen]] - times[seen], horizon)
    return intervals, intervals >= horizon


class SampledHistory:
    """Ring buffer of sampled accesses (key, time, feature row, next-access interval),
    recorded natively (``lcr._native.PendingSamples``, csrc/cpu/model_stream.cpp), a batch
    of accesses in one pass (``observe_many``).

    Not thread-safe by itself: ``LightGBMPredictor`` guards it with its lock.
    """

    def __init__(self, capacity: int, width: int, seed: int = 0):
        if capacity < 2:
            raise ValueError(f"history must hold at least 2 samples, got {capacity}")
        from lcr import _native

        self.capacity = capacity
        self.rate = 1.0
        self._keys = np.zeros(capacity, dtype=np.int64)
        self._times = np.zeros(capacity)
        self._rows = np.zeros((capacity, width))
        self._interval = np.full(capacity, np.nan)  # NaN: next access not seen yet
        # Each key's unlabelled sample (its serial number); records into the arrays above.
        self._pending = _native.PendingSamples(self._keys, self._times, self._rows, self._interval)
        self._random = _Draws(seed)
        self.total = 0  # samples ever added

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def observe(self, key: int, t: float, row: np.ndarray) -> None:
        """An access: label the key's pending sample, then maybe sample this access."""
        sampled = self.rate >= 1.0 or self._random.one() < self.rate
        self.total = self._pending.record_one(self.total, key, t, row, sampled)

    def observe_many(self, keys: np.ndarray, times: np.ndarray, rows: np.ndarray) -> None:
        """Accesses in order (int64 keys, float64 times, each access's feature row), as
        ``observe`` one by one would. Each access is sampled with probability ``rate``
        (a draw per access while ``rate`` < 1)."""
        if self.rate < 1.0:
            sampled = self._random.many(len(keys)) < self.rate
        else:
            sampled = np.ones(len(keys), dtype=bool)
        self.total = self._pending.record(self.total, np.ascontiguousarray(keys, dtype=np.int64),
                                          np.ascontiguousarray(times, dtype=np.float64),
                                          np.ascontiguousarray(rows, dtype=np.float64), sampled.view(np.uint8))

    def span(self) -> float:
        """Time covered by the samples held."""
        n = len(self)
        if n < 2:
            return 0.0
        newest = (self.total - 1) % self.capacity
        oldest = self.total % self.capacity if self.total > self.capacity else 0
        return float(self._times[newest] - self._times[oldest])

    def ripe(self, now: float, horizon: float) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, intervals)`` of the samples at least ``horizon`` old at ``now``:
        copies of their feature rows and their next-access intervals capped at the
        horizon (a key not back within it, or never, gets exactly ``horizon``)."""
        n = len(self)
        old = np.flatnonzero(self._times[:n] <= now - horizon)
        intervals = self._interval[old]
        intervals = np.where(np.isnan(intervals), horizon, np.minimum(intervals, horizon))
        return self._rows[old], intervals
