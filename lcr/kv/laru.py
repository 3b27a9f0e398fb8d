"""LARU (Algorithm 1 of the LCR paper) over the evictable leaves of a radix tree.

Rules (each measured in docs/kv.md; the options name the alternatives tried):

* k, the cache size in the algorithm's units, is the number of cached *nodes*, read
  live at every eviction round; the window is the l = max(floor(lambda * k), 1) oldest
  evictable leaves. Leaves never outnumber nodes, so at lambda = 1 every evictable leaf
  is a candidate and exact predictions make LARU leaf-OPT.
* Phase (``phase``): ``tokens`` (default, the authors') starts a phase when the
  distinct tokens requested in the phase reach the capacity; ``nodes`` starts one when
  room is needed and no node cached at the previous phase start is left unrequested
  (the set O).
* Induced miss (``check``): a request whose first missing block heads a node that a
  prediction evicted in this phase. ``evict`` (default) checks when that request needs
  room; ``insert`` (the authors') checks every request that misses, room or not.
* Induced-miss condition (``induced``): ``phase`` (Algorithm 1's line 14) asks that
  the prediction eviction fell in this phase; ``stale`` (the paper's definition in its
  text) asks that some cached node has not been requested since that eviction (the
  oldest request stamp, O(1)), whichever phase it fell in; a split's lower part counts
  as requested when it is split off.
* Record (``record``): ``phase`` (the authors') keeps a prediction-evicted key for the
  whole phase; ``cached`` drops it once the node is cached again.
* Fallback (``fallback``): ``round`` evicts the whole eviction round of an induced miss
  by LRU; ``one`` (the authors') gives one LRU eviction per induced miss.
* Confidence (``confidence``), default ``shadow``: an exact LRU of the same capacity
  runs beside the cache (``lcr.kv.shadow.ShadowLRU``, fed by the engine's
  ``on_request``). A phase that starts with this cache's hit tokens at least
  (1 - ``slack``) of the shadow's (slack 0.01, half of the 2% that inverted predictions
  may cost) follows Algorithm 1 (lambda 1, shrunk by b per induced miss); any other phase
  is LRU, and a trusted phase that falls behind turns LRU for its rest. So the loss to
  LRU is at most slack plus what one trusted stretch costs before its misses show, while
  a predictor that is ahead keeps full use of its window. With exact predictions no
  phase is ever behind (leaf-OPT). An engine that sends no requests gets ``guarded``.
  ``phase`` (Algorithm 1) resets lambda to 1 at every
  phase start; ``earned`` keeps it across phases and multiplies it by b only after a
  phase without an induced miss; ``guarded`` is ``earned`` where an induced miss also
  makes the rest of its phase LRU and costs one more shrink when the phase ends (a small
  cache sees few evictions per phase, so the per-miss shrink alone comes too late:
  Online-QA 2.5% at p = 1, docs/kv.md).
* ``confidence=balance`` (for predictors right on average but often wrong one by one,
  such as LPC's): no induced misses. ``lcr.kv.reuse.LRUBalance`` estimates from reuse
  distances the hit tokens LRU would have had; the window is every evictable leaf
  (lambda = 1) unless the hit-token balance over LRU falls below ``-slack`` (0.02) times
  the hit tokens plus the capacity, then LRU's choice (a window of one). ``horizon`` > 0 fades both over
  that many requests so trust can come back (default 0: never forgotten, the robust
  choice). Needs the engine's depths.
* Shrink (``shrink_every``): lambda /= b once every ``shrink_every`` induced misses of a
  phase (default 1, Algorithm 1; the paper's LLM setting is k // 32, ``shrink_every=0``).
* Only evictions a prediction decided (victim other than the oldest candidate) are
  recorded and counted as prediction-driven.

Within an eviction round each key is predicted once (one batch for the round's first
window, then only newcomers, such as a victim's parent; ``now`` does not move within a
round, so the predictions stay exact). The window itself is found in C++
(``lcr._native.leaf_window``): a scan of the evictable leaves, O(leaves) per pick.
``lcr.kv.spec.RadixLARUSpec`` makes the same decisions by sorting in Python; tests compare
the two victim by victim.
Not thread-safe: one engine thread drives a policy.
"""
from __future__ import annotations

import math

