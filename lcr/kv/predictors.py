"""Next-use predictors for tree nodes, built from the trace (experiments).

A node is named by the path id of its first block; its next use is the next request
that needs that block. ``PathOracle`` answers exactly that, and with ``noise`` = p
replaces each answer, with probability p, by its negative (``NegationNoise``: the worst
case of paper Figure 13; serving applies the same rule to any predictor,
``--predictor-noise``).
"""
from __future__ import annotations

import math
from typing import Sequence

from lcr.errors import LcrInputError
from lcr.kv.features import NodeFeatures
from lcr.kv.requests import BlockWorkload
from lcr.policies.rng import SplitMix64
from lcr.predict.base import Predictor

_MASK = (1 << 64) - 1
LEARNED_RADIX_PREDICTORS = ("residual", "lightgbm", "intervals", "lightgbm-late", "lightgbm-belady")


def check_probability(value, what: str) -> float:
    """``value`` as a float in [0, 1], else a one-line refusal naming ``what``."""
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (numeric and math.isfinite(value) and 0 <= value <= 1):
        raise LcrInputError(f"{what} must be a probability in [0, 1], got {value!r}")
    return float(value)


class NegationNoise:
    """Each prediction, with probability ``p``, replaced by its negative: its key ranked
    the opposite way (a larger predicted time is evicted first; NaN stays NaN). The
    coin is a hash of (seed, key, now), so every engine and every call order negates
    the same predictions."""

    def __init__(self, p: float, seed: int = 0):
        self.p = check_probability(p, "noise")
        self.seed = int(seed)

    def flips(self, key: int, now: int) -> bool:
        draw = SplitMix64((self.seed * 0x9E3779B97F4A7C15 + key * 0xBF58476D1CE4E5B9 + now) & _MASK)
        return draw.next_u64() < self.p * 2.0 ** 64

    def apply(self, keys: Sequence[int], values, now: int) -> list[float]:
        if self.p == 0:
            return list(values)
        return [-v if self.flips(key, now) else v for key, v in zip(keys, values)]


class PathOracle(Predictor):
    def __init__(self, workload: BlockWorkload, noise: float = 0.0, seed: int = 0):
        self.noise = NegationNoise(noise, seed)
        self.workload = workload
        self.name = "oracle" if noise == 0 else f"noisy:{noise:g}"

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        next_use = self.workload.next_use
        return self.noise.apply(keys, [next_use(key, now) for key in keys], now)


def parse_radix_predictor(text: str) -> tuple[str, float | None]:
    """``oracle``, ``noisy:P`` or ``lightgbm``; returns (kind, fixed noise or None)."""
    kind, _, arg = text.partition(":")
    if kind == "oracle" and not arg:
        return "oracle", None
    if kind == "noisy":
        try:
            p = float(arg)
        except ValueError:
            raise LcrInputError(f"--predictor {text!r}: expected noisy:P with P in [0, 1]") from None
        if not 0 <= p <= 1:
            raise LcrInputError(f"--predictor {text!r}: P must be in [0, 1]")
        return "oracle", p
    if kind in LEARNED_RADIX_PREDICTORS and not arg:
        return kind, None
    raise LcrInputError(f"unknown predictor {text!r}; valid: oracle, noisy:P, "
                        f"{', '.join(LEARNED_RADIX_PREDICTORS)}")


def make_path_predictor(kind: str, workload: BlockWorkload, noise: float, seed: int) -> Predictor:
    if kind == "oracle":
        return PathOracle(workload, noise, seed)
    # Fits run inline in the simulator so that a replay is reproducible.
    if kind == "residual":
        from lcr.predict.residual import ResidualLifePredictor
        return ResidualLifePredictor()
    if kind == "intervals":
        return RecentIntervalsPredictor()
    if kind == "lightgbm-late":
        return LightGBMNodePredictor(seed=seed, background=False)
    if kind == "lightgbm-belady":
        return LearnedNodePredictor(seed=seed, background=False, objective="belady", rank="aging")
    return LearnedNodePredictor(seed=seed, background=False)


class LightGBMNodePredictor(Predictor):
    """lcr's online LightGBM model (``lcr.predict``) over tree nodes: the paper's LLM
    features (10 intervals, 10 EDCs) plus the node's tokens from the root as static
    metadata. Serving fits in the background so evictions never wait for training."""

    name = "lightgbm"

    def __init__(self, seed: int = 0, background: bool = True, retrain_every: int = 10_000,
                 min_samples: int | None = None, objective: str = "regression", rank: str = "time"):
        from lcr.predict.features import FeatureConfig
        from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor

        extra = {} if min_samples is None else {"min_samples": min_samples}
        # One classifier: the boundary mix was measured on flat traces with LARU's
        # probability rank, not on the radix cache's aging rank (docs/kv.md's tables).
        self.model = LightGBMPredictor(LightGBMConfig(
            seed=seed, background=background, retrain_every=retrain_every, objective=objective, rank=rank,
            features=FeatureConfig(static_fields=("tokens_from_root",)), boundary_fractions=(1.0,), **extra))

    def observe(self, key: int, t: int) -> None:
        self.model.observe(key, t)

    def observe_node(self, key: int, t: int, tokens_from_root: int) -> None:
        self.model.observe(key, t, (float(tokens_from_root),))

    def predict(self, keys: Sequence[int], now: int):
        return self.model.predict(keys, now)


