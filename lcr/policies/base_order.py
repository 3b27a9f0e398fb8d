"""Another policy's eviction order as LARU's candidate order (``laru:base=s3fifo|lfu``).

LARU's window is the l keys its base order would evict next. The base order of the
paper is recency (``RecencyOrder``); here it is a heuristic's: the l keys the heuristic
would evict next if no request came in between (a dry run of its own eviction
procedure, ``eviction_order``). The heuristic keeps its whole state (queues, counts,
ghosts) and sees every request; LARU's victim is handed to it before the miss
(``plan_eviction``) and evicted inside the heuristic's own miss handling, at the moment
it would evict (S3-FIFO looks its ghost up before evicting). When LARU's victim is the
head the heuristic evicts by its own procedure; any other key of the window just leaves
(each policy's ``evict_key`` says what state it leaves behind). So with l = 1 LARU makes
exactly the heuristic's decisions, and with l = k the window is the whole cache.
"""
from __future__ import annotations

from typing import Iterator

from lcr.policies.base import Policy


class PlannedEviction:
    """Mixin for a policy usable as a base order. The policy offers ``eviction_order(count)``,
    ``_evict_next()`` (its own eviction procedure) and ``evict_key(key)`` (a key other than
    its next victim leaves), and calls ``_evict_for_miss`` on a miss into the full cache."""

    _planned: tuple[int, bool] | None = None

    def plan_eviction(self, key: int, head: bool) -> None:
        """The next miss into the full cache evicts ``key`` (``head``: the policy's own next
        victim, so it leaves by the policy's own procedure)."""
        self._planned = (key, head)

    def _evict_for_miss(self) -> None:
        planned, self._planned = self._planned, None
        if planned is None or planned[1]:
            self._evict_next()
            if planned is not None and self.last_evicted != planned[0]:
                raise RuntimeError(f"{self.name}: eviction_order's head {planned[0]} is not its next victim")
        else:
            self.evict_key(planned[0])


class HeuristicOrder:
    """The RecencyOrder interface LARU uses (touch, remove, oldest, membership), served by
    ``policy``, a cache of LARU's capacity offering ``eviction_order`` and ``evict_key``.
    Not thread-safe (neither is LARU)."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self._head: int | None = None  # head of the latest eviction_order, until a key leaves
        self._planned: int | None = None  # LARU's victim, evicted by the next touch
        self._clock = 0

    def touch(self, key: int) -> None:
        """A request for ``key``; on a miss into the full cache the key LARU removed goes."""
        planned, self._planned = self._planned, None
        self._head = None
        self.policy.access(key, self._clock)
        self._clock += 1
        if self.policy.last_evicted != planned:
            raise RuntimeError(f"base {self.policy.name} evicted {self.policy.last_evicted}, LARU chose {planned}")

    def oldest(self, count: int = 1) -> list[int]:
        """The ``count`` keys the base policy would evict next, first victim first."""
        order = self.policy.eviction_order(count)
        self._head = order[0] if order else None
        return order

    def remove(self, key: int) -> None:
        """LARU's victim: it leaves at the next ``touch`` (always the missed key's)."""
        head = self._head if self._head is not None else self.oldest(1)[0]
        self.policy.plan_eviction(key, head=key == head)
        self._planned = key

    def __contains__(self, key: int) -> bool:
        return key in self.policy

    def __len__(self) -> int:
        return len(self.policy)

    def __iter__(self) -> Iterator[int]:
        return iter(self.policy)
