"""Predictions for a lookup stream, in the shape SparseLengthsSum consumes them.

``sls`` asks any ``predictor`` for ``predict(keys, now)`` once per batch, with the
batch's distinct keys; the answers (predicted next-access times, NaN when unknown)
become the slots' metadata. A LightGBM or remote predictor plugs in the same way. Handed
a ``BatchPredictor`` instead, ``sls`` keeps the model off the serving path: it runs on a
CPU thread of its own, and its answers go in when they are ready.

``OnlineModel`` feeds an online next-access model (``observe_many``/``predict``: the
LightGBM model, a ``RemotePredictor``) batch by batch, each lookup at its trace position.

``TracePredictor`` serves experiment predictions (``lcr.predict.experimental``:
oracle, noisy, lognormal) aligned with the flattened lookup trace: a key is answered
with the prediction made at its latest lookup. Time is the position in that trace.
"""
from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np

log = logging.getLogger(__name__)


class TracePredictor:
    def __init__(self, values: np.ndarray, rows: int):
        self.values = np.asarray(values, dtype=np.float64)
        self._last = np.full(int(rows), -1, dtype=np.int64)  # latest lookup of each row

    def observe_batch(self, indices: np.ndarray, start: int) -> None:
        """Record that lookups ``start``, ``start + 1``, ... asked for ``indices``."""
        indices = np.asarray(indices, dtype=np.int64)
        # np.unique on the reversed batch finds each key's last lookup in it.
        keys, from_end = np.unique(indices[::-1], return_index=True)
        self._last[keys] = start + len(indices) - 1 - from_end

    def predict(self, keys, now: int) -> np.ndarray:
        last = self._last[np.asarray(keys, dtype=np.int64)]
        return np.where(last >= 0, self.values[np.maximum(last, 0)], np.nan)


class OnlineModel:
    """An online model fed a batch at a time (what ``lcr.embedding.bench.BatchPredictor``
    drives on its thread): lookup i of a batch starting at ``start`` is observed at time
    ``start + i``."""

    def __init__(self, model):
        self.model = model

    def observe_batch(self, indices: np.ndarray, start: int) -> None:
        indices = np.asarray(indices, dtype=np.int64)
        self.model.observe_many(indices, start + np.arange(len(indices), dtype=np.int64))

    def predict(self, keys, now: int) -> np.ndarray:
        return self.model.predict(np.asarray(keys, dtype=np.int64), now)


