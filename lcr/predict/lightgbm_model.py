"""LightGBMPredictor: a next-access-time regressor trained online from the access stream.

Every ``observe`` updates the key's features and appends a sample to a sliding window.
Every ``retrain_every`` accesses a fresh booster is fitted on the window (labels from
``lcr.predict.labels``) and swapped in whole: readers always see either the old model
or the new one. With ``background=True`` fitting runs on a daemon thread and a retrain
due while one is running is skipped (counted), so the access path never waits for it;
the simulator uses ``background=False`` so that replays are reproducible.

``predict`` answers ``last access + expm1(model output)`` per key: the model predicts
the interval after the key's latest access. Before the first model, and for keys never
seen, the answer is NaN ("unknown"), which the policies rank like LRU would.

``weak=True`` is the deliberately poor model of the paper's robustness experiment: one
tree over one feature (the key id), so its ranking carries almost no information.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.features import FeatureConfig, FeatureStore
from lcr.predict.forest import compile_booster
from lcr.predict.labels import HistoryWindow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LightGBMConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    retrain_every: int = 10_000   # accesses between fits
    window: int = 25_000          # samples kept (the latest ones)
    horizon_fraction: float = 0.5  # newest share of the window used only to label older samples
    min_samples: int = 1_000      # no fit before this many samples
    num_trees: int = 16
    num_leaves: int = 15
    learning_rate: float = 0.2
    max_bin: int = 63
    min_data_in_leaf: int = 20
    num_threads: int = 1
    seed: int = 0
    background: bool = True
    weak: bool = False
    # Memoise each key's prediction until its features or the model change.
    cache_predictions: bool = True

    def __post_init__(self):
        for name in ("retrain_every", "window", "min_samples", "num_trees", "num_leaves", "num_threads"):
            if getattr(self, name) < 1:
                raise LcrInputError(f"LightGBM config: {name} must be at least 1")
        if self.weak and self.features.mode != "compact":
            # The weak model reads the key column, which only the compact layout has.
            object.__setattr__(self, "features", replace(self.features, mode="compact"))

    def lgb_params(self) -> dict:
        return {"objective": "regression", "num_leaves": self.num_leaves,
                "learning_rate": self.learning_rate, "max_bin": self.max_bin,
                "min_data_in_leaf": self.min_data_in_leaf, "num_threads": self.num_threads,
                "seed": self.seed, "deterministic": True, "force_row_wise": True, "verbose": -1}


def _require_lightgbm():
    try:
        import lightgbm
    except ImportError:
        raise LcrInputError("the LightGBM predictor needs the 'lightgbm' package: "
                            "pip install 'lcr[ml]' (or pip install lightgbm)") from None
    return lightgbm


@dataclass(frozen=True)
class _Model:
    """One fitted booster and the feature columns it reads."""

    booster: object
    columns: np.ndarray | None  # None: all columns
    version: int
    forest: object | None = None  # the booster compiled to lcr._native.Forest, when possible

    def predict_log_interval(self, rows: np.ndarray, num_threads: int, index: np.ndarray | None = None) -> np.ndarray:
        """Model output for ``rows`` (for ``rows[index]`` when an index is given)."""
        if self.columns is not None:
            rows = rows[:, self.columns]
        if self.forest is not None:
            return self.forest.predict(rows, index, num_threads)
        return self.booster.predict(rows if index is None else rows[index], num_threads=num_threads)


class LightGBMPredictor(Predictor):
    def __init__(self, config: LightGBMConfig | None = None):
        self.config = config or LightGBMConfig()
        self._lgb = _require_lightgbm()
        c = self.config
        self.name = "lightgbm-weak" if c.weak else f"lightgbm({c.features.mode})"
        self.features = FeatureStore(c.features)
        self.history = HistoryWindow(c.window, self.features.width)
        self._model: _Model | None = None
        self._lock = threading.Lock()  # guards features, history and the prediction memo
        self._trainer: threading.Thread | None = None
        self._since_fit = 0
        # Per-slot predicted interval under the current model; NaN = to be computed.
        self._memo = np.full(self.features.capacity, np.nan)
        self._epoch = 0  # bumped by every change to the features
        self.metrics = {"observed": 0, "fits": 0, "fits_skipped_busy": 0, "last_fit_seconds": 0.0,
                        "last_fit_samples": 0, "predicted_keys": 0}

    # -- access path -------------------------------------------------------------------
    def observe(self, key: int, t: int, static: Sequence[float] | None = None) -> None:
        with self._lock:
            row = self.features.update(key, t, static)
            self.history.add(key, t, row)
            slot = self.features.slot_of(key)
            if slot < len(self._memo):
                self._memo[slot] = np.nan
            self._epoch += 1  # a prediction computed before this must not be memoised
        self.metrics["observed"] += 1
        self._since_fit += 1
        if self._since_fit >= self.config.retrain_every and len(self.history) >= self.config.min_samples:
            self._since_fit = 0
            self.fit_async() if self.config.background else self.fit()

    def observe_many(self, keys: np.ndarray, times: np.ndarray) -> None:
        for key, t in zip(np.asarray(keys).tolist(), np.asarray(times).tolist()):
            self.observe(key, t)

    # -- training ------------------------------------------------------------------------
    @property
    def model_version(self) -> int:
        model = self._model
        return model.version if model is not None else 0

    def fit(self) -> bool:
        """Fit on the current window now and swap the model in; False if too few samples."""
        with self._lock:
            X, y, _ = self.history.training_set(self.config.horizon_fraction)
        if len(y) < 2:
            return False
        self._fit_on(X, y)
        return True

    def fit_async(self) -> bool:
        """Start a fit on a background thread unless one is running; True if started."""
        if self._trainer is not None and self._trainer.is_alive():
            self.metrics["fits_skipped_busy"] += 1
            return False
        with self._lock:
            X, y, _ = self.history.training_set(self.config.horizon_fraction)
        if len(y) < 2:
            return False
        self._trainer = threading.Thread(target=self._fit_on, args=(X, y), name="lcr-lightgbm-fit",
                                         daemon=True)
        self._trainer.start()
        return True

    def wait_for_fit(self, timeout: float | None = None) -> None:
        trainer = self._trainer
        if trainer is not None:
            trainer.join(timeout)

    def fit_arrays(self, X: np.ndarray, y_log: np.ndarray) -> None:
        """Fit on given rows and log1p labels (benchmarks, offline warm starts)."""
        self._fit_on(np.asarray(X, dtype=np.float64), np.asarray(y_log, dtype=np.float64))

    def _fit_on(self, X: np.ndarray, y: np.ndarray) -> None:
        c = self.config
        start = time.perf_counter()
        columns = np.array([1]) if c.weak else None  # weak: the key column only
        data = self._lgb.Dataset(X if columns is None else X[:, columns], y, free_raw_data=True,
                                 params={"max_bin": c.max_bin, "verbose": -1})
        try:
            booster = self._lgb.train(c.lgb_params(), data, num_boost_round=1 if c.weak else c.num_trees)
        except Exception as err:  # a failed fit must not take the cache down: keep the old model
            log.warning("LightGBM fit failed, keeping the previous model: %s", err)
            return
        forest = compile_booster(booster, X.shape[1] if columns is None else len(columns))
        with self._lock:
            self._model = _Model(booster, columns, self.model_version + 1, forest)
            self._memo = np.full(self.features.capacity, np.nan)
        self.metrics["fits"] += 1
        self.metrics["last_fit_seconds"] = time.perf_counter() - start
        self.metrics["last_fit_samples"] = len(y)

    # -- prediction ----------------------------------------------------------------------
    def predict(self, keys: Sequence[int] | np.ndarray, now: int) -> np.ndarray:
        keys = validate_keys(keys)
        out = np.full(len(keys), np.nan)
        model = self._model
        if model is None or len(keys) == 0:
            return out
        self.metrics["predicted_keys"] += len(keys)
        if self.config.cache_predictions:
            return self._predict_memoised(keys, model, out)
        with self._lock:
            slots = self.features.slots(keys)
            known = slots >= 0
            slots = slots[known]
            if len(slots):
                log_intervals = model.predict_log_interval(self.features.matrix, self.config.num_threads, slots)
                out[known] = self.features.last_times(slots) + np.expm1(np.maximum(log_intervals, 0.0))
        return out

    def _predict_memoised(self, keys: np.ndarray, model: _Model, out: np.ndarray) -> np.ndarray:
        with self._lock:
            slots = self.features.slots(keys)
            known = np.flatnonzero(slots >= 0)
            slots = slots[known]
            if len(self._memo) < self.features.capacity:
                grown = np.full(self.features.capacity, np.nan)
                grown[:len(self._memo)] = self._memo
                self._memo = grown
            memo, epoch = self._memo, self._epoch
            intervals = memo[slots]
            stale = np.flatnonzero(np.isnan(intervals))
            rows = self.features.rows(slots[stale])
            last = self.features.last_times(slots)
        if len(stale):
            fresh = np.expm1(np.maximum(model.predict_log_interval(rows, self.config.num_threads), 0.0))
            intervals[stale] = fresh
            with self._lock:
                # Memoise only if neither the model nor any key's features changed meanwhile.
                if self._model is model and self._memo is memo and self._epoch == epoch:
                    memo[slots[stale]] = fresh
        out[known] = last + intervals
        return out


    def forget_least_recent(self, max_keys: int, keep: int) -> int:
        """Once more than ``max_keys`` keys are tracked, keep only the ``keep`` most
        recently seen (bounded memory for long-running services); returns keys forgotten.
        Forgotten keys predict NaN until seen again; the training window is unchanged."""
        with self._lock:
            before = len(self.features)
            if before <= max_keys:
                return 0
            self.features.retain_most_recent(keep)
            self._memo = np.full(self.features.capacity, np.nan)
            self._epoch += 1
            return before - len(self.features)


def validate_keys(keys) -> np.ndarray:
    """Keys as a 1-D int64 array; a clear error for anything else (2-D, NaN, floats)."""
    array = np.asarray(keys)
    if array.ndim != 1:
        raise LcrInputError(f"keys must be a 1-D sequence of integers, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        if array.dtype.kind == "f":
            if np.isnan(array).any():
                raise LcrInputError("keys contain NaN; keys must be integers")
            if not np.all(np.mod(array, 1) == 0):
                raise LcrInputError("keys must be integers, got fractional values")
        else:
            raise LcrInputError(f"keys must be integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


__all__ = ["LightGBMConfig", "LightGBMPredictor", "validate_keys"]
