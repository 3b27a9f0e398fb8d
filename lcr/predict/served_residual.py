"""The residual-life predictor as the predictor service hosts a model
(``lcr serve-predictor --model residual``).

``ResidualLifePredictor`` is the radix caches' serving default; in process it learns
from one cache's requests. Behind the service it learns from every client's, with the
service's rules around it, as the LightGBM model has them:

- times follow ``lcr.predict.clock`` (the host sets the bounds); an access older than
  its key's latest is dropped (``times_stale``), and a restarted clock forgets the
  per-key state, whose times belong to the old clock (``clock_state_forgotten``);
- the key cap (``forget_least_recent``): the least recently seen keys go first, their
  open counts with them;
- nothing is trained: the tables are counts, rebuilt every ``refresh`` observations when
  a prediction reads them; ``fit`` (``POST /train``) rebuilds them at once and is the
  only step that moves ``model_version``.

``now`` is the client's time, as the LightGBM model takes it (a radix cache sends the
same clock it observes with).

Thread-safe: one lock around the predictor, so that the service's predict lane may run
beside its observe lane.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import int64_keys, time_value
from lcr.predict.clock import DEFAULT_CLOCK_RESTART_S, DEFAULT_MAX_TIME_JUMP, StreamClock
from lcr.predict.residual import ResidualLifePredictor


class ServedResidual:
    name = "residual"

    def __init__(self, refresh: int = 256, halve_every: int = 1 << 16):
        self._settings = (refresh, halve_every)
        self.model = self._fresh()
        #: Stamps every access; the service's host replaces it with one bounded by its limits.
        self.clock = StreamClock(DEFAULT_MAX_TIME_JUMP, DEFAULT_CLOCK_RESTART_S)
        self.model_version = 0
        self.metrics = {"observed": 0, "fits": 0, "predicted_keys": 0, "times_stale": 0,
                        "clock_state_forgotten": 0}
        self._lock = threading.Lock()

    def _fresh(self) -> ResidualLifePredictor:
        refresh, halve_every = self._settings
        return ResidualLifePredictor(refresh, halve_every, max_keys=1 << 62)  # the host caps the keys

    @property
    def keys_held(self) -> int:
        return len(self.model.nodes)

    def observe_many(self, keys: np.ndarray, times: np.ndarray) -> dict:
        """Record a batch in order; times the clock refuses are dropped and counted."""
        keys, times = int64_keys(keys), int64_keys(times, "times")
        if len(keys) != len(times):
            raise LcrInputError(f"observations need as many times as keys, got {len(keys)} keys and "
                                f"{len(times)} times")
        with self._lock:
            taken = self.clock.order(times)
            if taken.restarted:
                self.metrics["clock_state_forgotten"] += len(self.model.nodes)
                self.model = self._fresh()
            nodes, observe = self.model.nodes, self.model.observe
            at = np.flatnonzero(taken.mask)
            for key, t in zip(keys[at].tolist(), taken.times.tolist()):
                node = nodes.get(key)
                if node is not None and t < node[0]:
                    self.metrics["times_stale"] += 1
                    continue
                observe(key, t)
                self.metrics["observed"] += 1
        return {"observed": len(at), "refused": len(keys) - len(at)}

    def forget_least_recent(self, max_keys: int, keep: int) -> int:
        """Past ``max_keys`` keys, keep the ``keep`` most recently seen; returns keys forgotten."""
        with self._lock:
            nodes = self.model.nodes
            if len(nodes) <= max_keys:
                return 0
            forgotten = len(nodes) - keep
            self.model.forget_oldest(forgotten)
            return forgotten

    def wait_for_fit(self, timeout: float | None = None) -> None:
        """Nothing fits in the background."""

    def fit(self) -> bool:
        with self._lock:
            self.model.rebuild()
            self.model_version += 1
            self.metrics["fits"] += 1
        return True

    def predict(self, keys: Sequence[int] | np.ndarray, now: int) -> np.ndarray:
        keys = int64_keys(keys)
        time_value(now, "now")
        with self._lock:
            self.metrics["predicted_keys"] += len(keys)
            return np.asarray(self.model.predict(keys.tolist(), int(now)), dtype=np.float64)


__all__ = ["ServedResidual"]
