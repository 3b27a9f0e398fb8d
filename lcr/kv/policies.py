"""Leaf-eviction policies for radix (prefix) caches, shared by every tree engine.

A tree engine (lcr's own ``RadixTree``, or SGLang's tree through
``lcr.integrations.sglang``) owns the nodes and the locks; a policy only sees node
*keys* (the path id of a node's first block, see ``lcr.kv.requests``) and answers one
question: which of these evictable leaves goes next? The engine tells it about
accesses, splits and evictions so that it can keep its own state (recency, phases,
marks) identically in every engine.

Engine protocol, per request at time ``now``:
  ``on_access(keys, now, depths)``    the request's cached path (hits) and its new node;
                                      ``depths``: tokens from the root to each node's end
  ``begin_eviction(missing, now)``    room is needed; ``missing`` is the key of the first
                                      block the request did not find (LARU's line 14)
  ``pick_victim(leaves, now)``        repeatedly, until enough tokens are free
  ``on_evicted(key)``                 after each removal
  ``on_split(key, lower_key)``        a node was cut: ``key`` stays on the upper part,
                                      ``lower_key`` names the lower part (same history)
"""
from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Iterable, Sequence

from lcr.policies.base import PolicyStats
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.rng import SplitMix64

log = logging.getLogger(__name__)


class CacheView(ABC):
    """What a policy may ask of the tree it serves."""

    capacity_tokens: int

    @abstractmethod
    def cached_keys(self) -> Iterable[int]:
        """Keys of every cached node (root excluded)."""

    @abstractmethod
    def tokens_of(self, keys: Iterable[int]) -> int:
        """Tokens held by the cached nodes among ``keys``."""


class LeafPolicy(ABC):
    name: ClassVar[str]
    uses_predictions: ClassVar[bool] = False

    def __init__(self):
        self.stats = PolicyStats()
        self.last_access: dict[int, int] = {}
        self.view: CacheView | None = None

    def bind(self, view: CacheView) -> "LeafPolicy":
        self.view = view
        return self

    def on_access(self, keys: Sequence[int], now: int, depths: Sequence[int] | None = None) -> None:
        for key in keys:
            self.last_access[key] = now

    def on_split(self, key: int, lower_key: int) -> None:
        self.last_access[lower_key] = self.last_access.get(key, -1)

    def begin_eviction(self, missing: int | None, now: int) -> None:
        """Room is needed for a request whose first uncached block is ``missing``."""

    @abstractmethod
    def pick_victim(self, leaves: Sequence[int], now: int) -> int:
        """One of ``leaves`` (evictable, non-empty) to evict."""

    def on_evicted(self, key: int) -> None:
        self.last_access.pop(key, None)
        self.stats.evictions += 1

    def lru_order(self, leaves: Iterable[int]) -> list[int]:
        """Leaves oldest first; the key breaks ties so every engine agrees."""
        get = self.last_access.get
        return sorted(leaves, key=lambda k: (get(k, -1), k))

    def oldest(self, leaves: Iterable[int]) -> int:
        get = self.last_access.get
        return min(leaves, key=lambda k: (get(k, -1), k))


class LRU(LeafPolicy):
    """SGLang's default: the least recently used leaf."""

    name = "lru"

    def pick_victim(self, leaves, now):
        self.stats.lru_evictions += 1
        return self.oldest(leaves)


class _Predictive(LeafPolicy):
    """Batch predictions over candidate leaves, with an LRU fallback when the predictor
    fails: one bad call must not stop serving, so it is counted, logged once, and that
    eviction follows recency instead."""

    uses_predictions = True

    def __init__(self, predictor: NextAccessPredictor):
        super().__init__()
        self.predictor = predictor
        self.table = PredictionTable(predictor, "sync", self.stats)
        self.stats.extra.update(predictor_fallbacks=0)
        self._warned = False

    def on_access(self, keys, now, depths=None):
        super().on_access(keys, now, depths)
        observe_node = getattr(self.predictor, "observe_node", None)
        if observe_node is not None and depths is not None:
            for key, depth in zip(keys, depths):
                observe_node(key, now, depth)
            return
        observe = getattr(self.predictor, "observe", None)
        if observe is not None:
            for key in keys:
                observe(key, now)

    def on_split(self, key, lower_key):
        super().on_split(key, lower_key)
        split = getattr(self.predictor, "on_split", None)
        if split is not None:
            split(key, lower_key)

    def on_evicted(self, key):
        super().on_evicted(key)
        self.table.forget(key)

    def predicted_victim(self, candidates: list[int], now: int) -> int | None:
        """The candidate predicted to return last (ties: least recent); None on failure."""
        try:
            self.table.before_eviction(candidates, now)
        except Exception as err:  # noqa: BLE001 - any predictor fault means "fall back"
            self.stats.extra["predictor_fallbacks"] += 1
            if not self._warned:
                log.warning("%s: predictor failed (%s); evicting by LRU for such calls", self.name, err)
                self._warned = True
            return None
        return self.table.pick_victim(candidates)


class FPB(_Predictive):
    """Follow the predicted Belady: the leaf predicted to return last, among all leaves."""

    name = "fpb"

    def pick_victim(self, leaves, now):
        victim = self.predicted_victim(self.lru_order(leaves), now)
        if victim is None:
            self.stats.lru_evictions += 1
            return self.oldest(leaves)
        self.stats.prediction_evictions += 1
        return victim


class HF(_Predictive):
    """Heuristic filtering: predictions decide among a fixed window of oldest leaves."""

    name = "hf"

    def __init__(self, predictor: NextAccessPredictor, window: int = 4):
        super().__init__(predictor)
        if window < 1:
            raise ValueError(f"hf window must be at least 1, got {window}")
        self.window = int(window)

    def pick_victim(self, leaves, now):
        candidates = self.lru_order(leaves)[:self.window]
        victim = self.predicted_victim(candidates, now) if len(candidates) > 1 else None
        if victim is None:
            self.stats.lru_evictions += 1
            return candidates[0]
        self.stats.prediction_evictions += 1
        return victim


