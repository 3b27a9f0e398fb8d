"""Predictors for experiments, built from the trace itself.

Each builds the prediction made at every request i (aligned with the trace) and
answers for a key with the prediction made at that key's latest access. This is
also the exact input of the native engines (a float64 array aligned with requests),
so every engine sees the same predictions.

- oracle: the true next-request time (``inf`` when the key never returns);
  ``noise`` = p replaces each prediction, with probability p, by the negative of the
  true time, the worst case used in the paper's Figure 5.
- lognormal: the true interval scaled by exp(N(0, sigma)), ``noise`` = sigma.
- constant: the same value for every key; with it LARU and HF reduce to LRU.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from lcr.predict.base import Predictor
from lcr.traces import NEVER, Trace


def noise_rng(seed: int) -> np.random.Generator:
    """The noise stream for ``seed``: independent of the trace generators' stream for the
    same seed (a child of it), so which predictions get corrupted is unrelated to which
    keys the requests went to."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x6E6F6973,)))


def true_next_times(trace: Trace) -> np.ndarray:
    times = trace.next_use.astype(np.float64)
    times[trace.next_use == NEVER] = np.inf
    return times


def oracle_predictions(trace: Trace, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    times = true_next_times(trace)
    if noise > 0:
        flip = noise_rng(seed).random(len(times)) < noise
        times[flip] = -times[flip]
    return times


def lognormal_predictions(trace: Trace, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    times = true_next_times(trace)
    now = np.arange(len(times), dtype=np.float64)
    scale = np.exp(noise_rng(seed).normal(0.0, noise, len(times)))
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(times), times, now + (times - now) * scale)


def constant_predictions(trace: Trace, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    return np.zeros(len(trace), dtype=np.float64)


class ArrayPredictor(Predictor):
    """Answers with ``values[i]``, i being the key's latest observed access."""

    def __init__(self, values: np.ndarray, name: str = "array"):
        self.values = np.asarray(values, dtype=np.float64)
        self._values = self.values.tolist()  # plain floats: indexing a list is faster here
        self.name = name
        self._last_access: dict[int, int] = {}

    def observe(self, key: int, t: int) -> None:
        self._last_access[key] = t

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        last, values, nan = self._last_access, self._values, float("nan")
        return [values[last[k]] if k in last else nan for k in keys]


PredictionBuilder = Callable[[Trace, float, int], np.ndarray]
EXPERIMENT_PREDICTORS: dict[str, PredictionBuilder] = {
    "oracle": oracle_predictions,
    "lognormal": lognormal_predictions,
    "constant": constant_predictions,
}
