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
- ``lbgr``: learning-based greedy routing (the RLT/LBGR paper's predicted latency
  E_i = Cost_i + P_i + theta_i . phi_i, with Cost_i from the approximate prefix match, P_i
  the prefill queued there and theta_i a per-worker recursive least squares fit of the
  measured latency minus the model's estimate), plus the delay a request's work imposes on
  those after it (see LBGRRouter).
- ``lbgr_paper``: the paper's own greedy rule (its decayed load, no cost to others), kept
  to reproduce its comparison.

Each router takes the options its ``OPTIONS`` names and nothing else (``make_router``).
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
    OPTIONS: tuple[str, ...] = ()   # the parameters `name:key=value` may set (make_router)

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
    OPTIONS = ("defaults", "cache_threshold", "balance_abs", "balance_rel", "max_index_tokens")
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
    load: float       # P: the prefill still queued there plus the wait for a decode slot
                      # (lbgr_paper: the recent work routed there, decaying)
    residual: float   # theta . phi: the learned correction
    queueing: float   # the delay its work, and a second copy of its prefix, impose on other
                      # requests (0 under lbgr_paper)
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


def _flag(router: str, name: str, value) -> bool:
    """A 0/1 option (``lbgr:record=1``): anything else is refused, naming the option."""
    if value in (0, 1, True, False):
        return bool(value)
    raise LcrInputError(f"{router}: {name} must be 0 or 1, got {value!r}")


class LBGRRouter(Router):
    """Learning-based greedy routing, lcr's rule: each worker's score is the request's
    predicted latency there (Cost + P + theta . phi) plus what the choice costs the requests
    after it; the lowest score wins.

    - Cost: prefill of what misses the router's approximate index, plus the mean decode.
    - P (load): the prefill still queued at the worker (each routed request adds its prefill
      over the prefill lanes; P drains one second per second), plus, once every decode slot
      is taken, the wait for one (``slot_wait``): a continuous batcher starts a request as
      soon as a prefill lane and a slot are free, so requests decoding in free slots do not
      hold it back.
    - theta . phi: per worker, a recursive least squares fit of measured latency minus
      Cost + P, on phi = (hit, miss, load) in seconds of the service model, counted only
      beyond ``CONFIDENCE`` standard errors (a fit on a few dozen latencies that mostly
      reflect momentary queueing would otherwise learn "this worker is slow" from noise).
    - queueing: the delay the request's work imposes on later requests there
      (``queued_occupancy``: its prefill, its decode share only when it takes the last free
      slot) times the requests expected to arrive while it is in flight, which by Little's
      law is the worker's time-averaged number in flight (``expected_in_flight``: the
      router's own count averaged over the mean latency, so a momentary split of a few
      clients is not priced as a standing queue). Plus what a second copy of a prefix held
      elsewhere costs (``duplication``), unless the prefix is hot (``is_hot``: its requests
      arrive at ``HOT_SHARE`` of a worker's capacity or more, and fill the copy).
    - A prefix no worker holds goes to the worker with the fewest routed tokens (its group's
      later requests follow it, so its placement sets a worker's long-run share), the score
      breaking ties; a worker with a longer match is kept when its score is within
      ``HYSTERESIS`` of the best.

    Each rule was chosen over measured alternatives, since removed (docs/history.md,
    "Routing"). ``record``: keep the per-worker ``Score`` terms of the last
    ``RECORD_LIMIT`` decisions in ``decisions`` (bounded for a long-running serve-router).
    ``learn=False`` freezes the residual fits (for tests that isolate the other terms).
    """

    name = "lbgr"
    OPTIONS = ("record",)           # what `lbgr:...` accepts
    FORGETTING = 0.992              # the RLS fits' (the authors' value)
    HYSTERESIS = 0.02
    CONFIDENCE = 2.0                # standard errors the residual must exceed to count
    HOT_SHARE = 0.25                # of a worker's capacity (.1-.5 measured alike)
    RECORD_LIMIT = 10_000
    LATENCY_MEMORY = 256  # completions the mean latency (the in-flight average's time scale) spans
    PATHS_LIMIT = 1 << 18   # prefix blocks whose demand LBGR remembers (66 MB when full)
    DEMAND_HORIZON = 10.0  # seconds a prefix's request rate averages over (is_hot)

    def __init__(self, workers: int, seed: int = 0, service: ServiceModel | None = None,
                 record: bool = False, learn: bool = True):
        super().__init__(workers, seed)
        self.service = service or ServiceModel()
        self.learn = learn
        self.indexes = [ApproxPrefixIndex(DEFAULT_MAX_TOKENS) for _ in range(workers)]
        self.models = [RecursiveLeastSquares(3, self.FORGETTING, delta=1.0) for _ in range(workers)]
        self.load = [0.0] * workers
        self._load_time = 0.0
        self._in_flight: dict[int, tuple[int, _InFlight]] = {}
        self._mean_output = 0.0
        self._completed = 0
        # Requests routed and not finished per worker, their exponential time average and
        # when it was last brought up to date, and the mean latency that sets its time scale.
        self._count = [0] * workers
        self._count_mean = [0.0] * workers
        self._count_time = 0.0
        self._mean_latency = 0.0
        # Requests routed through each prefix block, and their rate (is_hot).
        self.demand = PrefixDemand(self.DEMAND_HORIZON, self.PATHS_LIMIT)
        # (request id, outstanding, per-worker Score, chosen worker) per decision, if asked:
        # what moved each request where it went (docs/routing.md, "Live").
        self.decisions: deque[tuple[int, list[int], list[Score], int]] | None = (
            deque(maxlen=self.RECORD_LIMIT) if _flag(self.name, "record", record) else None)

    # --- the rules lbgr_paper replaces (PaperLBGRRouter) ---------------------------------

    def _drain(self, elapsed: float) -> None:
        """P after ``elapsed`` seconds: queued prefill drains one second per second."""
        self.load = [max(0.0, p - elapsed) for p in self.load]

    def _load_at(self, worker: int, outstanding: Sequence[int] | None) -> float:
        load = self.load[worker]
        return load if outstanding is None else load + self.slot_wait(outstanding[worker])

    def _queueing(self, hit: int, miss: int, in_flight: float, copies: int, copied: int) -> float:
        return (self.queued_occupancy(hit, miss, in_flight) * in_flight
                + copies * self.duplication(copied, in_flight))

    def _added_load(self, hit: int, miss: int) -> float:
        """What a request routed to a worker adds to its P: its prefill (decoding shares
        the slots: ``slot_wait``)."""
        return self.service.prefill_occupancy(hit, miss)

    def _unseen(self, alive: list[int], estimates: list[Score]) -> int:
        """A prefix no worker holds: where it lands is where its group's later requests
        will follow it, so place it by each worker's long-run share of routed tokens (its
        index: cache_aware's rule), not by the last second's load; the score breaks ties."""
        return min(alive, key=lambda w: (self.indexes[w].tokens, estimates[w].score))

    def _take_back(self, worker: int, flight: _InFlight, now: float) -> None:
        """A finished request's share of P: queued prefill has drained by time alone."""

    # --- shared by both rules ----------------------------------------------------------

    def _decay_to(self, now: float) -> None:
        if now > self._load_time:
            self._drain(now - self._load_time)
            self._load_time = now

    def phi(self, hit: int, miss: int, load: float) -> np.ndarray:
        # In seconds of the service model, so theta reads as relative corrections
        # (theta = 0.5 on the miss term: prefill is 50% slower than modelled).
        return np.array([self.service.prefill(hit, 0), self.service.prefill(0, miss), load])

    def estimates(self, request: RoutedRequest, now: float,
                  outstanding: Sequence[int] | None = None) -> list[Score]:
        """Per worker, the terms of its score (``Score``); the queueing term needs
        ``outstanding`` (without it, 0)."""
        self._decay_to(now)
        expected = self.expected_in_flight(now, outstanding)
        hits = [index.match(request.request) for index in self.indexes]
        # The longest prefix some worker in rotation is believed to hold.
        held = max((hits[w] for w in range(self.workers) if w not in self.dead), default=0)
        copies = 0 if self.is_hot(self.held_path(request.request, held), now) else 1
        out = []
        for worker, hit in enumerate(hits):
            miss = request.prompt_tokens - hit
            load = self._load_at(worker, outstanding)
            phi = self.phi(hit, miss, load)
            queueing = (0.0 if expected is None else
                        self._queueing(hit, miss, expected[worker], copies, held - hit))
            out.append(Score(cost=self.service.prefill(hit, miss) + self.service.decode(self._mean_output),
                             load=load,
                             residual=self.models[worker].predict(phi, self.CONFIDENCE),
                             queueing=queueing, hit=hit, phi=phi))
        return out

    def expected_in_flight(self, now: float, outstanding: Sequence[int] | None) -> Sequence[float] | None:
        """Per worker, the requests expected to arrive while one routed now is in flight:
        the router's own in-flight count, time-averaged (None without ``outstanding``)."""
        if outstanding is None:
            return None
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
        """A request routed to (+1) or finished at (-1) ``worker``. Until a latency is known
        there is no time scale, and the average is the count itself."""
        self._average_counts_to(now)
        self._count[worker] += delta
        if self._mean_latency <= 0:
            self._count_mean[worker] = float(self._count[worker])

    def queued_occupancy(self, hit: int, miss: int, in_flight: float) -> float:
        """What one request at a worker with ``in_flight`` others delays each later one by:
        its prefill, and its decode share only once every slot is taken (a continuous
        batcher starts a later request beside it while one is free)."""
        slot = self.service.decode(self._mean_output) / self.service.slots if in_flight + 1 >= self.service.slots else 0.0
        return self.service.prefill_occupancy(hit, miss) + slot

    def slot_wait(self, outstanding: int) -> float:
        """How long a request waits for a decode slot behind ``outstanding`` requests (0
        while one is free; then a slot frees every mean decode / slots)."""
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

    def is_hot(self, held_path: int | None, now: float) -> bool:
        """Whether requests through ``held_path`` arrive at ``HOT_SHARE`` of a worker's
        capacity or more (never before a decode time is known)."""
        decode = self.service.decode(self._mean_output)
        if self.HOT_SHARE <= 0 or held_path is None or decode <= 0:
            return False
        return self.demand.rate(held_path, now) >= self.HOT_SHARE * self.service.slots / decode

    def duplication(self, tokens: int, outstanding: float) -> float:
        """What storing a second copy of ``tokens`` prefix tokens, already cached at another
        worker, costs later requests: in a full cache the copy evicts as many tokens of other
        prefixes, so some later request prefills them again instead of hitting (the miss
        minus the hit), and delays those queued behind it at that worker as this request's
        own prefill would. Without it a busy home and an idle neighbour split a group
        between two caches on one momentary imbalance, and every later request of the group
        follows the load between both copies."""
        if tokens <= 0:
            return 0.0
        extra = self.service.prefill(0, tokens) - self.service.prefill(tokens, 0)
        return extra + extra / self.service.prefill_parallel * outstanding

    def route(self, request, now, outstanding):
        alive = self.alive()
        estimates = self.estimates(request, now, outstanding)
        if all(estimates[w].hit == 0 for w in alive):
            best = self._unseen(alive, estimates)
        else:
            best = min(alive, key=lambda w: estimates[w].score)
        sticky = max(alive, key=lambda w: estimates[w].hit)
        if (estimates[sticky].hit > estimates[best].hit
                and estimates[sticky].score - estimates[best].score <= self.HYSTERESIS * abs(estimates[best].score)):
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
        miss = request.prompt_tokens - chosen.hit
        # What the request delays those behind it: its prefill shared by the worker's
        # prefill lanes, its decode by its slots (ServiceModel.occupancy).
        cost = self.service.occupancy(chosen.hit, miss, self._mean_output)
        self.load[best] += self._added_load(chosen.hit, miss)
        self._in_flight[request.rid] = (best, _InFlight(cost, now, chosen.cost + chosen.load, chosen.phi))
        self._count_change(best, +1, now)
        self.indexes[best].insert(request.request)
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
        """Forget a finished or failed request: its in-flight count and its share of P."""
        routed = self._in_flight.pop(request.rid, None)
        if routed is None:
            return None
        self._decay_to(now)
        routed_to, flight = routed
        self._count_change(routed_to, -1, now)
        self._take_back(worker, flight, now)
        return flight


class PaperLBGRRouter(LBGRRouter):
    """``lbgr_paper``: the RLT/LBGR paper's greedy rule, for reproducing its comparison. The
    score is the request's own predicted latency, Cost + P + theta . phi (no queueing term,
    no second-copy cost); P is the recent work routed to the worker, growing by each routed
    request's occupancy and decaying by ``DECAY`` every ``DECAY_INTERVAL`` seconds (the
    authors' 31/32 every 20 ms: about the last 0.6 s of routed work), a finished request
    releasing what is left of its share; an unseen prefix goes by the score. lcr's residual
    gating (``CONFIDENCE``), covariance cap and hysteresis are kept."""

    name = "lbgr_paper"
    DECAY = 31 / 32
    DECAY_INTERVAL = 0.02

    @property
    def decay_rate(self) -> float:
        return -math.log(self.DECAY) / self.DECAY_INTERVAL   # P(t) = P(t0) exp(-rate (t - t0))

    def _drain(self, elapsed: float) -> None:
        factor = math.exp(-self.decay_rate * elapsed)
        self.load = [p * factor for p in self.load]

    def _load_at(self, worker: int, outstanding: Sequence[int] | None) -> float:
        return self.load[worker]

    def _queueing(self, hit: int, miss: int, in_flight: float, copies: int, copied: int) -> float:
        return 0.0

    def _added_load(self, hit: int, miss: int) -> float:
        return self.service.occupancy(hit, miss, self._mean_output)

    def _unseen(self, alive: list[int], estimates: list[Score]) -> int:
        return min(alive, key=lambda w: estimates[w].score)

    def _take_back(self, worker: int, flight: _InFlight, now: float) -> None:
        residual = flight.cost * math.exp(-self.decay_rate * (now - flight.routed_at))
        self.load[worker] = max(0.0, self.load[worker] - residual)


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
    "lbgr_paper": PaperLBGRRouter,
}


def make_router(name: str, workers: int, seed: int = 0, service: ServiceModel | None = None,
                **options) -> Router:
    """The router ``name`` for ``workers`` workers, with the ``options`` its ``OPTIONS``
    name (the ``name:key=value`` of ``--routers``); anything else is refused in one line
    naming it. ``service``: what LBGR assumes of the workers (the others ignore it)."""
    cls = ROUTERS.get(name)
    if cls is None:
        raise LcrInputError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    unknown = sorted(set(options) - set(cls.OPTIONS))
    if unknown:
        valid = ", ".join(cls.OPTIONS) or "none"
        raise LcrInputError(f"router {name}: unknown option(s) {', '.join(unknown)}; valid: {valid}")
    extra = {"service": service} if issubclass(cls, LBGRRouter) else {}
    try:
        return cls(workers, seed, **extra, **options)
    except TypeError as err:   # a value of the wrong kind, e.g. cache_threshold=high
        raise LcrInputError(f"router {name}: {err}") from None
