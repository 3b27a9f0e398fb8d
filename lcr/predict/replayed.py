"""Learned predictions as an array aligned with the trace, for the native engines.

In async mode (Algorithm 1, lines 31-32) the prediction for request i is made right
after access i, from the key's features at that moment and the model current then.
Features depend only on the access stream, never on what a cache holds, and the model
changes only at refits, so that whole sequence can be computed ahead of a replay: one
pass observes every access, buffers each access's feature row, and predicts a buffer
in one batch with the model that was current when its rows were taken. The result is
exactly what an online model queried at access time would have answered, and it feeds
any engine that takes per-request predictions (the C++ cores included).
"""
from __future__ import annotations

import numpy as np

from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.traces import Trace

_FLUSH_ROWS = 1 << 15


def replayed_predictions(trace: Trace, config: LightGBMConfig) -> np.ndarray:
    """Predicted next-access time of each request's key, made at that request (NaN
    while no model exists yet)."""
    model = LightGBMPredictor(config)
    out = np.full(len(trace), np.nan)
    buffered: list[int] = []   # request indices whose rows wait for a prediction
    rows: list[np.ndarray] = []
    current = None

    def flush():
        if buffered and current is not None:
            log_intervals = current.predict_log_interval(np.vstack(rows), config.num_threads)
            out[buffered] = np.asarray(buffered, dtype=np.float64) + np.expm1(np.maximum(log_intervals, 0.0))
        buffered.clear()
        rows.clear()

    for t, key in enumerate(trace.keys.tolist()):
        model.observe(key, t)
        if model._model is not current:  # a refit at this access: earlier rows keep the old model
            flush()
            current = model._model
        if current is not None:
            buffered.append(t)
            rows.append(model.features.rows(np.array([model.features.slot_of(key)]))[0])
            if len(buffered) >= _FLUSH_ROWS:
                flush()
    flush()
    return out
