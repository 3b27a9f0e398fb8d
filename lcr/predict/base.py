"""The predictor interface every cache and the simulator talk to.

A predictor sees every access (``observe``) and answers, for a batch of keys, the
predicted absolute time of each key's next access (``predict``). Times are in the
caller's logical clock (request index in the simulator). NaN means "unknown": the
policies then fall back to recency (see ``lcr.policies.predictions``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np


class Predictor(ABC):
    name: str = "predictor"

    def observe(self, key: int, t: int) -> None:
        """Record an access to ``key`` at time ``t`` (features, labels, online training)."""

    @abstractmethod
    def predict(self, keys: Sequence[int], now: int) -> np.ndarray:
        """Predicted next-access time of each key, float64, NaN where unknown."""
