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
  ``end_eviction(now, fits_in)``      the pass ended
  ``on_split(key, lower_key)``        a node was cut: ``key`` stays on the upper part,
                                      ``lower_key`` names the lower part (same history)
A live engine also sends ``on_touch(keys, now)`` when it caches a request's blocks later
than it matched them (see ``on_touch``).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Iterable, Sequence

from lcr._native import StampOrder
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

    #: Whether a request's blocks are cached after later requests may have arrived (a
    #: live server caches a prompt after its prefill); such an engine calls
    #: ``on_request_cached``.
    caches_requests_later: bool = False

    #: Whether the engine takes a request's room from its pool when it allocates, before
    #: its tree caches anything, and evicts only when an allocation finds the pool full (a
    #: live server): it sends ``end_eviction`` with the tokens its tree had to fit in.
    allocates_before_caching: bool = False

    @abstractmethod
    def lru_twin(self):
        """An empty LRU cache of this capacity that serves ``BlockRequest``s (its
        ``serve(request, now)`` returns hit tokens): the radix LARU's shadow
        (``lcr.kv.shadow``). The engine makes it, so that a policy never builds the tree
        that runs it."""


class LeafPolicy(ABC):
    """Base of every leaf policy: keeps each cached node's last access, and the nodes in
    recency order (a native sorted set of (last access, key): O(log n) per access or
    eviction, a fraction of a microsecond inside an eviction pass) so that the oldest
    evictable leaf is found by walking from the old end, not by sorting.

    ``leaves`` given to ``pick_victim`` must answer ``key in leaves`` in O(1) (a set, a
    dict, or an engine's live view); a list or tuple is turned into a set first.
    Not thread-safe: one engine thread drives a policy.
    """

    name: ClassVar[str]
    uses_predictions: ClassVar[bool] = False
    #: Whether the engine should evict one tail block of the chosen leaf instead of all of it.
    evicts_tail_blocks: bool = False

    def __init__(self):
        self.stats = PolicyStats()
        self.last_access: dict[int, int] = {}
        self.recency = StampOrder()  # (last access, key) of every known cached node
        self.view: CacheView | None = None

    def bind(self, view: CacheView) -> "LeafPolicy":
        self.view = view
        return self

    def on_access(self, keys: Sequence[int], now: int, depths: Sequence[int] | None = None) -> None:
        for key in keys:
            self._touch(key, now)

    #: Whether the engine should send ``on_request`` (it costs the engine a walk of the
    #: request's blocks, so only policies that keep a shadow cache ask for it).
    wants_requests: bool = False

    def on_request(self, paths: Sequence[int], tokens: Sequence[int], now: int) -> None:
        """A request arrives, before ``on_access``: its blocks' path ids and tokens, root
        first (only sent to policies with ``wants_requests``)."""

    def on_request_cached(self, t: int, blocks: tuple[Sequence[int], Sequence[int]] | None = None,
                          done: bool = True, now: int | None = None) -> None:
        """The engine cached blocks for the request that arrived at ``t`` (engines whose
        ``caches_requests_later`` is true: a live server, its prompt after the prefill,
        prompt and generated tokens when it finishes): ``blocks`` (path ids, tokens; None:
        the request's own), ``done`` whether the request finished (else it still holds
        its path), ``now`` the engine's clock then (None: ``t``)."""

    def on_touch(self, keys: Sequence[int], now: int) -> None:
        """A live engine cached blocks under the path ``keys`` (root first) at ``now``, after
        the request that holds them was matched: the path was in use until then, so it is
        as recent as ``now`` in the recency order (SGLang's LRU dates every node an insert
        walks), but no request reached it: predictors, hits and races see nothing."""
        for key in keys:
            if key in self.last_access:
                self._touch(key, now)

    def on_miss(self, key: int, now: int) -> None:
        """A request found its blocks cached only up to ``key`` (its first missing block),
        whether or not room must be made for it."""

    def on_split(self, key: int, lower_key: int) -> None:
        self._touch(lower_key, self.last_access.get(key, -1))

    def begin_eviction(self, missing: int | None, now: int) -> None:
        """Room is needed for a request whose first uncached block is ``missing``."""

    def end_eviction(self, now: int, fits_in: int | None = None) -> None:
        """The eviction pass (``begin_eviction``, then ``pick_victim`` per victim) ended;
        ``fits_in``: the tokens an engine that ``allocates_before_caching`` had to bring its
        tree down to (what it held less the allocation's shortfall the pass was for)."""

    @abstractmethod
    def pick_victim(self, leaves, now: int) -> int:
        """One of ``leaves`` (evictable, non-empty) to evict."""

    def on_evicted(self, key: int) -> None:
        last = self.last_access.pop(key, None)
        if last is not None:
            self.recency.discard(last, key)
        self.stats.evictions += 1

    def on_trimmed(self, key: int, tokens_left: int) -> None:
        """The engine evicted one tail block of ``key`` (``evicts_tail_blocks``)."""
        self.stats.evictions += 1

    def _touch(self, key: int, now: int) -> None:
        restamp(self.last_access, self.recency, key, now)

    def lru_order(self, leaves: Iterable[int]) -> list[int]:
        """Leaves oldest first; the key breaks ties so every engine agrees (by sorting:
        the simple reference, used by the specs and the full-scan policies)."""
        get = self.last_access.get
        return sorted(leaves, key=lambda k: (get(k, -1), k))

    def oldest_leaves(self, leaves, count: int, after=None) -> list[tuple[int, int]]:
        """The ``count`` oldest (last access, key) among ``leaves``, walking the recency
        order from the old end (or from just after the entry ``after``)."""
        return self.recency.oldest_in(leaves, count, after)

    def oldest(self, leaves) -> int:
        found = self.oldest_leaves(leaves, 1)
        if found:
            return found[0][1]
        get = self.last_access.get  # leaves the policy never saw accessed (engine misuse)
        return min(leaves, key=lambda k: (get(k, -1), k))


