"""LightGBMPredictor: a next-access model trained online from the access stream.

Every ``observe`` updates the key's features and offers the access to the sampled
history (``lcr.predict.labels``). Every ``retrain_every`` accesses a booster is fitted on
the ripe samples and swapped in whole: readers always see either the old model or the
new one.

Label scale: the relaxed-Belady boundary B of the cache size (``lcr.predict.boundary``)
is re-estimated at each fit; labels are capped at ``horizon_factor`` x B and the history
is sampled to span ``span_factor`` x that horizon. Two objectives (``objective``):

- ``regression``: log1p of the time to the next access; the answer is
  ``last access + expm1(output)``.
- ``belady``: P(next access beyond B), binary log-loss; by default the mean (in logit) of
  three classifiers, for B, B/2 and B/4, each fitted on its own sampled history
  (``boundary_fractions``): the smaller boundaries learn from fresher samples. A
  probability is not a time, yet LARU evicts the largest answer, so it is mapped to one
  (``rank``): ``odds`` answers ``last access + B * p / (1 - p)`` (p = 1/2 means "back after one boundary"; an older
  key with the same p ranks first, as in LRU); ``probability`` answers p itself.

``warm_start``: a refit continues the previous booster with ``warm_trees`` new trees on
the fresh samples, until the forest would exceed ``num_trees`` * 2, then starts over. With ``background=True`` fitting runs on a daemon thread and a retrain
due while one is running is skipped (counted), so the access path never waits for it;
the simulator uses ``background=False`` so that replays are reproducible.

``predict`` answers ``last access + expm1(model output)`` per key: the model predicts
the interval after the key's latest access. Before the first model, and for keys never
seen, the answer is NaN ("unknown"), which the policies rank like LRU would.

``weak=True`` is the deliberately poor model of the paper's robustness experiment: one
tree over one feature (the key id), so its ranking carries almost no information.

Times (``lcr.predict.clock``, the one rule the service's model process applies too):
every access is stamped by the model's ``StreamClock`` (negative times and times more
than ``max_time_jump`` past the newest are refused; times far behind it are taken at it),
and a key's time never goes back: an access stamped before the key's latest one arrived
after it and is dropped (``times_stale``; taking it at the latest would record a false
"back at once"). So no interval, decay or label is ever negative or invented, however the
accesses of several threads or clients interleave.

Thread-safe: several threads may observe, predict and fit at once. Observers take turns
(``_observe_lock``: each access is stamped and recorded in one step, in stamp order);
the state they share with predictions and fits (features, histories, memo) is guarded by
``_lock``, held per access (per chunk of at most 4,096 in a batch, about a millisecond), so a
prediction never waits for a whole batch; one fit runs
at a time (``_fit_lock``).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.boundary import belady_boundary
from lcr.predict.base import int64_keys, int64_value, time_value
from lcr.predict.clock import DEFAULT_CLOCK_RESTART_S, DEFAULT_MAX_TIME_JUMP, StreamClock
from lcr.predict.features import FeatureConfig, FeatureStore
from lcr.predict.forest import BoosterMean, compile_booster
from lcr.predict.labels import SampledHistory

OBJECTIVES = ("regression", "belady")
RANKS = ("time", "aging", "probability")
TARGETS = ("log", "mean")

log = logging.getLogger(__name__)
_CHUNK = 4096  # accesses recorded per step of a batch (the lock is held per step, ~1 ms)

#: The model the simulator's ``lightgbm`` and ``serve-predictor --objective belady`` run: the
#: relaxed-Belady classifier ranked by its probability (measured best, docs/predictor.md).
BELADY_CLASSIFIER = MappingProxyType({"objective": "belady", "rank": "probability"})


@dataclass(frozen=True)
class LightGBMConfig:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    retrain_every: int = 5_000    # accesses between fits
    window: int = 40_000          # samples kept (the latest ones)
    objective: str = "regression"
    rank: str = "time"            # how the model output becomes an answer (see above)
    target: str = "log"           # regression: fit log1p(interval) or interval / boundary (the mean)
    capacity: int | None = None   # cache size the boundary is for; None: capacity_fraction of keys seen
    capacity_fraction: float = 0.05  # no cache size given (a shared service): 5% of keys, >= 64
    boundary_factor: float = 4.0  # the boundary, in characteristic times (see lcr.predict.boundary)
    # belady: a mix of classifiers, one per fraction f of the boundary ("back after f x B?"),
    # each with its own sampled history (spanning, and ripe after, its own boundary) and
    # num_trees / len(...) trees, averaged in logit; (1.0,) is one classifier. Measured
    # better than one (docs/predictor.md); the first fraction is the model's boundary.
    boundary_fractions: tuple[float, ...] = (1.0, 0.5, 0.25)
    horizon_factor: float = 2.0   # regression labels capped at this many boundaries
    span_factor: float = 2.0      # samples span this many horizons
    warm_start: bool = False
    warm_trees: int = 8
    min_samples: int = 1_000      # no fit before this many ripe samples
    num_trees: int = 16
    num_leaves: int = 15
    learning_rate: float = 0.2
    max_bin: int = 63
    bin_sample: int = 4096        # rows LightGBM reads to place its bins (its default 200k costs ~0.5 s)
    min_data_in_leaf: int = 20
    num_threads: int = 1
    seed: int = 0
    background: bool = True
    weak: bool = False
    # Memoise each key's prediction until its features or the model change.
    cache_predictions: bool = True
    # The clock's rule (lcr.predict.clock): the longest step ahead a time may take, and how
    # long the stream must move nothing before the clock restarts from it.
    max_time_jump: int = DEFAULT_MAX_TIME_JUMP
    clock_restart_s: float = DEFAULT_CLOCK_RESTART_S

    def __post_init__(self):
        for name in ("retrain_every", "window", "min_samples", "num_trees", "num_leaves", "num_threads"):
            if getattr(self, name) < 1:
                raise LcrInputError(f"LightGBM config: {name} must be at least 1")
        if self.objective not in OBJECTIVES or self.rank not in RANKS:
            raise LcrInputError(f"LightGBM config: objective must be one of {OBJECTIVES} and rank one of "
                                f"{RANKS}, got {self.objective!r}, {self.rank!r}")
        fractions = self.boundary_fractions
        if not fractions or not all(isinstance(f, (int, float)) and 0 < f <= 1 for f in fractions) \
                or len(fractions) > self.num_trees:
            raise LcrInputError(f"LightGBM config: boundary_fractions must be 1 to num_trees numbers in (0, 1], "
                                f"got {fractions!r}")
        StreamClock(self.max_time_jump, self.clock_restart_s)  # the clock checks its own settings
        if self.weak and self.features.mode != "compact":
            # The weak model reads the key column, which only the compact layout has.
            object.__setattr__(self, "features", replace(self.features, mode="compact"))

    def lgb_params(self) -> dict:
        return {"objective": "binary" if self.objective == "belady" else "regression", "num_leaves": self.num_leaves,
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
    """One fitted booster, the feature columns it reads, and how its output becomes an
    answer (the one place that rule lives)."""

    booster: object
    columns: np.ndarray | None  # None: all columns
    version: int
    forest: object | None = None  # the booster compiled to lcr._native.Forest, when possible
    objective: str = "regression"
    rank: str = "time"
    boundary: float = 1.0
    target: str = "log"
    horizon_factor: float = 4.0

    def raw(self, rows: np.ndarray, num_threads: int, index: np.ndarray | None = None) -> np.ndarray:
        """Raw model output for ``rows`` (for ``rows[index]`` when an index is given)."""
        if self.columns is not None:
            rows = rows[:, self.columns]
        if self.forest is not None:
            return self.forest.predict(rows, index, num_threads)
        return self.booster.predict(rows if index is None else rows[index], num_threads=num_threads,
                                    raw_score=True)

    # The answer rule (``lcr._native.AnswerRule``, shared with the forest's fused batch
    # answer): the model's term, then how it meets the key's latest access time.
    rule: object = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        from lcr import _native

        if self.objective == "regression":
            offset = "scaled_interval" if self.target == "mean" else "log_interval"
        else:  # belady: odds (p = 1/2 is "back after one boundary"), p, or p scaled for aging
            offset = {"time": "odds", "probability": "probability", "aging": "scaled_probability"}[self.rank]
        place = {"time": "after_last", "aging": "minus_last", "probability": "as_is"}[self.rank]
        object.__setattr__(self, "rule", _native.AnswerRule(offset, place, self.boundary))

    def offsets(self, raw: np.ndarray) -> np.ndarray:
        """The model's term of the answer: a predicted interval, or the belady mapping."""
        return self.rule.offsets(raw)

    def place(self, offsets: np.ndarray, last_times: np.ndarray) -> np.ndarray:
        """Answers from ``offsets`` (see ``rank``)."""
        return self.rule.place(offsets, last_times)

    def answers(self, raw: np.ndarray, last_times: np.ndarray) -> np.ndarray:
        return self.place(self.offsets(raw), last_times)


