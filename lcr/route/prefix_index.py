"""What a router believes each worker has cached: the prefixes it routed there.

Routers cannot see a worker's real radix cache, so, like SGLang's router, they keep an
approximate one: every block routed to a worker is assumed cached there until the index
outgrows ``max_tokens``, when the least recently routed blocks are forgotten. A prefix
match walks the request's block chain while the worker holds it.

By default the bound is sglang-router's own (``max_tree_size``, 2^26 characters per worker
since 0.2.0: about 2^24 tokens): far past any KV pool, so it changes no decision here, but a
long-running router no longer grows with every new prompt it sees.
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.kv.requests import BlockRequest


DEFAULT_MAX_TOKENS = 1 << 24


class ApproxPrefixIndex:
    """Blocks routed to one worker, least recently routed first (``max_tokens=None``: never
    forgotten). Not thread-safe: one router owns it and calls it from one thread."""

    def __init__(self, max_tokens: int | None = DEFAULT_MAX_TOKENS):
        self.max_tokens = max_tokens
        self.tokens = 0
        self._blocks: OrderedDict[int, int] = OrderedDict()  # path id -> tokens

    def match(self, request: BlockRequest) -> int:
        """Tokens of the longest prefix of ``request`` this worker is believed to hold."""
        matched = 0
        for path, tokens in zip(request.paths, request.tokens):
            if path not in self._blocks:
                break
            matched += tokens
        return matched

    def insert(self, request: BlockRequest) -> None:
        blocks = self._blocks
        for path, tokens in zip(request.paths, request.tokens):
            if path in blocks:
                blocks.move_to_end(path)
            else:
                blocks[path] = tokens
                self.tokens += tokens
        if self.max_tokens is not None:
            while self.tokens > self.max_tokens and blocks:
                self.tokens -= blocks.popitem(last=False)[1]