def restamp(stamps: dict, order: StampOrder, key: int, t: int) -> None:
    """Set ``stamps[key] = t`` and keep ``order`` (sorted (stamp, key)) in step."""
    old = stamps.get(key)
    if old is not None:
        order.discard(old, key)
    stamps[key] = t
    order.add(t, key)


def as_container(leaves):
    """``leaves`` with O(1) membership."""
    return set(leaves) if isinstance(leaves, (list, tuple)) else leaves


class RadixLRU(LeafPolicy):
    """SGLang's default: the least recently used leaf."""

    name = "lru"

    def pick_victim(self, leaves, now):
        self.stats.lru_evictions += 1
        return self.oldest(as_container(leaves))


class _Predictive(LeafPolicy):
    """Batch predictions over candidate leaves, with an LRU fallback when the predictor
    fails: one bad call must not stop serving, so it is counted, logged once, and that
    eviction follows recency instead.

    ``prediction_evictions`` counts only evictions a prediction decided: the victim
    differs from the oldest candidate, i.e. from what LRU would have evicted."""

    uses_predictions = True

    def __init__(self, predictor: NextAccessPredictor):
        super().__init__()
        self.predictor = predictor
        self.table = PredictionTable(predictor, "sync", self.stats)
        self.stats.extra.update(predictor_fallbacks=0)
        self._warned = False

    @property
    def predictor_name(self) -> str:
        """Which predictor serves right now (a learned one may still be warming up)."""
        serving = getattr(self.predictor, "serving", None)
        return serving() if callable(serving) else getattr(self.predictor, "name", type(self.predictor).__name__)

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

    def begin_eviction(self, missing, now):
        # A guarded predictor (lcr.integrations.serving_predictor) bounds its time per
        # eviction pass: every engine starts the pass here, so none starves the predictor.
        begin_pass = getattr(self.predictor, "begin_pass", None)
        if begin_pass is not None:
            begin_pass()

    def predict(self, keys: list[int], now: int) -> bool:
        """Refresh P for ``keys`` in one call; False (counted, logged once) on failure."""
        try:
            self.table.before_eviction(keys, now)
        except Exception as err:  # noqa: BLE001 - any predictor fault means "fall back"
            self.stats.extra["predictor_fallbacks"] += 1
            if not self._warned:
                log.warning("%s: predictor failed (%s); evicting by LRU for such calls", self.name, err)
                self._warned = True
            return False
        return True

    def predicted_victim(self, candidates: list[int], now: int) -> int | None:
        """The candidate predicted to return last (ties: least recent); None on failure."""
        if not self.predict(candidates, now):
            return None
        return self.table.pick_victim(candidates)

    def count(self, victim: int | None, oldest: int) -> int:
        """Count the choice (None: LRU by fallback) and return the key to evict."""
        if victim is None or victim == oldest:
            self.stats.lru_evictions += 1
            return oldest
        self.stats.prediction_evictions += 1
        return victim


class RadixFPB(_Predictive):
    """Follow the predicted Belady: the leaf predicted to return last, among all leaves."""

    name = "fpb"

    def pick_victim(self, leaves, now):
        candidates = self.lru_order(leaves)
        return self.count(self.predicted_victim(candidates, now), candidates[0])


class RadixHF(_Predictive):
    """Heuristic filtering: predictions decide among a fixed window of oldest leaves."""

    name = "hf"

    def __init__(self, predictor: NextAccessPredictor, window: int = 4):
        super().__init__(predictor)
        if window < 1:
            raise ValueError(f"hf window must be at least 1, got {window}")
        self.window = int(window)

    def pick_victim(self, leaves, now):
        candidates = [key for _, key in self.oldest_leaves(as_container(leaves), self.window)]
        if not candidates:
            candidates = self.lru_order(leaves)[:self.window]
        victim = self.predicted_victim(candidates, now) if len(candidates) > 1 else None
        return self.count(victim, candidates[0])


class RadixRLT(LeafPolicy):
    """RLT (randomized leaf eviction, the LBGR paper): a uniformly random *unmarked*
    leaf loses tokens from its tail, one block per draw (``whole_leaf=True``: the whole
    leaf goes, as a whole-node tree must do).

    Accessed nodes are marked. A phase ends, and the marks are cleared except for the
    latest request's path, when the marked tokens reach the capacity, or when no
    evictable leaf is unmarked. Draws come from SplitMix64 over leaves in key order, so
    every engine makes the same choices.
    """

    name = "rlt"

    def __init__(self, seed: int = 0, whole_leaf: bool = False):
        super().__init__()
        self.rng = SplitMix64(seed)
        self.evicts_tail_blocks = not whole_leaf
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
        if self.view.tokens_of(self.marked) >= self.view.capacity_tokens:
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

    def _clear_marks(self):
        self.marked = set(self._latest)
        self.stats.extra["phases"] += 1


class FurthestNextUse(LeafPolicy):
    """leaf-OPT: the evictable leaf whose next use is furthest (exact future, offline).
    The best a leaf-only policy can do one choice at a time; what LARU with exact
    predictions must equal."""

    name = "opt"

    def __init__(self, next_use: Callable[[int, int], float]):
        super().__init__()
        self.next_use = next_use

    def pick_victim(self, leaves, now):
        return max(self.lru_order(leaves), key=lambda k: self.next_use(k, now))


from lcr.kv.laru import RadixLARU  # noqa: E402,F401  (it builds on _Predictive above)
