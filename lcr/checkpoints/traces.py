"""Overlap depths from prefix-block traces, under a cache that retains the last K requests.

A request's depth is the longest run of leading blocks it shares with any retained entry;
the entries are kept in a trie with reference counts so that both adding the newest request
and dropping the oldest cost O(its length).
"""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.errors import LcrInputError


def read_mooncake_blocks(path: str | Path) -> list[list[int]]:
    """The ``hash_ids`` of every line of a Mooncake JSONL trace, in file order.

    Deliberately minimal (the general readers live in ``lcr.traces``): one JSON object per
    line, of which only ``hash_ids`` (the prompt's block ids, in order) is used.
    """
    source = str(path)
    try:
        handle = open(path, encoding="utf-8")
    except OSError as err:
        raise LcrInputError(f"cannot read trace: {err.strerror}", source=source) from None
    blocks = []
    with handle:
        try:
            _read_lines(handle, blocks, source)
        except UnicodeDecodeError:
            raise LcrInputError("not UTF-8 text (a binary or compressed file?)", source=source) from None
    if not blocks:
        raise LcrInputError("trace has no requests", source=source)
    return blocks


def _read_lines(handle, blocks: list, source: str) -> None:
    """Append each line's ``hash_ids`` to ``blocks``."""
    for line_no, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            raise LcrInputError(f"not valid JSON ({getattr(err, 'msg', 'nested too deeply')})", source=source, line=line_no) from None
        ids = record.get("hash_ids") if isinstance(record, dict) else None
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise LcrInputError("field 'hash_ids': expected a list of integers", source=source, line=line_no)
        blocks.append(ids)


class _PrefixTrie:
    """Block sequences with multiplicity; answers the longest retained prefix of a query."""

    def __init__(self) -> None:
        self.root: dict = {}  # block id -> [count, children]

    def add(self, blocks: Sequence[int]) -> None:
        node = self.root
        for b in blocks:
            entry = node.setdefault(b, [0, {}])
            entry[0] += 1
            node = entry[1]

    def remove(self, blocks: Sequence[int]) -> None:
        node = self.root
        for b in blocks:
            entry = node[b]
            entry[0] -= 1
            if entry[0] == 0:  # no retained sequence passes here any more: drop the whole branch
                del node[b]
                return
            node = entry[1]

    def match_depth(self, blocks: Sequence[int]) -> int:
        node, depth = self.root, 0
        for b in blocks:
            entry = node.get(b)
            if entry is None:
                break
            depth += 1
            node = entry[1]
        return depth


def overlap_depths(requests: Iterable[Sequence[int]], cache_entries: int = 1024) -> np.ndarray:
    """For each request, the depth (in blocks) it matches among the last ``cache_entries`` requests."""
    if cache_entries < 1:
        raise LcrInputError(f"cache entries must be >= 1, got {cache_entries}")
    trie, retained, depths = _PrefixTrie(), deque(), []
    for blocks in requests:
        depths.append(trie.match_depth(blocks))
        trie.add(blocks)
        retained.append(blocks)
        if len(retained) > cache_entries:
            trie.remove(retained.popleft())
    return np.asarray(depths, dtype=np.int64)


def law_from_trace(path: str | Path, cache_entries: int = 1024) -> OverlapLaw:
    """The empirical overlap law of a Mooncake trace, with L the deepest observed overlap."""
    depths = overlap_depths(read_mooncake_blocks(path), cache_entries)
    if depths.max() == 0:
        raise LcrInputError("no request overlaps a retained cache entry; the overlap law is empty", source=str(path))
    return OverlapLaw.from_samples(depths)
