"""Next-access predictors: the interface, experiment predictors, the online LightGBM
model, and the registry the simulator and caches pick from by name.

Registry names: the experiment predictors (``oracle``, ``lognormal``, ``constant``),
and ``lightgbm``, ``lightgbm-compact``, ``lightgbm-weak``. After a colon, ``;``-separated
items: ``sync`` or ``async`` (how the policies query it) and, for a learned model, its
schedule: ``lightgbm:async;retrain_every=5000;window=40000``. ``lightgbm``'s default
schedule is ``LIGHTGBM_SCHEDULE``, the measured best. A name is parsed once, where it
enters, into a ``PredictorSpec``; the functions below take that spec (or a name, which
they parse: the entry point for callers holding strings).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.experimental import (EXPERIMENT_PREDICTORS, ArrayPredictor, oracle_predictions,
                                      true_next_times)
from lcr.traces import Trace

#: Online-trained models; the LightGBM import itself waits until one is built.
LEARNED_PREDICTORS = ("lightgbm", "lightgbm-compact", "lightgbm-weak")
QUERY_MODES = ("sync", "async")
#: Settings a learned model's name may carry (``LightGBMConfig`` fields): its schedule.
LEARNED_OPTIONS = ("retrain_every", "window")
#: ``lightgbm``'s schedule unless its name sets one, and its features: a fit every 5,000
#: accesses on up to 20,000 samples, over a key's last 4 intervals and 2 decayed counts.
#: With LARU's defaults that is as good as the 2,500 / 80,000 schedule over 16 + 8 features
#: at a seventh of the model's time per request (docs/predictor.md, "Cost";
#: tests/test_defaults.py). The compact and weak models and the shared service
#: (``lcr serve-predictor``) keep ``LightGBMConfig``'s own 5,000 / 40,000.
LIGHTGBM_SCHEDULE = MappingProxyType({"retrain_every": 5_000, "window": 20_000})
LIGHTGBM_FEATURES = MappingProxyType({"n_deltas": 4, "n_edcs": 2})
PREDICTOR_HELP = (f"{', '.join(EXPERIMENT_PREDICTORS)} or {', '.join(LEARNED_PREDICTORS)}; "
                  f"after a colon, ';'-separated: sync or async, and for a learned model {'=N, '.join(LEARNED_OPTIONS)}=N "
                  f"(e.g. lightgbm:async;window=80000)")


@dataclass(frozen=True)
class PredictorSpec:
    """A ``--predictor`` value, parsed once where it enters (``PredictorSpec.parse``) and
    passed down as this object, so nothing below reads the name again.

    ``kind``: a registry name; ``mode``: ``sync``, ``async`` or None (not said; the
    simulator then replays a learned model async); ``options``: a learned model's schedule
    as ``(name, value)`` pairs, in the order given. ``str(spec)`` is the canonical name,
    which parses back to an equal spec (it keys the prediction cache and the reports)."""

    kind: str
    mode: str | None = None
    options: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, value: "str | PredictorSpec") -> "PredictorSpec":
        """``lightgbm:async;window=80000`` -> ``PredictorSpec("lightgbm", "async",
        (("window", 80000),))``; a spec is returned as it is. Raises ``LcrInputError``
        naming the bad part, ``TypeError`` for anything but a string or a spec."""
        if isinstance(value, PredictorSpec):
            return value
        if not isinstance(value, str):
            raise TypeError(f"predictor: expected a name or a PredictorSpec, got {type(value).__name__}")
        kind, _, rest = value.partition(":")
        if kind not in EXPERIMENT_PREDICTORS and kind not in LEARNED_PREDICTORS:
            raise LcrInputError(f"unknown predictor {value!r}; valid: {PREDICTOR_HELP}")
        mode, options = None, {}
        for item in filter(None, (part.strip() for part in rest.split(";"))):
            key, eq, number = item.partition("=")
            if not eq and key in QUERY_MODES and mode is None:
                mode = key
            elif eq and kind in LEARNED_PREDICTORS and key in LEARNED_OPTIONS and key not in options:
                try:
                    options[key] = int(number)
                except ValueError:
                    options[key] = 0
                if options[key] < 1:
                    raise LcrInputError(f"predictor {value!r}: {key} must be a positive integer, got {number!r}")
            else:
                raise LcrInputError(f"predictor {value!r}: unexpected {item!r}; valid: {PREDICTOR_HELP}")
        return cls(kind, mode, tuple(options.items()))

    def __str__(self) -> str:
        items = ([self.mode] if self.mode else []) + [f"{key}={value}" for key, value in self.options]
        return f"{self.kind}:{';'.join(items)}" if items else self.kind

    @property
    def learned(self) -> bool:
        """An online-trained model (``LEARNED_PREDICTORS``), not an experiment built from the trace."""
        return self.kind in LEARNED_PREDICTORS

    @property
    def has_array(self) -> bool:
        """Whether the answers are fixed before the replay, as an array aligned with the
        requests (what the native engines read): the experiment predictors, and the learned
        ones queried async (replayed). The sync online model depends on the replay itself."""
        return not self.learned or self.mode == "async"


def make_predictions(predictor: "str | PredictorSpec", trace: Trace, noise: float = 0.0, seed: int = 0,
                     capacity: int | None = None) -> np.ndarray:
    """The prediction made at every request of ``trace``; see ``PredictorSpec.has_array``.
    ``capacity``: the cache size a learned model's boundary is for (``learned_config``)."""
    spec = PredictorSpec.parse(predictor)
    if not spec.has_array:
        raise LcrInputError(f"predictor {str(spec)!r} has no prediction array; it answers during the replay")
    if not spec.learned:
        return EXPERIMENT_PREDICTORS[spec.kind](trace, noise, seed)
    return make_predictor(spec, trace, noise, seed, capacity).values


