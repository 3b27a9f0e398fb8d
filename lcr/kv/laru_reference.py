"""The radix LARU's default rules, written a second time to be read: an executable
reference for ``lcr.kv.laru.RadixLARU`` (docs/kv.md, "Radix LARU").

Plain dicts and sorting, no native code and nothing shared with ``RadixLARU`` beyond the
engine protocol (``LeafPolicy``'s hooks, ``CacheView``) and the predictor's ``predict``.
CI drives both through lcr's tree on generated workloads and compares every victim
(tests/test_kv_laru_reference.py). It covers the default rules with a predictor that
answers (the fast policy's fallback to LRU when a predictor raises is tested on its own),
and it is slow: every pick sorts the evictable leaves and asks the predictor again.

The rules, as this class applies them:

1. Recency. Every node has the time of its last access, or of the engine's last touch
   (a live server caching blocks under it); a split's lower part keeps the node's.
   Leaves are ordered oldest first, ties by the smaller key.
2. Window. At the start of an eviction round k = the number of cached nodes and
   l = max(floor(lambda * k), 1). Each pick takes the l oldest evictable leaves and
   evicts the one predicted to return last (NaN = never; ties: the older leaf). When that
   is not the oldest leaf, the eviction is the prediction's: it is recorded (key -> time)
   until the node is accessed again.
3. Phases. A phase counts the tokens of the distinct nodes requested in it; when room is
   needed and the count has reached the capacity (or at the first eviction), a new phase
   starts. A node's tokens are those the engine reports: its depth minus the depth of the
   node above it in the same report, or, heading a report, the tokens it had at its
   previous report, else its depth.
4. Confidence. An LRU of the same capacity serves the same requests (an LRU twin of the
   engine). A phase starts trusted when this cache's hit tokens are at least
   (1 - slack) of the twin's, the twin's lead at the first eviction a prediction decided
   added to this cache's hits (before it, every phase is trusted), and either this
   cache's hits so counted exceed (1 + slack) of the twin's or the predictions are not
   losing their races (rule 7); trusted phases start
   at lambda = 1 and follow rule 2, the others evict the oldest leaf. A stretch is the run
   of trusted phases since a phase started trusted after an LRU one (or the first phase).
   When room is needed in a trusted phase that has fallen below (1 - slack) of the twin
   (after rule 5 has looked at this request): if the stretch has had an induced miss or
   lost more races than it won (races decided during it, rule 7), the rest of the phase
   evicts the oldest leaf; else the twin's whole lead is forgiven (the cache's hits so
   counted equal the twin's) and the phase stays trusted.
5. Induced misses. When room is needed for a request whose first missing block heads a
   recorded node, evicted at t, and some cached node has not been requested since t (a
   split's lower part counts as requested by the request that split it), the miss was
   induced by the prediction: the record ends, and, unless this cache's hit tokens so
   counted (rule 4) exceed (1 + slack) of the twin's (the lead pays), lambda /= b and the
   rest of this eviction round evicts the oldest leaf.
6. Credit (``credit=1``). A request with more hit tokens here than in the LRU twin
   multiplies lambda by b, up to 1.
7. Races. At every pick, in trusted and LRU phases alike, the leaf the predictions
   would evict from the current window is compared with the window's oldest leaf; when
   they differ, a race between them opens. A race is decided at the first access of
   either key (a request's keys in root-first order): the predictions' leaf first is a
   loss, the oldest leaf first a win. The predictions are losing while losses exceed
   8 times (wins + 1). At most 4 * (cached nodes) + 1024 races stay open; beyond that the
   oldest open race is dropped undecided.
"""
from __future__ import annotations

import math

from lcr.kv.policies import LeafPolicy
from lcr.kv.requests import BlockRequest


