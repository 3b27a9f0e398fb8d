"""Radix LARU: Algorithm 1 of the LCR paper over the evictable leaves of a radix tree,
trusted only while it keeps up with an exact LRU of the same capacity.

The rules (docs/kv.md; ``lcr.kv.laru_reference`` states them again, independently, and
CI compares the two victim by victim):

* k is the number of cached *nodes*, read live at every eviction round; the window is
  the l = max(floor(lambda * k), 1) oldest evictable leaves (ties: the smaller key), and
  the victim is the window's leaf with the largest predicted next use (NaN counts as
  +inf; ties go to the older leaf). Leaves never outnumber nodes, so at lambda = 1 every
  evictable leaf is a candidate and exact predictions make LARU leaf-OPT.
* A phase ends when the tokens of the distinct nodes requested in it reach the capacity
  (checked when room is needed). A node's tokens are read from the engine's depths: its
  depth minus the depth above it in the same report, or, heading a report, what it had at
  its last report, else its depth (so a request's new node counts its cached path again:
  shorter phases, which measured better with the learned predictor, docs/kv.md).
* An eviction a prediction decided (victim other than the window's oldest) is recorded
  with its time until that node is cached again. A request that needs room and whose
  first missing block heads a recorded node is a prediction-induced miss when some
  cached node has not been requested since that eviction (a split's lower part counts
  as requested when it is split off). Each induced miss divides lambda by ``b`` (1.05)
  and makes the rest of its eviction round LRU, unless the lead pays for it (below).
* The lead pays (lcr's extension): while this cache's hit tokens (with the forgiven lead,
  under Confidence) exceed the LRU twin's by more than the slack, an induced miss only
  ends its record. Random gaps make good predictions induce misses too, and each shrink
  hands evictions back to LRU: on Online-QA that cost up to half of what following the
  predictions gains, most under a live server (a batch's eviction pass while the batch
  before still holds its prompts, docs/kv.md). Once the lead is spent the rules above
  apply again, and the twin still turns a phase LRU when it falls behind.
* Credit (``credit=1``, the default; lcr's extension, as in the item LARU): a request
  with more hit tokens here than in the LRU twin (the predictions kept what LRU lost)
  multiplies lambda by ``b``, up to 1. Without it lambda only shrinks within a phase, and
  where intervals are random (a conversation's next turn) even good predictions see
  induced misses (some kept node always comes later than predicted): Online-QA at 2.5%
  kept 1.2x LRU's hit tokens with b = 2 and no credit, 7.8x with them (docs/kv.md).
* Confidence (``confidence=shadow``, the default): ``lcr.kv.shadow.ShadowLRU`` replays
  every request (the engine's ``on_request``) through an LRU twin the engine hands in
  (``CacheView.lru_twin()``). A phase that starts with this cache's hit tokens at least
  (1 - ``slack``) of the twin's (slack 0.01) follows the rules above from lambda = 1;
  any other phase is LRU. A trusted phase that falls behind turns LRU for its rest if its
  stretch (the trusted phases since the last LRU one) has shown its evictions cost hits:
  an induced miss, or more of the races decided in it lost than won; else the twin's lead
  is forgiven and the phase stays trusted. A replay's twin is exact, and there a stretch
  that falls behind has nearly always shown a cost first (docs/kv.md); a live twin errs
  lenient (below), and its lead alone held LARU to LRU for whole runs where LRU hits
  little (Online-QA at 2.5%: two of three runs at 8x the token scale, docs/history.md). So
  the loss to LRU is at most slack plus one trusted stretch and what stretches lose
  without showing it, and exact predictions are never behind (leaf-OPT). What the
  twin leads by at the first eviction a prediction decides is not held against the cache:
  until then the cache is LRU in effect (in a replay it hits exactly what the twin hits),
  and what a live server's tree and the twin differ by then is not the predictions' (a
  single prompt's hit, before the predictor's first fit, held LARU to LRU for a whole
  run at 4x the grid's token scale).
  Under a live server the twin inserts what the server inserts when it does
  (``on_request_cached``: a prompt after its prefill, so it hits nothing still in flight;
  the prompt with its generated tokens when the request finishes), dates the path then,
  as the server's LRU does and the driver does for this cache (``on_touch``), holds a
  request's path while the server does, and evicts when the server does, down to what
  the server's tree had to fit in after each pass (``end_eviction``): a server allocates
  a request's room before its tree caches it (``lcr.kv.shadow``).
* Races (lcr's extension): the twin judges nothing before LRU's first hits, and on
  Online-QA at 2% those come among the last 1% of the requests, when inverted
  predictions have emptied the cache of everything LRU would hit (0.64 of LRU's hit
  tokens). So every eviction where the predictions' choice in the window differs from
  its oldest leaf (made in a trusted phase, only computed in an LRU one) opens a race
  between the two leaves, decided by whichever is requested first: the predictions'
  victim first, a loss; the oldest leaf first, a win. Unless this cache is ahead of the
  twin by more than the slack (the twin has shown the predictions gaining), a phase
  starts trusted only while the losses are at most ``RACE_ODDS`` (8) times (wins + 1):
  inverted predictions win at most 1.4% of the decided races in the 12 cells of
  docs/kv.md, learned ones 20% or more; early in a live run, though, races
  are few and mostly lost (under races alone, half-negated predictions turned LRU within
  40 evictions in two of three live repeats, docs/history.md), hence the twin's word
  first.
* ``confidence=balance`` (``laru-lpc``: LPC's predictions are right on average but wrong
  on many single conversations): no induced misses; ``lcr.kv.reuse.LRUBalance``
  estimates from reuse distances the hit tokens LRU would have had, and the window is
  every evictable leaf unless the balance over LRU falls below ``-slack`` (0.02) times
  the hit tokens plus the capacity, then LRU's choice. Needs the engine's depths.

Within an eviction round each key is predicted once (``now`` does not move within a
round, so the predictions stay exact). A predictor a network round trip away (its
``round_trip`` is true: the shared service) is asked once a round, for every cached node:
the leaves a pass uncovers as it evicts are among them (live passes that asked again for
each uncovered parent took 20 ms, one call 7-10 ms, docs/kv.md). The window is found in C++
(``lcr._native.leaf_window``): a scan of the evictable leaves, O(leaves) per pick; a
pass inside SGLang evicts a few of a few dozen leaves, so a scan in C++ costs less than
keeping a window in Python.
Not thread-safe: one engine thread drives a policy.
"""
from __future__ import annotations

