"""Next-access predictors: the interface, experiment predictors, and the registry the
simulator and caches pick from by name."""
from __future__ import annotations

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.experimental import (EXPERIMENTAL, ArrayPredictor, oracle_predictions,
                                      true_next_times)
from lcr.traces import Trace

PREDICTORS = tuple(EXPERIMENTAL)


def make_predictions(name: str, trace: Trace, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """The prediction made at every request of ``trace`` (what the native engine reads)."""
    if name not in EXPERIMENTAL:
        raise LcrInputError(f"unknown predictor {name!r}; valid: {', '.join(PREDICTORS)}")
    return EXPERIMENTAL[name](trace, noise, seed)


def make_predictor(name: str, trace: Trace, noise: float = 0.0, seed: int = 0) -> Predictor:
    """A fresh predictor for one replay of ``trace``."""
    return ArrayPredictor(make_predictions(name, trace, noise, seed), name=f"{name}(noise={noise:g})")


__all__ = ["Predictor", "ArrayPredictor", "PREDICTORS", "make_predictor", "make_predictions", "oracle_predictions",
           "true_next_times"]
