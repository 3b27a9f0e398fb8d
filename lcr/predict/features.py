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
_NO_ROWS, _NO_ROW = np.zeros((0, 0)), np.zeros(0)
# Exponents numpy's ``array ** scalar`` computes by a shortcut (square, sqrt, reciprocal, ...).
_SCALAR_POWER_SHORTCUTS = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])


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
    """Feature rows of every key seen so far, in one growable float64 matrix. The rows are
    written natively (``lcr._native.update_feature_rows``, csrc/cpu/model_stream.cpp), a
    batch of accesses in one pass (``update_many``).

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
        """Record an access to ``key`` at ``t``; return its row (a copy). ``update_many``
        for one access, without its vectorised set-up."""
        c = self.config
        compact = c.mode == "compact"
        static = _NO_ROW if static is None or compact else self._checked_static([static], 1)[0]
        slot = self._slot.get(key)
        first = slot is None
        if first:
            slot = self._new_slots(np.array([key], dtype=np.int64))
        factor = _NO_ROW if compact else self._decay ** (t - self._last_time[slot])
        _native().update_feature_row(self._rows, self._last_time, self._first_time, slot, t, first, factor,
                                     static, compact, c.n_deltas, c.n_edcs)
        return self._rows[slot].copy()

    def update_many(self, keys: np.ndarray, times: np.ndarray, static=None) -> np.ndarray:
        """Record accesses (int64 keys, float64 times) in order, as ``update`` one by one
        would; return each access's row right after it (n x width). ``static``: n x
        ``static_fields`` values (full layout; None: rows keep what they had)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        times = np.ascontiguousarray(times, dtype=np.float64)
        c = self.config
        compact = c.mode == "compact"
        static = _NO_ROWS if static is None or compact else self._checked_static(static, len(keys))
        slots, first = self._slots_making(keys)
        factors = _NO_ROWS if compact else self._decay_factors(self._deltas(slots, times))
        out = np.empty((len(keys), self.width))
        _native().update_feature_rows(self._rows, self._last_time, self._first_time, slots, times,
                                      first.view(np.uint8), factors, static, compact, c.n_deltas, c.n_edcs, out)
        return out

    def _deltas(self, slots: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Each access's interval since the key's previous access, within the batch or
        before it (meaningless for a key's first access, which uses none)."""
        previous = self._last_time[slots]
        order = np.argsort(slots, kind="stable")
        again = slots[order[1:]] == slots[order[:-1]]
        previous[order[1:][again]] = times[order[:-1][again]]
        return times - previous

    def _decay_factors(self, deltas: np.ndarray) -> np.ndarray:
        """``decay ** delta`` per access (n x n_edcs), each row as numpy computes it for
        one scalar delta (as ``update`` does): for exponents like 2 it takes a shortcut
        (x * x) whose last bit can differ from its vector power's, and a key's counters
        must not depend on how its accesses were batched."""
        factors = self._decay[None, :] ** deltas[:, None]
        for special in np.unique(deltas[np.isin(deltas, _SCALAR_POWER_SHORTCUTS)]):
            factors[deltas == special] = self._decay ** special
        return factors

    def _checked_static(self, static, n: int) -> np.ndarray:
        fields = self.config.static_fields
        try:
            static = np.ascontiguousarray(static, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"static metadata must be numbers, got {static!r:.60}") from None
        if static.shape != (n, len(fields)):
            raise LcrInputError(f"static metadata: expected {len(fields)} values "
                                f"({', '.join(fields) or 'none configured'}) per access, got shape {static.shape}")
        return static

    def _slots_making(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(slots, first)``: each key's slot, new keys numbered in order of first
        appearance; ``first`` marks each new key's first access."""
        slots = self.slots(keys)
        first = np.zeros(len(keys), dtype=bool)
        new = np.flatnonzero(slots < 0)
        if len(new):
            unique, at, inverse = np.unique(keys[new], return_index=True, return_inverse=True)
            appearance = np.argsort(at, kind="stable")  # unique[appearance]: the new keys in order seen
            rank = np.empty(len(unique), dtype=np.int64)
            rank[appearance] = np.arange(len(unique))
            start = self._new_slots(unique[appearance])
            slots[new] = start + rank[inverse.reshape(-1)]
            first[new[at]] = True
        return slots, first

    def _new_slots(self, keys: np.ndarray) -> int:
        """Give ``keys`` (none seen before) the next slots, in order; return the first."""
        start, end = len(self._slot), len(self._slot) + len(keys)
        size = len(self._rows)
        while size < end:
            size *= 2
        if size > len(self._rows):
            grown = np.full((size, self.width), np.nan)
            grown[:start] = self._rows[:start]
            self._rows = grown
            extra = size - len(self._last_time)
            self._last_time = np.concatenate([self._last_time, np.zeros(extra)])
            self._first_time = np.concatenate([self._first_time, np.zeros(extra)])
            self._key_of_slot = np.concatenate([self._key_of_slot, np.zeros(extra, dtype=np.int64)])
        rows = self._rows[start:end]
        rows[:] = np.nan
        if self.config.mode == "compact":
            rows[:, 1] = keys
            rows[:, 2] = 0
        else:
            rows[:, self._layout.edcs] = 0.0
            rows[:, self._layout.count] = 0
        self._slot.update(zip(keys.tolist(), range(start, end)))
        self._key_of_slot[start:end] = keys
        return start

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


def _native():
    from lcr import _native

    return _native


def _new_index():
    return _native().KeySlots()


__all__ = ["FeatureConfig", "FeatureStore", "MODES"]
