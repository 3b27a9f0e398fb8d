"""Learned predictions as an array aligned with the trace, for the native engines.

In async mode (Algorithm 1, lines 31-32) the prediction for request i is made right
after access i, from the key's features at that moment and the model current then.
Features depend only on the access stream, never on what a cache holds, and the model
changes only at refits, so that whole sequence can be computed ahead of a replay: one
pass observes every access, buffers each access's feature row, and predicts a buffer
in one batch with the model that was current when its rows were taken
(``LightGBMPredictor.observe_stream``: chunks of accesses between refits). The result is
exactly what an online model queried at access time would have answered, and it feeds
any engine that takes per-request predictions (the C++ cores included).

The static columns the config names (``FeatureConfig.static_fields``) are read from the
trace's metadata (``lcr.traces.static``), as a cache would supply them at each access.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lcr.predict.base import Predictor
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.traces import Trace
from lcr.traces.static import static_columns

@dataclass
class ReplayedModel:
    """Per request: the answer (``values``, NaN before the first model), the raw model
    output and the boundary of the model that answered (NaN before the first model)."""

    values: np.ndarray
    raw: np.ndarray
    boundary: np.ndarray
    fits: int
    seconds_fitting: float


def _trace_static(trace: Trace, config: LightGBMConfig) -> np.ndarray | None:
    """The static columns ``config`` reads, per request of ``trace`` (None: none)."""
    fields = config.features.static_fields if config.features.mode == "full" else ()
    return static_columns(trace, fields) if fields else None


class TraceMetadataFeed(Predictor):
    """The online model replayed over a trace by the simulator (sync queries), fed the
    trace's static metadata at each access as a cache would feed it; ``t`` is the
    request index. Anything else is the model's own. Not thread-safe (neither is a replay)."""

    def __init__(self, model: LightGBMPredictor, trace: Trace):
        self.model, self.name = model, model.name
        self._static = _trace_static(trace, model.config)

    def observe(self, key: int, t: int) -> None:
        self.model.observe(key, t, None if self._static is None else self._static[t])

    def predict(self, keys, now):
        return self.model.predict(keys, now)

    def __getattr__(self, name):  # metrics, close, ...: the model's own
        return getattr(self.model, name)


def replay_model(trace: Trace, config: LightGBMConfig) -> ReplayedModel:
    """Run the online model over ``trace`` once, recording what it answers at each access."""
    model = LightGBMPredictor(config)
    n = len(trace)
    values, raw, boundary = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    fitting = 0.0

    def answer(at: np.ndarray, rows: np.ndarray, fitted) -> None:
        if fitted is not None and len(at):
            out = fitted.raw(rows, config.num_threads)
            raw[at] = out
            values[at] = fitted.answers(out, at.astype(np.float64))
            boundary[at] = fitted.boundary

    current = None
    for at, rows in model.observe_stream(trace.keys, np.arange(n), _trace_static(trace, config)):
        # A refit can fall only after a chunk's last access: that one gets the new model.
        fitted = model._model
        refit = fitted is not current
        answer(at[:-1] if refit else at, rows[:-1] if refit else rows, current)
        if refit:
            answer(at[-1:], rows[-1:], fitted)
            current = fitted
            fitting += model.metrics["last_fit_seconds"]
    return ReplayedModel(values, raw, boundary, model.metrics["fits"], fitting)


def replayed_predictions(trace: Trace, config: LightGBMConfig) -> np.ndarray:
    """Predicted next-access time (or rank) of each request's key, made at that request
    (NaN while no model exists yet)."""
    return replay_model(trace, config).values
