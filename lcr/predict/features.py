"""Per-key feature state, updated on every access, read in batches for prediction.

Two layouts (``FeatureConfig.mode``):

- ``full`` (LLM setting): the last ``n_deltas`` inter-access intervals, most recent
  first (NaN until seen); ``n_edcs`` exponentially decayed counters whose half-lives are
  geometrically spaced between ``edc_min_half_life`` and ``edc_max_half_life``; the
  request count; the age (time since the key's first access); then any static metadata the cache supplies (``static_fields``, e.g.
  table id, layer id, tokens from root; NaN when not given).
- ``compact`` (DLRM setting): time of the latest access, the key, the request count and
  the latest interval. Four columns keep inference cheap at high request rates.

A key's row is its state right after its latest access. Training samples are copies
of that row taken at access time, so a prediction made later from the same row asks
the same question the model was trained on: "how long after this access until the
next one?".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError

MODES = ("full", "compact")
_VECTOR_LOOKUP_MIN = 64  # below this many keys, dict probes beat numpy call overhead


@dataclass(frozen=True)
class FeatureConfig:
    mode: str = "full"
    n_deltas: int = 16
    n_edcs: int = 8
    edc_min_half_life: float = 8.0
    edc_max_half_life: float = float(2**20)
    static_fields: tuple[str, ...] = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise LcrInputError(f"feature mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "full" and (self.n_deltas < 1 or self.n_edcs < 1):
            raise LcrInputError("full features need n_deltas >= 1 and n_edcs >= 1")
        if not 0 < self.edc_min_half_life <= self.edc_max_half_life:
            raise LcrInputError("EDC half-lives must satisfy 0 < min <= max")

    @property
    def half_lives(self) -> np.ndarray:
        return np.geomspace(self.edc_min_half_life, self.edc_max_half_life, self.n_edcs)

    @property
    def names(self) -> list[str]:
        if self.mode == "compact":
            return ["time", "key", "count", "last_delta"]
        return ([f"delta_{i}" for i in range(1, self.n_deltas + 1)]
                + [f"edc_{i}" for i in range(1, self.n_edcs + 1)]
                + ["count", "age", *self.static_fields])

    @property
    def width(self) -> int:
        return len(self.names)


@dataclass
class _Layout:
    """Column slices of a full-mode row."""

    deltas: slice
    edcs: slice
    count: int
    age: int
    static: int


class FeatureStore:
    """Feature rows of every key seen so far, in one growable float64 matrix.

    Not thread-safe by itself: ``LightGBMPredictor`` guards it with its lock.
    """

    def __init__(self, config: FeatureConfig | None = None, initial_keys: int = 1024):
        self.config = config or FeatureConfig()
        c = self.config
        self.width = c.width
        self._slot: dict[int, int] = {}
        self._rows = np.full((initial_keys, self.width), np.nan)
        self._last_time = np.zeros(initial_keys)
        self._first_time = np.zeros(initial_keys)
        # Per-time-unit decay of each EDC: after delta units a counter is scaled by decay**delta.
        self._decay = np.exp2(-1.0 / c.half_lives) if c.mode == "full" else None
        # Batch lookups go through a native hash index of the same numbering (slots are
        # handed out in order of first appearance); it is brought up to date lazily.
        self._key_of_slot = np.zeros(initial_keys, dtype=np.int64)
        self._index = _new_index()
        edcs_end = c.n_deltas + c.n_edcs
        self._layout = _Layout(slice(0, c.n_deltas), slice(c.n_deltas, edcs_end),
                               edcs_end, edcs_end + 1, edcs_end + 2)

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: int) -> bool:
        return key in self._slot

    def update(self, key: int, t: float, static: Sequence[float] | None = None) -> np.ndarray:
        """Record an access to ``key`` at ``t``; return its row (a view: copy to keep it)."""
        slot = self._slot.get(key)
        if slot is None:
            slot = self._new_slot(key)
            self._first_time[slot] = t
            delta = None
        else:
            delta = t - self._last_time[slot]
        self._last_time[slot] = t
        row = self._rows[slot]
        if self.config.mode == "compact":
            row[0] = t
            row[2] += 1
            if delta is not None:
                row[3] = delta
        else:
            self._update_full(row, delta)
            row[self._layout.age] = t - self._first_time[slot]
            if static is not None:
                self._set_static(row, static)
        return row

    def _update_full(self, row: np.ndarray, delta: float | None) -> None:
        lay = self._layout
        edcs = row[lay.edcs]
        if delta is not None:
            deltas = row[lay.deltas]
            deltas[1:] = deltas[:-1].copy()
            deltas[0] = delta
            edcs *= self._decay ** delta
        edcs += 1.0
        row[lay.count] += 1

    def _set_static(self, row: np.ndarray, static: Sequence[float]) -> None:
        n = len(self.config.static_fields)
        if len(static) != n:
            raise LcrInputError(f"static metadata: expected {n} values "
                                f"({', '.join(self.config.static_fields) or 'none configured'}), "
                                f"got {len(static)}")
        row[self._layout.static:self._layout.static + n] = static

    def _new_slot(self, key: int) -> int:
        slot = len(self._slot)
        if slot == len(self._rows):
            grown = np.full((2 * slot, self.width), np.nan)
            grown[:slot] = self._rows
            self._rows = grown
            self._last_time = np.concatenate([self._last_time, np.zeros(slot)])
            self._first_time = np.concatenate([self._first_time, np.zeros(slot)])
            self._key_of_slot = np.concatenate([self._key_of_slot, np.zeros(slot, dtype=np.int64)])
        row = self._rows[slot]
        row[:] = np.nan
        if self.config.mode == "compact":
            row[1] = key
            row[2] = 0
        else:
            row[self._layout.edcs] = 0.0
            row[self._layout.count] = 0
        self._slot[key] = slot
        self._key_of_slot[slot] = key
        return slot

    def slot_of(self, key: int) -> int:
        return self._slot[key]

    def slots(self, keys: Sequence[int] | np.ndarray) -> np.ndarray:
        """Row index of each key, -1 for keys never seen.

        Small batches probe the dict; large ones the native index (``lcr._native.KeySlots``),
        first told about the keys added since the last large batch.
        """
        if len(keys) < _VECTOR_LOOKUP_MIN:
            get = self._slot.get
            if isinstance(keys, np.ndarray):
                keys = keys.tolist()
            return np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        indexed, n = len(self._index), len(self._slot)
        if indexed < n:
            self._index.extend(self._key_of_slot[indexed:n])
        return self._index.find(np.asarray(keys, dtype=np.int64))

    @property
    def matrix(self) -> np.ndarray:
        """All rows (a view; rows past ``len(self)`` are unused). Read under the owner's lock."""
        return self._rows

    @property
    def last_times_by_slot(self) -> np.ndarray:
        """Latest access time per slot, aligned with ``matrix`` (a view). Read under the owner's lock."""
        return self._last_time

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """Feature rows of known slots (a copy)."""
        return self._rows[slots]

    @property
    def capacity(self) -> int:
        """Rows allocated (slots below this are valid indices)."""
        return len(self._rows)

    def last_times(self, slots: np.ndarray | None = None) -> np.ndarray:
        """Latest access time of each slot (of every key seen when ``slots`` is None)."""
        return self._last_time[:len(self._slot)] if slots is None else self._last_time[slots]

    def batch(self, keys: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(known, rows, last_times)``: a mask over ``keys``, then the rows and latest
        access times of the known keys, in order."""
        slots = self.slots(keys)
        known = slots >= 0
        slots = slots[known]
        return known, self._rows[slots], self._last_time[slots]

    def retain_most_recent(self, keep: int) -> np.ndarray:
        """Forget every key but the ``keep`` with the latest access times (ties: any).

        Kept keys move to slots 0..keep-1 in their old slot order; returns their old
        slots (new slot i held old slot ``kept[i]``) so owners can carry per-slot data.
        """
        n = len(self._slot)
        if n <= keep:
            return np.arange(n)
        newest = np.argpartition(-self._last_time[:n], keep - 1)[:keep] if keep else np.zeros(0, np.int64)
        kept = np.sort(newest)
        # Every per-slot array moves (first access times too: the age column reads them).
        for per_slot in (self._rows, self._last_time, self._first_time, self._key_of_slot):
            per_slot[:keep] = per_slot[kept]
        self._slot = dict(zip(self._key_of_slot[:keep].tolist(), range(keep)))
        self._index = _new_index()
        return kept


def _new_index():
    from lcr import _native

    return _native.KeySlots()


__all__ = ["FeatureConfig", "FeatureStore", "MODES"]
