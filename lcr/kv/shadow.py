"""An exact ghost of LRU beside a cache: the hit tokens LRU of the same capacity would
have had on the same requests, for a policy that must not fall behind it.

``ShadowLRU`` replays every request through lcr's own radix tree with ``LRU`` (the
engine ``lcr sim-kv`` uses), so on lcr's engine its count *is* LRU's, not an estimate
(``lcr.kv.reuse`` estimates it from reuse distances instead, off by up to 10% on
Online-QA because LRU evicts whole nodes). It holds at most the capacity's tokens (its
own tree evicts), and a request costs what serving it in lcr's tree costs: a walk of
its blocks plus O(log n) per eviction. Needs the engine's ``on_request`` (the request's
blocks); engines that do not send it leave ``requests`` at 0.
Not thread-safe: one engine thread drives it.
"""
from __future__ import annotations

from lcr.kv.policies import LRU
from lcr.kv.requests import BlockRequest


class ShadowLRU:
    def __init__(self, capacity_tokens: int):
        from lcr.kv.tree import RadixTree  # lcr.kv.tree imports the policies

        self.tree = RadixTree(capacity_tokens, LRU())
        self.hits = 0       # LRU's hit tokens so far
        self.requests = 0

    def request(self, paths, tokens, now: int) -> int:
        """Serve one request (block path ids and tokens, root first); LRU's hit tokens."""
        hit = self.tree.serve(BlockRequest(tuple(paths), tuple(tokens)), now)
        self.hits += hit
        self.requests += 1
        return hit
