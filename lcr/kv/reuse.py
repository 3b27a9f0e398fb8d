"""Distinct tokens requested between two moments: the reuse distance that decides
whether LRU would still hold a node.

LRU keeps a node exactly while fewer than ``capacity`` other tokens have been requested
since its last access (its reuse distance), so a miss that LRU would also have taken is
one whose distance reached the capacity. ``TokenReuse`` keeps, for every node ever
requested, its latest request stamp and token count in a Fenwick tree over stamps, so
the distinct tokens requested in a stamp interval cost O(log T).

A node re-requested moves its tokens to the new stamp. A split's lower part is counted
from its first own request; until then its tokens count where the whole node's did
(approximate). ``LRUBalance`` turns this into a running estimate of a cache's hit tokens
over LRU's. Memory grows with the stamps (two floats per request) and the distinct nodes
ever requested (offline replays; a server would prune). Not thread-safe: one engine
thread drives them.
"""
from __future__ import annotations


class TokenReuse:
    def __init__(self) -> None:
        self._tree = [0.0] * 1024    # Fenwick over stamp + 1 (index 0 unused)
        self._values = [0.0] * 1024  # the point values, to rebuild the tree when it grows
        self.stamp: dict[int, tuple[int, int]] = {}  # key -> (last stamp, tokens then)

    def _add(self, stamp: int, tokens: float) -> None:
        i = stamp + 1
        if i >= len(self._tree):
            self._grow(i)
        self._values[i] += tokens
        tree, n = self._tree, len(self._tree)
        while i < n:
            tree[i] += tokens
            i += i & -i

    def _grow(self, index: int) -> None:
        size = len(self._tree)
        while size <= index:
            size *= 2
        self._values += [0.0] * (size - len(self._values))
        tree = list(self._values)
        for i in range(1, size):  # O(n) Fenwick build
            j = i + (i & -i)
            if j < size:
                tree[j] += tree[i]
        self._tree = tree

    def _prefix(self, stamp: int) -> float:
        """Tokens with a stamp <= ``stamp``."""
        i = min(stamp + 1, len(self._tree) - 1)
        total, tree = 0.0, self._tree
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    def requested(self, key: int, stamp: int, tokens: int) -> None:
        """``key`` (``tokens`` tokens now) was requested at ``stamp`` (>= 0)."""
        old = self.stamp.get(key)
        if old is not None:
            self._add(old[0], -old[1])
        self.stamp[key] = (stamp, tokens)
        self._add(stamp, tokens)

    def between(self, after: int, before: int) -> float:
        """Distinct tokens whose latest request fell in (after, before)."""
        if before - 1 <= after:
            return 0.0
        return self._prefix(before - 1) - self._prefix(after)

    def distance(self, key: int, now: int) -> float | None:
        """Tokens requested since ``key``'s last request, before ``now`` (None: never
        requested)."""
        old = self.stamp.get(key)
        return None if old is None else self.between(old[0], now)


class LRUBalance:
    """Hit tokens of this cache minus those LRU of the same capacity would have had,
    estimated request by request from reuse distances (no second cache is kept).

    For a request, the node that decides LRU's outcome is the first missing one if it
    was requested before (the conversation's earlier path), else the deepest cached one:
    LRU would hit the top ``capacity - distance`` tokens of that node's earlier path
    (it evicts the deepest, oldest tokens first), at most the path's earlier depth."""

    def __init__(self) -> None:
        self.hits = 0.0  # this cache's hit tokens (the scale)
        self.reuse = TokenReuse()
        self.depth: dict[int, int] = {}  # key -> depth of the request path it was last on
        self.total = 0.0  # hit tokens - LRU's estimated hit tokens
        self._now = -1
        self._hit = 0            # this request's hit tokens
        self._lru = 0.0          # LRU's estimated hit tokens for it
        self._path: list[int] = []   # this request's keys, root first

    def _lru_hit(self, key: int, now: int, capacity: int) -> float | None:
        last = self.reuse.stamp.get(key)
        if last is None:
            return None
        depth = self.depth.get(key, last[1])
        return min(depth, max(0.0, capacity - self.reuse.between(last[0], now)))

    def _begin(self, now: int) -> None:
        if now != self._now:
            self.settle(now)
            self._now, self._hit, self._lru, self._path = now, 0, 0.0, []

    def access(self, keys, depths, now: int, cached: bool, capacity: int) -> None:
        """``keys`` (with ``depths``) requested at ``now``; ``cached``: they were hits."""
        self._begin(now)
        if cached and keys:
            self._hit = depths[-1]
            estimate = self._lru_hit(keys[-1], now, capacity)
            self._lru = estimate if estimate is not None else 0.0
        above = 0 if cached else self._hit  # an inserted node hangs below this request's hits
        for key, depth in zip(keys, depths):
            self.reuse.requested(key, now, depth - above)
            above = depth
        self._path.extend(keys)
        if keys:
            for key in self._path:  # the request's whole path, for its next turn's estimate
                self.depth[key] = depths[-1]

    def miss(self, key: int, now: int, capacity: int) -> None:
        """The request at ``now`` misses from ``key`` on (before ``key`` is inserted)."""
        self._begin(now)
        estimate = self._lru_hit(key, now, capacity)
        if estimate is not None:
            self._lru = max(self._lru, estimate)

    def settle(self, now: int) -> float:
        """Close the accounting of requests before ``now``; the running balance."""
        if self._now >= 0 and self._now != now:
            self.total += self._hit - self._lru
            self.hits += self._hit
            self._hit, self._lru = 0, 0.0
        return self.total
