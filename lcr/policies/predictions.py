"""The prediction table P of LARU's Algorithm 1, shared by every predictive policy.

Policies depend only on the small ``NextAccessPredictor`` protocol below; concrete
predictors (oracle, noisy, LightGBM, a remote service) live in ``lcr.predict``.

Two ways of keeping P fresh (paper Section 3.4):
- ``sync``: just before an eviction, the candidates are predicted in one call.
- ``async``: each requested key is predicted at access time; evictions read P as is.
  A predictor with a ``submit(keys, now, sink)`` method (``lcr.predict.AsyncPredictor``)
  gets the keys without the caller waiting and writes P later through ``update``;
  any other predictor is simply called at access time.

Ranking rule for eviction (documented in docs/policies.md): a larger predicted
next-access time means "evict first". A key with no prediction, or a NaN
prediction, ranks as +inf: with nothing known about its reuse, the recency order
decides among such keys. +inf and -inf are kept as given. Ties always go to the
least recently used candidate, so a table that knows nothing reproduces LRU. Any
choice inside LARU's candidate window keeps Theorem 1's robustness bound, so no
prediction value can break it.
"""
from __future__ import annotations

import math
from typing import Iterable, Protocol, Sequence

from lcr.policies.base import PolicyStats

MODES = ("sync", "async")


class NextAccessPredictor(Protocol):
    def predict(self, keys: Sequence[int], now: int) -> Sequence[float]:
        """Predicted absolute time of each key's next access (NaN: unknown)."""


class PredictionTable:
    def __init__(self, predictor: NextAccessPredictor, mode: str, stats: PolicyStats):
        if mode not in MODES:
            raise ValueError(f"prediction mode must be one of {MODES}, got {mode!r}")
        self.predictor = predictor
        self.mode = mode
        self._stats = stats
        self._predicted: dict[int, float] = {}

    def on_access(self, key: int, t: int) -> None:
        if self.mode == "async":
            self._refresh([key], t)

    def before_eviction(self, candidates: Sequence[int], t: int) -> None:
        if self.mode == "sync":
            self._refresh(candidates, t)

    @property
    def predictions(self) -> dict[int, float]:
        """key -> rank of every predicted key (read-only; ``rank``'s default applies)."""
        return self._predicted

    def rank(self, key: int) -> float:
        """Eviction rank of ``key``: the largest rank is evicted first."""
        return self._predicted.get(key, math.inf)

    def ranks(self, keys: Iterable[int]) -> list[float]:
        """``rank`` of each key, in one call."""
        get, inf = self._predicted.get, math.inf
        return [get(key, inf) for key in keys]

    def pick_victim(self, candidates: Iterable[int]) -> int:
        """The candidate with the largest rank; the first one (least recent) on ties."""
        get, inf = self._predicted.get, math.inf
        return max(candidates, key=lambda key: get(key, inf))

    def update(self, key: int, value: float) -> None:
        """Set P(key); async workers call this from their own thread."""
        value = float(value)
        self._predicted[key] = math.inf if math.isnan(value) else value

    def update_many(self, keys: Sequence[int], values: Sequence[float]) -> None:
        predicted, inf = self._predicted, math.inf  # update() inlined: one call per batch
        for key, value in zip(keys, values):
            value = float(value)
            predicted[key] = inf if value != value else value  # NaN: unknown, evicted first

    def forget(self, key: int) -> None:
        self._predicted.pop(key, None)

    def _refresh(self, keys: Sequence[int], t: int) -> None:
        keys = list(keys)
        self._stats.predictor_calls += 1
        self._stats.predicted_keys += len(keys)
        submit = getattr(self.predictor, "submit", None) if self.mode == "async" else None
        if submit is not None:
            submit(keys, t, self.update_many)
        else:
            self.update_many(keys, self.predictor.predict(keys, t))
