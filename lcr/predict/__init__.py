"""Next-access predictors: the interface, experiment predictors, the online LightGBM
model, and the registry the simulator and caches pick from by name.

Registry names: the experiment predictors (``oracle``, ``lognormal``, ``constant``),
and ``lightgbm``, ``lightgbm-compact``, ``lightgbm-weak``, each optionally suffixed
``:sync`` or ``:async`` to choose how the policies query it.
"""
from __future__ import annotations

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.experimental import (EXPERIMENTAL, ArrayPredictor, oracle_predictions,
                                      true_next_times)
from lcr.traces import Trace

#: Online-trained models; the LightGBM import itself waits until one is built.
LEARNED = ("lightgbm", "lightgbm-compact", "lightgbm-weak")
QUERY_MODES = ("sync", "async")
PREDICTORS = (*EXPERIMENTAL, *(f"{base}{suffix}" for base in LEARNED
                              for suffix in ("", ":sync", ":async")))


def parse_predictor_name(name: str) -> tuple[str, str | None]:
    """``lightgbm:async`` -> ``("lightgbm", "async")``; no suffix -> mode None."""
    base, _, mode = name.partition(":")
    if base not in EXPERIMENTAL and base not in LEARNED or (mode and mode not in QUERY_MODES):
        raise LcrInputError(f"unknown predictor {name!r}; valid: {', '.join(PREDICTORS)}")
    return base, mode or None


def has_prediction_array(name: str) -> bool:
    """Whether the predictor's answers are fixed before the replay, as an array aligned with
    the requests (what the native engines read): the experiment predictors, and the learned
    ones queried async (replayed). The sync online model depends on the replay itself."""
    base, mode = parse_predictor_name(name)
    return base in EXPERIMENTAL or mode == "async"


def make_predictions(name: str, trace: Trace, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    """The prediction made at every request of ``trace``; see ``has_prediction_array``."""
    if not has_prediction_array(name):
        raise LcrInputError(f"predictor {name!r} has no prediction array; it answers during the replay")
    base, _ = parse_predictor_name(name)
    if base in EXPERIMENTAL:
        return EXPERIMENTAL[base](trace, noise, seed)
    return make_predictor(name, trace, noise, seed).values


def make_predictor(name: str, trace: Trace, noise: float = 0.0, seed: int = 0) -> Predictor:
    """A fresh predictor for one replay of ``trace``."""
    base, mode = parse_predictor_name(name)
    if base in EXPERIMENTAL:
        return ArrayPredictor(EXPERIMENTAL[base](trace, noise, seed), name=f"{base}(noise={noise:g})")
    if noise:
        raise LcrInputError(f"predictor {name!r} learns from the trace; --noise applies only to "
                            f"{', '.join(EXPERIMENTAL)}")
    return make_learned_predictor(base, mode, trace, seed)


def learned_config(base: str, seed: int = 0, trace: Trace | None = None):
    """The online model's settings for registry name ``base``; given a trace, the full
    feature layout also reads the static metadata it carries (``lcr.traces.static``)."""
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import LightGBMConfig
    from lcr.traces.static import static_fields

    mode = "compact" if base == "lightgbm-compact" else "full"
    static = static_fields(trace) if trace is not None and mode == "full" and base != "lightgbm-weak" else ()
    # Fits run inline in the simulator so that a replay is reproducible.
    return LightGBMConfig(seed=seed, background=False, weak=base == "lightgbm-weak",
                          features=FeatureConfig(mode=mode, static_fields=static))


def make_learned_predictor(base: str, mode: str | None, trace: Trace, seed: int = 0) -> Predictor:
    """Sync: the online model itself, queried at each eviction. Async: what that model
    answers right after each access, computed in one pass (``lcr.predict.replayed``),
    the exact zero-lag async semantics, reproducible and usable by the native engines.
    The threaded ``AsyncPredictor`` is the serving path and is tested on its own."""
    from lcr.predict.lightgbm_model import LightGBMPredictor
    from lcr.predict.replayed import TraceMetadataFeed, replayed_predictions

    config = learned_config(base, seed, trace)
    if mode == "async":
        return ArrayPredictor(replayed_predictions(trace, config), name=f"{base}:async")
    model = LightGBMPredictor(config)
    return TraceMetadataFeed(model, trace) if config.features.static_fields else model


__all__ = ["Predictor", "ArrayPredictor", "PREDICTORS", "LEARNED", "make_predictor", "make_predictions", "has_prediction_array",
           "learned_config",
           "parse_predictor_name", "oracle_predictions", "true_next_times"]
