"""The recency (LRU) order that LRU, HF, LARU and FPB keep: oldest first."""
from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Iterator


class RecencyOrder:
    def __init__(self):
        self._order: OrderedDict[int, None] = OrderedDict()

    def touch(self, key: int) -> None:
        """Make ``key`` the most recently used (inserting it if absent)."""
        self._order[key] = None
        self._order.move_to_end(key)

    def remove(self, key: int) -> None:
        del self._order[key]

    def oldest(self, count: int = 1) -> list[int]:
        """The ``count`` least recently used keys, oldest first."""
        return list(islice(self._order, count))

    def __contains__(self, key: int) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[int]:
        return iter(self._order)
