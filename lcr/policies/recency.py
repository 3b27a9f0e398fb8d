"""The recency (LRU) order that LRU, HF, LARU and FPB keep: oldest first.

``pinned`` is a hook for batched cache engines (``lcr.embedding.reference``): keys in it
stay cached but are never offered for eviction. Empty by default, so the policies'
decisions are those of the paper unless an engine pins something.
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Iterator


class RecencyOrder:
    def __init__(self):
        self._order: OrderedDict[int, None] = OrderedDict()
        self.pinned: set[int] = set()

    def touch(self, key: int) -> None:
        """Make ``key`` the most recently used (inserting it if absent)."""
        self._order[key] = None
        self._order.move_to_end(key)

    def remove(self, key: int) -> None:
        del self._order[key]

    def oldest(self, count: int = 1) -> list[int]:
        """The ``count`` least recently used evictable keys, oldest first."""
        return list(islice(self.evictable(), count))

    def evictable(self) -> Iterator[int]:
        """The keys eviction may pick (all but the pinned ones), oldest first."""
        if not self.pinned:
            return iter(self._order)
        return (key for key in self._order if key not in self.pinned)

    def __contains__(self, key: int) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)