class FeaturePredictor(Predictor):
    """Base of in-process learned predictors: keeps ``NodeFeatures`` from real accesses
    (engines call ``observe_node`` with each node's tokens from the root)."""

    def __init__(self, edcs: bool = True):
        self.features = NodeFeatures(edcs=edcs)

    def observe(self, key: int, t: int) -> None:
        self.features.observe(key, t)

    def observe_node(self, key: int, t: int, tokens_from_root: int) -> None:
        self.features.observe(key, t, tokens_from_root)

    def on_split(self, key: int, lower_key: int) -> None:
        self.features.split(key, lower_key)


class RecentIntervalsPredictor(FeaturePredictor):
    """Next access = last access + mean of the node's recent intervals (NaN until a node
    has been seen twice: unknown reuse ranks first for eviction)."""

    name = "intervals"

    def __init__(self):
        super().__init__(edcs=False)  # the estimate reads only the intervals

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        return recent_interval_estimate(self.features, keys)


def recent_interval_estimate(features: NodeFeatures, keys: Sequence[int]) -> list[float]:
    last, intervals, out = features.last, features.intervals, []
    for key in keys:
        gaps = intervals.get(key)
        out.append(last[key] + sum(gaps) / len(gaps) if gaps else float("nan"))
    return out


class LearnedNodePredictor(FeaturePredictor):
    """The learned node predictor lcr serves with: LightGBM over the paper's node
    features, fitted first on the first ``first_fit`` observations (a few hundred ripe
    labels) and refitted every ``retrain_every``; until the first fit it answers with
    the recent-intervals estimate, so predictions help from the first eviction.

    One observation per node per request: a repeat of (key, time) is ignored (it would
    add a zero-length interval to the features and the training data).

    ``objective="belady", rank="aging"`` (``--predictor lightgbm-belady``) is the
    relaxed-Belady boundary classifier of ``lcr.predict``: p = P(next access beyond the
    boundary B), answered as B * p - last access, i.e. LRU's age plus a learned bonus of
    up to one boundary. Ages stay in the order, so a wrong model costs less than a wrong
    time; and a split's lower part, never observed itself, answers NaN (evicted first:
    the divergence that split it mostly leaves a dead tail). It is the one with which
    LARU beats LRU at every size measured (docs/kv.md).
    ``serving()`` names the predictor answering now, for logs and metrics.
    Not thread-safe for observations (one engine thread); fits may run in background."""

    name = "lightgbm"

    def __init__(self, seed: int = 0, background: bool = True, first_fit: int = 600,
                 retrain_every: int = 5_000, objective: str = "regression", rank: str = "time"):
        super().__init__(edcs=False)  # its own features serve the estimate until the first fit
        if first_fit < 2 or retrain_every < 1:
            raise LcrInputError("learned predictor: first_fit must be >= 2 and retrain_every >= 1")
        # The first fit needs only a few hundred ripe labels: half the observations it waits for.
        self.lightgbm = LightGBMNodePredictor(seed=seed, background=background, retrain_every=retrain_every,
                                              min_samples=max(2, first_fit // 2), objective=objective, rank=rank)
        if objective == "belady":
            self.name = "lightgbm-belady"
        self.first_fit = first_fit
        self._observed = 0
        self._first_fit_started = False
        self._next_try = first_fit  # too few ripe labels yet: try again a quarter later

    def observe(self, key: int, t: int) -> None:
        self.observe_node(key, t, None)

    def observe_node(self, key: int, t: int, tokens_from_root: int | None) -> None:
        if self.features.last.get(key) == t:
            return
        self.features.observe(key, t, tokens_from_root)
        if tokens_from_root is None:
            self.lightgbm.observe(key, t)
        else:
            self.lightgbm.observe_node(key, t, tokens_from_root)
        self._observed += 1
        if self._observed >= self._next_try and not self._first_fit_started:
            model = self.lightgbm.model
            self._first_fit_started = model.fit_async() if model.config.background else model.fit()
            self._next_try += max(1, self.first_fit // 4)

    def serving(self) -> str:
        return self.name if self.lightgbm.model.model_version else "intervals"

    def predict(self, keys: Sequence[int], now: int):
        if not self.lightgbm.model.model_version:
            return recent_interval_estimate(self.features, keys)
        return self.lightgbm.predict(keys, now)
