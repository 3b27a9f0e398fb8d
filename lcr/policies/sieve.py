"""SIEVE (Zhang et al., NSDI 2024): a FIFO queue with one visited bit and a moving hand.

New keys enter at the head. A hit only sets the key's visited bit. To evict, the hand
walks from where it last stopped (initially the tail, the oldest key) towards the
head, clearing visited bits, and evicts the first unvisited key; past the head it
wraps to the tail. The hand then rests on the evicted key's newer neighbour.
"""
from __future__ import annotations

from lcr.policies.base import Policy


class Sieve(Policy):
    name = "sieve"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.visited: dict[int, bool] = {}
        self.resident = self.visited
        # A doubly linked queue: newer[key] is the key inserted after it (towards the head).
        self.newer: dict[int, int | None] = {}
        self.older: dict[int, int | None] = {}
        self.head: int | None = None  # newest
        self.tail: int | None = None  # oldest
        self.hand: int | None = None

    def native_args(self) -> dict:
        return {}

    def _access(self, key, t):
        if key in self.visited:
            self.visited[key] = True
            return True
        if self.full:
            self.last_evicted = self._evict()
        self._push_head(key)
        return False

    def _evict(self) -> int:
        key = self.hand if self.hand is not None else self.tail
        while self.visited[key]:
            self.visited[key] = False
            key = self.newer[key] if self.newer[key] is not None else self.tail
        self.hand = self.newer[key]
        self._unlink(key)
        return key

    def _push_head(self, key: int) -> None:
        self.visited[key] = False
        self.older[key], self.newer[key] = self.head, None
        if self.head is not None:
            self.newer[self.head] = key
        self.head = key
        if self.tail is None:
            self.tail = key

    def _unlink(self, key: int) -> None:
        older, newer = self.older.pop(key), self.newer.pop(key)
        del self.visited[key]
        if older is not None:
            self.newer[older] = newer
        else:
            self.tail = newer
        if newer is not None:
            self.older[newer] = older
        else:
            self.head = older
