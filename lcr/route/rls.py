"""Recursive least squares with exponential forgetting: LBGR's online residual model."""
from __future__ import annotations

import math

import numpy as np


class RecursiveLeastSquares:
    """Fits y ~ theta . phi online; observations age by ``forgetting`` per update.

    ``P`` starts at ``delta`` times the identity (a prior towards theta = 0). Read with
    ``P`` scaled by the noise variance, it is theta's covariance, so ``predict(phi,
    confidence=z)`` can shrink a prediction by z of its standard errors: a fit on a few
    noisy samples then predicts nothing, one on consistent evidence what it learned.
    Not thread-safe: one router owns each model."""

    def __init__(self, dim: int, forgetting: float = 0.992, delta: float = 1.0):
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        self.forgetting = forgetting
        self.theta = np.zeros(dim)
        self.P = np.eye(dim) * delta
        # Forgetting inflates P along directions the data never excites (collinear
        # features, a load that sits at zero) until one sample swings theta wildly:
        # "covariance wind-up". Capping P's trace at its start keeps the gain bounded.
        self.max_trace = delta * dim
        # The noise variance: a forgetting-weighted mean of the squared prediction errors.
        self._err_sum = 0.0
        self._weight = 0.0

    @property
    def noise_var(self) -> float:
        return self._err_sum / self._weight if self._weight else 0.0

    def predict(self, phi: np.ndarray, confidence: float = 0.0) -> float:
        value = float(self.theta @ phi)
        if confidence <= 0 or value == 0.0:
            return value
        stderr = math.sqrt(max(0.0, self.noise_var * float(phi @ self.P @ phi)))
        return math.copysign(max(0.0, abs(value) - confidence * stderr), value)

    def update(self, phi: np.ndarray, y: float) -> None:
        error = y - float(self.theta @ phi)
        self._err_sum = self.forgetting * self._err_sum + error * error
        self._weight = self.forgetting * self._weight + 1.0
        Pphi = self.P @ phi
        gain = Pphi / (self.forgetting + phi @ Pphi)
        self.theta = self.theta + gain * error
        self.P = (self.P - np.outer(gain, Pphi)) / self.forgetting
        # Keep P symmetric against rounding drift.
        self.P = 0.5 * (self.P + self.P.T)
        trace = float(np.trace(self.P))
        if trace > self.max_trace:
            self.P *= self.max_trace / trace
