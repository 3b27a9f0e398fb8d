"""The relaxed-Belady boundary: the reuse interval beyond which a cache of k items loses.

At any moment a cache of k items can serve at most the k keys requested soonest, so OPT
keeps roughly the keys whose next request falls within the span in which k distinct
keys are requested; a key whose next request comes later is one OPT would rather evict.
That span is estimated online from the past alone, as the time since the k-th most
recently requested key was last requested (Che's characteristic time of the stream at
size k). Labels "next access beyond the boundary" (LRB's relaxed Belady) and the label
horizon of the regression are both measured in this unit, so one configuration fits
traces whose time scales differ by orders of magnitude.
"""
from __future__ import annotations

import numpy as np


def belady_boundary(last_times: np.ndarray, capacity: int, now: float) -> float | None:
    """``now`` minus the k-th latest of ``last_times`` (one per key seen); None while
    fewer than ``capacity`` keys were seen (the cache is not full yet)."""
    if capacity < 1 or len(last_times) < capacity:
        return None
    kth_latest = np.partition(last_times, len(last_times) - capacity)[len(last_times) - capacity]
    return max(float(now - kth_latest), 1.0)
