"""Request routers across serving workers, each with its own prefix cache.

One router object makes every routing decision, in the simulator (``lcr sim-route``) and
wherever requests are routed for real: it is told of each arrival (``route``) and each
completion (``on_complete``) and keeps its own view of the workers. ``outstanding`` is the
number of requests each worker holds (queued or running), the load signal every real
router has.

- ``random``, ``round_robin``: the baselines.
- ``cache_aware``: SGLang router's policy (sglang-router 0.3.2's defaults, or 0.1.9's with
  ``defaults=0.1.9``): when the load is imbalanced (max - min outstanding > ``balance_abs``
  and max > ``balance_rel`` x min) go to the least loaded worker; otherwise to the worker
  with the longest approximate prefix match if its match rate exceeds ``cache_threshold``,
  else to the worker whose index is smallest (the most free cache, as far as the router
  knows).
- ``lbgr``: learning-based greedy routing (the RLT/LBGR paper): predicted latency
  E_i = Cost_i + P_i + theta_i . phi_i, with Cost_i from the approximate prefix match,
  P_i a queue load (exponentially decaying, or the backlog with ``load=backlog``, or the
  queued prefill and the wait for a decode slot with ``load=prefill``) and
  theta_i a per-worker recursive least squares fit of the measured latency minus the
  model's estimate; by default lcr adds the delay a request's work imposes on those after
  it (``queueing=little``, see LBGRRouter).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.route.prefix_demand import PrefixDemand
from lcr.route.prefix_index import DEFAULT_MAX_TOKENS, ApproxPrefixIndex
from lcr.route.rls import RecursiveLeastSquares
from lcr.route.service import ServiceModel
from lcr.route.workload import RoutedRequest


class Router(ABC):
    """Routes requests to ``workers`` workers. Not thread-safe: one event loop calls it."""

    name = "router"

    def __init__(self, workers: int, seed: int = 0):
        if workers < 1:
            raise LcrInputError(f"need at least one worker, got {workers}")
        self.workers = workers
        self.rng = np.random.default_rng(seed)
        self.dead: set[int] = set()

    def alive(self) -> list[int]:
        """Workers still in rotation (at least one, or routing is impossible)."""
        alive = [w for w in range(self.workers) if w not in self.dead]
        if not alive:
            raise LcrInputError("no worker left to route to")
        return alive

    @abstractmethod
    def route(self, request: RoutedRequest, now: float, outstanding: Sequence[int]) -> int:
        """The worker for ``request`` arriving at ``now`` (seconds)."""

    def on_complete(self, worker: int, request: RoutedRequest, now: float, latency: float) -> None:
        """``request`` finished on ``worker`` at ``now`` after ``latency`` seconds."""

    def on_failed(self, worker: int, request: RoutedRequest, now: float) -> None:
        """``worker`` failed ``request`` (it will be retried elsewhere): forget the attempt."""

    def remove_worker(self, worker: int) -> None:
        """``worker`` is gone: route nothing more to it."""
        self.dead.add(worker)

    def restore_worker(self, worker: int) -> None:
        self.dead.discard(worker)


class RandomRouter(Router):
    name = "random"

    def route(self, request, now, outstanding):
        alive = self.alive()
        return alive[int(self.rng.integers(len(alive)))]


class RoundRobinRouter(Router):
    name = "round_robin"

    def __init__(self, workers: int, seed: int = 0):
        super().__init__(workers, seed)
        self._next = 0

    def route(self, request, now, outstanding):
        alive = self.alive()
        worker = next((w for w in alive if w >= self._next), alive[0])
        self._next = worker + 1
        return worker


class CacheAwareRouter(Router):
    """``defaults`` picks the sglang-router release whose default thresholds apply; explicit
    ``cache_threshold``, ``balance_abs``, ``balance_rel`` override them. ``0.3.2`` (the
    installed release, the thresholds since 0.2.0) balances only past a large imbalance;
    ``0.1.9`` (the last release before 0.2.0, August 2025, current when the RLT/LBGR paper
    ran its cache-aware baseline) balances as soon as the outstanding counts differ by more
    than 32, and needs a match over half the prompt to follow the cache."""

    name = "cache_aware"
    # sglang-router's RouterArgs defaults (cache_threshold, balance_abs_threshold,
    # balance_rel_threshold). Its tree bound (max_tree_size: 2^24 characters in 0.1.9, 2^26
    # since 0.2.0) is the index's default (DEFAULT_MAX_TOKENS), never reached here.
    DEFAULTS = {"0.3.2": {"cache_threshold": 0.3, "balance_abs": 64, "balance_rel": 1.5},
                "0.1.9": {"cache_threshold": 0.5, "balance_abs": 32, "balance_rel": 1.0001}}

    def __init__(self, workers: int, seed: int = 0, defaults: str = "0.3.2",
                 cache_threshold: float | None = None, balance_abs: int | None = None,
                 balance_rel: float | None = None, max_index_tokens: int | None = DEFAULT_MAX_TOKENS):
        super().__init__(workers, seed)
        preset = self.DEFAULTS.get(str(defaults))
        if preset is None:
            raise LcrInputError(f"cache_aware: defaults must be one of {', '.join(self.DEFAULTS)} "
                                f"(sglang-router releases), got {defaults!r}")
        self.defaults = str(defaults)
        self.cache_threshold = preset["cache_threshold"] if cache_threshold is None else cache_threshold
        self.balance_abs = preset["balance_abs"] if balance_abs is None else balance_abs
        self.balance_rel = preset["balance_rel"] if balance_rel is None else balance_rel
        if not 0 <= self.cache_threshold <= 1 or self.balance_abs < 0 or self.balance_rel < 1:
            raise LcrInputError("cache_aware: cache_threshold must be in [0, 1], balance_abs >= 0 "
                                "and balance_rel >= 1")
        self.indexes = [ApproxPrefixIndex(max_index_tokens) for _ in range(workers)]
        self.balanced = 0   # decisions the load-imbalance rule made (a measurement)

    def imbalanced(self, loads: Sequence[int]) -> bool:
        high, low = max(loads), min(loads)
        return high - low > self.balance_abs and high > low * self.balance_rel

    def route(self, request, now, outstanding):
        alive = self.alive()
        # Ties go to the lowest worker index.
        if self.imbalanced([outstanding[w] for w in alive]):
            worker = min(alive, key=lambda w: outstanding[w])
            self.balanced += 1
        else:
            matches = {w: self.indexes[w].match(request.request) for w in alive}
            best = max(alive, key=lambda w: matches[w])
            if matches[best] / max(request.prompt_tokens, 1) > self.cache_threshold:
                worker = best
            else:
                worker = min(alive, key=lambda w: self.indexes[w].tokens)
        self.indexes[worker].insert(request.request)
        return worker


@dataclass(frozen=True)
class Score:
    """One worker's LBGR score for one request, term by term (seconds)."""
    cost: float       # the request's own service time there: prefill of what misses + decode
    load: float       # P: the recent work routed there (load=decay), still queued (backlog), or
                      # queued prefill plus the wait for a decode slot (prefill)
    residual: float   # theta . phi: the learned correction
    queueing: float   # queueing=little: the delay its work, and a second copy of its
                      # prefix, impose on other requests
    hit: int          # prefix tokens the router believes that worker holds
    phi: np.ndarray

    @property
    def score(self) -> float:
        return self.cost + self.load + self.residual + self.queueing


