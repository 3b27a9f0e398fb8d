"""Expected recomputation of a checkpoint set under an overlap law: the one objective."""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.errors import LcrInputError


def validate_positions(positions: Iterable[int], length: int) -> np.ndarray:
    """Sorted, distinct positions in 1..L as int64, or an ``LcrInputError``."""
    s = np.unique(np.asarray(list(positions), dtype=np.int64))
    if s.size and (s[0] < 1 or s[-1] > length):
        bad = s[0] if s[0] < 1 else s[-1]
        raise LcrInputError(f"checkpoint position {int(bad)} is outside 1..{length}")
    return s


def resume_depths(positions: Iterable[int], length: int) -> np.ndarray:
    """c(d) for d = 0..L: the deepest checkpoint at or above depth d (0 when none)."""
    s = np.concatenate(([0], validate_positions(positions, length)))
    d = np.arange(length + 1)
    return s[np.searchsorted(s, d, side="right") - 1]


def expected_recompute(law: OverlapLaw, positions: Iterable[int]) -> float:
    """E[d - c(d)]: blocks replayed per request when resuming from the deepest usable checkpoint."""
    d = np.arange(law.length + 1)
    replay = d - resume_depths(positions, law.length)
    return float(np.dot(law.weights, replay) / law.total)


def reduction_factor(no_cache_work: float, recompute_work: float) -> float:
    """No-cache work over recompute work; ``inf`` when a plan leaves nothing to recompute."""
    if recompute_work <= 0:
        return float("inf") if no_cache_work > 0 else 1.0
    return no_cache_work / recompute_work
