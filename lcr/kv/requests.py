"""Prefix-block requests: a block-chain trace turned into what a radix cache sees.

A request's blocks form a prefix chain, so a block is only identified by the whole
prefix in front of it. Each distinct prefix-through-a-block gets a dense *path id*;
two requests share a path id exactly when they share that prefix. Path ids are the
keys the tree, the policies and the predictors talk about, in every engine.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from lcr.errors import LcrInputError
from lcr.traces import Trace

BLOCK_TOKENS = 512


@dataclass(frozen=True)
class BlockRequest:
    paths: tuple[int, ...]   # path id of each block, root first
    tokens: tuple[int, ...]  # tokens in each block

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


class BlockWorkload:
    """The requests of a block-chain trace, with each path's request times (for oracles)."""

    def __init__(self, requests: list[BlockRequest], name: str = "trace"):
        self.name = name
        self.meta: dict = {}  # the trace's meta (chat traces: what LPC needs)
        self.path_count = 1 + max((max(r.paths) for r in requests if r.paths), default=-1)
        # A path keeps the token count it had when first seen: a later request that
        # disagrees must not make the same cached block change size.
        self.path_tokens = [0] * self.path_count
        for request in reversed(requests):
            for path, tokens in zip(request.paths, request.tokens):
                self.path_tokens[path] = tokens
        self.requests = [BlockRequest(r.paths, tuple(self.path_tokens[p] for p in r.paths))
                         for r in requests]
        self.total_tokens = sum(r.total_tokens for r in self.requests)
        self._uses: list[list[int]] = [[] for _ in range(self.path_count)]
        for t, request in enumerate(self.requests):
            for path in request.paths:
                self._uses[path].append(t)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def distinct_tokens(self) -> int:
        return sum(self.path_tokens)

    def next_use(self, path: int, now: int) -> float:
        """The first request after ``now`` that needs ``path`` (inf: never again)."""
        uses = self._uses[path]
        i = bisect.bisect_right(uses, now)
        return float(uses[i]) if i < len(uses) else float("inf")


def block_token_sizes(trace: Trace, block_tokens: int = BLOCK_TOKENS) -> np.ndarray:
    """Tokens per block, aligned with ``trace.keys``.

    ``trace.sizes`` wins when present; otherwise every block holds ``block_tokens``
    except a request's last block, which holds what its ``input_length`` leaves over.
    """
    if trace.sizes is not None:
        return np.asarray(trace.sizes, dtype=np.int64)
    sizes = np.full(len(trace.keys), block_tokens, dtype=np.int64)
    lengths = trace.meta.get("input_lengths")
    offsets = trace.request_offsets
    if lengths is not None and offsets is not None and len(lengths) >= len(offsets) - 1:
        for r, length in enumerate(lengths[:len(offsets) - 1]):
            start, end = offsets[r], offsets[r + 1]
            if end > start:
                tail = int(length) - block_tokens * (end - start - 1)
                sizes[end - 1] = min(max(tail, 1), block_tokens)
    return sizes


def build_workload(trace: Trace, block_tokens: int = BLOCK_TOKENS) -> BlockWorkload:
    if trace.request_offsets is None:
        raise LcrInputError(f"{trace.name}: not a prefix-block trace (no per-request block lists); "
                            "sim-kv needs Mooncake JSONL or the online_qa/aibrix generators")
    if block_tokens < 1:
        raise LcrInputError(f"--block-tokens must be at least 1, got {block_tokens}")
    sizes = block_token_sizes(trace, block_tokens)
    if len(sizes) and sizes.min() < 1:
        raise LcrInputError(f"{trace.name}: block token sizes must be positive")
    offsets = trace.request_offsets.tolist()
    keys = trace.keys.tolist()
    sizes = sizes.tolist()
    path_ids: dict[tuple[int, int], int] = {}
    requests = []
    for r in range(len(offsets) - 1):
        parent, paths = -1, []
        for i in range(offsets[r], offsets[r + 1]):
            parent = path_ids.setdefault((parent, keys[i]), len(path_ids))
            paths.append(parent)
        requests.append(BlockRequest(tuple(paths), tuple(sizes[offsets[r]:offsets[r + 1]])))
    workload = BlockWorkload(requests, trace.name)
    workload.meta = trace.meta
    return workload
