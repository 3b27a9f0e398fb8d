"""Offline quality of next-access predictions, measured before they drive a cache.

- OPT-victim rank: at OPT's evictions (a sample of them), the victim's place among
  everything OPT holds when the cache is ranked by the predictions as LARU ranks them
  (largest answer first, NaN as +inf). 0 = the predictions pick OPT's victim first.
  ``top_rate`` is the share of evictions whose victim lies in the top ``top`` fraction.
- ROC-AUC of the boundary classifier: P(next access beyond the boundary) against what
  happened.
- Calibration: predicted probability against the observed frequency, per bin.

The recency-only baseline ranks by time since the latest access (LRU's order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lcr.predict.experimental import true_next_times
from lcr.traces import Trace


def recency_answers(trace: Trace) -> np.ndarray:
    """LRU's ranking as answers: the older the latest access, the larger."""
    return -np.arange(len(trace), dtype=np.float64)


def opt_victim_ranks(trace: Trace, answers: np.ndarray, capacity: int, samples: int = 2000) -> np.ndarray:
    """Normalised rank (0 best, 1 worst) of OPT's victim among OPT's residents, at up to
    ``samples`` evenly spaced OPT evictions. Ties count half."""
    from lcr import _native

    # OPT's C++ core called directly (lcr.predict sits below the simulator's adapter,
    # lcr.sim.native); it takes and returns dense ids (first-appearance order).
    ids, keys = _native.dense_ids(trace.keys)
    hits, evicted, _ = _native.replay_opt(ids=ids, n_ids=len(keys), capacity=capacity,
                                          next_use=trace.next_use, record_evictions=True)
    evictions = np.flatnonzero(evicted >= 0)
    if len(evictions) == 0:
        return np.zeros(0)
    chosen = set(evictions[np.linspace(0, len(evictions) - 1, min(samples, len(evictions))).astype(int)].tolist())
    answers = np.where(np.isnan(answers), np.inf, answers)
    resident = np.zeros(len(keys), dtype=bool)
    last = np.zeros(len(keys), dtype=np.int64)
    ranks = []
    evicted = evicted.tolist()
    for t, i in enumerate(ids.tolist()):
        if not hits[t]:
            if evicted[t] >= 0:
                victim = evicted[t]
                if t in chosen:
                    held = np.flatnonzero(resident)
                    scores = answers[last[held]]
                    mine = answers[last[victim]]
                    above = np.count_nonzero(scores > mine) + 0.5 * (np.count_nonzero(scores == mine) - 1)
                    ranks.append(above / max(len(held) - 1, 1))
                resident[victim] = False
            resident[i] = True
        last[i] = t
    return np.asarray(ranks)


def top_rate(ranks: np.ndarray, top: float = 0.1) -> float:
    """Share of OPT's victims ranked within the top ``top`` of the cache."""
    return float(np.mean(ranks <= top)) if len(ranks) else float("nan")


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties half)."""
    from scipy.stats import rankdata

    labels = np.asarray(labels, dtype=bool)
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def calibration(labels: np.ndarray, probabilities: np.ndarray, bins: int = 10) -> list[tuple[float, float, int]]:
    """``(mean predicted, observed frequency, count)`` per probability bin (empty bins left out)."""
    which = np.minimum((probabilities * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        at = which == b
        if at.any():
            out.append((float(probabilities[at].mean()), float(labels[at].mean()), int(at.sum())))
    return out


@dataclass
class BoundaryQuality:
    auc: float
    calibration: list[tuple[float, float, int]]
    positives: float  # share of requests whose next access came beyond the boundary


def boundary_quality(trace: Trace, probabilities: np.ndarray, boundary: np.ndarray) -> BoundaryQuality:
    """AUC and calibration of P(beyond the boundary) made at each request (NaN = no model yet)."""
    intervals = true_next_times(trace) - np.arange(len(trace))
    known = np.isfinite(probabilities)
    labels = intervals[known] >= boundary[known]
    p = probabilities[known]
    return BoundaryQuality(roc_auc(labels, p), calibration(labels, p), float(labels.mean()) if len(p) else float("nan"))

