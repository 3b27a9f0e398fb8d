"""The policy spec: one readable pure-Python class per eviction policy.

Every engine (the C++ simulator core, the SlabHash kernels, the SGLang radix cache) is
tested against these classes decision by decision. To add a policy, write one module
with a ``Policy`` subclass and list it in ``_ALL`` below; a policy with a C++ core also
defines ``native_args`` (docs/architecture.md lists every file to touch).
"""
from __future__ import annotations

from typing import Sequence

from lcr.policies.base import Policy, PolicyStats
from lcr.policies.arc import ARC
from lcr.policies.blind_oracle_lru import BlindOracleLRU
from lcr.policies.clock import Clock
from lcr.policies.fpb import FPB
from lcr.policies.hf import HF
from lcr.policies.laru import LARU, llm_shrink_every
from lcr.policies.laru_llru import LaruLLRU
from lcr.policies.lfu import LFU
from lcr.policies.lirs import LIRS
from lcr.policies.llru import LLRU
from lcr.policies.lru import LRU
from lcr.policies.marker import Marker
from lcr.policies.opt import OPT
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.predictive_marker import PredictiveMarker
from lcr.policies.s3fifo import S3FIFO
from lcr.policies.sieve import Sieve
from lcr.policies.split import LRUDist, MarkerDist, OPTDist
from lcr.policies.wtinylfu import WTinyLFU

_ALL = (LRU, OPT, FPB, HF, LARU, Marker, PredictiveMarker, BlindOracleLRU, Sieve, Clock,
        LLRU, LRUDist, MarkerDist, OPTDist, LaruLLRU,
        ARC, LIRS, S3FIFO, WTinyLFU, LFU)  # the heuristics users would pick (issue 11)
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in _ALL}


def make_policy(name: str, capacity: int, *, predictor: NextAccessPredictor | None = None,
                next_use: Sequence[int] | None = None, **params) -> Policy:
    """Build a registered policy, handing it only what it uses."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}") from None
    if cls.uses_predictions:
        if predictor is None:
            raise ValueError(f"policy {name!r} needs a predictor")
        params["predictor"] = predictor
    if cls.uses_future:
        if next_use is None:
            raise ValueError(f"policy {name!r} needs the trace's next-use array")
        params["next_use"] = next_use
    return cls(capacity, **params)


__all__ = ["POLICIES", "Policy", "PolicyStats", "NextAccessPredictor", "PredictionTable",
           "make_policy", "llm_shrink_every", *(cls.__name__ for cls in _ALL)]