class LightGBMPredictor(Predictor):
    def __init__(self, config: LightGBMConfig | None = None):
        self.config = config or LightGBMConfig()
        self._lgb = _require_lightgbm()
        c = self.config
        self.name = "lightgbm-weak" if c.weak else f"lightgbm({c.features.mode})"
        self.features = FeatureStore(c.features)
        # One sampled history per member of the classifier mix (one for regression and the
        # weak model); ``history`` is the first, at the model's boundary.
        members = len(c.boundary_fractions) if c.objective == "belady" and not c.weak else 1
        self.histories = [SampledHistory(c.window, self.features.width, c.seed) for _ in range(members)]
        self.history = self.histories[0]
        self._model: _Model | None = None
        self._lock = threading.Lock()  # guards features, histories, the prediction memo and metrics
        self._observe_lock = threading.Lock()  # observers take turns: stamp and record in one step
        self._fit_lock = threading.Lock()  # one fit at a time
        self._trainer_lock = threading.Lock()  # starting a background fit
        self._trainer: threading.Thread | None = None
        self._since_fit = 0
        self._now = 0.0
        # Per-slot predicted interval under the current model; NaN = to be computed.
        self._memo = np.full(self.features.capacity, np.nan)
        #: Stamps every access (``lcr.predict.clock``); the service's host replaces it with
        #: one built from its limits.
        self.clock = StreamClock(c.max_time_jump, c.clock_restart_s)
        self.metrics = {"observed": 0, "fits": 0, "fits_skipped_busy": 0, "last_fit_seconds": 0.0,
                        "last_fit_samples": 0, "predicted_keys": 0, "times_stale": 0, "clock_state_forgotten": 0}

    # -- access path -------------------------------------------------------------------
    def observe(self, key: int, t: int, static: Sequence[float] | None = None) -> None:
        """Record an access. ``key`` and ``t`` are int64 integers (LcrInputError otherwise,
        ``lcr.predict.base.int64_value``); a time the clock refuses (negative, or too far
        ahead) raises LcrInputError and changes nothing but the clock's counters."""
        key, t = int64_value(key, "key"), int64_value(t, "time")
        if static is not None:
            static = self._checked_static(static)
        with self._observe_lock:
            clock = self.clock
            restarts = clock.counters["clock_restarts"]
            stamped = clock.stamp(t)
            if stamped is None:  # refused: the clock did not move
                raise LcrInputError(self._refusal(t))
            if clock.counters["clock_restarts"] != restarts:
                self._forget_the_old_clock()
            self._record(key, stamped, static)

    def observe_many(self, keys: np.ndarray, times: np.ndarray, static: np.ndarray | None = None) -> dict:
        """Record a batch in order. Times the clock refuses are dropped and counted
        (``metrics``: ``times_negative``, ``times_ahead``); returns how many were taken and
        refused. Bad arrays (shape, dtype, lengths) raise before anything is recorded.
        ``static``: one row of static metadata per access (as ``observe`` takes one)."""
        taken = 0
        for at, _ in self.observe_stream(keys, times, static):
            taken += len(at)
        return {"observed": taken, "refused": len(keys) - taken}

    def observe_stream(self, keys: np.ndarray, times: np.ndarray, static: np.ndarray | None = None):
        """``observe_many``, yielding per chunk of accesses recorded ``(at, rows)``: their
        indices into ``keys`` and each one's feature row right after it. A fit can fall
        only after a chunk's last access (chunks end where one is due), so the model
        current after each access is the one before the chunk, and for the last access,
        the one after it. Holds the observe lock until exhausted: consume it whole."""
        keys, times = int64_keys(keys), int64_keys(times, "times")
        if len(keys) != len(times):
            raise LcrInputError(f"observations need as many times as keys, got {len(keys)} keys and "
                                f"{len(times)} times")
        if static is not None:
            static = self._checked_static_rows(static, len(keys))
        with self._observe_lock:
            taken = self.clock.order(times)
            if taken.restarted:
                self._forget_the_old_clock()
            at = np.flatnonzero(taken.mask)
            stamped = taken.times.astype(np.float64)
            begin = 0
            while begin < len(at):
                end = begin + self._chunk_length(len(at) - begin)
                chunk = at[begin:end]
                rows, due = self._record_chunk(keys[chunk], stamped[begin:end],
                                               None if static is None else static[chunk])
                if due:
                    self.fit_async() if self.config.background else self.fit()
                yield chunk, rows
                begin = end

    def _chunk_length(self, left: int) -> int:
        """Accesses to record in one step: up to the next access a fit may be due at, and
        at most ``_CHUNK`` (the lock is held per chunk)."""
        c = self.config
        if self._since_fit < c.retrain_every:
            until_due = c.retrain_every - self._since_fit
        else:  # due once min_samples are held; an access adds at most one sample
            until_due = c.min_samples - len(self.history)
        return max(1, min(left, _CHUNK, until_due))

    def _record_chunk(self, keys: np.ndarray, times: np.ndarray, static) -> tuple[np.ndarray, bool]:
        """``_record`` over accesses in stamp order, a fit due at most at the last one:
        ``(rows, due)``. Accesses that may be stale (time behind the newest) go one by one."""
        with self._lock:
            if times[0] < self._now or np.any(times[1:] < times[:-1]):
                rows = np.empty((len(keys), self.features.width))
                due = False
                for i, (key, t) in enumerate(zip(keys.tolist(), times.tolist())):
                    due = self._take(key, t, None if static is None else static[i]) or due
                    rows[i] = self.features.matrix[self.features.slot_of(key)]
                return rows, due
            rows = self.features.update_many(keys, times, static)
            for history in self.histories:
                history.observe_many(keys, times, rows)
            slots = self.features.slots(keys)
            self._memo[slots[slots < len(self._memo)]] = np.nan
            self._now = max(self._now, times[-1])
            self.metrics["observed"] += len(keys)
            self._since_fit += len(keys)
            return rows, self._fit_due()

    def _fit_due(self) -> bool:
        """Whether a fit is due now (resets the count of accesses since one if so)."""
        due = self._since_fit >= self.config.retrain_every and len(self.history) >= self.config.min_samples
        if due:
            self._since_fit = 0
        return due

    def _record(self, key: int, t: int, static) -> None:
        """Take one stamped access in (observe lock held); fit when one is due."""
        with self._lock:
            due = self._take(key, t, static)
        if due:
            self.fit_async() if self.config.background else self.fit()

    def _take(self, key: int, t: int, static) -> bool:
        """Record one access (lock held); whether a fit is due."""
        # Behind the newest, maybe behind the key's latest: a key's time never goes back.
        if t < self._now and key in self.features and t < self.features.last_times_by_slot[
                self.features.slot_of(key)]:
            self.metrics["times_stale"] += 1
            return False
        row = self.features.update(key, t, static)
        for history in self.histories:
            history.observe(key, t, row)
        slot = self.features.slot_of(key)
        if slot < len(self._memo):
            self._memo[slot] = np.nan
        if t > self._now:  # the newest time recorded: what is ripe is judged from it
            self._now = t
        self.metrics["observed"] += 1
        self._since_fit += 1
        return self._fit_due()

    def _checked_static_rows(self, static, n: int) -> np.ndarray:
        """``_checked_static`` for a batch: one row per access."""
        try:
            values = np.asarray(static, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"static metadata must be numbers, got {static!r:.60}") from None
        if values.ndim != 2 or len(values) != n:
            raise LcrInputError(f"static metadata: expected one row per access ({n}), got shape {values.shape}")
        for row in values[:1]:
            self._checked_static(row)
        return values

    def _checked_static(self, static):
        """Static metadata as floats, checked before anything is recorded."""
        try:
            values = np.asarray(static, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"static metadata must be numbers, got {static!r:.60}") from None
        fields = self.config.features.static_fields if self.config.features.mode == "full" else None
        if values.ndim != 1 or (fields is not None and len(values) != len(fields)):
            raise LcrInputError(f"static metadata: expected {len(fields or ())} values "
                                f"({', '.join(fields or ()) or 'none configured'}), got {values.shape}")
        return values

    def _refusal(self, t: int) -> str:
        if t < 0:
            return f"time {t} is negative; times are access counters or timestamps >= 0"
        return (f"time {t} is more than max_time_jump={self.clock.max_jump} past the clock ({self.clock.now}); "
                "refused so that one wrong time cannot drag the clock")

    def _forget_the_old_clock(self) -> None:
        """The clock restarted: per-key state and samples hold the old clock's times.
        The fitted model stays (its features are intervals, not times)."""
        c = self.config
        with self._lock:
            forgotten = len(self.features)
            self.features = FeatureStore(c.features)
            self.histories = [SampledHistory(c.window, self.features.width, c.seed) for _ in self.histories]
            self.history = self.histories[0]
            self._memo = np.full(self.features.capacity, np.nan)
            self._since_fit, self._now = 0, 0
            self.metrics["clock_state_forgotten"] += forgotten
        log.warning("the access clock restarted: for %g s no time moved it though accesses kept coming (a "
                    "client's clock restarted?); forgot the per-key state of %d keys", self.clock.restart_after_s,
                    forgotten)

    @property
    def keys_held(self) -> int:
        """Keys with per-key state (the service's ``keys`` metric)."""
        return len(self.features)

    # -- training ------------------------------------------------------------------------
    @property
    def model_version(self) -> int:
        model = self._model
        return model.version if model is not None else 0

    def boundary(self) -> float | None:
        """The relaxed-Belady boundary now, for ``capacity`` (None: the cache is not full yet)."""
        c = self.config
        last = self.features.last_times()
        capacity = c.capacity or min(len(last), max(64, round(c.capacity_fraction * len(last))))
        span = belady_boundary(last, capacity, self._now)
        return None if span is None else c.boundary_factor * span

    def training_set(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """``(X, y, boundary)`` of the first member (the model's boundary); see
        ``training_sets``. Call under the lock."""
        sets = self.training_sets()
        return None if sets is None else sets[0]

    def training_sets(self) -> list[tuple[np.ndarray, np.ndarray, float]] | None:
        """``(X, y, boundary)`` per member ready to fit (enough ripe samples, and for belady
        both classes), and retune every history's sampling rate so that it spans
        ``span_factor`` of its horizons. None unless the first member (the model's boundary)
        is ready; a smaller-boundary member that is not (e.g. every sample back within it)
        sits this fit out. Call under the lock."""
        c = self.config
        boundary = self.boundary()
        if boundary is None:
            return None
        sets = []
        for j, (history, fraction) in enumerate(zip(self.histories, c.boundary_fractions)):
            member = boundary * fraction if c.objective == "belady" else boundary
            # A classification label is known once the sample is a boundary old.
            horizon = member if c.objective == "belady" else c.horizon_factor * boundary
            history.rate = min(1.0, c.window / (c.span_factor * horizon))
            X, intervals = history.ripe(self._now, horizon)
            if c.objective == "belady":
                y = (intervals >= member).astype(np.float64)  # capped at the boundary: ">=" is "beyond"
                ready = len(y) >= c.min_samples and y.min() < y.max()  # else nothing to learn yet
            else:
                y = np.log1p(intervals) if c.target == "log" else intervals / boundary
                ready = len(y) >= c.min_samples
            if not ready and j == 0:
                return None
            if ready:
                sets.append((X, y, member))
        return sets

    def fit(self) -> bool:
        """Fit on the ripe samples now and swap the model in; False if too few are ripe."""
        with self._fit_lock:
            with self._lock:
                sets = self.training_sets()
            if sets is None:
                return False
            self._fit_on(sets)
            return True

    def fit_async(self) -> bool:
        """Start a fit on a background thread unless one is running; True if started."""
        with self._trainer_lock:
            if self._trainer is not None and self._trainer.is_alive():
                with self._lock:
                    self.metrics["fits_skipped_busy"] += 1
                return False
            with self._lock:
                sets = self.training_sets()
            if sets is None:
                return False
            self._trainer = threading.Thread(target=self._fit_alone, args=(sets,), name="lcr-lightgbm-fit",
                                             daemon=True)
            self._trainer.start()
            return True

    def _fit_alone(self, sets) -> None:
        with self._fit_lock:
            self._fit_on(sets)

    def wait_for_fit(self, timeout: float | None = None) -> None:
        trainer = self._trainer
        if trainer is not None:
            trainer.join(timeout)

    def fit_arrays(self, X: np.ndarray, y: np.ndarray, boundary: float = 1.0) -> None:
        """Fit one model (not a mix) on given rows and labels (log1p intervals, or 0/1
        beyond the boundary)."""
        with self._fit_lock:
            self._fit_on([(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64), boundary)])

    def _fit_on(self, sets: list[tuple[np.ndarray, np.ndarray, float]]) -> None:
        """Fit one booster per ``(X, y, boundary)`` (their mean, if several) and swap it in;
        the first boundary is the model's."""
        c = self.config
        start = time.perf_counter()
        columns = np.array([1]) if c.weak else None  # weak: the key column only
        previous = self._model
        warm = (c.warm_start and not c.weak and len(sets) == 1 and previous is not None
                and not isinstance(previous.booster, BoosterMean)
                and previous.booster.num_trees() + c.warm_trees <= 2 * c.num_trees)
        rounds = 1 if c.weak else c.warm_trees if warm else max(1, c.num_trees // len(sets))
        members = []
        try:
            for X, y, _ in sets:
                data = self._lgb.Dataset(X if columns is None else X[:, columns], y, free_raw_data=not warm,
                                         params={"max_bin": c.max_bin, "verbose": -1,
                                                 "bin_construct_sample_cnt": c.bin_sample})
                members.append(self._lgb.train(c.lgb_params(), data, num_boost_round=rounds,
                                               init_model=previous.booster if warm else None,
                                               keep_training_booster=warm))
        except Exception as err:  # a failed fit must not take the cache down: keep the old model
            log.warning("LightGBM fit failed, keeping the previous model: %s", err)
            return
        booster = members[0] if len(members) == 1 else BoosterMean(members)
        X, boundary = sets[0][0], sets[0][2]
        forest = compile_booster(booster, X.shape[1] if columns is None else len(columns))
        with self._lock:
            self._model = _Model(booster, columns, self.model_version + 1, forest, c.objective, c.rank,
                                 boundary, c.target, c.horizon_factor)
            self._memo = np.full(self.features.capacity, np.nan)
            self.metrics["boundary"] = boundary
            self.metrics["fits"] += 1
            self.metrics["last_fit_seconds"] = time.perf_counter() - start
            self.metrics["last_fit_samples"] = sum(len(y) for _, y, _ in sets)

    # -- prediction ----------------------------------------------------------------------
    def predict(self, keys: Sequence[int] | np.ndarray, now: int) -> np.ndarray:
        """Predicted next-access times of ``keys`` (NaN: unknown). ``now`` is a time, as
        for ``RemotePredictor`` (answers do not depend on it: they follow from each key's
        latest access)."""
        keys = int64_keys(keys)
        time_value(now, "now")
        out = np.full(len(keys), np.nan)
        model = self._model
        if model is None or len(keys) == 0:
            return out
        with self._lock:
            self.metrics["predicted_keys"] += len(keys)
        if self.config.cache_predictions:
            return self._predict_memoised(keys, model, out)
        with self._lock:
            slots = self.features.slots(keys)
            if model.forest is not None and model.columns is None:  # one native pass
                return model.forest.answers(self.features.matrix, slots, self.features.last_times_by_slot, model.rule,
                                            threads=self.config.num_threads)
            known = slots >= 0
            slots = slots[known]
            if len(slots):
                raw = model.raw(self.features.matrix, self.config.num_threads, slots)
                out[known] = model.answers(raw, self.features.last_times(slots))
        return out

    def _predict_memoised(self, keys: np.ndarray, model: _Model, out: np.ndarray) -> np.ndarray:
        # The memo holds model.offsets (relative to the latest access): valid until the row changes.
        # Stale keys are predicted in place under the lock (reading rows by index costs less
        # than copying them out first), so what is memoised matches the features now.
        with self._lock:
            slots = self.features.slots(keys)
            if len(self._memo) < self.features.capacity:
                grown = np.full(self.features.capacity, np.nan)
                grown[:len(self._memo)] = self._memo
                self._memo = grown
            if model.forest is not None and model.columns is None:  # one native pass
                # A fit may have swapped in a newer model (and memo) meanwhile: don't fill it.
                memo = self._memo if self._model is model else None
                return model.forest.answers(self.features.matrix, slots, self.features.last_times_by_slot,
                                            model.rule, memo, self.config.num_threads)
            known = np.flatnonzero(slots >= 0)
            slots = slots[known]
            intervals = self._memo[slots]
            stale = np.flatnonzero(np.isnan(intervals))
            if len(stale):
                fresh = model.offsets(model.raw(self.features.matrix, self.config.num_threads, slots[stale]))
                intervals[stale] = fresh
                if self._model is model:  # a fit may have swapped in a newer model meanwhile
                    self._memo[slots[stale]] = fresh
            last = self.features.last_times(slots)
        out[known] = model.place(intervals, last)
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
            return before - len(self.features)


__all__ = ["LightGBMConfig", "LightGBMPredictor"]
