"""Predictions for a lookup stream, in the shape SparseLengthsSum consumes them.

``sls`` asks any ``predictor`` for ``predict(keys, now)`` once per batch, with the
batch's distinct keys; the answers (predicted next-access times, NaN when unknown)
become the slots' metadata. A LightGBM or remote predictor plugs in the same way.

``OnlineModel`` feeds an online next-access model (``observe_many``/``predict``: the
LightGBM model, a ``RemotePredictor``) batch by batch, each lookup at its trace position.

``TracePredictor`` serves experiment predictions (``lcr.predict.experimental``:
oracle, noisy, lognormal) aligned with the flattened lookup trace: a key is answered
with the prediction made at its latest lookup. Time is the position in that trace.
"""
from __future__ import annotations

import numpy as np


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
