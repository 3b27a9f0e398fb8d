"""The overlap law: how deep requests reuse a cached prefix of ``L`` blocks.

Depth ``d`` (0..L) is how many leading blocks a request shares with the cached
prefix; ``d = 0`` means no reuse. The law keeps the weights as given (counts from a
histogram stay integers, which keeps the exact DP exact) next to their normalized
probabilities.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from lcr.errors import LcrInputError


@dataclass(frozen=True, eq=False)  # arrays do not compare as one bool
class OverlapLaw:
    """Non-negative weights over depths 0..L (``L >= 1``) with a positive total."""

    weights: np.ndarray

    def __post_init__(self) -> None:
        w = np.array(self.weights, dtype=np.float64)  # a private copy: the law is immutable
        if w.ndim != 1:
            raise LcrInputError(f"overlap law: expected a 1-D array of weights, got shape {w.shape}")
        if w.size < 2:
            raise LcrInputError("overlap law: prefix length L must be >= 1 (need weights for depths 0..L)")
        if not np.all(np.isfinite(w)):
            raise LcrInputError("overlap law: weights must be finite")
        negative = np.flatnonzero(w < 0)
        if negative.size:
            d = int(negative[0])
            raise LcrInputError(f"overlap law: negative probability {w[d]:g} at depth {d}")
        if w.sum() <= 0:
            raise LcrInputError("overlap law: weights sum to zero")
        w.setflags(write=False)
        object.__setattr__(self, "weights", w)

    @classmethod
    def from_samples(cls, depths: Iterable[int], length: int | None = None) -> "OverlapLaw":
        """The empirical law (integer counts) of observed depths; ``length`` defaults to the deepest."""
        d = np.asarray(depths if isinstance(depths, np.ndarray) else list(depths), dtype=np.int64)
        if d.size == 0:
            raise LcrInputError("overlap law: no depth samples")
        if d.min() < 0:
            raise LcrInputError(f"overlap law: negative depth {int(d.min())}")
        top = int(d.max()) if length is None else int(length)
        if d.max() > top:
            raise LcrInputError(f"overlap law: depth {int(d.max())} exceeds prefix length {top}")
        return cls(np.bincount(d, minlength=top + 1).astype(np.float64))

    @property
    def length(self) -> int:
        """L, the prefix length in blocks."""
        return self.weights.size - 1

    @property
    def total(self) -> float:
        return float(self.weights.sum())

    @property
    def probabilities(self) -> np.ndarray:
        return self.weights / self.total

    def mean_depth(self) -> float:
        """E[d]: the recurrent work with no checkpoint at all (every request replays its overlap)."""
        return float(np.dot(np.arange(self.weights.size), self.weights) / self.total)
