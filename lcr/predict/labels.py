"""Training samples from a sliding history window, and their labels.

The window keeps the latest ``capacity`` accesses: key, time and the key's feature row
right after that access. Its newest part (``horizon``, half the window's time span by
default) is look-ahead only: it labels the older samples and waits for the next fit to
be labelled itself. A sample's label is the time until the same key's next access,
capped at the horizon; a key not re-accessed within the horizon is censored at the
horizon ("beyond the window"). Labelling only samples that had the whole horizon to
see their next access keeps the newest samples, which have not had time to be
re-accessed, from teaching the model that recent keys are never reused.

The model is fitted to ``log1p`` of the label, so errors count relatively.
"""
from __future__ import annotations

import numpy as np


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


def label_horizon(times: np.ndarray, fraction: float = 0.5) -> float:
    """The default horizon: ``fraction`` of the window's time span, at least 1."""
    return max(float(times[-1] - times[0]) * fraction, 1.0) if len(times) else 1.0


class HistoryWindow:
    """Ring buffer of the latest ``capacity`` samples (key, time, feature row)."""

    def __init__(self, capacity: int, width: int):
        if capacity < 2:
            raise ValueError(f"history window must hold at least 2 samples, got {capacity}")
        self.capacity = capacity
        self._keys = np.zeros(capacity, dtype=np.int64)
        self._times = np.zeros(capacity)
        self._rows = np.zeros((capacity, width))
        self._next = 0
        self.total = 0  # samples ever added

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def add(self, key: int, t: float, row: np.ndarray) -> None:
        i = self._next
        self._keys[i] = key
        self._times[i] = t
        self._rows[i] = row
        self._next = (i + 1) % self.capacity
        self.total += 1

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, times, rows)`` in time order, copied so training can run elsewhere."""
        if self.total < self.capacity:
            cut = slice(0, self.total)
            return self._keys[cut].copy(), self._times[cut].copy(), self._rows[cut].copy()
        order = np.r_[self._next:self.capacity, 0:self._next]
        return self._keys[order], self._times[order], self._rows[order]

    def training_set(self, horizon_fraction: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X, y, censored)`` for the samples older than the horizon: feature rows,
        log1p of their next-access intervals, and which of those are censored."""
        keys, times, rows = self.snapshot()
        if len(times) == 0:
            return rows, np.zeros(0), np.zeros(0, dtype=bool)
        horizon = label_horizon(times, horizon_fraction)
        intervals, censored = next_access_labels(keys, times, horizon)
        ripe = times <= times[-1] - horizon
        return rows[ripe], np.log1p(intervals[ripe]), censored[ripe]