from lcr._native import StampOrder, leaf_window
from lcr.kv.policies import _Predictive, as_container, restamp
from lcr.kv.reuse import LRUBalance
from lcr.policies.predictions import NextAccessPredictor

PHASES = ("nodes", "tokens")
CHECKS = ("evict", "insert")
RECORDS = ("phase", "cached")
FALLBACKS = ("round", "one")
CONFIDENCES = ("shadow", "phase", "earned", "guarded", "balance")
INDUCED = ("phase", "stale")


class LARURules(_Predictive):
    """Phases, prediction-induced misses and lambda: everything of LARU but the window
    search, which ``RadixLARU`` (incremental) and ``RadixLARUSpec`` (sorting) implement."""

    name = "laru"

    def __init__(self, predictor: NextAccessPredictor, k: int | None = None, b: float = 2.0,
                 shrink_every: int | None = 1, phase: str = "tokens", check: str = "evict",
                 record: str = "cached", fallback: str = "round", confidence: str = "shadow",
                 induced: str = "stale", horizon: float = 0.0, slack: float | None = None):
        super().__init__(predictor)
        if k is not None and k < 1:
            raise ValueError(f"laru needs k >= 1, got {k}")
        if not b > 1:
            raise ValueError(f"laru needs b > 1, got {b}")
        if shrink_every is not None and shrink_every < 0:
            raise ValueError(f"laru shrink_every must be >= 0 (0: every k // 32 misses), got {shrink_every}")
        for value, valid, what in ((phase, PHASES, "phase"), (check, CHECKS, "check"),
                                   (record, RECORDS, "record"), (fallback, FALLBACKS, "fallback"),
                                   (confidence, CONFIDENCES, "confidence"), (induced, INDUCED, "induced")):
            if value not in valid:
                raise ValueError(f"laru {what} must be one of {', '.join(valid)}, got {value!r}")
        self.fixed_k = k
        self.k = k or 1
        self.b = float(b)
        # None: the default (every miss, Algorithm 1); 0: the paper's k // 32.
        self.fixed_shrink_every = None if shrink_every == 0 else (shrink_every or 1)
        self.phase, self.check, self.record, self.fallback = phase, check, record, fallback
        self.confidence, self.induced = confidence, induced
        self.lam = 1.0
        self.old: set[int] = set()
        self.phase_tokens = 0           # phase="tokens": distinct tokens requested this phase
        self._phase_seen: set[int] = set()
        self._size: dict[int, int] = {}  # tokens of each node, from access depths
        self.evicted_by_prediction: dict[int, int] = {}  # key -> time of that eviction
        self.requested = StampOrder()  # (time requested, key) of cached nodes (induced="stale")
        self._requested_at: dict[int, int] = {}
        self._split_off: list[int] = []
        if slack is None:  # half of the 2% that p = 1 may lose (shadow); balance's estimate
            slack = 0.01 if confidence == "shadow" else 0.02
        if not horizon >= 0 or not slack >= 0:
            raise ValueError(f"laru needs horizon >= 0 and slack >= 0, got {horizon}, {slack}")
        # confidence="balance": estimated hit tokens over LRU's replace induced misses
        self.balance = LRUBalance(horizon) if confidence == "balance" else None
        self.slack = float(slack)
        self._induced_in_phase = 0
        self._lru_round = False
        self._lru_budget = 0
        self._lru_phase = False  # confidence="guarded": an induced miss ends predictions for the phase
        # confidence="shadow": an exact LRU beside the cache (made at the engine's first
        # on_request) and this cache's own hit tokens; ``trusted``: this phase follows
        # the predictions (Algorithm 1), else LRU
        self.wants_requests = confidence == "shadow"
        self.shadow = None
        self.hit_tokens = 0
        self._hit_now = -1
        self.trusted = False
        self.behind = False  # more than ``slack`` behind LRU: an LRU phase
        self.floor_lam = 1.0  # guarded's lambda, for the phases neither trusted nor behind
        self._started = False
        self.stats.extra.update(phases=0, prediction_induced_misses=0)

    @property
    def shrink_every(self) -> int:
        return self.fixed_shrink_every or max(1, self.k // 32)

    @property
    def window(self) -> int:
        return max(math.floor(self.lam * self.k), 1)

    # Events ---------------------------------------------------------------------------
    def on_request(self, paths, tokens, now):
        if self.shadow is None and self.view is not None:
            from lcr.kv.shadow import ShadowLRU

            self.shadow = ShadowLRU(self.view.capacity_tokens)
        if self.shadow is not None:
            self.shadow.request(paths, tokens, now)

    def on_access(self, keys, now, depths=None):
        if self.wants_requests and now != self._hit_now:  # a request's first report: its hits
            self._hit_now = now
            if keys and depths and keys[-1] in self.last_access:
                self.hit_tokens += depths[-1]
        if self.balance is not None and depths is not None and self.view is not None:
            self.balance.access(keys, depths, now, keys[-1] in self.last_access if keys else False,
                                self.view.capacity_tokens)
        super().on_access(keys, now, depths)
        self.old.difference_update(keys)
        if self.record == "cached":
            for key in keys:
                self.evicted_by_prediction.pop(key, None)
        if self.induced == "stale":
            for key in keys:
                self._stamp(key, now)
            for key in self._split_off:
                if key in self._requested_at:
                    self._stamp(key, now)
            self._split_off.clear()
        if depths is not None:
            above = None
            for key, depth in zip(keys, depths):
                size = depth - above if above is not None else self._size.get(key, depth)
                self._size[key] = size
                above = depth
                if self.phase == "tokens" and key not in self._phase_seen:
                    self._phase_seen.add(key)
                    self.phase_tokens += size

    def on_split(self, key, lower_key):
        # A split is a request of the node's upper part: the node counts as requested,
        # so its lower part does not join O (it would hold the phase open on blocks that
        # leaf-OPT never sees as separate, and register misses exact predictions cause).
        super().on_split(key, lower_key)
        if self.induced == "stale":  # stamped with the access that split it
            self._stamp(lower_key, self._requested_at.get(key, -1))
            self._split_off.append(lower_key)
        if key in self._phase_seen:
            self._phase_seen.add(lower_key)

    def on_miss(self, key, now):
        if self.balance is not None and self.view is not None:
            self.balance.miss(key, now, self.view.capacity_tokens)
        if self.check == "insert" and self._started:
            self._check_induced(key)

    def begin_eviction(self, missing, now):
        if self._phase_over():
            self._start_phase()
        self._lru_round = False
        if self.balance is not None:  # all leaves while not behind LRU, else LRU's choice
            # The capacity term keeps estimate noise before the first hits from deciding.
            scale = self.balance.hits + self.view.capacity_tokens if self.view is not None else self.balance.hits
            behind = self.balance.settle(now) < -self.slack * scale
            self.lam = 0.0 if behind else 1.0
        if self.trusted and not self._ahead():  # a trusted phase fell behind LRU: LRU from here
            self.trusted, self.behind = False, True
            self._lru_phase = True
        if self.check == "evict" and missing is not None:
            self._check_induced(missing)
        self.k = self.fixed_k or max(1, len(self.last_access))
        self.begin_round(now)

    def on_evicted(self, key):
        super().on_evicted(key)
        stamp = self._requested_at.pop(key, None)
        if stamp is not None:
            self.requested.discard(stamp, key)
        self.old.discard(key)
        self._size.pop(key, None)

    # Decisions ------------------------------------------------------------------------
    def pick_victim(self, leaves, now):
        leaves = as_container(leaves)
        if self._lru_round or self._lru_budget > 0 or self._lru_phase:
            self._lru_budget = max(0, self._lru_budget - 1)
            victim = self.oldest(leaves)
            self.stats.lru_evictions += 1
            return victim
        victim, oldest = self.window_choice(leaves, now)
        victim = self.count(victim, oldest)
        if victim != oldest:
            self.evicted_by_prediction[victim] = now
            if len(self.evicted_by_prediction) > 4 * len(self.last_access) + 1024:
                del self.evicted_by_prediction[next(iter(self.evicted_by_prediction))]  # oldest
        return victim

    def begin_round(self, now: int) -> None:
        """An eviction round starts; k and lambda are settled, so is the window size."""

    def window_choice(self, leaves, now) -> tuple[int | None, int]:
        """(the window's leaf with the largest prediction or None to follow LRU, the
        oldest evictable leaf)."""
        raise NotImplementedError

    # Phases and induced misses --------------------------------------------------------
    def _stamp(self, key: int, t: int) -> None:
        restamp(self._requested_at, self.requested, key, t)

    def _phase_over(self) -> bool:
        if not self._started:
            return True
        if self.phase == "tokens":
            return self.phase_tokens >= self.view.capacity_tokens
        return not self.old

    @property
    def _guarded(self) -> bool:
        return self.confidence == "guarded"

    @property
    def _guarded_phase(self) -> bool:
        """A ``shadow`` phase neither ahead of LRU nor behind it: guarded's rules."""
        return self.confidence == "shadow" and not self.trusted and not self.behind

    def _ahead(self) -> bool:
        """This cache's hit tokens are at least (1 - slack) of the shadow LRU's."""
        shadow = self.shadow
        return shadow is not None and self.hit_tokens >= (1.0 - self.slack) * shadow.hits

    def _check_induced(self, key: int) -> None:
        evicted_at = self.evicted_by_prediction.get(key)
        if evicted_at is None or self.balance is not None:
            return
        oldest = self.requested.first() if self.induced == "stale" else None
        if self.induced == "stale" and not (oldest is not None and oldest[0] < evicted_at):
            return  # every cached node was requested since: that eviction cost nothing
        self.stats.extra["prediction_induced_misses"] += 1
        self._induced_in_phase += 1
        if self.record == "cached":
            self.evicted_by_prediction.pop(key, None)
        self._lru_phase = self._lru_phase or self._guarded or self._guarded_phase
        if self._guarded_phase and self._induced_in_phase % self.shrink_every == 0:
            self.floor_lam /= self.b
        if self.fallback == "round":
            self._lru_round = True
        else:
            self._lru_budget += 1
        if self._induced_in_phase % self.shrink_every == 0:
            self.lam /= self.b

    def _start_phase(self):
        self._started = True
        # O, the nodes cached at the phase start, ends a phase="nodes" phase only
        self.old = set(self.last_access) if self.phase == "nodes" else set()
        self.phase_tokens, self._phase_seen = 0, set()
        self.k = self.fixed_k or max(1, len(self.last_access))
        if self.confidence == "phase":
            self.lam = 1.0
        elif self.confidence == "earned" or self._guarded:  # balance sets its window elsewhere
            if self._induced_in_phase == 0:
                self.lam = min(1.0, self.lam * self.b)
            elif self._guarded:
                self.lam /= self.b
        elif self.confidence == "shadow":
            if self._guarded_phase:  # guarded's lambda moves in its own phases only
                self.floor_lam = min(1.0, self.floor_lam * self.b) if self._induced_in_phase == 0 \
                    else self.floor_lam / self.b
            shadow = self.shadow
            self.trusted = self._ahead()
            self.behind = shadow is not None and not self.trusted
            self.lam = 1.0 if self.trusted else self.floor_lam
        if self.induced == "phase":
            self.evicted_by_prediction.clear()
        self._induced_in_phase = 0
        self._lru_phase = self.confidence == "shadow" and self.behind
        self.stats.extra["phases"] += 1


class RadixLARU(LARURules):
    """LARU with the window found in one native call per pick (see the module docstring).

    ``lcr._native.leaf_window`` scans the evictable leaves for the l oldest, names the
    ones not predicted yet this round and picks the largest prediction; the newcomers
    are predicted in one batch and the call repeated. A pass inside SGLang evicts a few
    of a few dozen leaves, so a scan in C++ costs less than keeping a window in Python."""

    def __init__(self, predictor: NextAccessPredictor, **options):
        super().__init__(predictor, **options)
        self._l = 1
        self._now = 0
        self._failed = False  # the predictor failed this round: the rest of it follows LRU
        self._predicted: set[int] = set()  # keys predicted in this round

    def begin_round(self, now):
        self._l = self.window
        self._now = now
        self._failed = False
        self._predicted = set()

    def window_choice(self, leaves, now):
        stamps, predicted, ranks = self.last_access, self._predicted, self.table.predictions
        victim, oldest, fresh = leaf_window(leaves, stamps, self._l, predicted, ranks)
        if self._failed:
            return None, oldest
        if fresh:
            if not self.predict(fresh, self._now):
                self._failed = True
                return None, oldest
            predicted.update(fresh)
            victim, oldest, _ = leaf_window(leaves, stamps, self._l, predicted, ranks)
        return victim, oldest


LARU = RadixLARU  # temporary alias: other modules still import LARU