class LARU(_Predictive):
    """LARU (Algorithm 1 of the LCR paper) over evictable leaves.

    ``k``, the cache size of the algorithm, counts *nodes*: the units this cache
    evicts. Unless fixed by the caller it is re-read at every phase start as the
    number of cached nodes. It sets the window l = max(floor(lambda * k), 1) of
    oldest leaves that predictions choose from, and the LLM rule of paper Section 5.1:
    lambda is halved once every max(k // 32, 1) prediction-induced misses of a phase.

    A phase starts when room is needed and no node cached at the previous phase start
    is left unrequested (the set O). A miss is prediction-induced when the request's
    first missing block heads a node that a prediction evicted in this phase; such
    misses evict by LRU.
    """

    name = "laru"

    def __init__(self, predictor: NextAccessPredictor, k: int | None = None, b: float = 2.0,
                 shrink_every: int | None = None):
        super().__init__(predictor)
        if k is not None and k < 1:
            raise ValueError(f"laru needs k >= 1, got {k}")
        if not b > 1:
            raise ValueError(f"laru needs b > 1, got {b}")
        if shrink_every is not None and shrink_every < 1:
            raise ValueError(f"laru shrink_every must be at least 1, got {shrink_every}")
        self.fixed_k = k
        self.k = k or 1
        self.b = float(b)
        self.fixed_shrink_every = shrink_every
        self.lam = 1.0
        self.old: set[int] = set()
        self.evicted_by_prediction: set[int] = set()
        self._induced_in_phase = 0
        self._follow_lru = False
        self.stats.extra.update(phases=0, prediction_induced_misses=0)

    @property
    def shrink_every(self) -> int:
        return self.fixed_shrink_every or max(1, self.k // 32)

    @property
    def window(self) -> int:
        return max(math.floor(self.lam * self.k), 1)

    def on_access(self, keys, now, depths=None):
        super().on_access(keys, now, depths)
        self.old.difference_update(keys)
        # Cached again: the eviction that line 14 asks about is no longer its latest.
        self.evicted_by_prediction.difference_update(keys)

    def on_split(self, key, lower_key):
        super().on_split(key, lower_key)
        if key in self.old:
            self.old.add(lower_key)

    def begin_eviction(self, missing, now):
        if not self.old:
            self._start_phase()
        self._follow_lru = missing is not None and missing in self.evicted_by_prediction
        if self._follow_lru:
            self.stats.extra["prediction_induced_misses"] += 1
            self._induced_in_phase += 1
            if self._induced_in_phase % self.shrink_every == 0:
                self.lam /= self.b

    def pick_victim(self, leaves, now):
        victim = None
        if not self._follow_lru:
            candidates = self.lru_order(leaves)[:self.window]
            if len(candidates) > 1:
                victim = self.predicted_victim(candidates, now)
        if victim is None:
            self.stats.lru_evictions += 1
            return self.oldest(leaves)
        self.stats.prediction_evictions += 1
        self.evicted_by_prediction.add(victim)
        return victim

    def on_evicted(self, key):
        super().on_evicted(key)
        self.old.discard(key)

    def _start_phase(self):
        self.old = set(self.view.cached_keys())
        self.k = self.fixed_k or max(1, len(self.old))
        self.lam = 1.0
        self.evicted_by_prediction.clear()
        self._induced_in_phase = 0
        self.stats.extra["phases"] += 1


class RLT(LeafPolicy):
    """Randomized leaf eviction with marking: a uniformly random *unmarked* leaf.

    Accessed nodes are marked. When the marked tokens would exceed the capacity, or
    no evictable leaf is unmarked, the marks are cleared except for the latest
    request's path (a new phase). Draws come from SplitMix64 over leaves in a fixed
    order, so every engine makes the same choices.
    """

    name = "rlt"

    def __init__(self, seed: int = 0):
        super().__init__()
        self.rng = SplitMix64(seed)
        self.marked: set[int] = set()
        self._latest: set[int] = set()  # the nodes of the request being served
        self._latest_time = -1
        self.stats.extra.update(phases=0)

    def on_access(self, keys, now, depths=None):
        super().on_access(keys, now, depths)
        if now != self._latest_time:
            self._latest, self._latest_time = set(), now
        self._latest.update(keys)
        self.marked.update(keys)
        if self._marked_tokens() > self.view.capacity_tokens:
            self._clear_marks()

    def on_split(self, key, lower_key):
        super().on_split(key, lower_key)
        if key in self.marked:
            self.marked.add(lower_key)

    def pick_victim(self, leaves, now):
        unmarked = [k for k in leaves if k not in self.marked]
        if not unmarked:
            self._clear_marks()
            unmarked = [k for k in leaves if k not in self.marked] or list(leaves)
        unmarked.sort()
        return unmarked[self.rng.below(len(unmarked))]

    def on_evicted(self, key):
        super().on_evicted(key)
        self.marked.discard(key)

    def _marked_tokens(self) -> int:
        return self.view.tokens_of(self.marked)

    def _clear_marks(self):
        self.marked = set(self._latest)
        self.stats.extra["phases"] += 1


class FurthestNextUse(LeafPolicy):
    """OPT for the tree: the leaf whose next use is furthest (exact future, offline)."""

    name = "opt"

    def __init__(self, next_use: Callable[[int, int], float]):
        super().__init__()
        self.next_use = next_use

    def pick_victim(self, leaves, now):
        return max(self.lru_order(leaves), key=lambda k: self.next_use(k, now))
