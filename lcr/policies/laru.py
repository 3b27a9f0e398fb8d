"""LARU: learning-augmented LRU (Algorithm 1 of the LCR paper, with lcr's extensions).

On a miss into a full cache:
  - if no unrequested old item is left, a new phase starts: every cached item becomes
    old, lambda returns to 1, and the record of prediction-driven evictions is cleared;
  - if the requested key was evicted *by prediction* earlier in this phase (its most
    recent eviction), the miss is prediction-induced: evict by LRU and shrink lambda;
  - otherwise the candidates are the l = max(floor(lambda * k), 1) least recently used
    items; with l = 1 that is an LRU eviction (no predictor call), else the candidate
    with the largest predicted next-request time is evicted.

The defaults are lcr's measured best for a learned model (docs/predictor.md, "Learned
eviction"; tests/test_defaults.py): b = 1.05 with ``credit``, ``guard`` 0.005 and the
experts (``intervals``), below. Their guarantee is the guard's (at most 1.01 x
LRU's misses + k, 1.005 x where no shadow beats LRU), not Theorem 1's, which
credit gives up. Algorithm 1 as the paper writes it, which Theorem 1 and the paper's
experiments are about, is ``PAPER_RULE`` (b = 2, the extensions off).

``shrink_every`` gives the LLM variant of the paper's Section 5.1: lambda is divided by
``b`` once every ``shrink_every`` prediction-induced misses of a phase (the paper uses
k/32 there, see ``llm_shrink_every``); the default 1 is Algorithm 1 as written.

``credit`` (lcr's extension, not in the paper) also lets lambda grow back: every hit
that an LRU cache of the same size would have missed (the predictions kept a key LRU
would have lost) multiplies it by ``b``, up to 1. Without credit the window only shrinks
within a phase, so predictions that are mostly right still drift to LRU after log_b k
induced misses; with it the window follows the predictions' net effect against LRU.
Oracle predictions cause no induced miss, so lambda stays 1 and LARU with credit still
makes OPT's decisions.

``guard`` (lcr's extension; None, or ``"none"`` as ``lcr sim`` spells it, is no guard)
is a miss budget against LRU: while LARU's misses so far exceed (1 + guard) times those
of an LRU cache of the same size on the same requests, it evicts by recency (no
predictor call, lambda untouched). LRU caches of one size agree once k distinct keys
have been requested since they last differed, so LARU with a guard misses at most (1 +
guard) x LRU's misses + k, whatever the predictions. Oracle predictions never exceed
LRU's misses (OPT is optimal on every prefix of the requests), so the guard never acts
and LARU still makes OPT's decisions. With the experts, the budget also grows by what the
best of the shadows (below: the predictions' and the experts') has saved against LRU so
far: the cache may fall behind LRU following an expert, or the predictions from another
state, and a budget of LRU's misses alone would then hold it to recency for good (it can
only earn the budget back at g per LRU miss) while the shadow it follows gains. The
growth is at most guard x LRU's misses, so the bound becomes (1 + 2 guard) x LRU's
misses + k; where no shadow beats LRU it stays (1 + guard) x LRU's + k.

``intervals`` (lcr's extension) switches on LARU's experts
(``lcr.policies.laru_experts``: each key's own smoothed interval, frequency with aging,
the interval order keeping a pass's first keys, the model's answers followed blindly, and
frequency never aged (LFU); the option is named after the first, which came alone
before). The heuristic ones need no model and see what a boundary classifier is blind to
(a loop, where its answers all tie; popularity beyond the classifier's horizon); the
model expert is FPB, for a model right often enough to gain but wrong often enough that
LARU's induced misses shrink its window to recency. Beside the cache run one shadow LARU
over the predictions (same parameters) and one per expert over that expert's ranks, its
window fixed at the whole cache (an expert is a ranking, not a prediction to distrust)
and without a guard (the cache's guard bounds the cache; a shadow held to recency after
an early loss could never show its expert gaining later); all are keys only and fed
exactly the cache's requests, and each expert hears what its shadow evicts. When the
predictions would pick the victim, LARU instead evicts the key the leading expert ranks
first among all it holds, if that expert's shadow has missed less than the predictions'
shadow so far (the one that missed least; the first listed on ties). Where no expert
leads, the window's candidates the predictions rank largest may tie (equal answers: NaN
before the first model, a classifier's equal probabilities for keys it cannot tell
apart); while the first-seen expert's shadow has missed no more than the predictions'
shadow plus the guard's slack (guard x LRU's misses: one early miss of its bet, before it
pays, must not stop it), that expert breaks the tie (the tied key it ranks first goes if
that is a key seen once, its bet; else the oldest, as without experts): where neither the
answers nor the shadows tell keys apart, LARU bets as LIRS does on keys seen once, and
keeps recency among the others. Oracle predictions make their shadow OPT, which no shadow
beats on any prefix of the requests, and tie only on keys never requested again, so LARU
still makes OPT's decisions; the guard is checked first. The predictor is asked twice per
query (the cache and its shadow), and once more at every access (the model expert).

``record`` replaces the exact set of prediction-evicted keys with any object offering
``add``, ``discard``, ``clear`` and ``in`` (SlabHash keeps a bitset, see
``lcr.embedding.reference.BitsetRecord``).
"""
from __future__ import annotations

