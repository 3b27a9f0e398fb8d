"""FIFO: evict the key loaded longest ago; a hit does not move it. The spec of the slab
policy ``fifo`` (``lcr.embedding.slab_policies``), written as an ``lcr.policies.Policy``.

``pinned`` is the hook batched cache engines use (``lcr.embedding.reference``), as in
``RecencyOrder``: keys in it stay cached but are never evicted, so the victim is the
oldest unpinned key. Empty by default: plain FIFO.
"""
from __future__ import annotations

from lcr.policies import Policy
from lcr.policies.recency import RecencyOrder


class FIFO(Policy):
    name = "fifo"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        # A recency order that only insertions touch is the insertion order.
        self.queue = self.resident = RecencyOrder()

    @property
    def pinned(self) -> set[int]:
        return self.queue.pinned

    def _access(self, key, t):
        if key in self.queue:
            return True
        if self.full:
            [victim] = self.queue.oldest(1)
            self.queue.remove(victim)
            self.last_evicted = victim
        self.queue.touch(key)
        return False
