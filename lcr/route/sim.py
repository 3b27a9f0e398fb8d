"""Discrete-event simulation of a serving cluster: arrivals -> router -> workers.

Each worker owns an lcr radix cache (``lcr.kv.tree.RadixTree``) under any KV policy and
serves up to ``ServiceModel.slots`` requests at once, first come first served, of which at
most ``ServiceModel.prefill_parallel`` prefill at once (a request starts when both a slot
and a prefill lane are free, and gives the lane back when its prefill ends). A request's
cache hit is decided when it starts (its prefix is matched and its new blocks inserted
then), its prefill costs what the hit leaves uncached, and its first token comes after the
queueing delay plus prefill. The router only learns of completions, as a real one does.

Arrivals are open (each request at its own ``arrival``) or, with ``clients``, a closed
loop: that many clients each send their next request when their previous one completes
(bench_serving's ``--max-concurrency``, and the live benchmark's clients), so the
requests' own arrival times are ignored.

The workers' caches count time in request indices (the workload's order): a policy that
reads per-request data, LPC's continuation probabilities of a chat trace (``meta``) or a
predictor's view of the workload, finds the request it is serving.

``jitter`` makes the workers' real service times vary around the service model's: each
request's prefill and decode take a lognormal multiple (mean 1, log standard deviation
``jitter``) of what the model says, drawn per request from ``seed``. Routers still
estimate with the model, as live ones do.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

import lcr.lpc.sim  # noqa: F401  (registers lpc, lpc-oracle, laru-lpc)
from lcr.errors import LcrInputError
from lcr.kv import registry
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import BlockWorkload
from lcr.kv.sim import PREDICTIVE, make_radix_policy
from lcr.kv.tree import RadixTree
from lcr.route.routers import Router
from lcr.route.service import ServiceModel
from lcr.route.workload import RoutedRequest
from lcr.sim.sweep import PolicySpec

#: The KV policies a simulated worker can run: the radix registry's for lcr's tree (a live
#: view; the LPC ones need a chat trace's ``meta``). Not OPT: a worker's future depends on
#: the routing, which the workload's next uses do not know.
KV_POLICIES = registry.runs_on("lcr", offline=False)


@dataclass
class RouteResult:
    router: str
    policy: str
    workers: int
    cache_tokens: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    ttft_p50: float
    ttft_p95: float
    latency_p50: float
    latency_p95: float
    throughput: float                     # completed requests per second of makespan
    per_worker_requests: list[int] = field(default_factory=list)
    per_worker_busy: list[float] = field(default_factory=list)  # fraction of slot-time busy

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict:
        from dataclasses import asdict
        return {**asdict(self), "hit_rate": self.hit_rate}


class _Worker:
    def __init__(self, tree: RadixTree, service: ServiceModel):
        self.tree = tree
        self.service = service
        self.free_slots = service.slots
        self.free_prefill = service.prefill_parallel
        self.queue: deque[RoutedRequest] = deque()
        self.outstanding = 0
        self.served = 0
        self.busy = 0.0


def simulate(requests: Sequence[RoutedRequest], router: Router, *, policy: str = "lru",
             cache_tokens: int, service: ServiceModel | Sequence[ServiceModel] | None = None,
             predictor: str = "lightgbm", seed: int = 0, clients: int | None = None,
             jitter: float = 0.0, meta: dict | None = None) -> RouteResult:
    """Serve ``requests`` (in arrival order, ``rid`` = position) on ``router.workers``
    workers; with ``clients``, in a closed loop of that many clients, in the same order.
    ``policy``: a KV policy, with parameters (``lpc:model=oracle``); ``meta``: the trace's
    (a chat trace's conversations, for the LPC policies)."""
    if cache_tokens < 1:
        raise LcrInputError(f"cache size must be at least 1 token per worker, got {cache_tokens}")
    if clients is not None and clients < 1:
        raise LcrInputError(f"closed loop: clients must be at least 1, got {clients}")
    check_jitter(jitter)
    spec = PolicySpec.parse(policy, registry=KV_POLICIES)
    if any(r.rid != i for i, r in enumerate(requests)) or (
            clients is None and any(b.arrival < a.arrival for a, b in zip(requests, requests[1:]))):
        raise LcrInputError("simulate: requests must be in arrival order with rid = their position")
    # Per request, the factor its real service time has over the model's (1 without jitter).
    slowdown = np.exp(jitter * np.random.default_rng(seed).standard_normal(len(requests)) - jitter ** 2 / 2)
    n = router.workers
    services = _per_worker(service, n)
    workload = BlockWorkload([r.request for r in requests], "routed")
    # The caller's meta itself: LPC caches its probabilities there, once per workload.
    workload.meta = meta if meta is not None else {}
    workers = []
    for w in range(n):
        pred = make_path_predictor(predictor, workload, 0.0, seed + w) if spec.name in PREDICTIVE else None
        workers.append(_Worker(RadixTree(cache_tokens, make_radix_policy(spec.name, workload, predictor=pred,
                                                                     seed=seed + w, **spec.kwargs)),
                               services[w]))

    # (time, kind, sequence, worker or -1, request index): at equal times prefill ends
    # (kind 0) and completions (kind 1) come before arrivals (kind 2), so a freed lane or
    # slot is seen by the next arrival.
    PREFILLED, DONE, ARRIVAL = 0, 1, 2
    events: list[tuple[float, int, int, int, int]] = []
    arrival = np.array([r.arrival for r in requests], dtype=float)
    if clients is not None:  # the first `clients` requests at once, each later one on a completion
        arrival[:] = 0.0
    issued = len(requests) if clients is None else min(clients, len(requests))
    for i in range(issued):
        heapq.heappush(events, (arrival[i], ARRIVAL, i, -1, i))
    ttft = np.zeros(len(requests))
    latency = np.zeros(len(requests))
    hits = 0
    finish_order = 0
    last_finish = 0.0

    def start_ready(w: int, now: float) -> None:
        nonlocal hits, finish_order
        worker = workers[w]
        while worker.free_slots and worker.free_prefill and worker.queue:
            r = worker.queue.popleft()
            # The trees and their policies count time in request indices (module docstring);
            # each worker's FIFO queue keeps them increasing per tree.
            hit = worker.tree.serve(r.request, r.rid)
            hits += hit
            prefill = worker.service.prefill(hit, r.prompt_tokens - hit) * slowdown[r.rid]
            service_time = prefill + worker.service.decode(r.output_tokens) * slowdown[r.rid]
            ttft[r.rid] = now - arrival[r.rid] + prefill
            worker.free_slots -= 1
            worker.free_prefill -= 1
            worker.busy += service_time
            worker.served += 1
            heapq.heappush(events, (now + prefill, PREFILLED, finish_order, w, r.rid))
            heapq.heappush(events, (now + service_time, DONE, finish_order, w, r.rid))
            finish_order += 1

    while events:
        now, kind, _, w, i = heapq.heappop(events)
        r = requests[i]
        if kind == PREFILLED:
            workers[w].free_prefill += 1
            start_ready(w, now)
        elif kind == ARRIVAL:
            target = router.route(r, now, [x.outstanding for x in workers])
            if not 0 <= target < n:
                raise RuntimeError(f"router {router.name} chose worker {target} of {n}")
            workers[target].queue.append(r)
            workers[target].outstanding += 1
            start_ready(target, now)
        else:
            worker = workers[w]
            worker.free_slots += 1
            worker.outstanding -= 1
            latency[i] = now - arrival[i]
            last_finish = max(last_finish, now)
            router.on_complete(w, r, now, latency[i])
            if issued < len(requests):  # closed loop: this client's next request
                arrival[issued] = now
                heapq.heappush(events, (now, ARRIVAL, issued, -1, issued))
                issued += 1
            start_ready(w, now)

    makespan = last_finish - (arrival[0] if requests else 0.0)
    return RouteResult(
        router=router.name, policy=spec.label, workers=n, cache_tokens=cache_tokens,
        requests=len(requests), prompt_tokens=sum(r.prompt_tokens for r in requests),
        hit_tokens=hits,
        ttft_p50=_pct(ttft, 50), ttft_p95=_pct(ttft, 95),
        latency_p50=_pct(latency, 50), latency_p95=_pct(latency, 95),
        throughput=len(requests) / makespan if makespan > 0 else float("nan"),
        per_worker_requests=[x.served for x in workers],
        per_worker_busy=[x.busy / (x.service.slots * makespan) if makespan > 0 else 0.0
                         for x in workers])


def check_jitter(jitter: float) -> None:
    if not (np.isfinite(jitter) and jitter >= 0):
        raise LcrInputError(f"service jitter must be a finite number >= 0, got {jitter!r}")


def _per_worker(service, n: int) -> list[ServiceModel]:
    if service is None:
        return [ServiceModel()] * n
    if isinstance(service, ServiceModel):
        return [service] * n
    services = list(service)
    if len(services) != n:
        raise LcrInputError(f"{len(services)} service models for {n} workers")
    return services


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")