import math
import numbers
from types import MappingProxyType
from typing import MutableSet

from lcr.policies.base import Policy
from lcr.policies.laru_experts import EXPERTS, ExpertRanks, FirstSeenRanks
from lcr.policies.predictions import NextAccessPredictor, PredictionTable
from lcr.policies.lru import LRU
from lcr.policies.recency import RecencyOrder
from lcr.policies.window import choose_in_window


#: Algorithm 1 as the paper writes it (b = 2, none of lcr's extensions): what Theorem 1 and
#: the paper's experiments are about. ``lcr sim --policies 'laru:b=2;credit=0;guard=none;intervals=0'``.
PAPER_RULE = MappingProxyType({"b": 2.0, "credit": False, "guard": None, "intervals": False})


def _guard_budget(guard) -> float | None:
    """``guard`` as LARU keeps it: None (or the word ``none``) is no guard, else a number >= 0."""
    if guard is None or (isinstance(guard, str) and guard.lower() == "none"):
        return None
    if isinstance(guard, numbers.Real) and not isinstance(guard, bool) and guard >= 0:
        return float(guard)
    raise ValueError(f"laru guard must be a number >= 0, or none for no guard, got {guard!r}")


#: ``shrink_every`` of the experts' shadows: their window stays the whole cache.
WHOLE_CACHE = 2 ** 62