@dataclass
class _InFlight:
    cost: float
    routed_at: float
    base_estimate: float   # Cost + P at routing time: what the residual model corrects
    phi: np.ndarray


class LBGRRouter(Router):
    """Learning-based greedy routing.

    ``features``: ``paper`` (hit, miss, load), ``intercept`` (a constant only, as the authors'
    released router learns), or ``paper+intercept``. ``load``: what P_i holds (default:
    ``prefill`` under ``queueing=little``, the paper's ``decay`` under ``queueing=none``).
    ``decay``: P decays by ``decay`` every ``decay_interval`` seconds (the authors: 31/32
    every 20 ms), a finished request releasing what is left of its share, so P measures the
    last ~0.6 s of routed work. ``backlog``: P drains by one second per second, the rate at
    which a worker works off occupancy, so P is the work still queued there, however old
    (with skewed groups the hot group's worker builds a backlog that the decayed load
    forgets: docs/routing.md, "Skewed groups"). ``prefill``: P is the prefill still queued
    (each routed request adds its prefill over the prefill lanes, draining 1 s per second),
    and a request waits for a decode slot only once all are taken (``slot_wait``): a continuous
    batcher starts a request as soon as its prefill lane and a slot are free, so requests
    decoding in free slots do not hold it back; in the same terms the queueing term
    counts a request's decode against later ones only when it takes the last free slot
    (``queued_occupancy``; docs/routing.md, "Time to first token").

    ``hysteresis``: a worker with a longer prefix match is kept when its estimate is within
    this fraction of the best (stickiness keeps prefixes together when workers are nearly
    tied).

    ``queueing``: what a choice costs the requests after it. ``none`` is the paper's greedy
    rule (the request's own predicted latency only). ``little`` (lcr's default) adds the
    delay the request's work imposes on later requests at that worker: its occupancy
    (``ServiceModel.occupancy``: the worker capacity it takes, so a miss costs its full
    prefill) times the number of requests expected to arrive there while it is in flight,
    which by Little's law is about the number in flight there (``outstanding`` now, or its
    time average: ``in_flight``; under ``load=prefill``, ``queued_occupancy``). Under
    load a miss then costs what it really costs the cluster, and groups stay together.
    It also counts what a second copy of a prefix costs (``duplicate_cost``, on by default:
    see ``duplication``), so an idle worker takes a request whose prefix is cached elsewhere
    only when the home's queue outweighs the request's prefill twice over.

    ``in_flight``: the count of requests at a worker that ``queueing`` multiplies. By
    Little's law the requests expected to arrive while this one is in flight are the
    worker's *time-averaged* number in flight, of which the count at this moment is one
    noisy sample. ``now`` uses that sample; ``mean`` (the default) the count averaged over
    the last mean request latency (exponentially, from the router's own routed and
    completed requests), so a momentary imbalance (4 clients: a 3-to-0 split that lasts a
    few requests) is not priced as a standing queue, while a standing one still is. A
    request's own wait for a slot (``slot_wait``) stays on the count now.

    ``hot_share``: a held prefix whose requests arrive at ``hot_share`` or more of one
    worker's capacity (its slots over the mean decode time, requests/s) is hot, and a second
    copy of it costs nothing: its own later requests fill the copy, where the second-copy
    cost assumes the copy only displaces other prefixes. Without it LBGR kept a hot group on
    a worker it overloaded (docs/routing.md, "Skewed groups"). 0 turns it off.

    ``copy_cost``: how many times the second-copy cost is counted. ``once`` (the default):
    one re-prefill of the copied tokens. ``group``: once per request that has shared the
    held prefix so far (up to ``GROUP_LIMIT``): a prefix that served n requests is expected
    to serve about as many more, and a copy splits them between two caches, each holding
    the group at the expense of others (docs/routing.md, "Why LBGR lost with few clients").

    ``first_sight``: where a prefix no worker holds goes. ``score`` (the paper's rule) by
    the score, i.e. by the last second's load; ``index`` (the default under
    ``queueing=little``) to the worker with the fewest routed tokens, cache_aware's rule:
    the group's later requests follow its first one, so its placement sets a worker's
    long-run share of load and cache, which the momentary load does not predict.

    ``confidence``: the residual theta . phi counts only beyond this many of its standard
    errors (``RecursiveLeastSquares.predict``; 0: as fitted, the paper's rule). Measured
    live, a fit on a few dozen latencies that mostly reflect momentary queueing would
    otherwise learn "this worker is slow" from noise and move groups off their home.

    ``record``: keep the per-worker ``Score`` terms of the last ``RECORD_LIMIT`` decisions
    in ``decisions`` (bounded: a long-running ``serve-router`` would otherwise grow without
    end).
    """

    name = "lbgr"
    FEATURES = ("paper", "intercept", "paper+intercept")
    RECORD_LIMIT = 10_000
    QUEUEING = ("little", "none")
    LOADS = ("decay", "backlog", "prefill")
    COPY_COSTS = ("once", "group")
    IN_FLIGHT = ("now", "mean")
    LATENCY_MEMORY = 256  # completions the mean latency (in_flight=mean's time scale) spans
    GROUP_LIMIT = 8
    PATHS_LIMIT = 1 << 18   # prefix blocks whose demand LBGR remembers (66 MB when full)
    DEMAND_HORIZON = 10.0  # seconds a prefix's request rate averages over (hot_share)

    def __init__(self, workers: int, seed: int = 0, service: ServiceModel | None = None,
                 features: str = "paper", forgetting: float = 0.992, decay: float = 31 / 32,
                 decay_interval: float = 0.02, hysteresis: float = 0.02, queueing: str = "little",
                 max_index_tokens: int | None = DEFAULT_MAX_TOKENS, learn: bool = True, record: bool = False,
                 duplicate_cost: bool = True, first_sight: str | None = None, confidence: float = 2.0,
                 load: str | None = None, copy_cost: str = "once", in_flight: str = "mean",
                 hot_share: float = 0.25):
        super().__init__(workers, seed)
        if in_flight not in self.IN_FLIGHT:
            raise LcrInputError(f"lbgr: in_flight must be one of {', '.join(self.IN_FLIGHT)}, got {in_flight!r}")
        self.in_flight = in_flight
        # in_flight=mean: requests routed and not finished per worker, their exponential
        # time average and when it was last brought up to date, and the mean latency that
        # sets its time scale.
        self._count = [0] * workers
        self._count_mean = [0.0] * workers
        self._count_time = 0.0
        self._mean_latency = 0.0
        if copy_cost not in self.COPY_COSTS:
            raise LcrInputError(f"lbgr: copy_cost must be one of {', '.join(self.COPY_COSTS)}, got {copy_cost!r}")
        self.copy_cost = copy_cost
        if not (math.isfinite(hot_share) and hot_share >= 0):
            raise LcrInputError(f"lbgr: hot_share must be a number >= 0, got {hot_share!r}")
        self.hot_share = hot_share
        # Requests routed through each prefix block, and their rate (copy_cost=group, hot_share).
        self.demand = PrefixDemand(self.DEMAND_HORIZON, self.PATHS_LIMIT)
        # lcr's cluster-cost rule prices queued prefill (measured best live and on multi-turn
        # chat: docs/routing.md, "One default"); the paper's rule keeps its decayed load.
        load = load or ("prefill" if queueing == "little" else "decay")
        if load not in self.LOADS:
            raise LcrInputError(f"lbgr: load must be one of {', '.join(self.LOADS)}, got {load!r}")
        self.load_rule = load
        if confidence < 0:
            raise LcrInputError(f"lbgr: confidence must be >= 0, got {confidence}")
        self.confidence = confidence
        self.duplicate_cost = bool(duplicate_cost)
        # The paper's rule places everything by its score; lcr's cluster-cost rule places
        # unseen prefixes by routed share.
        first_sight = first_sight or ("index" if queueing == "little" else "score")
        if first_sight not in ("index", "score"):
            raise LcrInputError(f"lbgr: first_sight must be index or score, got {first_sight!r}")
        self.first_sight = first_sight
        if features not in self.FEATURES:
            raise LcrInputError(f"lbgr: features must be one of {', '.join(self.FEATURES)}, got {features!r}")
        if queueing not in self.QUEUEING:
            raise LcrInputError(f"lbgr: queueing must be one of {', '.join(self.QUEUEING)}, got {queueing!r}")
        self.queueing = queueing
        # Only the second-copy cost reads the demand (its group count and hot prefixes).
        self._tracks_demand = (queueing == "little" and self.duplicate_cost
                               and (hot_share > 0 or copy_cost == "group"))
        if not 0 < decay <= 1 or decay_interval <= 0:
            raise LcrInputError("lbgr: decay must be in (0, 1] and decay_interval > 0")
        self.service = service or ServiceModel()
        self.features = features
        self.hysteresis = hysteresis
        self.learn = learn
        self.decay_rate = -math.log(decay) / decay_interval  # P(t) = P(t0) exp(-rate (t - t0))
        self.indexes = [ApproxPrefixIndex(max_index_tokens) for _ in range(workers)]
        dim = {"paper": 3, "intercept": 1, "paper+intercept": 4}[features]
        self.models = [RecursiveLeastSquares(dim, forgetting, delta=1.0) for _ in range(workers)]
        self.load = [0.0] * workers
        self._load_time = 0.0
        self._in_flight: dict[int, tuple[int, _InFlight]] = {}
        self._mean_output = 0.0
        self._completed = 0
        # (request id, outstanding, per-worker Score, chosen worker) per decision, if asked:
        # what moved each request where it went (docs/routing.md, "Live").
        self.decisions: deque[tuple[int, list[int], list[Score], int]] | None = (
            deque(maxlen=self.RECORD_LIMIT) if record else None)

    def _decay_to(self, now: float) -> None:
        if now > self._load_time:
            elapsed = now - self._load_time
            if self.load_rule in ("backlog", "prefill"):
                self.load = [max(0.0, p - elapsed) for p in self.load]
            else:
                factor = math.exp(-self.decay_rate * elapsed)
                self.load = [p * factor for p in self.load]
            self._load_time = now

    def phi(self, hit: int, miss: int, load: float) -> np.ndarray:
        # In seconds of the service model, so theta reads as relative corrections
        # (theta = 0.5 on the miss term: prefill is 50% slower than modelled).
        paper = [self.service.prefill(hit, 0), self.service.prefill(0, miss), load]
        if self.features == "paper":
            return np.array(paper)
        if self.features == "intercept":
            return np.array([1.0])
        return np.array(paper + [1.0])

    def estimates(self, request: RoutedRequest, now: float,
                  outstanding: Sequence[int] | None = None) -> list[Score]:
        """Per worker, the terms of its score (``Score``): the predicted latency Cost + P +
        theta . phi, plus under ``queueing=little`` the delay the request imposes on those
        after it (needs ``outstanding``)."""
        self._decay_to(now)
        expected = self.expected_in_flight(now, outstanding)
        hits = [index.match(request.request) for index in self.indexes]
        # The longest prefix some worker in rotation is believed to hold.
        held = max((hits[w] for w in range(self.workers) if w not in self.dead), default=0)
        held_path = self.held_path(request.request, held)
        if self.is_hot(held_path, now):
            copies = 0
        else:
            copies = self.group_size(held_path) if self.copy_cost == "group" else 1
        out = []
        for worker, hit in enumerate(hits):
            miss = request.prompt_tokens - hit
            load = self.load[worker]
            if self.load_rule == "prefill" and outstanding is not None:
                load += self.slot_wait(outstanding[worker])
            phi = self.phi(hit, miss, load)
            queueing = 0.0
            if self.queueing == "little" and expected is not None:
                queueing = (self.queued_occupancy(hit, miss, expected[worker]) * expected[worker]
                            + copies * self.duplication(held - hit, expected[worker]))
            out.append(Score(cost=self.service.prefill(hit, miss) + self.service.decode(self._mean_output),
                             load=load,
                             residual=self.models[worker].predict(phi, self.confidence),
                             queueing=queueing, hit=hit, phi=phi))
        return out

    def expected_in_flight(self, now: float, outstanding: Sequence[int] | None) -> Sequence[float] | None:
        """Per worker, the requests expected to arrive while one routed now is in flight
        (``in_flight``): ``outstanding`` itself, or its time average."""
        if self.in_flight == "now" or outstanding is None:
            return outstanding
        self._average_counts_to(now)
        return self._count_mean

    def _average_counts_to(self, now: float) -> None:
        """Bring the time average of the in-flight counts up to ``now``: the counts held
        since the last event, weighted by how long they held over the mean latency."""
        if now > self._count_time and self._mean_latency > 0:
            weight = 1.0 - math.exp(-(now - self._count_time) / self._mean_latency)
            self._count_mean = [m + (c - m) * weight for m, c in zip(self._count_mean, self._count)]
        self._count_time = max(self._count_time, now)

    def _count_change(self, worker: int, delta: int, now: float) -> None:
        """A request routed to (+1) or finished at (-1) ``worker`` (tracked for
        ``in_flight=mean`` only). Until a latency is known there is no time scale, and the
        average is the count itself."""
        if self.in_flight != "mean":
            return
        self._average_counts_to(now)
        self._count[worker] += delta
        if self._mean_latency <= 0:
            self._count_mean[worker] = float(self._count[worker])

    def queued_occupancy(self, hit: int, miss: int, in_flight: float) -> float:
        """What one request at a worker with ``in_flight`` others delays each later one by
        (``queueing=little``): its occupancy (``ServiceModel.occupancy``); under
        ``load=prefill`` its prefill, and its decode only once every slot is taken (a
        continuous batcher starts a later request beside it while one is free)."""
        if self.load_rule != "prefill":
            return self.service.occupancy(hit, miss, self._mean_output)
        slot = self.service.decode(self._mean_output) / self.service.slots if in_flight + 1 >= self.service.slots else 0.0
        return self.service.prefill_occupancy(hit, miss) + slot

    def slot_wait(self, outstanding: int) -> float:
        """``load=prefill``: how long a request waits for a decode slot behind ``outstanding``
        requests (0 while one is free; then a slot frees every mean decode / slots)."""
        waiting = outstanding - self.service.slots + 1
        return max(0, waiting) * self.service.decode(self._mean_output) / self.service.slots

    @staticmethod
    def held_path(request, held: int) -> int | None:
        """The deepest block of ``request``'s first ``held`` tokens (None if none)."""
        deepest, tokens = None, 0
        for path, block in zip(request.paths, request.tokens):
            if tokens + block > held:
                break
            tokens += block
            deepest = path
        return deepest

    def group_size(self, held_path: int | None) -> int:
        """Requests routed so far through ``held_path`` (at least 1, at most ``GROUP_LIMIT``)."""
        return min(self.GROUP_LIMIT, max(1, self.demand.count(held_path)))

    def is_hot(self, held_path: int | None, now: float) -> bool:
        """Whether requests through ``held_path`` arrive at ``hot_share`` of a worker's
        capacity or more (never before a decode time is known)."""
        decode = self.service.decode(self._mean_output)
        if self.hot_share <= 0 or held_path is None or decode <= 0:
            return False
        return self.demand.rate(held_path, now) >= self.hot_share * self.service.slots / decode

    def duplication(self, tokens: int, outstanding: int) -> float:
        """What storing a second copy of ``tokens`` prefix tokens, already cached at another
        worker, costs later requests: in a full cache the copy evicts as many tokens of other
        prefixes, so some later request prefills them again instead of hitting (the miss
        minus the hit), and delays those queued behind it at that worker as this request's
        own prefill would. Without it a busy home and an idle neighbour split a group
        between two caches on one momentary imbalance, and every later request of the group
        follows the load between both copies (docs/routing.md, "Live")."""
        if not self.duplicate_cost or tokens <= 0:
            return 0.0
        extra = self.service.prefill(0, tokens) - self.service.prefill(tokens, 0)
        return extra + extra / self.service.prefill_parallel * outstanding

    def route(self, request, now, outstanding):
        alive = self.alive()
        estimates = self.estimates(request, now, outstanding)
        if self.first_sight == "index" and all(estimates[w].hit == 0 for w in alive):
            # A prefix no worker holds: where it lands is where its group's later requests
            # will follow it, so place it by each worker's long-run share of routed tokens
            # (its index: cache_aware's rule), not by the last second's load; the score
            # breaks ties.
            best = min(alive, key=lambda w: (self.indexes[w].tokens, estimates[w].score))
        else:
            best = min(alive, key=lambda w: estimates[w].score)
        sticky = max(alive, key=lambda w: estimates[w].hit)
        if (estimates[sticky].hit > estimates[best].hit
                and estimates[sticky].score - estimates[best].score <= self.hysteresis * abs(estimates[best].score)):
            best = sticky
        if self.decisions is not None:
            self.decisions.append((request.rid, list(outstanding), estimates, best))
        # A worker that gets no requests gets no completions, so a pessimistic fit would
        # starve it forever; each request routed elsewhere relaxes its correction a little
        # (by the same forgetting factor), so it is tried again once the others fill up.
        for w in alive:
            if w != best:
                self.models[w].theta *= self.models[w].forgetting
        chosen = estimates[best]
        # What the request delays those behind it: its prefill shared by the worker's
        # prefill lanes, its decode by its slots (ServiceModel.occupancy).
        miss = request.prompt_tokens - chosen.hit
        cost = self.service.occupancy(chosen.hit, miss, self._mean_output)
        # load=prefill: only the prefill queues; decoding shares the slots (slot_wait).
        self.load[best] += self.service.prefill_occupancy(chosen.hit, miss) if self.load_rule == "prefill" else cost
        self._in_flight[request.rid] = (best, _InFlight(cost, now, chosen.cost + chosen.load, chosen.phi))
        self._count_change(best, +1, now)
        self.indexes[best].insert(request.request)
        if self._tracks_demand:
            self.demand.record(request.request.paths, now)
        return best

    def on_complete(self, worker, request, now, latency):
        self._completed += 1
        self._mean_output += (request.output_tokens - self._mean_output) / self._completed
        self._mean_latency += (latency - self._mean_latency) / min(self._completed, self.LATENCY_MEMORY)
        flight = self._release(worker, request, now)
        if flight is not None and self.learn:
            self.models[worker].update(flight.phi, latency - flight.base_estimate)

    def on_failed(self, worker, request, now):
        self._release(worker, request, now)

    def _release(self, worker: int, request: RoutedRequest, now: float) -> _InFlight | None:
        """Take back what is left of the request's share of the worker's load."""
        routed = self._in_flight.pop(request.rid, None)
        if routed is None:
            return None
        self._decay_to(now)
        routed_to, flight = routed
        self._count_change(routed_to, -1, now)
        if self.load_rule == "decay":  # a backlog drains by time alone
            residual = flight.cost * math.exp(-self.decay_rate * (now - flight.routed_at))
            self.load[worker] = max(0.0, self.load[worker] - residual)
        return flight