def make_predictor(predictor: "str | PredictorSpec", trace: Trace, noise: float = 0.0, seed: int = 0,
                   capacity: int | None = None) -> Predictor:
    """A fresh predictor for one replay of ``trace`` (by a cache of ``capacity`` keys)."""
    spec = PredictorSpec.parse(predictor)
    if not spec.learned:
        values = EXPERIMENT_PREDICTORS[spec.kind](trace, noise, seed)
        return ArrayPredictor(values, name=f"{spec.kind}(noise={noise:g})")
    if noise:
        raise LcrInputError(f"predictor {str(spec)!r} learns from the trace; --noise applies only to "
                            f"{', '.join(EXPERIMENT_PREDICTORS)}")
    return make_learned_predictor(spec, trace, seed, capacity)


def learned_config(predictor: "str | PredictorSpec", seed: int = 0, trace: Trace | None = None,
                   capacity: int | None = None):
    """The online model's settings for a learned predictor (with its schedule options).

    ``lightgbm`` is the relaxed-Belady classifier ranked by its probability, with its
    boundary for a cache of ``capacity`` keys (None: ``capacity_fraction`` of the keys seen)
    ``LIGHTGBM_SCHEDULE`` and ``LIGHTGBM_FEATURES``, the model docs/predictor.md measures; given a trace, it also
    reads the static metadata the trace carries (``lcr.traces.static``). ``lightgbm-compact`` is the paper's
    four-feature DLRM model and ``lightgbm-weak`` the robustness model (one tree, one
    feature), both regressions on the time to the next access, the same for every size."""
    from lcr.predict.features import FeatureConfig
    from lcr.predict.lightgbm_model import BELADY_CLASSIFIER, LightGBMConfig
    from lcr.traces.static import static_fields

    spec = PredictorSpec.parse(predictor)
    if not spec.learned:
        raise LcrInputError(f"predictor {str(spec)!r} is not a learned model; valid: {', '.join(LEARNED_PREDICTORS)}")
    full = spec.kind == "lightgbm"
    static = static_fields(trace) if trace is not None and full else ()
    settings = {**BELADY_CLASSIFIER, "capacity": capacity, **LIGHTGBM_SCHEDULE} if full else {}
    # Fits run inline in the simulator so that a replay is reproducible.
    return LightGBMConfig(seed=seed, background=False, weak=spec.kind == "lightgbm-weak",
                          features=FeatureConfig(mode="full" if full else "compact", static_fields=static,
                                                 **(LIGHTGBM_FEATURES if full else {})),
                          **{**settings, **dict(spec.options)})


def make_learned_predictor(predictor: "str | PredictorSpec", trace: Trace, seed: int = 0,
                           capacity: int | None = None) -> Predictor:
    """Sync: the online model itself, queried at each eviction. Async: what that model
    answers right after each access, computed in one pass (``lcr.predict.replayed``),
    the exact zero-lag async semantics, reproducible and usable by the native engines.
    The threaded ``AsyncPredictor`` is the serving path and is tested on its own."""
    from lcr.predict.lightgbm_model import LightGBMPredictor
    from lcr.predict.replayed import TraceMetadataFeed, replayed_predictions

    spec = PredictorSpec.parse(predictor)
    config = learned_config(spec, seed, trace, capacity)
    if spec.mode == "async":
        return ArrayPredictor(replayed_predictions(trace, config), name=f"{spec.kind}:async")
    model = LightGBMPredictor(config)
    return TraceMetadataFeed(model, trace) if config.features.static_fields else model


__all__ = ["Predictor", "ArrayPredictor", "PredictorSpec", "PREDICTOR_HELP", "EXPERIMENT_PREDICTORS",
           "LEARNED_PREDICTORS", "LEARNED_OPTIONS", "LIGHTGBM_SCHEDULE", "LIGHTGBM_FEATURES", "make_predictor", "make_predictions", "learned_config",
           "oracle_predictions", "true_next_times"]