class BatchPredictor:
    """A model (``observe_batch(indices, start)``, ``predict(keys, now)``: ``OnlineModel``,
    ``TracePredictor``) on a CPU thread of its own, beside the serving loop: what
    ``lcr.sls(..., predictor=...)`` takes to keep the model off the serving path.

    ``submit(lookups, start)`` hands it a batch's lookups (positions ``start``, ...): a
    numpy array or a tensor; a GPU tensor is copied to pinned host memory behind an event,
    which the thread waits for, so the caller never synchronises. The thread observes
    them and predicts the batch's distinct keys; ``collect()`` hands answers back and
    ``apply(cache)`` writes them into a cache. Two modes, the paper's two:

    - ``wait=False`` (async, the default): the serving loop never waits. ``submit`` leaves
      the batch in a one-batch mailbox, replacing one the thread has not started (its
      lookups are never observed: ``skipped``), and ``collect()`` returns the newest
      answers finished since the last call, or None;
    - ``wait=True`` (sync): ``collect()`` returns the answers to the batch submitted before
      the last one, waiting for the thread when it is behind, so every run makes the same
      decisions (what the predictions are worth, at the price of the wait).

    A model that raises costs the serving loop nothing but a warning, one per outage
    (``failures`` counts the batches); the cache keeps its last predictions meanwhile,
    and keys never predicted rank as LRU ranks them. ``raise_errors=True`` (benchmarks)
    raises the model's exception from ``collect()`` instead. Thread-safe: each call is
    atomic under one lock (``apply`` then writes under the cache's own), but "the batch
    before the last one" of sync mode means one serving loop's batches. ``close()`` (or
    ``with``) stops the thread (sync: once it has observed every batch handed over)."""

    def __init__(self, model, wait: bool = False, raise_errors: bool = False):
        self.model, self.wait, self.raise_errors = model, wait, raise_errors
        self._cv = threading.Condition()
        self._mailbox: collections.deque = collections.deque()  # batches not started
        self._answers: collections.deque = collections.deque()  # finished, not collected
        self._pending = 0   # sync: batches submitted, answers not collected
        self._closed = False
        self._failing = False
        self.work_s = self.wait_s = 0.0
        self.seen = self.skipped = self.failures = 0  # lookups observed, dropped; failed batches
        self._thread = threading.Thread(target=self._run, name="lcr-batch-predictor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._mailbox and not self._closed:
                    self._cv.wait()
                if not self._mailbox:
                    return
                lookups, ready, start = self._mailbox.popleft()
            began = time.perf_counter()
            if ready is not None:  # a copy from the GPU: this thread waits, not the caller
                ready.synchronize()
            indices = np.asarray(lookups.numpy() if hasattr(lookups, "numpy") else lookups, dtype=np.int64)
            try:
                self.model.observe_batch(indices, start)
                keys = np.unique(indices)
                answer = (keys, np.asarray(self.model.predict(keys, start + len(indices)),
                                           dtype=np.float64))
            except Exception as err:  # noqa: BLE001 - the serving loop decides (collect)
                answer = err
            with self._cv:
                self.work_s += time.perf_counter() - began
                self.seen += len(indices)
                self._answers.append(answer)
                self._cv.notify_all()

    def submit(self, lookups, start: int) -> None:
        """Hand over a batch's lookups (flattened), the first at position ``start``."""
        ready = None
        if getattr(lookups, "is_cuda", False):  # a tensor on a GPU
            import torch
            host = torch.empty(lookups.numel(), dtype=torch.int64, pin_memory=True)
            host.copy_(lookups.reshape(-1), non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(lookups.device))
            lookups = host
        elif hasattr(lookups, "reshape"):
            lookups = lookups.reshape(-1)
        with self._cv:
            while not self.wait and self._mailbox:  # the thread is behind: newest first
                self.skipped += len(self._mailbox.popleft()[0])
            self._mailbox.append((lookups, ready, start))
            self._pending += 1
            self._cv.notify_all()

    def collect(self):
        """(keys, predictions) or None (async: of the newest batch finished since the last
        call; sync: of the batch before the last one submitted)."""
        with self._cv:
            if self.wait:
                if self._pending < 2:
                    return None
                began = time.perf_counter()
                while not self._answers:
                    self._cv.wait()
                self.wait_s += time.perf_counter() - began
                self._pending -= 1
                answers = [self._answers.popleft()]
            else:
                answers = list(self._answers)
                self._answers.clear()
            newest = None
            for answer in answers:
                if not isinstance(answer, Exception):
                    if self._failing:
                        log.warning("the batch predictor answers again after %d failed batch(es)",
                                    self.failures)
                    self._failing, newest = False, answer
                    continue
                if self.raise_errors:
                    raise answer
                self.failures += 1
                if not self._failing:
                    log.warning("the batch predictor's model failed (%s: %s); the cache keeps its last "
                                "predictions until it answers again", type(answer).__name__, answer)
                self._failing = True
            return newest

    def apply(self, cache) -> None:
        """Write the answers ``collect()`` returns, if any, into ``cache``."""
        answer = self.collect()
        if answer is not None:
            cache.set_predictions(*answer)

    @property
    def seen_share(self) -> float:
        """The share of the lookups handed over that the model observed."""
        total = self.seen + self.skipped
        return self.seen / total if total else 1.0

    def reset_counts(self) -> None:
        with self._cv:
            self.work_s = self.wait_s = 0.0
            self.seen = self.skipped = self.failures = 0

    def close(self) -> None:
        """Stop the thread: sync mode first observes every batch handed over (its promise);
        async mode drops the batches the thread has not started (counted in ``skipped``)."""
        with self._cv:
            self._closed = True
            while not self.wait and self._mailbox:
                self.skipped += len(self._mailbox.popleft()[0])
            self._cv.notify_all()
        self._thread.join()

    def __enter__(self) -> "BatchPredictor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
