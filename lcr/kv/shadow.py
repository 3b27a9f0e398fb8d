"""An exact ghost of LRU beside a cache: the hit tokens LRU of the same capacity would
have had on the same requests, for a policy that must not fall behind it.

``ShadowLRU`` replays every request through an LRU *twin* of the engine, handed in by the
engine (its ``lru_twin()``: on lcr's tree and in SGLang's driver, lcr's tree with LRU), so
its count *is* LRU's, not an estimate (``lcr.kv.reuse`` estimates it from reuse distances
instead, off by up to 10% on Online-QA because LRU evicts whole nodes). A request costs
what serving it in the twin costs: a walk of its blocks plus O(log n) per eviction.
Needs the engine's ``on_request`` (the request's blocks); engines that do not send it
leave ``requests`` at 0.

A live engine is mirrored as it serves: ``request(..., complete=False)`` matches at
arrival and holds the matched path; ``complete(t, request, done, now)`` inserts what the
engine inserted for request t when it did (a prompt after its prefill, so the twin hits
nothing still in flight; the prompt and its generated tokens when the request finishes,
which take pool space and which a chat's next turn may hit), dates the path at ``now``,
and holds it until the request is done. Such an engine takes a request's room from the
pool when it allocates, before its tree caches anything, and evicts only when an
allocation finds the pool full, down to what its tree holds after that pass; ``live=True``
mirrors that too: the twin's inserts never evict, and ``fit(tokens)`` after each of the
engine's passes evicts the twin down to what the tree had to fit in (what it held less
the allocation's shortfall: the tree's own overshoot, the part of its last victim it did
not need, is not the twin's). (Sized instead by the pool left to the tree at each match,
the twin found no room for a burst's prompts and hit 14% less than the LRU cache it judged
under Poisson arrivals; without the generated tokens 2.7-2.9% more: docs/history.md.)
Not thread-safe: one engine thread drives it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from lcr.kv.requests import BlockRequest


UNBOUNDED = 1 << 62

#: Requests matched but not yet cached by the engine that a shadow keeps at most (an
#: engine that never caches one, e.g. an aborted request, must not lock its path forever).
MAX_PENDING = 1024


class ServesBlocks(Protocol):
    """An engine as the shadow sees it: a request matched (its hit tokens, its path
    locked), then its missing blocks inserted."""

    capacity_tokens: int

    def admit(self, request: BlockRequest, now: int): ...

    def complete(self, admitted, now: int) -> None: ...

    def progress(self, admitted, now: int): ...

    def touch(self, node, now: int) -> None: ...

    def fit(self, tokens: int, now: int) -> None: ...


class ShadowLRU:
    def __init__(self, twin: ServesBlocks, live: bool = False):
        self.twin = twin
        self.live = live
        if live:
            twin.capacity_tokens = UNBOUNDED  # the engine's passes bound it (``fit``)
        self.hits = 0       # LRU's hit tokens so far
        self.requests = 0
        self._pending: OrderedDict[int, object] = OrderedDict()  # request time -> admitted

    def request(self, paths, tokens, now: int, complete: bool = True) -> int:
        """One request (block path ids and tokens, root first) at time ``now``; LRU's hit
        tokens. ``complete=False``: its blocks are inserted at ``complete(now, ...)``, even
        when all were hit (the engine still inserts what it generates)."""
        admitted = self.twin.admit(BlockRequest(tuple(paths), tuple(tokens)), now)
        if complete:
            self.twin.complete(admitted, now)
        else:
            self._pending[now] = admitted
            if len(self._pending) > MAX_PENDING:
                t, oldest = self._pending.popitem(last=False)
                self.twin.complete(oldest, t)
        self.hits += admitted.hit_tokens
        self.requests += 1
        return admitted.hit_tokens

    def complete(self, t: int, request: BlockRequest | None = None, done: bool = True,
                 now: int | None = None) -> None:
        """The engine cached blocks for the request that arrived at ``t``: ``request``'s
        (None: those it arrived with); ``done``: it finished, its path is no longer held
        (else the twin holds the path to the end of these blocks until its next insert);
        ``now``: the engine's clock then (None: ``t``), which dates the path in the twin's
        recency order as the engine dates it in the cache's (``LeafPolicy.on_touch``).
        No-op for a request completed already, or never pending."""
        admitted = self._pending.pop(t, None)
        if admitted is None:
            return
        if request is not None:
            admitted = admitted.reading(request)
        if done:
            end = self.twin.complete(admitted, t)
        else:
            self._pending[t] = progressed = self.twin.progress(admitted, t)
            end = progressed.last
        if now is not None and now != t:
            self.twin.touch(end, now)

    def fit(self, tokens: int, now: int) -> None:
        """A live engine's eviction pass had to bring its tree down to ``tokens``: the twin
        evicts its least recently used leaves down to as many (its locked paths stay)."""
        self.twin.fit(tokens, now)