def moves_off_home(decisions) -> dict:
    """Summary of recorded LBGR decisions (``LBGRRouter(record=True).decisions``): how many
    requests went to a worker holding a shorter prefix than the longest any worker held,
    and which score term decided each such move (the term by which the home worker's score
    exceeded the chosen one's the most); and per worker, how many prefixes no worker held
    were placed there (``placed``: a group's home, so its share of cache and load)."""
    summary = {"decisions": 0, "no_match": 0, "home": 0, "moved": 0,
               "moved_by": {"cost": 0, "load": 0, "residual": 0, "queueing": 0}, "placed": []}
    for _, _, scores, chosen in decisions:
        summary["decisions"] += 1
        held = max(s.hit for s in scores)
        if held == 0:
            summary["no_match"] += 1
            placed = summary["placed"]
            placed.extend([0] * (len(scores) - len(placed)))
            placed[chosen] += 1
            continue
        if scores[chosen].hit == held:
            summary["home"] += 1
            continue
        summary["moved"] += 1
        home = next(s for s in scores if s.hit == held)
        gaps = {term: getattr(home, term) - getattr(scores[chosen], term) for term in summary["moved_by"]}
        summary["moved_by"][max(gaps, key=gaps.get)] += 1
    return summary


ROUTERS = {
    "random": RandomRouter,
    "round_robin": RoundRobinRouter,
    "cache_aware": CacheAwareRouter,
    "lbgr": LBGRRouter,
}


def make_router(name: str, workers: int, seed: int = 0, service: ServiceModel | None = None,
                cache_tokens: int | None = None, **params) -> Router:
    """``cache_tokens``: each worker's KV pool, if the caller wants LBGR's approximate index
    to forget past it (unless ``max_index_tokens`` is given), least recently routed first.
    That order is LRU's: measured in docs/routing.md, it helps LBGR over LRU workers and
    hurts it over RLT ones, so it is opt-in. cache_aware keeps sglang-router's tree, whose
    2^26 characters per worker are never reached here."""
    if name not in ROUTERS:
        raise LcrInputError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    if name == "lbgr":
        if cache_tokens is not None:
            params.setdefault("max_index_tokens", cache_tokens)
        return LBGRRouter(workers, seed, service=service, **params)
    try:
        return ROUTERS[name](workers, seed, **params)
    except TypeError as err:
        raise LcrInputError(f"router {name}: {err}") from None