class ReferenceRadixLARU(LeafPolicy):
    name = "laru-reference"
    uses_predictions = True
    wants_requests = True

    def __init__(self, predictor, b: float = 1.05, slack: float = 0.01, credit: int = 1):
        super().__init__()
        self.predictor, self.b, self.slack, self.credit = predictor, float(b), float(slack), bool(credit)
        self.twin_hit = 0                       # rule 6: the twin's hit tokens for this request
        self.last: dict[int, int] = {}          # rule 1: key -> last access
        self.requested: dict[int, int] = {}     # rule 5: key -> last request
        self.split_by_this_request: list[int] = []
        self.record: dict[int, int] = {}        # rule 2: prediction-evicted key -> time
        self.tokens: dict[int, int] = {}        # rule 3: key -> tokens last reported
        self.phase_nodes: set[int] = set()
        self.phase_tokens = 0
        self.started = False
        self.twin = None                        # rule 4
        self.hits = self.twin_hits = 0
        self.forgiven = None                    # rule 4: the twin's lead forgiven (first at the first prediction eviction)
        self.reported_at = -1
        self.trusted = False
        self.stretch_induced, self.stretch_won, self.stretch_lost = 0, 0, 0  # rule 4
        self.lru_until_phase_ends = False
        self.lru_until_round_ends = False
        self.lam, self.l = 1.0, 1
        self.races: dict[int, tuple[int, int]] = {}  # rule 7: open races, oldest first
        self.next_race = 0
        self.stats.extra.update(phases=0, prediction_induced_misses=0, induced_misses_paid=0,
                                credited_requests=0, races_won=0, races_lost=0, leads_forgiven=0)

    # What the engine reports ----------------------------------------------------------
    def on_request(self, paths, tokens, now):
        if self.twin is None:
            self.twin = self.view.lru_twin()
        self.twin_hit = self.twin.serve(BlockRequest(tuple(paths), tuple(tokens)), now)
        self.twin_hits += self.twin_hit

    def on_access(self, keys, now, depths=None):
        if now != self.reported_at:  # a request's first report is its cached path
            self.reported_at = now
            hit = depths[-1] if keys and depths and keys[-1] in self.last else 0
            self.hits += hit
            if self.credit and self.twin is not None and hit > self.twin_hit:                              # rule 6
                self.lam = min(1.0, self.lam * self.b)
                self.stats.extra["credited_requests"] += 1
        for key in keys:
            self.last[key] = now
            self.requested[key] = now
            self.record.pop(key, None)
            for race, (victim, oldest) in list(self.races.items()):                 # rule 7
                if key in (victim, oldest):
                    del self.races[race]
                    self.stats.extra["races_lost" if key == victim else "races_won"] += 1
                    if key == victim:
                        self.stretch_lost += 1
                    else:
                        self.stretch_won += 1
        for key in self.split_by_this_request:
            if key in self.last:
                self.requested[key] = now
        self.split_by_this_request = []
        if depths:
            above = None
            for key, depth in zip(keys, depths):
                self.tokens[key] = depth - above if above is not None else self.tokens.get(key, depth)
                above = depth
                if key not in self.phase_nodes:
                    self.phase_nodes.add(key)
                    self.phase_tokens += self.tokens[key]

    def on_touch(self, keys, now):
        for key in keys:                                                            # rule 1
            if key in self.last:
                self.last[key] = now

    def on_split(self, key, lower_key):
        self.last[lower_key] = self.last.get(key, -1)
        self.requested[lower_key] = self.requested.get(key, -1)
        self.split_by_this_request.append(lower_key)
        if key in self.phase_nodes:
            self.phase_nodes.add(lower_key)

    def on_evicted(self, key):
        for table in (self.last, self.requested, self.tokens):
            table.pop(key, None)
        self.stats.evictions += 1

    # Decisions ------------------------------------------------------------------------
    def ahead_of_lru(self) -> bool:
        if self.forgiven is None:
            return True
        return self.hits + self.forgiven >= (1.0 - self.slack) * self.twin_hits

    def gaining(self) -> bool:
        return self.forgiven is not None and self.hits + self.forgiven > (1.0 + self.slack) * self.twin_hits

    def begin_eviction(self, missing, now):
        if not self.started or self.phase_tokens >= self.view.capacity_tokens:  # rule 3
            self.started = True
            self.phase_nodes, self.phase_tokens = set(), 0
            won, lost = self.stats.extra["races_won"], self.stats.extra["races_lost"]
            was_trusted = self.trusted
            self.trusted = self.ahead_of_lru() and (self.gaining() or lost <= 8 * (won + 1))  # rules 4, 7
            if self.trusted and not was_trusted:  # a stretch begins
                self.stretch_induced, self.stretch_won, self.stretch_lost = 0, 0, 0
            self.lru_until_phase_ends = not self.trusted
            self.lam = 1.0
            self.stats.extra["phases"] += 1
        self.lru_until_round_ends = False
        evicted_at = self.record.get(missing)                                   # rule 5
        if evicted_at is not None and any(t < evicted_at for t in self.requested.values()):
            del self.record[missing]
            self.stats.extra["prediction_induced_misses"] += 1
            self.stretch_induced += 1
            if self.gaining():
                self.stats.extra["induced_misses_paid"] += 1
            else:
                self.lam /= self.b
                self.lru_until_round_ends = True
        if self.trusted and not self.ahead_of_lru():                            # rule 4
            if self.stretch_induced or self.stretch_lost > self.stretch_won:
                self.trusted, self.lru_until_phase_ends = False, True
            else:
                self.forgiven = self.twin_hits - self.hits
                self.stats.extra["leads_forgiven"] += 1
        k = len(list(self.view.cached_keys()))                                  # rule 2
        self.l = max(math.floor(self.lam * k), 1)

    def pick_victim(self, leaves, now):
        by_age = sorted(leaves, key=lambda key: (self.last.get(key, -1), key))
        window = by_age[:self.l]
        victim = window[0]
        if len(window) > 1:
            predicted = self.predictor.predict(window, now)
            self.stats.predictor_calls += 1
            # the largest prediction, NaN as never; max keeps the first (older) leaf on ties
            order = [math.inf if p != p else p for p in predicted]
            victim = window[max(range(len(window)), key=order.__getitem__)]
        if victim != window[0]:                                                 # rule 7
            self.races[self.next_race] = (victim, window[0])
            self.next_race += 1
            if len(self.races) > 4 * len(self.last) + 1024:
                del self.races[next(iter(self.races))]
        if victim == window[0] or self.lru_until_round_ends or self.lru_until_phase_ends:
            self.stats.lru_evictions += 1
            return window[0]
        if self.forgiven is None:
            self.forgiven = self.twin_hits - self.hits
        self.record[victim] = now
        self.stats.prediction_evictions += 1
        return victim
