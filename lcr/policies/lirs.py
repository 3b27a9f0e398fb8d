"""LIRS (Jiang & Zhang, SIGMETRICS 2002), as libCacheSim 0.3.5 runs it with unit sizes.

Resident keys are LIR (low inter-reference recency, at most k - h of them) or HIR
(h = max(1, int(0.01 k)) slots). The stack S orders recently seen keys (LIR, resident
HIR and non-resident HIR) by recency; the queue Q holds the resident HIR keys; NH
remembers, oldest first, which non-resident HIR keys S still holds. Rules:

- S is pruned after every change at its bottom: HIR entries below the oldest LIR entry
  leave S (never the top one).
- Demoting a LIR key: S's bottom entry leaves S and enters Q as resident HIR.
- Evicting (the only way a key leaves the cache): Q's oldest key; if S holds it, it
  becomes non-resident there and enters NH.
- Hit on a LIR key: move to S's top, prune.
- Hit on a resident HIR key in S: it leaves Q, becomes LIR at S's top, and a LIR key is
  demoted if the LIR set is full.
- Hit on a resident HIR key in Q only: libCacheSim first demotes a LIR key (when the LIR
  set is full, which makes Q overflow, so a HIR key is evicted on this hit), then pushes
  the key onto S as resident HIR while it stays in Q.
- Miss on a non-resident HIR key in S: demote a LIR key if the LIR set is full, and if
  the cache is still full, evict from Q while Q is full and demote once more; the key
  becomes LIR.
- Miss on a new key: while both sets are full, evict from Q; the key becomes LIR if the
  LIR set has room, else resident HIR (top of S and of Q).
- S holds at most 2k entries: beyond that the oldest non-resident entries (by NH) go.

These are libCacheSim's rules step by step, quirks included, with one exception (and
k >= 2: libCacheSim's LIRS caches nothing at k = 1). When h = 1 (k < 200), the demotion
on a hit in Q would evict the hit key itself, Q's only entry; libCacheSim then still
marks it resident in S without counting it, so its cache holds k + 1 keys, more with
every repeat. Here that hit demotes nothing (the paper's rule for this hit), so the
cache never exceeds k keys. From k = 200 on the decisions are libCacheSim's
(``tests/test_libcachesim_parity.py``).
"""
from __future__ import annotations

from collections import OrderedDict

from lcr.policies.base import Policy

LIR, HIR, NONRESIDENT = 0, 1, 2


def resident_hir_slots(capacity: int) -> int:
    """LIRS's resident HIR share: the slots where keys not (yet) proven recur, 1% of the cache."""
    return max(1, int(0.01 * capacity))


class LIRS(Policy):
    name = "lirs"
    evicts_on_hit = True
    min_capacity = 2  # a LIR and a HIR slot (libCacheSim's LIRS caches nothing at k = 1)

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.hir_limit = resident_hir_slots(self.capacity)
        self.lir_limit = self.capacity - self.hir_limit
        # Oldest (bottom) first; the last entry is the top. S maps key -> LIR/HIR/NONRESIDENT.
        self.stack: OrderedDict[int, int] = OrderedDict()
        self.queue: OrderedDict[int, None] = OrderedDict()
        self.nonresident: OrderedDict[int, None] = OrderedDict()
        self.lir_count = 0
        self.hir_count = 0
        self.occupied = 0  # libCacheSim's resident count, which its quirks can leave at k - 1
        self.resident: dict[int, None] = {}

    def native_args(self) -> dict:
        return {}

    def _access(self, key, t):
        hit = self._find(key)
        if not hit:
            self._load(key)
        self._limit_stack()
        return hit

    def _find(self, key: int) -> bool:
        in_stack, in_queue = key in self.stack, key in self.queue
        if in_stack:
            self.stack.move_to_end(key)
        if in_queue:
            self.queue.move_to_end(key)
        if in_stack:
            state = self.stack[key]
            if state == LIR:
                self._prune()
                return True
            if state == NONRESIDENT:
                return False
            if in_queue:  # resident HIR in S: becomes LIR
                del self.queue[key]
                self.hir_count -= 1
                self.occupied -= 1
            while self.lir_count + 1 > self.lir_limit:
                self._demote_lir()
            if key in self.stack:
                self.stack[key] = LIR
            self.resident[key] = None
            self.lir_count += 1
            self.occupied += 1
            return True
        if in_queue:  # resident HIR in Q only
            evicts_itself = self.hir_count >= self.hir_limit and next(iter(self.queue)) == key
            while self.lir_count + 1 > self.lir_limit and not evicts_itself:  # see the docstring
                self._demote_lir()
            self.stack[key] = HIR
            return True
        return False

    def _load(self, key: int) -> None:
        if self.stack.get(key) == NONRESIDENT:
            while self.lir_count + 1 > self.lir_limit:
                self._demote_lir()
            self.nonresident.pop(key, None)
        elif self.lir_count + 1 > self.lir_limit and self.hir_count + 1 > self.hir_limit:
            while self.hir_count + 1 > self.hir_limit:
                self._evict_hir()
        while self.occupied + 1 > self.capacity:
            if self.stack.get(key) == NONRESIDENT:
                while self.hir_count >= self.hir_limit:
                    self._evict_hir()
                self._demote_lir()
            elif self.lir_count + 1 > self.lir_limit and self.hir_count + 1 > self.hir_limit:
                self._evict_hir()
            else:  # libCacheSim would spin here; its own accounting never gets here
                raise RuntimeError("LIRS could not free a slot")
        if self.stack.get(key) == NONRESIDENT:
            self.stack[key] = LIR
            self.lir_count += 1
        elif key not in self.stack and key not in self.queue:
            if self.lir_count + 1 <= self.lir_limit:
                self.stack[key] = LIR
                self.lir_count += 1
            else:
                self.stack[key] = HIR
                self.queue[key] = None
                self.hir_count += 1
        self.occupied += 1
        self.resident[key] = None

    def _prune(self) -> None:
        while len(self.stack) > 1:
            bottom, state = next(iter(self.stack.items()))
            if state == LIR:
                return
            if state == NONRESIDENT:
                self.nonresident.pop(bottom, None)
            del self.stack[bottom]

    def _demote_lir(self) -> None:
        bottom, _ = self.stack.popitem(last=False)
        self.lir_count -= 1
        while self.hir_count + 1 > self.hir_limit:
            self._evict_hir()
        self.queue[bottom] = None
        self.hir_count += 1
        self._prune()

    def _evict_hir(self) -> None:
        key, _ = self.queue.popitem(last=False)
        self.hir_count -= 1
        self.occupied -= 1
        if key in self.stack:
            self.stack[key] = NONRESIDENT
            self.nonresident[key] = None
        if key in self.resident:
            del self.resident[key]
        self._evict(key)

    def _limit_stack(self) -> None:
        while len(self.stack) > 2 * self.capacity and self.nonresident:
            key, _ = self.nonresident.popitem(last=False)
            del self.stack[key]
