"""An exact ghost of LRU beside a cache: the hit tokens LRU of the same capacity would
have had on the same requests, for a policy that must not fall behind it.

``ShadowLRU`` replays every request through an LRU *twin* of the engine, handed in by the
engine (its ``lru_twin()``: on lcr's tree and in SGLang's driver, lcr's tree with LRU), so
its count *is* LRU's, not an estimate (``lcr.kv.reuse`` estimates it from reuse distances
instead, off by up to 10% on Online-QA because LRU evicts whole nodes). A request costs
what serving it in the twin costs: a walk of its blocks plus O(log n) per eviction.
Needs the engine's ``on_request`` (the request's blocks); engines that do not send it
leave ``requests`` at 0.
Not thread-safe: one engine thread drives it.
"""
from __future__ import annotations

from typing import Protocol

from lcr.kv.requests import BlockRequest


class ServesBlocks(Protocol):
    """An engine as the shadow sees it: serve a request, return its hit tokens."""

    def serve(self, request: BlockRequest, now: int) -> int: ...


class ShadowLRU:
    def __init__(self, twin: ServesBlocks):
        self.twin = twin
        self.hits = 0       # LRU's hit tokens so far
        self.requests = 0

    def request(self, paths, tokens, now: int) -> int:
        """Serve one request (block path ids and tokens, root first); LRU's hit tokens."""
        hit = self.twin.serve(BlockRequest(tuple(paths), tuple(tokens)), now)
        self.hits += hit
        self.requests += 1
        return hit

