"""Recursive least squares with exponential forgetting: LBGR's online residual model."""
from __future__ import annotations

import numpy as np


class RecursiveLeastSquares:
    """Fits y ~ theta . phi online; observations age by ``forgetting`` per update.

    ``P`` starts at ``delta`` times the identity (a prior towards theta = 0)."""

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

    def predict(self, phi: np.ndarray) -> float:
        return float(self.theta @ phi)

    def update(self, phi: np.ndarray, y: float) -> None:
        Pphi = self.P @ phi
        gain = Pphi / (self.forgetting + phi @ Pphi)
        self.theta = self.theta + gain * (y - self.theta @ phi)
        self.P = (self.P - np.outer(gain, Pphi)) / self.forgetting
        # Keep P symmetric against rounding drift.
        self.P = 0.5 * (self.P + self.P.T)
        trace = float(np.trace(self.P))
        if trace > self.max_trace:
            self.P *= self.max_trace / trace
