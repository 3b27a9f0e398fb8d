"""An exact ghost of LRU beside a cache: the hit tokens LRU of the same capacity would
have had on the same requests, for a policy that must not fall behind it.

``ShadowLRU`` replays every request through lcr's own radix tree with ``LRU`` (the
engine ``lcr sim-kv`` uses), so on lcr's engine its count *is* LRU's, not an estimate
(``lcr.kv.reuse`` estimates it from reuse distances instead, off by up to 10% on
Online-QA because LRU evicts whole nodes). It holds at most the capacity's tokens (its
own tree evicts), and a request costs what serving it in lcr's tree costs: a walk of
its blocks plus O(log n) per eviction. Engines make it through ``CacheView.lru_shadow`` and
feed it their own request description through the policy's ``on_request`` (SGLang's
driver makes one on SGLang's own tree instead: ``lcr.integrations.sglang_shadow``).
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

    def request(self, request: BlockRequest, now: int) -> int:
        """Serve one request (its blocks, root first); LRU's hit tokens."""
        hit = self.tree.serve(request, now)
        self.hits += hit
        self.requests += 1
        return hit
