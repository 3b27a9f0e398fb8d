"""AsyncPredictor: predictions off the access path.

The cache hands keys over with ``submit(keys, now, sink)`` and returns at once; a
single background worker calls the wrapped predictor and passes the results to
``sink(keys, values)``, which writes them into the cache's prediction table.

Trigger rule (paper Section 4.1): a prediction task starts only when the previous one
has finished, and at most once per ``min_interval_s``. Keys handed over while a task
runs wait in a bounded pending set (``max_pending`` keys, duplicates merged) and go
out with the next task; beyond the bound they are dropped and counted (the bound holds
whether or not a task runs: an idle worker with nothing queued admits one batch of up to
``max(max_pending, max_batch)`` keys, after that keys wait within ``max_pending``). With ``max_pending=0`` keys arriving during a task are simply
skipped, as in the paper. ``close`` counts the keys it drops (``dropped_on_close``).
Nothing on the caller's side ever waits for the worker.

``submit`` checks its arguments on the caller's thread, as ``predict`` does: keys that
are not int64 values, or a ``now`` that is not a time >= 0 (``lcr.predict.base``), raise
``LcrInputError`` (a ValueError) there, instead of failing later in the worker unseen. After ``close``,
``submit`` raises ``RuntimeError``: nothing would ever predict those keys.

``predict`` is the sync path: it calls the wrapped predictor directly and blocks.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor, int64_keys, time_value

log = logging.getLogger(__name__)

#: Receives a finished task's keys and their predicted next-access times.
Sink = Callable[[Sequence[int], Sequence[float]], None]


@dataclass(frozen=True)
class AsyncConfig:
    max_pending: int = 65_536
    min_interval_s: float = 0.0
    max_batch: int = 65_536

    def __post_init__(self):
        if self.max_batch < 1:
            raise LcrInputError(f"AsyncConfig: max_batch must be at least 1, got {self.max_batch}")
        if self.max_pending < 0:
            raise LcrInputError(f"AsyncConfig: max_pending must be >= 0, got {self.max_pending}")
        if not self.min_interval_s >= 0:
            raise LcrInputError(f"AsyncConfig: min_interval_s must be >= 0, got {self.min_interval_s}")


class AsyncPredictor(Predictor):
    def __init__(self, inner: Predictor, config: AsyncConfig | None = None):
        self.inner = inner
        self.config = config or AsyncConfig()
        self.name = f"async({inner.name})"
        self._cond = threading.Condition()
        # sink -> {key: now}; dicts keep arrival order and merge repeated keys.
        self._pending: dict[Sink, dict[int, int]] = {}
        self._pending_count = 0
        self._busy = False
        self._closed = False
        self.metrics = {"submitted": 0, "predicted": 0, "dropped": 0, "dropped_on_close": 0, "tasks": 0,
                        "errors": 0}
        self._worker = threading.Thread(target=self._run, name="lcr-async-predictor", daemon=True)
        self._worker.start()

    def observe(self, key: int, t: int) -> None:
        self.inner.observe(key, t)

    def predict(self, keys: Sequence[int], now: int) -> np.ndarray:
        return self.inner.predict(keys, now)

    def submit(self, keys: Sequence[int], now: int, sink: Sink) -> None:
        """Queue ``keys`` for prediction; never blocks on the worker. Bad keys or ``now``
        raise ``LcrInputError``; a closed predictor raises ``RuntimeError``."""
        keys, now = int64_keys(keys).tolist(), time_value(now, "now")
        cond = self._cond
        with cond:  # held only for a few dict operations: the worker never predicts under it
            if self._closed:
                raise RuntimeError("AsyncPredictor is closed")
            self.metrics["submitted"] += len(keys)
            queue = self._pending.setdefault(sink, {})
            # An idle worker with nothing queued takes one batch (up to max_batch keys);
            # otherwise keys wait within max_pending. Either way the bound holds.
            triggered = self._busy or self._pending_count > 0
            bound = self.config.max_pending if triggered else max(self.config.max_pending, self.config.max_batch)
            room = max(bound - self._pending_count, 0)
            for key in keys:
                if key in queue:
                    queue[key] = now
                elif room > 0:
                    queue[key] = now
                    room -= 1
                    self._pending_count += 1
                else:
                    self.metrics["dropped"] += 1
            if not queue:
                del self._pending[sink]
            elif not self._busy:
                cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return not self._busy and not self._pending

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until no task is running or pending (tests, shutdown); True if drained."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy or self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the worker; keys still pending are dropped and counted (``dropped_on_close``)."""
        with self._cond:
            self._closed = True
            self.metrics["dropped_on_close"] += self._pending_count
            self._pending.clear()
            self._pending_count = 0
            self._cond.notify_all()
        self._worker.join(timeout=5)

    def _take_task(self) -> tuple[Sink, list[int], int] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            sink, queue = next(iter(self._pending.items()))
            keys = list(queue)[: self.config.max_batch]
            now = max(queue[k] for k in keys)
            for key in keys:
                del queue[key]
            if not queue:
                del self._pending[sink]
            self._pending_count -= len(keys)
            self._busy = True
            return sink, keys, now

    def _run(self) -> None:
        last_start = -float("inf")
        while True:
            task = self._take_task()
            if task is None:
                return
            wait = last_start + self.config.min_interval_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            last_start = time.monotonic()
            sink, keys, now = task
            try:
                sink(keys, self.inner.predict(keys, now))
                self.metrics["predicted"] += len(keys)
            except Exception as err:  # a failing predictor leaves the table as it was
                self.metrics["errors"] += 1
                if self.metrics["errors"] == 1:
                    log.warning("async prediction failed (further failures are counted only): %s", err)
            finally:
                self.metrics["tasks"] += 1
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


__all__ = ["AsyncConfig", "AsyncPredictor", "Sink"]
