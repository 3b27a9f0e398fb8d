"""The native engine: replay a trace through a policy's C++ core in ``lcr._native``.

Each core makes the same decision as its Python spec in ``lcr.policies`` at every
request. Predictive policies read a float64 array aligned with the requests (the
prediction made at request i), which is what ``lcr.predict.ArrayPredictor`` answers
from, so both engines see the same predictions.

Keys are remapped once per trace to dense ids (first appearance order), so the cores
keep per-key state in flat arrays.
"""
from __future__ import annotations

import time

import numpy as np

from lcr.policies import make_policy
from lcr.sim.runner import Replay
from lcr.traces import Trace

#: Policies with a C++ core.
NATIVE_POLICIES = frozenset({"lru", "opt", "fpb", "hf", "laru", "marker", "sieve",
                             "arc", "lirs", "s3fifo", "wtinylfu", "lfu"})


class _NoPredictor:
    """Stands in for a predictor when a spec policy is built only to check its parameters."""

    def predict(self, keys, now):  # pragma: no cover - never called
        raise AssertionError("not used")


def dense_ids(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, keys)``: ``ids[t]`` numbers ``trace.keys[t]`` by first appearance and
    ``keys[id]`` maps back. Computed once per trace."""
    cached = getattr(trace, "_dense_ids", None)
    if cached is not None and cached[0] is trace.keys:
        return cached[1], cached[2]
    from lcr import _native

    ids, keys = _native.dense_ids(trace.keys)
    trace._dense_ids = (trace.keys, ids, keys)
    return ids, keys


def native_replay(trace: Trace, name: str, capacity: int, predictions: np.ndarray | None = None,
                  record_evictions: bool = False, **params) -> Replay:
    """Replay ``trace`` through the C++ core of policy ``name``.

    ``params`` are the spec constructor's (``mode``, ``b``, ``shrink_every``, ``window``,
    ``seed``, ``aging``, ...); the spec class itself checks them and supplies the defaults.
    ``predictions`` (predictive policies only): the prediction made at each request.
    ``Replay.stats`` matches the spec's ``PolicyStats.as_dict()``; LARU adds ``final_lambda``.
    """
    from lcr import _native

    if name not in NATIVE_POLICIES:
        raise ValueError(f"policy {name!r} has no native core; native: {', '.join(sorted(NATIVE_POLICIES))}")
    spec = make_policy(name, capacity, predictor=_NoPredictor(), next_use=(), **params)
    if spec.uses_predictions:
        if predictions is None:
            raise ValueError(f"policy {name!r} needs predictions")
        predictions = np.ascontiguousarray(predictions, dtype=np.float64)
        if predictions.shape != trace.keys.shape:
            raise ValueError(f"predictions: expected {len(trace)} values (one per request), "
                             f"got shape {predictions.shape}")
    ids, keys = dense_ids(trace)
    core = (ids, len(keys), spec.capacity)
    start = time.perf_counter()
    if name in ("lru", "sieve", "arc", "lirs"):
        hits, evicted, counters = getattr(_native, f"replay_{name}")(*core, record_evictions)
    elif name == "s3fifo":
        hits, evicted, counters = _native.replay_s3fifo(*core, spec.small_size, spec.ghost_size,
                                                        spec.move_to_main, record_evictions)
    elif name == "lfu":
        hits, evicted, counters = _native.replay_lfu(*core, spec.aging, record_evictions)
    elif name == "wtinylfu":  # its sketch hashes the keys themselves
        hits, evicted, counters = _native.replay_wtinylfu(ids, keys, spec.capacity, spec.window_size,
                                                          record_evictions)
    elif name == "opt":
        hits, evicted, counters = _native.replay_opt(*core, trace.next_use, record_evictions)
    elif name == "marker":
        hits, evicted, counters = _native.replay_marker(*core, spec.rng.state, record_evictions)
    else:
        async_mode = spec.table.mode == "async"
        if name == "fpb":
            extra = ()
        elif name == "hf":
            extra = (spec.window,)
        else:
            extra = (spec.b, spec.shrink_every, spec.credit, -1.0 if spec.guard is None else spec.guard,
                     spec.shadows is not None, spec.margin)
        hits, evicted, counters = getattr(_native, f"replay_{name}")(
            *core, predictions, async_mode, *extra, record_evictions)
    seconds = time.perf_counter() - start
    if evicted is not None:
        evicted = np.where(evicted >= 0, keys[np.maximum(evicted, 0)], -1)
    intervals = name == "laru" and spec.shadows is not None
    return Replay(hits, _spec_stats(name, counters, intervals), seconds, evicted)


def _spec_stats(name: str, counters: dict, intervals: bool = False) -> dict:
    """The counters under the keys the spec's ``PolicyStats.as_dict()`` uses."""
    stats = {k: counters[k] for k in ("hits", "misses", "evictions", "prediction_evictions",
                                      "lru_evictions", "predictor_calls", "predicted_keys")}
    if name == "laru":
        stats.update(phases=counters["phases"],
                     prediction_induced_misses=counters["prediction_induced_misses"],
                     credited_hits=counters["credited_hits"],
                     guarded_evictions=counters["guarded_evictions"],
                     final_lambda=counters["lambda"])
        if intervals:
            stats["interval_evictions"] = counters["interval_evictions"]
    elif name == "marker" and counters["phases"]:
        stats["phases"] = counters["phases"]  # the spec records phases once one starts
    return stats