def llm_shrink_every(capacity: int) -> int:
    """The paper's LLM setting halves lambda once every k/32 prediction-induced misses."""
    return max(1, capacity // 32)


class LARU(Policy):
    name = "laru"
    uses_predictions = True

    # The defaults are the measured best (module docstring); PAPER_RULE is Algorithm 1.
    def __init__(self, capacity: int, predictor: NextAccessPredictor, mode: str = "sync",
                 b: float = 1.05, shrink_every: int = 1, record: MutableSet[int] | None = None,
                 credit: bool = True, guard: float | str | None = 0.005, intervals: bool = True):
        super().__init__(capacity)
        if not b > 1:
            raise ValueError(f"laru needs b > 1, got {b}")
        if shrink_every < 1:
            raise ValueError(f"laru shrink_every must be at least 1, got {shrink_every}")
        if credit not in (0, 1):
            raise ValueError(f"laru credit must be 0 or 1, got {credit!r}")
        guard = _guard_budget(guard)
        if intervals not in (0, 1):
            raise ValueError(f"laru intervals must be 0 or 1, got {intervals!r}")
        self.b = float(b)
        self.shrink_every = int(shrink_every)
        self.credit = bool(credit)
        self.guard = guard
        # What plain LRU would hold, and its misses so far (credit and guard read them).
        self.lru_shadow = LRU(capacity) if credit or guard is not None else None
        self.recency = self.resident = RecencyOrder()
        self.table = PredictionTable(predictor, mode, self.stats)
        self.lam = 1.0
        self.old: set[int] = set()  # O: items cached at the phase start, not yet requested or evicted
        self.evicted_by_prediction: MutableSet[int] = set() if record is None else record
        self._induced_in_phase = 0
        # The experts, and the shadows that decide when to follow one: (expert, its shadow).
        same = dict(b=b, shrink_every=shrink_every, credit=credit, guard=guard, intervals=False)
        # An expert's shadow: the whole cache as its window, no guard (credit cannot widen a
        # window that never shrinks): a guard would hold a shadow that fell behind LRU early
        # to recency for good, and it could never show its expert gaining later.
        whole = dict(same, shrink_every=WHOLE_CACHE, credit=False, guard=None)
        experts = [make(capacity, predictor) for make in EXPERTS] if intervals else []
        self.experts: list[tuple[ExpertRanks, LARU]] = [
            (expert, LARU(capacity, expert, "sync", **whole)) for expert in experts]
        self.predicted_shadow = LARU(capacity, predictor, mode, **same) if self.experts else None
        # The expert that breaks the predictions' ties, with its shadow (None without experts).
        self.tie_breaker = next(((expert, shadow) for expert, shadow in self.experts
                                 if isinstance(expert, FirstSeenRanks)), None)
        #: Every shadow LARU (the predictions' first), or None without experts.
        self.shadows = (self.predicted_shadow, *(shadow for _, shadow in self.experts)) if self.experts else None
        self.stats.extra.update(phases=0, prediction_induced_misses=0, credited_hits=0,
                                guarded_evictions=0)
        if intervals:
            self.stats.extra["expert_evictions"] = 0  # those an expert chose
            self.stats.extra["expert_tie_breaks"] = 0  # the first-seen expert chose among tied answers

    def native_args(self) -> dict:
        if type(self.evicted_by_prediction) is not set:
            raise ValueError("laru record: the native core keeps its own exact record; "
                             "pass record= to the Python spec only")
        return {"async_mode": self.table.mode == "async", "b": self.b, "shrink_every": self.shrink_every,
                "credit": self.credit, "guard": -1.0 if self.guard is None else self.guard,  # -1: no guard
                "intervals": bool(self.experts)}

    @property
    def window(self) -> int:
        """l = max(floor(lambda * k), 1)."""
        return max(math.floor(self.lam * self.capacity), 1)

    def _access(self, key, t):
        if self.experts:
            for expert, shadow in self.experts:
                expert.on_access(key, t)
                shadow.access(key, t)
                if shadow.last_evicted is not None:
                    expert.on_shadow_eviction(shadow.last_evicted)
            self.predicted_shadow.access(key, t)
        lru_hit = self.lru_shadow.access(key, t) if self.lru_shadow is not None else True
        hit = key in self.recency
        if hit:
            self.old.discard(key)
            if self.credit and not lru_hit:  # the predictions kept a key LRU would have lost
                self.stats.extra["credited_hits"] += 1
                self.lam = min(1.0, self.lam * self.b)
        else:
            if self.full:
                self._evict_for(key, t)
            # Loaded again: its last eviction is no longer the one line 14 asks about.
            self.evicted_by_prediction.discard(key)
        self.recency.touch(key)
        self.table.on_access(key, t)
        return hit

    def _evict_for(self, key: int, t: int) -> None:
        if not self.old:
            self._start_phase()
        if key in self.evicted_by_prediction:
            victim = self.recency.oldest(1)[0]
            self.stats.lru_evictions += 1
            self.stats.extra["prediction_induced_misses"] += 1
            self._induced_in_phase += 1
            if self._induced_in_phase % self.shrink_every == 0:
                self.lam /= self.b
        elif self._over_budget():
            victim = self.recency.oldest(1)[0]
            self.stats.lru_evictions += 1
            self.stats.extra["guarded_evictions"] += 1
        else:
            victim, by_prediction = choose_in_window(self.recency, self.table, self.stats, self.window, t)
            if by_prediction:
                leader = self._leading_expert()
                if leader is not None:
                    victim = leader.pick_victim(self.recency.evictable())
                    self.stats.extra["expert_evictions"] += 1
                elif self._first_breaks_ties():
                    victim = self._break_tie(victim)
                self.evicted_by_prediction.add(victim)
        self.old.discard(victim)
        self.recency.remove(victim)
        self.table.forget(victim)
        self.last_evicted = victim

    def _leading_expert(self) -> ExpertRanks | None:
        """The expert whose shadow has missed least so far (the first on ties), if it has
        missed less than the predictions' shadow; else None (follow the predictions)."""
        if not self.experts:
            return None
        expert, shadow = min(self.experts, key=lambda pair: pair[1].stats.misses)
        return expert if shadow.stats.misses < self.predicted_shadow.stats.misses else None

    def _first_breaks_ties(self) -> bool:
        """Whether the first-seen expert's shadow has missed no more than the predictions'
        shadow plus the guard's slack (guard x LRU's misses; none without a guard): its bet
        costs a miss now and then before it pays, and the guard bounds what it may cost."""
        if self.tie_breaker is None:
            return False
        slack = 0.0 if self.guard is None else self.guard * self.lru_shadow.stats.misses
        return self.tie_breaker[1].stats.misses <= self.predicted_shadow.stats.misses + slack

    def _break_tie(self, victim: int) -> int:
        """Among the window's candidates ranked like ``victim`` (the predictions' largest,
        the oldest of them), the one the first-seen expert ranks first (the oldest on ties)
        if that is a key seen once (its bet); else ``victim``."""
        top, rank = self.table.rank(victim), self.table.rank
        tied = [key for key in self.recency.oldest(self.window) if rank(key) == top]
        first = self.tie_breaker[0]
        chosen = first.pick_victim(tied)
        if not first.seen_once(chosen):
            chosen = victim
        self.stats.extra["expert_tie_breaks"] += chosen != victim
        return chosen

    def _over_budget(self) -> bool:
        """Whether the misses so far, this one included (the base class counts it after
        ``_access``), exceed the guard's budget; the shadows have counted this request."""
        return self.guard is not None and self.stats.misses + 1 > self._guard_budget()

    def _guard_budget(self) -> float:
        """(1 + guard) x LRU's misses, plus (with experts) what the best shadow has saved
        against LRU, up to guard x LRU's misses: excess misses the cache took on following
        an expert, or the predictions from another state, must not hold it to LRU while
        the shadow it follows gains."""
        lru = self.lru_shadow.stats.misses
        saved = 0.0
        if self.shadows is not None:
            best = min(shadow.stats.misses for shadow in self.shadows)
            saved = min(max(0, lru - best), self.guard * lru)
        return (1 + self.guard) * lru + saved

    def _start_phase(self) -> None:
        self.old = set(self.recency)
        self.lam = 1.0
        self.evicted_by_prediction.clear()
        self._induced_in_phase = 0
        self.stats.extra["phases"] += 1
