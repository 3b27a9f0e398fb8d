"""Replay a trace through one policy."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from lcr.policies import Policy
from lcr.predict import Predictor
from lcr.traces import Trace


@dataclass
class Replay:
    """What one replay produced. ``evicted[i]`` is the key evicted at request i, or -1
    (kept only when asked for: it is what engines are compared on)."""

    hits: np.ndarray
    stats: dict
    seconds: float
    evicted: np.ndarray | None = None

    @property
    def misses(self) -> int:
        return int(len(self.hits) - self.hits.sum())


#: Called with the number of requests replayed since its last call.
Progress = Callable[[int], None]
PROGRESS_EVERY = 1 << 16


def replay(trace: Trace, policy: Policy, predictor: Predictor | None = None,
           record_evictions: bool = False, progress: Progress | None = None) -> Replay:
    keys = trace.keys.tolist()
    hits = np.zeros(len(keys), dtype=bool)
    evicted = np.full(len(keys), -1, dtype=np.int64) if record_evictions else None
    observe = predictor.observe if predictor is not None else None
    start = time.perf_counter()
    for t, key in enumerate(keys):
        if observe is not None:
            observe(key, t)
        hits[t] = policy.access(key, t)
        if evicted is not None and policy.last_evicted is not None:
            evicted[t] = policy.last_evicted
        if progress is not None and t % PROGRESS_EVERY == PROGRESS_EVERY - 1:
            progress(PROGRESS_EVERY)
    if progress is not None:
        progress(len(keys) % PROGRESS_EVERY)
    return Replay(hits, policy.stats.as_dict(), time.perf_counter() - start, evicted)
