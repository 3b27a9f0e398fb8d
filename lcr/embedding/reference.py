"""The pure-Python batch reference of SlabHashCache: the spec both engines must equal.

A SlabHash cache is ``num_slabsets`` independent caches of 64 slots; a key lives only in
slabset ``slabset_of(key)``, and each slabset runs one spec policy (``lcr.policies``)
of capacity 64. Lookups arrive in batches, served with these semantics:

1. keys are deduplicated, keeping the order of first occurrence;
2. every hit is refreshed first (in batch order), then
3. the misses are inserted, per slabset, in batch order;
4. nothing hit or inserted by the current batch is evicted by it: those keys are pinned
   (``pinned_keys``: the ``pinned`` set of the slabset's ``RecencyOrder``, or LFU's and
   FIFO's own),
   which excludes them from every policy's eviction candidates;
5. a miss whose slabset is full of pinned keys is *bypassed*: served from the backing
   store without being cached, and unseen by the slabset's policy.

Recency: hit ``i`` (position in the deduplicated batch) gets stamp ``clock + i``, miss
``i`` gets ``clock + U + i``, and the clock then advances by ``2U``. The spec policies
see the same order because hits are touched before misses. The batch's keys are thus
always the most recent ones of their slabset, which is what lets the engines test
"pinned" as ``stamp >= clock``.

Predictions are slot metadata: ``set_predictions`` (called after a batch by whatever
predicts) stores a value for keys that are cached; an inserted key starts unknown
(+inf, ranked by recency), an evicted key loses its value. The spec policies run in
``sync`` mode against ``SlotPredictions``, which answers from that metadata.

LFU (libCacheSim's: the fewest requests since the key was loaded, the key that reached
that count first on ties) reads no predictions: ``set_predictions`` is ignored by the
engines, which keep minus each key's count in its prediction slot instead
(``SlabPolicy.predictive`` marks the policies that read predictions). Requests are counted
per batch, once per distinct key, like recency. FIFO (the key inserted longest ago; hits
do not move it) reads none either: the engines keep minus each key's insertion stamp there.

LARU's record of prediction-driven evictions is SlabHash's 8192-bit bitset
(``BitsetRecord``), so the reference makes the same approximate decisions as the engines.

Which spec policy a slabset runs, and with which options, is the slab policy registry's
(``lcr.embedding.slab_policies.SLAB_POLICIES``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from lcr.embedding.hashing import slabset_of
from lcr.embedding.slab_policies import BitsetRecord, SlabPolicyChoice, parse_slab_policy
from lcr.policies import Policy

SLABSET_SLOTS = 64  # 2 slabs x 32 slots

# Outcome of one deduplicated key in a batch.
HIT, INSERTED, BYPASSED = 0, 1, 2
NO_KEY = -1  # "no eviction"; cached keys are non-negative row ids

__all__ = ["BitsetRecord", "SlotPredictions", "SlabsetReference", "BatchOutcome", "pinned_keys",
           "SLABSET_SLOTS", "HIT", "INSERTED", "BYPASSED", "NO_KEY"]


class SlotPredictions:
    """The predicted next-access time stored with each cached key (absent: unknown)."""

    def __init__(self) -> None:
        self.values: dict[int, float] = {}

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        get, nan = self.values.get, math.nan
        return [get(key, nan) for key in keys]


def pinned_keys(policy: Policy) -> set[int]:
    """The keys ``policy`` must not evict: its own ``pinned`` set (LFU, FIFO: no recency
    order), or its recency order's (LRU, FPB, HF, LARU)."""
    return policy.pinned if hasattr(policy, "pinned") else policy.recency.pinned


@dataclass
class BatchOutcome:
    """Per deduplicated key, in batch order: what happened and which key it evicted."""

    keys: list[int] = field(default_factory=list)
    outcome: list[int] = field(default_factory=list)  # HIT, INSERTED or BYPASSED
    evicted: list[int] = field(default_factory=list)  # NO_KEY unless an insert evicted

    @property
    def hits(self) -> int:
        return self.outcome.count(HIT)


class SlabsetReference:
    """``num_slabsets`` spec policies of 64 slots, served batch by batch. ``policy``: a slab
    policy's name and options (``lcr.embedding.slab_policies``)."""

    def __init__(self, num_slabsets: int, policy: str | SlabPolicyChoice):
        if num_slabsets < 1:
            raise ValueError(f"num_slabsets must be at least 1, got {num_slabsets}")
        self.num_slabsets = num_slabsets
        self.policy = parse_slab_policy(policy)
        self.predictions = SlotPredictions()
        self.slabsets = [self.policy.spec(SLABSET_SLOTS, self.predictions) for _ in range(num_slabsets)]
        self.clock = 0

    def access(self, keys: Iterable[int]) -> BatchOutcome:
        unique = list(dict.fromkeys(int(k) for k in keys))
        if any(k < 0 for k in unique):
            raise ValueError("keys must be non-negative row ids")
        start, count = self.clock, len(unique)
        homes = [self.slabsets[slabset_of(k, self.num_slabsets)] for k in unique]
        out = BatchOutcome(keys=unique, outcome=[HIT] * count, evicted=[NO_KEY] * count)
        for i, (key, home) in enumerate(zip(unique, homes)):
            if key in home:
                pinned_keys(home).add(key)
                home.access(key, start + i)
            else:
                out.outcome[i] = INSERTED
        stored = self.predictions.values
        for i, (key, home) in enumerate(zip(unique, homes)):
            if out.outcome[i] != INSERTED:
                continue
            if home.full and len(pinned_keys(home)) >= len(home):
                out.outcome[i] = BYPASSED
                continue
            home.access(key, start + count + i)
            pinned_keys(home).add(key)
            stored.pop(key, None)  # a fresh slot knows nothing yet
            if home.last_evicted is not None:
                out.evicted[i] = home.last_evicted
                stored.pop(home.last_evicted, None)
        for home in homes:
            pinned_keys(home).clear()
        self.clock = start + 2 * count
        return out

    def set_predictions(self, keys: Sequence[int], values: Sequence[float]) -> None:
        """Store predicted next-access times for the keys that are cached (NaN: unknown)."""
        for key, value in zip(keys, values):
            key = int(key)
            if key in self.slabsets[slabset_of(key, self.num_slabsets)]:
                value = float(value)
                if math.isnan(value):
                    self.predictions.values.pop(key, None)
                else:
                    self.predictions.values[key] = value

    def __contains__(self, key: int) -> bool:
        return key in self.slabsets[slabset_of(int(key), self.num_slabsets)]

    def cached_keys(self) -> set[int]:
        return {key for slabset in self.slabsets for key in slabset}
