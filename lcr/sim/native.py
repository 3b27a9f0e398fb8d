"""The native engine: replay a trace through a policy's C++ core in ``lcr._native``.

Each core makes the same decision as its Python spec in ``lcr.policies`` at every
request. Predictive policies read a float64 array aligned with the requests (the
prediction made at request i), which is what ``lcr.predict.ArrayPredictor`` answers
from, so both engines see the same predictions.

Keys are remapped once per trace to dense ids (first appearance order), so the cores
keep per-key state in flat arrays.

A core is called with named arguments only: the requests and the engine's inputs that
the spec class declares (``core_args``), plus the spec's own ``native_args()``, so no
spec option can be dropped on the way (tests/test_native_params.py).
"""
from __future__ import annotations

import time

import numpy as np

from lcr.policies import POLICIES, Policy, make_policy
from lcr.sim.runner import Replay
from lcr.traces import Trace

#: Policies with a C++ core ``lcr._native.replay_<name>``: those whose spec class defines
#: ``native_args`` (``Policy.has_native_core``).
NATIVE_POLICIES = frozenset(name for name, cls in POLICIES.items() if cls.has_native_core())


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


def native_spec(name: str, capacity: int, **params) -> Policy:
    """The spec policy ``name`` built only for its parameters: the constructor checks them
    (an unknown one is a TypeError naming it) and supplies the defaults."""
    if name not in NATIVE_POLICIES:
        raise ValueError(f"policy {name!r} has no native core; native: {', '.join(sorted(NATIVE_POLICIES))}")
    return make_policy(name, capacity, predictor=_NoPredictor(), next_use=(), **params)


def core_args(spec: Policy, trace: Trace, predictions: np.ndarray | None = None,
              record_evictions: bool = False) -> dict:
    """Every keyword argument of ``spec``'s core: the requests as dense ids, the inputs the
    spec class declares (predictions, next uses, the keys themselves), and its options."""
    ids, keys = dense_ids(trace)
    args = {"ids": ids, "capacity": spec.capacity, "record_evictions": record_evictions}
    if spec.hashes_keys:
        args["keys"] = keys  # the core hashes them; their count is the number of ids
    else:
        args["n_ids"] = len(keys)
    if spec.uses_predictions:
        args["predictions"] = predictions
    if spec.uses_future:
        args["next_use"] = trace.next_use
    return dict(**args, **spec.native_args())  # a name given twice is a TypeError


def native_replay(trace: Trace, name: str, capacity: int, predictions: np.ndarray | None = None,
                  record_evictions: bool = False, **params) -> Replay:
    """Replay ``trace`` through the C++ core of policy ``name``.

    ``params`` are the spec constructor's (``mode``, ``b``, ``shrink_every``, ``window``,
    ``seed``, ``aging``, ...); the spec class itself checks them and supplies the defaults.
    ``predictions`` (predictive policies only): the prediction made at each request.
    ``Replay.stats`` matches the spec's ``PolicyStats.as_dict()``; LARU adds ``final_lambda``.
    """
    from lcr import _native

    spec = native_spec(name, capacity, **params)
    if spec.uses_predictions:
        if predictions is None:
            raise ValueError(f"policy {name!r} needs predictions")
        predictions = np.ascontiguousarray(predictions, dtype=np.float64)
        if predictions.shape != trace.keys.shape:
            raise ValueError(f"predictions: expected {len(trace)} values (one per request), "
                             f"got shape {predictions.shape}")
    args = core_args(spec, trace, predictions, record_evictions)
    start = time.perf_counter()
    hits, evicted, counters = getattr(_native, f"replay_{name}")(**args)
    seconds = time.perf_counter() - start
    if evicted is not None:
        keys = dense_ids(trace)[1]
        evicted = np.where(evicted >= 0, keys[np.maximum(evicted, 0)], -1)
    return Replay(hits, _spec_stats(name, counters, args.get("intervals", False)), seconds, evicted)


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
            stats["expert_evictions"] = counters["expert_evictions"]
            stats["expert_tie_breaks"] = counters["expert_tie_breaks"]
    elif name == "marker" and counters["phases"]:
        stats["phases"] = counters["phases"]  # the spec records phases once one starts
    return stats