import math

from lcr._native import StampOrder, leaf_window
from lcr.kv.policies import _Predictive, as_container, restamp
from lcr.kv.requests import BlockRequest
from lcr.kv.reuse import LRUBalance
from lcr.kv.shadow import ShadowLRU
from lcr.policies.predictions import NextAccessPredictor

CONFIDENCES = ("shadow", "balance")
RACE_ODDS = 8  # a phase is trusted only while races lost <= RACE_ODDS * (races won + 1)


class RadixLARU(_Predictive):
    """The radix LARU (see the module docstring). Options: ``b`` (lambda's divisor per
    induced miss and its factor per credited request), ``credit`` (1: credited requests
    widen the window again; 0: Algorithm 1's shrink only), ``slack`` (how far behind LRU
    a phase may start and still be trusted; default 0.01, 0.02 for ``balance``),
    ``confidence`` (``shadow`` or ``balance``)."""

    name = "laru"

    def __init__(self, predictor: NextAccessPredictor, b: float = 1.05, slack: float | None = None,
                 confidence: str = "shadow", credit: int = 1):
        super().__init__(predictor)
        if not b > 1:
            raise ValueError(f"laru needs b > 1, got {b}")
        if credit not in (0, 1):
            raise ValueError(f"laru credit must be 0 or 1, got {credit!r}")
        if confidence not in CONFIDENCES:
            raise ValueError(f"laru confidence must be one of {', '.join(CONFIDENCES)}, got {confidence!r}")
        if slack is None:  # half of the 2% inverted predictions may cost (shadow); balance's estimate
            slack = 0.01 if confidence == "shadow" else 0.02
        if not slack >= 0:
            raise ValueError(f"laru needs slack >= 0, got {slack}")
        self.b, self.slack, self.confidence = float(b), float(slack), confidence
        self.credit = bool(credit)
        self._twin_hit = 0
        self.k = 1
        self.lam = 1.0
        self.phase_tokens = 0               # distinct tokens requested this phase
        self._phase_seen: set[int] = set()
        self._size: dict[int, int] = {}     # tokens of each node, from access depths
        self.evicted_by_prediction: dict[int, int] = {}  # key -> time of that eviction
        self.requested = StampOrder()       # (time requested, key) of cached nodes
        self._requested_at: dict[int, int] = {}
        self._split_off: list[int] = []
        self._lru_round = False             # an induced miss: the rest of the round is LRU
        self._lru_phase = False             # an untrusted phase: LRU until it ends
        self._started = False
        # confidence="shadow": an LRU twin beside the cache (made at the engine's first
        # on_request) and this cache's own hit tokens
        self.wants_requests = confidence == "shadow"
        self.shadow: ShadowLRU | None = None
        self.hit_tokens = 0
        self._hit_now = -1
        self._forgiven: int | None = None  # the twin's lead forgiven (first at the first prediction eviction)
        self.trusted = False
        # since the last phase that started trusted after an LRU one (or the first):
        self._stretch_induced = 0          # induced misses
        self._stretch_races = [0, 0]       # races won, lost
        self._races: dict[int, tuple[int, int]] = {}  # open races: id -> (predicted victim, oldest leaf)
        self._racing: dict[int, list[int]] = {}       # key -> ids of its open races
        self._race_id = 0
        self.balance = LRUBalance() if confidence == "balance" else None
        # the window search, per round
        self._l = 1
        self._now = 0
        self._failed = False                # the predictor failed this round: LRU for its rest
        self._predicted: set[int] = set()   # keys predicted in this round
        self._one_call = bool(getattr(predictor, "round_trip", False))  # every cached node at once
        self.stats.extra.update(phases=0, prediction_induced_misses=0, induced_misses_paid=0,
                                credited_requests=0, races_won=0, races_lost=0, leads_forgiven=0,
                                lru_twin_hit_tokens=0)

    @property
    def window(self) -> int:
        return max(math.floor(self.lam * self.k), 1)

    # Events ---------------------------------------------------------------------------
    def on_request(self, paths, tokens, now):
        if self.shadow is None and self.view is not None:
            self.shadow = ShadowLRU(self.view.lru_twin(), live=self.view.allocates_before_caching)
        if self.shadow is not None:
            later = getattr(self.view, "caches_requests_later", False)
            self._twin_hit = self.shadow.request(paths, tokens, now, complete=not later)
            self.stats.extra["lru_twin_hit_tokens"] = self.shadow.hits

    def on_request_cached(self, t, blocks=None, done=True, now=None):
        if self.shadow is not None:
            self.shadow.complete(t, None if blocks is None else BlockRequest(*map(tuple, blocks)), done, now)

    def on_access(self, keys, now, depths=None):
        if self.wants_requests and now != self._hit_now:  # a request's first report: its hits
            self._hit_now = now
            hit = depths[-1] if keys and depths and keys[-1] in self.last_access else 0
            self.hit_tokens += hit
            if self.credit and self.shadow is not None and hit > self._twin_hit:  # the predictions kept what LRU lost
                self.lam = min(1.0, self.lam * self.b)
                self.stats.extra["credited_requests"] += 1
        if self.balance is not None and depths is not None and self.view is not None:
            self.balance.access(keys, depths, now, keys[-1] in self.last_access if keys else False,
                                self.view.capacity_tokens)
        super().on_access(keys, now, depths)
        for key in keys:
            self.evicted_by_prediction.pop(key, None)  # cached again: the record ends
            if key in self._racing:
                self._decide_races(key)
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
                if key not in self._phase_seen:
                    self._phase_seen.add(key)
                    self.phase_tokens += size

    def on_split(self, key, lower_key):
        # A split is a request of the node's upper part: its lower part counts as requested
        # with it (else it would make exact predictions register induced misses).
        super().on_split(key, lower_key)
        self._stamp(lower_key, self._requested_at.get(key, -1))
        self._split_off.append(lower_key)
        if key in self._phase_seen:
            self._phase_seen.add(lower_key)

    def on_miss(self, key, now):
        if self.balance is not None and self.view is not None:
            self.balance.miss(key, now, self.view.capacity_tokens)

    def end_eviction(self, now, fits_in=None):
        if self.shadow is not None and self.shadow.live and fits_in is not None:
            self.shadow.fit(fits_in, now)

    def begin_eviction(self, missing, now):
        super().begin_eviction(missing, now)
        if not self._started or self.phase_tokens >= self.view.capacity_tokens:
            self._start_phase()
        self._lru_round = False
        if self.balance is not None:  # all leaves while not behind LRU, else LRU's choice
            # The capacity term keeps estimate noise before the first hits from deciding.
            scale = self.balance.hits + self.view.capacity_tokens if self.view is not None else self.balance.hits
            self.lam = 0.0 if self.balance.settle(now) < -self.slack * scale else 1.0
        if missing is not None and self.balance is None:
            self._check_induced(missing)
        if self.balance is None and self.trusted and not self._ahead():  # a trusted stretch fell behind LRU
            if self._stretch_shown_costly():  # LRU for the rest of the phase
                self.trusted, self._lru_phase = False, True
            else:  # no eviction of the stretch has shown a cost: the twin's lead is forgiven
                self._forgiven = self.shadow.hits - self.hit_tokens
                self.stats.extra["leads_forgiven"] += 1
        self.k = max(1, len(self.last_access))
        self._l, self._now, self._failed, self._predicted = self.window, now, False, set()

    def on_evicted(self, key):
        super().on_evicted(key)
        stamp = self._requested_at.pop(key, None)
        if stamp is not None:
            self.requested.discard(stamp, key)
        self._size.pop(key, None)

    # Decisions ------------------------------------------------------------------------
    def pick_victim(self, leaves, now):
        leaves = as_container(leaves)
        victim, oldest = self._window_choice(leaves)
        if victim is not None and victim != oldest and self.balance is None:  # balance never reads races
            self._open_race(victim, oldest)
        if self._lru_round or self._lru_phase:
            self.stats.lru_evictions += 1
            return oldest
        victim = self.count(victim, oldest)
        if victim != oldest:
            if self._forgiven is None and self.shadow is not None:
                self._forgiven = self.shadow.hits - self.hit_tokens
            self.evicted_by_prediction[victim] = now
            if len(self.evicted_by_prediction) > 4 * len(self.last_access) + 1024:
                del self.evicted_by_prediction[next(iter(self.evicted_by_prediction))]  # oldest
        return victim

    def _window_choice(self, leaves) -> tuple[int | None, int]:
        """(the window's leaf with the largest prediction, or None to follow LRU; the
        oldest evictable leaf). One native scan names the window's leaves not predicted
        yet this round; they are predicted in one batch and the scan repeated."""
        stamps, predicted, ranks = self.last_access, self._predicted, self.table.predictions
        victim, oldest, fresh = leaf_window(leaves, stamps, self._l, predicted, ranks)
        if self._failed:
            return None, oldest
        if fresh:
            if self._one_call and not predicted:  # the round's only call: every cached node
                fresh = list(stamps)
            if not self.predict(fresh, self._now):
                self._failed = True
                return None, oldest
            predicted.update(fresh)
            victim, oldest, _ = leaf_window(leaves, stamps, self._l, predicted, ranks)
        return victim, oldest

    # Phases and induced misses --------------------------------------------------------
    def _stamp(self, key: int, t: int) -> None:
        restamp(self._requested_at, self.requested, key, t)

    def _open_race(self, victim: int, oldest: int) -> None:
        rid, self._race_id = self._race_id, self._race_id + 1
        self._races[rid] = (victim, oldest)
        self._racing.setdefault(victim, []).append(rid)
        self._racing.setdefault(oldest, []).append(rid)
        if len(self._races) > 4 * len(self.last_access) + 1024:  # keys that never return
            self._close_race(next(iter(self._races)))

    def _close_race(self, rid: int) -> tuple[int, int]:
        pair = self._races.pop(rid)
        for key in pair:
            ids = self._racing[key]
            ids.remove(rid)
            if not ids:
                del self._racing[key]
        return pair

    def _decide_races(self, key: int) -> None:
        extra = self.stats.extra
        for rid in list(self._racing[key]):
            victim, _ = self._close_race(rid)
            extra["races_lost" if key == victim else "races_won"] += 1
            self._stretch_races[key == victim] += 1

    def _stretch_shown_costly(self) -> bool:
        """Whether the trusted stretch (since trust last began) has shown that its
        evictions cost hits: an induced miss, or more of its races lost than won."""
        won, lost = self._stretch_races
        return self._stretch_induced > 0 or lost > won

    def _losing_races(self) -> bool:
        extra = self.stats.extra
        return extra["races_lost"] > RACE_ODDS * (extra["races_won"] + 1)

    def _gaining(self) -> bool:
        """This cache's hit tokens (with the forgiven lead) exceed the twin's by more than
        the slack: the predictions have shown a gain (False until one decides an eviction)."""
        if self.shadow is None or self._forgiven is None:
            return False
        return self.hit_tokens + self._forgiven > (1.0 + self.slack) * self.shadow.hits

    def _ahead(self) -> bool:
        """This cache's hit tokens, with the twin's lead at the first prediction eviction
        forgiven (all of it before one), are at least (1 - slack) of the LRU twin's (an
        engine that sends no requests leaves no twin: LRU's hits count as 0)."""
        if self.shadow is None or self._forgiven is None:
            return True
        return self.hit_tokens + self._forgiven >= (1.0 - self.slack) * self.shadow.hits

    def _check_induced(self, key: int) -> None:
        evicted_at = self.evicted_by_prediction.get(key)
        if evicted_at is None:
            return
        oldest = self.requested.first()
        if oldest is None or oldest[0] >= evicted_at:
            return  # every cached node was requested since: that eviction cost nothing
        self.stats.extra["prediction_induced_misses"] += 1
        self._stretch_induced += 1
        del self.evicted_by_prediction[key]
        if self._gaining():  # the lead pays for it
            self.stats.extra["induced_misses_paid"] += 1
            return
        self._lru_round = True
        self.lam /= self.b

    def _start_phase(self):
        self._started = True
        self.phase_tokens, self._phase_seen = 0, set()
        if self.balance is None:
            stretch_begins = not self.trusted
            self.trusted = self._ahead() and (self._gaining() or not self._losing_races())
            if self.trusted and stretch_begins:
                self._stretch_induced, self._stretch_races = 0, [0, 0]
            self.lam = 1.0
            self._lru_phase = not self.trusted
        self.stats.extra["phases"] += 1

