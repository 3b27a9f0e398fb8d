"""Next-access predictors: the interface, experiment predictors, the online LightGBM
model, and the registry the simulator and caches pick from by name.

Registry names: the experiment predictors (``oracle``, ``lognormal``, ``constant``),
and ``lightgbm``, ``lightgbm-compact``, ``lightgbm-weak``. After a colon, ``;``-separated
items: ``sync`` or ``async`` (how the policies query it) and, for a learned model, its
schedule: ``lightgbm:async;retrain_every=5000;window=40000``. ``lightgbm``'s default
schedule is ``LIGHTGBM_SCHEDULE``, the measured best.
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.experimental import (EXPERIMENTAL, ArrayPredictor, oracle_predictions,
                                      true_next_times)
from lcr.traces import Trace

#: Online-trained models; the LightGBM import itself waits until one is built.
LEARNED = ("lightgbm", "lightgbm-compact", "lightgbm-weak")
QUERY_MODES = ("sync", "async")
#: Settings a learned model's name may carry (``LightGBMConfig`` fields): its schedule.
LEARNED_OPTIONS = ("retrain_every", "window")
#: ``lightgbm``'s schedule unless its name sets one: a fit every 2,500 accesses on up to
#: 80,000 samples, the measured best with LARU's defaults (docs/predictor.md, "Learned
#: eviction": `belady-p-fresh`; tests/test_defaults.py). About 2.4x the model time per
#: request of ``LightGBMConfig``'s 5,000 / 40,000, which the compact and weak models and
#: the shared service (``lcr serve-predictor``) keep.
LIGHTGBM_SCHEDULE = MappingProxyType({"retrain_every": 2_500, "window": 80_000})
PREDICTOR_HELP = (f"{', '.join(EXPERIMENTAL)} or {', '.join(LEARNED)}; after a colon, ';'-separated: "
                  f"sync or async, and for a learned model {'=N, '.join(LEARNED_OPTIONS)}=N "
                  f"(e.g. lightgbm:async;window=80000)")


def parse_predictor(name: str) -> tuple[str, str | None, dict[str, int]]:
    """``lightgbm:async;window=80000`` -> ``("lightgbm", "async", {"window": 80000})``;
    no mode given -> mode None. Raises ``LcrInputError`` naming the bad part."""
    base, _, rest = name.partition(":")
    if base not in EXPERIMENTAL and base not in LEARNED:
        raise LcrInputError(f"unknown predictor {name!r}; valid: {PREDICTOR_HELP}")
    mode, options = None, {}
    for item in filter(None, (part.strip() for part in rest.split(";"))):
        key, eq, value = item.partition("=")
        if not eq and key in QUERY_MODES and mode is None:
            mode = key
        elif eq and base in LEARNED and key in LEARNED_OPTIONS and key not in options:
            try:
                options[key] = int(value)
            except ValueError:
                options[key] = 0
            if options[key] < 1:
                raise LcrInputError(f"predictor {name!r}: {key} must be a positive integer, got {value!r}")
        else:
            raise LcrInputError(f"predictor {name!r}: unexpected {item!r}; valid: {PREDICTOR_HELP}")
    return base, mode, options


def parse_predictor_name(name: str) -> tuple[str, str | None]:
    """``lightgbm:async`` -> ``("lightgbm", "async")``; no mode -> mode None."""
    return parse_predictor(name)[:2]


def format_predictor(base: str, mode: str | None, options: dict[str, int]) -> str:
    """The inverse of ``parse_predictor``."""
    items = ([mode] if mode else []) + [f"{key}={value}" for key, value in options.items()]
    return f"{base}:{';'.join(items)}" if items else base


def has_prediction_array(name: str) -> bool:
    """Whether the predictor's answers are fixed before the replay, as an array aligned with
    the requests (what the native engines read): the experiment predictors, and the learned
    ones queried async (replayed). The sync online model depends on the replay itself."""
    base, mode = parse_predictor_name(name)
    return base in EXPERIMENTAL or mode == "async"


def make_predictions(name: str, trace: Trace, noise: float = 0.0, seed: int = 0,
                     capacity: int | None = None) -> np.ndarray:
    """The prediction made at every request of ``trace``; see ``has_prediction_array``.
    ``capacity``: the cache size a learned model's boundary is for (``learned_config``)."""
    if not has_prediction_array(name):
        raise LcrInputError(f"predictor {name!r} has no prediction array; it answers during the replay")
    base, _ = parse_predictor_name(name)
    if base in EXPERIMENTAL:
        return EXPERIMENTAL[base](trace, noise, seed)
    return make_predictor(name, trace, noise, seed, capacity).values


