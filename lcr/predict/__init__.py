"""Next-access predictors: the interface, experiment predictors, and the registry the
simulator and caches pick from by name."""
from __future__ import annotations

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.experimental import (EXPERIMENTAL, ArrayPredictor, oracle_predictions,
                                      true_next_times)
from lcr.traces import Trace

PREDICTORS = tuple(EXPERIMENTAL)


def make_predictor(name: str, trace: Trace, noise: float = 0.0, seed: int = 0) -> Predictor:
    """A fresh predictor for one replay of ``trace``."""
    if name not in EXPERIMENTAL:
        raise LcrInputError(f"unknown predictor {name!r}; valid: {', '.join(PREDICTORS)}")
    return ArrayPredictor(EXPERIMENTAL[name](trace, noise, seed), name=f"{name}(noise={noise:g})")


__all__ = ["Predictor", "ArrayPredictor", "PREDICTORS", "make_predictor", "oracle_predictions",
           "true_next_times"]