def make_predictor(name: str, trace: Trace, noise: float = 0.0, seed: int = 0,
                   capacity: int | None = None) -> Predictor:
    """A fresh predictor for one replay of ``trace`` (by a cache of ``capacity`` keys)."""
    base, mode = parse_predictor_name(name)
    if base in EXPERIMENTAL:
        return ArrayPredictor(EXPERIMENTAL[base](trace, noise, seed), name=f"{base}(noise={noise:g})")
    if noise:
        raise LcrInputError(f"predictor {name!r} learns from the trace; --noise applies only to "
                            f"{', '.join(EXPERIMENTAL)}")
    return make_learned_predictor(name, trace, seed, capacity)


def learned_config(name: str, seed: int = 0, trace: Trace | None = None, capacity: int | None = None):
    """The online model's settings for registry name ``name`` (with its schedule options).

    ``lightgbm`` is the relaxed-Belady classifier ranked by its probability, with its
    boundary for a cache of ``capacity`` keys (None: ``capacity_fraction`` of the keys seen)
    and ``LIGHTGBM_SCHEDULE``, the model docs/predictor.md measures; given a trace, it also
    reads the static metadata the trace carries (``lcr.traces.static``). ``lightgbm-compact`` is the paper's
    four-feature DLRM model and ``lightgbm-weak`` the robustness model (one tree, one
    feature), both regressions on the time to the next access, the same for every size."""
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import BELADY_CLASSIFIER, LightGBMConfig
    from lcr.traces.static import static_fields

    base, _, options = parse_predictor(name)
    if base not in LEARNED:
        raise LcrInputError(f"predictor {name!r} is not a learned model; valid: {', '.join(LEARNED)}")
    full = base == "lightgbm"
    static = static_fields(trace) if trace is not None and full else ()
    settings = {**BELADY_CLASSIFIER, "capacity": capacity, **LIGHTGBM_SCHEDULE} if full else {}
    # Fits run inline in the simulator so that a replay is reproducible.
    return LightGBMConfig(seed=seed, background=False, weak=base == "lightgbm-weak",
                          features=FeatureConfig(mode="full" if full else "compact", static_fields=static),
                          **{**settings, **options})


def make_learned_predictor(name: str, trace: Trace, seed: int = 0, capacity: int | None = None) -> Predictor:
    """Sync: the online model itself, queried at each eviction. Async: what that model
    answers right after each access, computed in one pass (``lcr.predict.replayed``),
    the exact zero-lag async semantics, reproducible and usable by the native engines.
    The threaded ``AsyncPredictor`` is the serving path and is tested on its own."""
    from lcr.predict.lightgbm_model import LightGBMPredictor
    from lcr.predict.replayed import TraceMetadataFeed, replayed_predictions

    base, mode = parse_predictor_name(name)
    config = learned_config(name, seed, trace, capacity)
    if mode == "async":
        return ArrayPredictor(replayed_predictions(trace, config), name=f"{base}:async")
    model = LightGBMPredictor(config)
    return TraceMetadataFeed(model, trace) if config.features.static_fields else model


__all__ = ["Predictor", "ArrayPredictor", "PREDICTOR_HELP", "LEARNED", "LEARNED_OPTIONS", "LIGHTGBM_SCHEDULE",
           "make_predictor", "make_predictions", "has_prediction_array", "learned_config",
           "parse_predictor", "parse_predictor_name", "format_predictor", "oracle_predictions", "true_next_times"]
