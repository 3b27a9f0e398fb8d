"""Routing across serving workers: each router's rule, LBGR's learning, the cluster simulator."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lcr.errors import LcrInputError
from lcr.kv.policies import RadixLRU
from lcr.kv.requests import BlockRequest
from lcr.kv.tree import RadixTree
from lcr.route.prefix_index import ApproxPrefixIndex
from lcr.route.rls import RecursiveLeastSquares
from lcr.route.routers import ROUTERS, CacheAwareRouter, LBGRRouter, PaperLBGRRouter, make_router
from lcr.route.service import ServiceModel
from lcr.route.sim import simulate
from lcr.route.workload import (RoutedRequest, azure_arrivals, poisson_arrivals, shared_prefix,
                                with_arrivals)

from conftest import data_file

def req(rid, paths, tokens=100, out=10, t=0.0):
    return RoutedRequest(rid, t, BlockRequest(tuple(paths), (tokens,) * len(paths)), out)


# --- the approximate index --------------------------------------------------------------

def test_prefix_index_matches_the_longest_routed_chain_and_forgets_oldest_first():
    index = ApproxPrefixIndex(max_tokens=300)
    index.insert(BlockRequest((1, 2, 3), (100, 100, 100)))
    assert index.match(BlockRequest((1, 2, 9), (100, 100, 100))) == 200
    assert index.match(BlockRequest((2, 3), (100, 100))) == 200  # chains are path ids already
    index.insert(BlockRequest((1, 4), (100, 100)))   # touches 1, adds 4: 2 is now the oldest
    assert index.tokens == 300
    assert index.match(BlockRequest((1, 2), (100, 100))) == 100


# --- cache_aware: SGLang router's rule ----------------------------------------------------

def test_cache_aware_goes_to_the_best_match_above_the_threshold():
    router = CacheAwareRouter(3, cache_threshold=0.3)
    router.indexes[2].insert(BlockRequest((1, 2), (100, 100)))
    # 2 of 5 blocks matched = 0.4 > 0.3.
    assert router.route(req(0, [1, 2, 3, 4, 5]), 0.0, [0, 0, 0]) == 2


def test_cache_aware_below_the_threshold_goes_to_the_smallest_index():
    router = CacheAwareRouter(3, cache_threshold=0.5)
    router.indexes[0].insert(BlockRequest((7, 8, 9), (100,) * 3))
    router.indexes[1].insert(BlockRequest((1,), (100,)))
    router.indexes[2].insert(BlockRequest((5, 6), (100, 100)))
    # Best match is worker 1 at 1/4 = 0.25 <= 0.5: the smallest index (worker 1, 100 tokens) wins
    # by size, not by match; make the best match a larger index to tell the two rules apart.
    router.indexes[1].insert(BlockRequest((11, 12, 13, 14), (100,) * 4))
    assert router.route(req(0, [1, 20, 21, 22]), 0.0, [0, 0, 0]) == 2


def test_cache_aware_balances_only_past_both_thresholds():
    router = CacheAwareRouter(2, balance_abs=64, balance_rel=1.5)
    router.indexes[0].insert(BlockRequest((1, 2), (100, 100)))
    request = req(0, [1, 2])
    # abs difference 64 is not > 64: still cache-first.
    assert router.route(request, 0.0, [100, 36]) == 0
    # 65 > 64 and 100 > 1.5 * 35: the least loaded worker.
    assert router.route(req(1, [1, 2]), 0.0, [100, 35]) == 1
    # abs met but not rel (200 <= 1.5 * 135).
    assert router.route(req(2, [1, 2]), 0.0, [200, 135]) == 0


def test_cache_aware_presets_are_sglang_routers_defaults_of_each_release():
    """0.1.9's thresholds (0.5, 32, 1.0001) balance where 0.3.2's (0.3, 64, 1.5) follow the
    cache, and need a longer match to follow it; explicit values override a preset."""
    def pick(defaults, outstanding, matched=3, blocks=5, **params):
        router = make_router("cache_aware", 2, defaults=defaults, **params)
        router.indexes[0].insert(BlockRequest(tuple(range(1, matched + 1)), (100,) * matched))
        router.indexes[1].insert(BlockRequest((90,), (100,)))   # worker 1: the smaller index
        return router.route(req(0, list(range(1, blocks + 1))), 0.0, outstanding)

    # Worker 0 holds 3 of the 5 blocks (0.6 matched) unless said otherwise.
    assert pick("0.3.2", [100, 60]) == 0            # 40 apart: not > 64, so the cache wins
    assert pick("0.3.2", [100, 36]) == 0            # 64 is not > 64
    assert pick("0.3.2", [100, 35]) == 1
    assert pick("0.3.2", [200, 135]) == 0           # 65 > 64 but 200 <= 1.5 x 135
    assert pick("0.3.2", [200, 130]) == 1
    assert pick("0.1.9", [100, 60]) == 1            # 40 > 32 and 100 > 60 x 1.0001: balance
    assert pick("0.1.9", [64, 32]) == 0             # 32 is not > 32
    assert pick("0.1.9", [65, 32]) == 1
    assert pick("0.1.9", [400_033, 400_000]) == 0   # 33 apart but 400,033 <= 1.0001 x 400,000
    assert pick("0.1.9", [400_033, 400_000], balance_rel=1.0) == 1
    assert pick("0.3.2", [0, 0], matched=2) == 0    # 2/5 = 0.4 > 0.3: the match
    assert pick("0.3.2", [0, 0], matched=3, blocks=10) == 1   # exactly 0.3 is not > 0.3
    assert pick("0.1.9", [0, 0], matched=2) == 1    # 0.4 <= 0.5: the smaller index
    assert pick("0.1.9", [0, 0], matched=3) == 0    # 0.6 > 0.5
    assert pick("0.1.9", [0, 0], matched=5, blocks=10) == 1   # exactly 0.5 is not > 0.5
    assert pick("0.1.9", [0, 0], matched=2, cache_threshold=0.3) == 0
    assert make_router("cache_aware", 2).defaults == "0.3.2"
    for bad in ({"defaults": "0.2"}, {"defaults": 0.1}, {"cache_threshold": 1.5}, {"balance_rel": 0.5}):
        with pytest.raises(ValueError):
            make_router("cache_aware", 2, **bad)


# --- LBGR ---------------------------------------------------------------------------------

def test_rls_recovers_planted_coefficients():
    rng = np.random.default_rng(0)
    truth = np.array([0.8, -0.3, 2.0])
    model = RecursiveLeastSquares(3, forgetting=0.992)
    for _ in range(2000):
        phi = rng.uniform(0, 1, 3)
        model.update(phi, float(truth @ phi + rng.normal(0, 0.01)))
    assert np.allclose(model.theta, truth, atol=0.05)


def test_rls_counts_a_prediction_only_beyond_its_standard_errors():
    """Few noisy samples: shrunk to nothing at 2 standard errors; many consistent ones: kept."""
    rng = np.random.default_rng(2)
    noisy, steady = RecursiveLeastSquares(1), RecursiveLeastSquares(1)
    for _ in range(5):
        noisy.update(np.array([0.3]), 0.3 + rng.normal(0, 0.5))
    for _ in range(300):
        steady.update(np.array([0.3]), 0.3 + rng.normal(0, 0.05))
    one = np.array([0.3])
    assert noisy.predict(one) != 0 and noisy.predict(one, confidence=2.0) == 0.0
    assert steady.predict(one, confidence=2.0) == pytest.approx(0.3, abs=0.05)
    assert 0 < steady.predict(one, confidence=2.0) < steady.predict(one)
    # LBGR reads its residual through it, at two standard errors: a noisy fit adds less
    # than it would as fitted.
    router = LBGRRouter(1, learn=False)
    probe = req(0, [1], tokens=1000)
    phi = router.estimates(probe, 0.0)[0].phi
    fit = RecursiveLeastSquares(3)
    for _ in range(5):
        fit.update(phi, 0.5 + rng.normal(0, 0.5))
    router.models[0] = fit
    residual = router.estimates(probe, 0.0)[0].residual
    assert LBGRRouter.CONFIDENCE == 2.0
    assert residual == fit.predict(phi, confidence=2.0) and abs(residual) < abs(fit.predict(phi))


def test_rls_tracks_a_change_through_forgetting():
    rng = np.random.default_rng(1)
    model = RecursiveLeastSquares(1, forgetting=0.95)
    for truth in (1.0, 3.0):
        for _ in range(300):
            model.update(np.array([1.0]), truth + rng.normal(0, 0.01))
    assert model.theta[0] == pytest.approx(3.0, abs=0.05)


def hold(router, counts):
    """Set LBGR's in-flight counts (and their time average: no latency known yet) as if
    ``counts`` requests it routed were in flight at each worker."""
    router._count = list(counts)
    router._count_mean = [float(c) for c in counts]


def with_constants(cls, **constants):
    """``cls`` with some of its class constants changed (the rules' tunables are constants,
    not options)."""
    return type(cls.__name__, (cls,), constants)


def test_lbgr_learns_a_planted_per_worker_slowdown_and_routes_around_it():
    """Worker 1 runs 3x slower than the service model LBGR was given: its residual model must
    learn a larger correction than worker 0's, route it less work, and cut the latency tail."""
    base = ServiceModel(miss_s_per_token=2e-4, hit_s_per_token=1e-5, decode_s_per_token=0.01, slots=4)
    slow = ServiceModel(6e-4, 3e-5, 0.03, 4)
    pairs = shared_prefix(groups=64, prompts=8, prompt_tokens=512, output_tokens=32, seed=3)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 8.0, seed=3))
    # The paper's rule: lbgr's queueing term would route around the slow worker on its own;
    # this test isolates what the residual model learns.
    blind = simulate(requests, PaperLBGRRouter(2, service=base, learn=False),
                     cache_tokens=8192, service=[base, slow])
    # CONFIDENCE 0 uses the fit as it stands; the default 2 counts it only beyond two
    # standard errors, and the slow worker, avoided, has few samples: it keeps less.
    for confidence, share in ((0.0, 0.5), (2.0, 0.75)):
        learned = with_constants(PaperLBGRRouter, CONFIDENCE=confidence)(2, service=base)
        out = simulate(requests, learned, cache_tokens=8192, service=[base, slow])
        probe = learned.phi(0, 512, 0.0)
        assert learned.models[1].predict(probe) > learned.models[0].predict(probe) + 0.05
        assert out.per_worker_requests[1] < share * blind.per_worker_requests[1]
        assert out.latency_p95 < 0.8 * blind.latency_p95


def test_lbgr_prefers_the_worker_holding_the_prefix_when_loads_are_equal():
    router = LBGRRouter(3, service=ServiceModel(), learn=False)
    router.indexes[1].insert(BlockRequest((1, 2, 3), (500,) * 3))
    assert router.route(req(0, [1, 2, 3, 4], tokens=500), 0.0, [0, 0, 0]) == 1


def test_make_router_takes_only_the_options_a_user_sets():
    """Each router takes the options its OPTIONS name; anything else (LBGR's removed
    experiments included) is refused in one line naming it, and so is a value of the
    wrong kind."""
    assert make_router("lbgr", 2).decisions is None and make_router("lbgr", 2, record=1).decisions is not None
    assert type(make_router("lbgr_paper", 2)) is PaperLBGRRouter
    removed = ("queueing", "load", "in_flight", "copy_cost", "first_sight", "duplicate_cost", "confidence",
               "hot_share", "features", "max_index_tokens", "hysteresis", "forgetting", "decay",
               "decay_interval", "learn", "cache_tokens")
    for name in ("lbgr", "lbgr_paper"):
        for option in removed:
            with pytest.raises(LcrInputError, match=rf"^router {name}: unknown option\(s\) {option}; valid: record$"):
                make_router(name, 2, **{option: 1})
        with pytest.raises(LcrInputError, match="record must be 0 or 1"):
            make_router(name, 2, record="yes")
    for name in ("random", "round_robin"):
        with pytest.raises(LcrInputError, match=rf"^router {name}: unknown option\(s\) threshold; valid: none$"):
            make_router(name, 2, threshold=1)
    with pytest.raises(LcrInputError, match="unknown option.*bogus"):
        make_router("cache_aware", 2, bogus=1)
    with pytest.raises(LcrInputError, match="^router cache_aware: "):
        make_router("cache_aware", 2, cache_threshold="high")


def test_lbgr_paper_load_grows_by_the_routed_cost_decays_and_is_released_on_completion():
    """lbgr_paper's P: each routed request's occupancy, decaying by DECAY every
    DECAY_INTERVAL (the authors' 31/32 per 20 ms; 0.5 per second here), what is left of a
    finished request's share released."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0, slots=1)
    assert PaperLBGRRouter.DECAY == 31 / 32 and PaperLBGRRouter.DECAY_INTERVAL == 0.02
    router = with_constants(PaperLBGRRouter, DECAY=0.5, DECAY_INTERVAL=1.0)(2, service=service, learn=False)
    r = req(0, [1], tokens=1000)
    first = router.route(r, 0.0, [0, 0])
    assert router.load[first] == pytest.approx(1.0)           # 1000 tokens x 1 ms / 1 slot
    # The second request goes to the idle worker: the first's load is now 1.0.
    assert router.route(req(1, [2], tokens=1000), 0.0, [1, 0]) == 1 - first
    router._decay_to(1.0)
    assert router.load[first] == pytest.approx(0.5)            # one interval at 0.5
    router.on_complete(first, r, 1.0, 1.0)
    assert router.load[first] == pytest.approx(0.0)            # its residual share released


def test_lbgr_load_is_queued_prefill_plus_a_slot_wait_only_when_every_slot_is_busy():
    """lbgr's P: the prefill still queued at the worker (each routed request's prefill over
    the prefill lanes, draining 1 s/s, never below empty; a completion takes nothing back
    early), plus, in the score, the wait for a decode slot once all are taken (one slot
    frees every mean decode / slots)."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.01,
                           slots=4, prefill_slots=1)
    router = LBGRRouter(1, service=service, learn=False)
    router._mean_output = 40.0                            # 0.4 s of decode, 0.1 s per slot
    first = req(0, [1], tokens=1000)
    router.route(first, 0.0, [0])
    assert router.load[0] == pytest.approx(1.0)           # the prefill; the decode is not queued
    probe = req(1, [2], tokens=1000)
    waits = [router.estimates(probe, 0.25, [n])[0].load for n in (0, 3, 4, 6)]
    assert waits == pytest.approx([0.75, 0.75, 0.85, 1.05])   # drained 0.25 s; 1, 3 slots short
    assert router.slot_wait(3) == 0.0 and router.slot_wait(4) == pytest.approx(0.1)
    router.on_complete(0, first, 0.5, 0.5)
    assert router.load[0] == pytest.approx(0.5)           # drained 0.5 s, nothing released
    router._decay_to(3.0)
    assert router.load[0] == 0.0


def test_lbgr_counts_a_requests_decode_against_later_ones_only_once_the_slots_are_full():
    """lbgr's queueing term: a request delays each later one at its worker by its prefill,
    and by its decode share only when it takes the last free slot (a continuous batcher
    starts the later request beside it otherwise)."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.01,
                           slots=4, prefill_slots=1)
    router = LBGRRouter(1, service=service, learn=False)
    router._mean_output = 40.0                            # 0.4 s of decode, 0.1 s per slot
    assert [router.queued_occupancy(0, 1000, n) for n in (0, 2, 3, 5)] == pytest.approx([1.0, 1.0, 1.1, 1.1])
    probe = req(0, [1], tokens=1000)
    queueing = []
    for n in (2, 3):
        hold(router, [n])
        queueing.append(router.estimates(probe, 0.0, [n])[0].queueing)
    assert queueing == pytest.approx([2.0, 3.3])


def test_lbgr_keeps_groups_home_in_a_closed_loop_of_few_clients():
    """The simulator's 4-client closed loop (docs/routing.md): in-flight requests that have
    finished their prefill and decode in free slots delay no one, but the paper's decayed
    load counts them until they complete and moves requests off their prefix's worker.
    lbgr keeps cache_aware's hit rate there; lbgr_paper loses to it."""
    service = ServiceModel(miss_s_per_token=5e-5, hit_s_per_token=0.0, decode_s_per_token=0.004,
                           slots=6, prefill_slots=1)
    hits = {name: [] for name in ("cache_aware", "lbgr", "lbgr_paper")}
    for seed in range(6):
        pairs = shared_prefix(groups=8, prompts=6, prompt_tokens=512, prefix_ratio=0.75, output_tokens=4,
                              block_tokens=64, seed=seed)
        requests = with_arrivals(pairs, np.zeros(len(pairs)))
        for name in hits:
            out = simulate(requests, make_router(name, 2, seed, service=service), cache_tokens=1536,
                           service=service, seed=seed, clients=4)
            hits[name].append(out.hit_rate)
    mean = {name: float(np.mean(h)) for name, h in hits.items()}
    assert mean["lbgr"] >= mean["cache_aware"] - 0.005, mean
    assert mean["lbgr_paper"] < mean["cache_aware"] - 0.03, mean


def test_lbgr_in_flight_count_is_the_time_average_of_the_routers_own_count():
    """The queueing term's count is the in-flight count averaged exponentially over the mean
    latency, from the requests the router routed and saw finish (the caller's momentary
    count is ignored); before any latency is known, the count itself."""
    router = LBGRRouter(1, learn=False)
    first, second = req(0, [1], tokens=100), req(1, [2], tokens=100)
    router.route(first, 0.0, [0])
    router.route(second, 0.5, [1])
    assert router.expected_in_flight(0.5, [7]) == [2.0]          # no latency yet: the count
    router.on_complete(0, first, 1.0, latency=1.0)                 # mean latency 1 s; 2 held until now
    assert router.expected_in_flight(1.0, [7]) == [pytest.approx(2.0)]
    # One request in flight since t = 1: 2 + (1 - 2) (1 - e^-1) at t = 2.
    assert router.expected_in_flight(2.0, [7]) == [pytest.approx(2 - (1 - math.exp(-1)))]


def test_lbgr_spreads_a_requests_cost_over_the_workers_slots():
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0, slots=4)
    router = LBGRRouter(1, service=service, learn=False)
    router.route(req(0, [1], tokens=1000), 0.0, [0])
    assert router.load[0] == pytest.approx(0.25)


def test_lbgr_load_takes_a_serialised_prefill_whole():
    """With one prefill lane a miss's prefill delays every later request by all of it."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.01,
                           slots=4, prefill_slots=1)
    assert service.occupancy(0, 1000, 40) == pytest.approx(1.0 + 0.4 / 4)
    router = LBGRRouter(1, service=service, learn=False)
    router.route(req(0, [1], tokens=1000), 0.0, [0])
    assert router.load[0] == pytest.approx(1.0)   # no completions yet: mean output 0


def test_lbgr_keeps_a_prefix_where_the_paper_rule_moves_it():
    """Worker 0 holds the prefix but carries more queued work than a hit saves; both workers
    have requests in flight. The paper's rule (own latency) moves the request to worker 1
    and pays a full prefill there; lbgr counts that prefill against the requests queued
    behind it, and the prefix's second copy, and keeps the request where its prefix is."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0,
                           slots=4, prefill_slots=1)
    request = req(0, [1, 2, 3, 4], tokens=100)          # 400 tokens, 300 of them at worker 0

    def pick(cls, in_flight):
        router = cls(2, service=service, learn=False)
        router.indexes[0].insert(BlockRequest((1, 2, 3), (100,) * 3))
        router.load = [0.5, 0.0]     # hit saves 0.3 s, worker 0 is 0.5 s more loaded
        hold(router, in_flight)
        return router.route(request, 0.0, in_flight)

    assert (pick(PaperLBGRRouter, [3, 3]), pick(LBGRRouter, [3, 3])) == (1, 0)
    # Nothing in flight anywhere: own latency (0.1 + 0.5 s at home, 0.4 s at worker 1) plus,
    # at worker 1, the 0.3 s a second copy of the prefix costs later: it stays, where the
    # paper's rule (own latency only) moves it.
    assert (pick(PaperLBGRRouter, [0, 0]), pick(LBGRRouter, [0, 0])) == (1, 0)

    # The prefix's worker is busy and the other idle: a miss there delays no one, but its
    # second copy of the 300 prefix tokens costs a later request 0.3 s of prefill. At home
    # 0.1 s own + 0.1 s x 5 behind = 0.6 s, at worker 1 0.4 s own + 0.3 s copy = 0.7 s: the
    # request stays; with 8 behind (0.9 s) it moves.
    def behind(count):
        router = LBGRRouter(2, service=service, learn=False)
        router.indexes[0].insert(BlockRequest((1, 2, 3), (100,) * 3))
        hold(router, [count, 0])
        return router.route(request, 0.0, [count, 0])

    assert (behind(5), behind(8)) == (0, 1)
    # The copy's later miss queues behind those at its worker too: 2 there make it 0.3 x 3.
    router = LBGRRouter(2, service=service, learn=False)
    assert router.duplication(300, 2) == pytest.approx(0.9) and router.duplication(0, 2) == 0


def test_recorded_lbgr_decisions_name_the_term_that_moved_a_request():
    from lcr.route.routers import moves_off_home

    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0,
                           slots=4, prefill_slots=1)
    router = LBGRRouter(2, service=service, learn=False, record=True)
    router.indexes[0].insert(BlockRequest((1, 2, 3), (100,) * 3))

    def route(rid, paths, outstanding):
        hold(router, outstanding)
        return router.route(req(rid, paths), 0.0, outstanding)

    assert route(0, [9], [0, 0]) == 1                    # nobody holds it: the emptier index
    assert route(1, [1, 2, 3, 4], [1, 0]) == 0           # stays home
    assert route(2, [1, 2, 3, 5], [8, 0]) == 1           # 8 queued behind: moves
    router.load[1] = 5.0
    assert route(3, [1, 2, 3, 6], [8, 0]) == 0           # unless worker 1 is loaded
    summary = moves_off_home(router.decisions)
    assert summary["decisions"] == 4 and summary["no_match"] == 1
    assert summary["home"] == 2 and summary["moved"] == 1
    assert summary["moved_by"] == {"cost": 0, "load": 0, "residual": 0, "queueing": 1}
    assert summary["placed"] == [0, 1]                                # the unseen prefix's home
    assert [d[3] for d in router.decisions] == [1, 0, 1, 0]
    # Bounded: only the latest RECORD_LIMIT decisions are kept.
    bounded = with_constants(LBGRRouter, RECORD_LIMIT=2)(2, service=service, learn=False, record=True)
    for rid in range(5):
        bounded.route(req(rid, [rid + 20]), 0.0, [0, 0])
    assert [d[0] for d in bounded.decisions] == [3, 4]


def test_lbgr_places_an_unseen_prefix_by_routed_share_not_momentary_load():
    """No worker holds the prefix: lbgr sends it to the worker with the fewest routed tokens
    even though that worker is busier this second; lbgr_paper goes by the score (the less
    loaded worker)."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0,
                           slots=4, prefill_slots=1)
    picks = {}
    for cls in (LBGRRouter, PaperLBGRRouter):
        router = cls(2, service=service, learn=False)
        router.indexes[0].insert(BlockRequest((7, 8, 9), (100,) * 3))   # 300 routed tokens
        router.indexes[1].insert(BlockRequest((5,), (100,)))            # 100
        router.load = [0.0, 0.5]
        picks[cls.name] = router.route(req(0, [1, 2]), 0.0, [1, 2])
    assert picks == {"lbgr": 1, "lbgr_paper": 0}


def test_lbgrs_default_routes_around_a_slow_worker():
    """LBGR (serve-router's and sim-route's), told nothing of it, sends a 3x slower worker
    less work and keeps the TTFT tail far below cache_aware's, which splits the groups
    evenly."""
    import argparse

    from lcr.route.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["serve-router", "--worker-urls", "http://127.0.0.1:1"]).router == "lbgr"
    assert parser.parse_args(["sim-route", "gsp"]).routers.split(",")[-1] == "lbgr"

    base = ServiceModel(miss_s_per_token=2e-4, hit_s_per_token=1e-5, decode_s_per_token=0.01, slots=4)
    slow = ServiceModel(6e-4, 3e-5, 0.03, 4)
    pairs = shared_prefix(groups=64, prompts=8, prompt_tokens=512, output_tokens=32, seed=3)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 8.0, seed=3))
    default = simulate(requests, make_router("lbgr", 2, service=base), cache_tokens=8192, service=[base, slow])
    ca = simulate(requests, make_router("cache_aware", 2), cache_tokens=8192, service=[base, slow])
    assert ca.per_worker_requests == [256, 256]
    assert default.per_worker_requests[1] < 0.7 * 256
    assert default.ttft_p95 < 0.1 * ca.ttft_p95


def test_lbgr_keeps_groups_together_when_prefill_is_the_bottleneck():
    """Prefill-bound cluster near saturation (the paper's regime): the paper's greedy rule
    scatters groups as load noise outweighs a hit, misses eat capacity and queues run away;
    lbgr holds cache_aware's hit rate and keeps TTFT low."""
    service = ServiceModel(miss_s_per_token=1.5e-4, hit_s_per_token=1e-6, decode_s_per_token=0.025,
                           slots=64, prefill_slots=1)
    pairs = shared_prefix(groups=32, prompts=24, prompt_tokens=2176, prefix_ratio=2048 / 2176,
                          output_tokens=256, seed=0)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 10.0, seed=0))
    runs = {name: simulate(requests, make_router(name, 2, service=service), cache_tokens=16384, service=service)
            for name in ("cache_aware", "lbgr_paper", "lbgr")}
    assert runs["lbgr"].hit_rate > runs["cache_aware"].hit_rate - 0.03
    assert runs["lbgr"].hit_rate > runs["lbgr_paper"].hit_rate + 0.1
    assert runs["lbgr"].ttft_p50 < 0.5 * runs["lbgr_paper"].ttft_p50


def test_router_indexes_keep_sglang_routers_bound():
    """LBGR's and cache_aware's indexes keep sglang-router's bound (2^26 characters, ~2^24
    tokens), and LBGR's demand its own, so a long-running serve-router does not grow with
    every prompt it sees."""
    for name in ("lbgr", "lbgr_paper", "cache_aware"):
        assert {index.max_tokens for index in make_router(name, 2).indexes} == {1 << 24}, name
    assert make_router("lbgr", 2).demand.limit == LBGRRouter.PATHS_LIMIT == 1 << 18


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_no_router_sends_work_to_a_removed_worker(name):
    router = make_router(name, 3, seed=1)
    router.remove_worker(1)
    for i in range(60):
        assert router.route(req(i, [i % 5, 100 + i]), float(i), [i % 4, 0, 3]) != 1


# --- the simulator --------------------------------------------------------------------------

def test_one_worker_one_slot_queues_in_order_with_exact_times():
    service = ServiceModel(miss_s_per_token=0.01, hit_s_per_token=0.001, decode_s_per_token=0.1, slots=1)
    requests = [RoutedRequest(0, 0.0, BlockRequest((0, 1), (10, 10)), 5),
                RoutedRequest(1, 0.5, BlockRequest((0, 2), (10, 10)), 5)]
    out = simulate(requests, make_router("round_robin", 1), cache_tokens=100, service=service)
    # First: prefill 20 x 0.01 = 0.2, decode 0.5 -> done at 0.7. Second waits until 0.7, hits 10
    # tokens: prefill 10 x 0.001 + 10 x 0.01 = 0.11, TTFT 0.2 + 0.11, done at 1.31.
    assert out.hit_tokens == 10
    assert sorted([out.ttft_p50 * 2 - 0.2]) == pytest.approx([0.31])  # median of {0.2, 0.31}
    assert out.latency_p95 == pytest.approx(0.7 + 0.95 * (0.81 - 0.7))
    assert out.throughput == pytest.approx(2 / 1.31)


def test_a_completion_frees_its_worker_before_a_simultaneous_arrival_is_routed():
    seen = []

    class Recorder(CacheAwareRouter):
        def route(self, request, now, outstanding):
            seen.append(list(outstanding))
            return super().route(request, now, outstanding)

    service = ServiceModel(miss_s_per_token=0.01, hit_s_per_token=0.0, decode_s_per_token=0.0, slots=1)
    requests = [RoutedRequest(0, 0.0, BlockRequest((0,), (100,)), 0),   # done at exactly 1.0
                RoutedRequest(1, 1.0, BlockRequest((1,), (100,)), 0)]
    simulate(requests, Recorder(1), cache_tokens=1000, service=service)
    assert seen == [[0], [0]]


def test_a_closed_loop_keeps_exactly_its_clients_in_flight():
    """clients=C: each request is sent when an earlier one completes, never more than C in
    flight and C at once when the workers are slow; one client sees no queueing at all."""
    seen = []

    class Recorder(CacheAwareRouter):
        def route(self, request, now, outstanding):
            seen.append((request.rid, now, sum(outstanding)))
            return super().route(request, now, outstanding)

    pairs = shared_prefix(groups=4, prompts=6, prompt_tokens=256, output_tokens=4, seed=2)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 1000.0, seed=2))  # ignored
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.01,
                           slots=1, prefill_slots=1)
    for clients in (1, 3):
        seen.clear()
        out = simulate(requests, Recorder(2), cache_tokens=4096, service=service, clients=clients)
        assert [rid for rid, _, _ in seen] == list(range(len(requests)))   # sent in order
        assert max(n for _, _, n in seen) == clients - 1                     # the others in flight
        assert [now for _, now, _ in seen[:clients]] == [0.0] * clients
        assert all(now > 0 for _, now, _ in seen[clients:])                  # each on a completion
        assert sum(out.per_worker_requests) == len(requests)
    # One client: nothing ever waits, so TTFT is the prefill alone, and the latency the
    # prefill plus 4 decode steps.
    one = simulate(requests, make_router("round_robin", 2), cache_tokens=4096, service=service, clients=1)
    assert one.latency_p50 == pytest.approx(one.ttft_p50 + 0.04)
    assert one.ttft_p95 <= service.prefill(0, 256) + 1e-12
    # As many clients as requests: an open loop with every arrival at 0.
    at_zero = [RoutedRequest(r.rid, 0.0, r.request, r.output_tokens) for r in requests]
    many = simulate(requests, make_router("cache_aware", 2), cache_tokens=4096, service=service,
                    clients=len(requests))
    open_ = simulate(at_zero, make_router("cache_aware", 2), cache_tokens=4096, service=service)
    assert (many.hit_tokens, many.ttft_p50, many.latency_p95) == (open_.hit_tokens, open_.ttft_p50,
                                                                 open_.latency_p95)
    with pytest.raises(ValueError):
        simulate(requests, make_router("round_robin", 2), cache_tokens=4096, clients=0)


def test_service_jitter_is_lognormal_with_mean_one_and_seeded():
    """One client, every prompt a miss: TTFT is the request's own prefill, so its spread is
    the jitter's. Lognormal with mean 1 and log sd 0.5 has median exp(-0.125) = 0.8825."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.0, slots=1)
    requests = [RoutedRequest(i, 0.0, BlockRequest((i,), (100,)), 0) for i in range(4001)]
    run = lambda jitter, seed=3: simulate(requests, make_router("round_robin", 1), cache_tokens=1000,
                                          service=service, clients=1, jitter=jitter, seed=seed)
    assert run(0.0).ttft_p50 == pytest.approx(0.1) and run(0.0).ttft_p95 == pytest.approx(0.1)
    jittered = run(0.5)
    assert jittered.ttft_p50 == pytest.approx(0.1 * np.exp(-0.125), rel=0.03)
    assert jittered.ttft_p95 == pytest.approx(0.1 * np.exp(-0.125 + 1.645 * 0.5), rel=0.05)
    assert run(0.5).ttft_p50 == jittered.ttft_p50 != run(0.5, seed=4).ttft_p50
    with pytest.raises(ValueError):
        run(-0.1)


def test_with_one_worker_every_router_serves_what_the_radix_tree_serves():
    pairs = shared_prefix(groups=8, prompts=6, prompt_tokens=512, seed=5)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 5.0, seed=5))
    tree = RadixTree(2048, RadixLRU())
    expected = sum(tree.serve(r.request, t) for t, r in enumerate(requests))
    for name in ROUTERS:
        out = simulate(requests, make_router(name, 1), cache_tokens=2048,
                       service=ServiceModel(slots=1))
        assert out.hit_tokens == expected, name


def test_cache_aware_keeps_groups_together_better_than_round_robin():
    pairs = shared_prefix(groups=16, prompts=16, prompt_tokens=1024, seed=0)
    requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 4.0, seed=0))
    rr = simulate(requests, make_router("round_robin", 4), cache_tokens=8192)
    ca = simulate(requests, make_router("cache_aware", 4), cache_tokens=8192)
    assert sum(rr.per_worker_requests) == sum(ca.per_worker_requests) == len(requests)
    assert ca.hit_rate > rr.hit_rate + 0.1


def test_shared_prefix_workload_shape():
    pairs = shared_prefix(groups=4, prompts=3, prompt_tokens=300, prefix_ratio=0.5, block_tokens=64)
    assert len(pairs) == 12
    first = {r.paths[:3] for r, _ in pairs}
    assert len(first) == 4                         # one shared 150-token prefix (3 blocks) per group
    assert all(r.total_tokens == 300 for r, _ in pairs)
    assert len({r.paths[-1] for r, _ in pairs}) == 12


def test_shared_prefix_zipf_groups_follow_their_rank():
    uniform = shared_prefix(groups=8, prompts=50, prompt_tokens=128, prefix_ratio=0.5, seed=1)
    skewed = shared_prefix(groups=8, prompts=50, prompt_tokens=128, prefix_ratio=0.5,
                           zipf_alpha=1.2, seed=1)
    def sizes(pairs):
        counts = {}
        for r, _ in pairs:
            counts[r.paths[0]] = counts.get(r.paths[0], 0) + 1
        return [counts.get(g, 0) for g in range(0, 8)]   # group g's first block is path g
    assert sizes(uniform) == [50] * 8
    skew = sizes(skewed)
    assert sum(skew) == 400 and skew[0] > 2 * skew[3] > 0
    assert len({r.paths[-1] for r, _ in skewed}) == 400       # every question its own
    with pytest.raises(ValueError):
        shared_prefix(zipf_alpha=-1)


def test_prefix_demand_reads_a_steady_rate_and_forgets_past_its_limit():
    from lcr.route.prefix_demand import PrefixDemand

    demand = PrefixDemand(horizon=2.0, limit=3)
    for i in range(400):                           # 5 requests/s through blocks 1 and 2
        demand.record([1, 2], i / 5)
    assert demand.rate(7, 79.8) == 0.0 and demand.rate(None, 79.8) == 0.0
    # Each request adds 1/horizon, decaying by e per horizon: a steady 5/s reads 5 (to the
    # discretisation of 0.2 s steps), and 2 s later e times less.
    assert demand.rate(1, 79.8) == pytest.approx(5.0, rel=0.06)
    assert demand.rate(1, 81.8) == pytest.approx(demand.rate(1, 79.8) / math.e)
    demand.record([3, 4], 80.0)                    # past the limit: the least recently routed goes
    assert demand.rate(1, 80.0) == 0.0 and demand.rate(2, 80.0) == pytest.approx(5.0 * math.exp(-0.1), rel=0.06)
    with pytest.raises(ValueError):
        PrefixDemand(horizon=0)


def test_lbgr_a_hot_prefixs_second_copy_costs_nothing():
    """A held prefix whose requests arrive at HOT_SHARE or more of a worker's capacity
    (slots over the mean decode time) is hot: copying it to another worker is not charged
    the second-copy cost (its own later requests fill the copy). A cold one is; HOT_SHARE 0
    charges it always."""
    service = ServiceModel(miss_s_per_token=1e-3, hit_s_per_token=0.0, decode_s_per_token=0.01,
                           slots=4, prefill_slots=1)

    def copy_cost(rate, **constants):
        router = with_constants(LBGRRouter, **constants)(2, service=service, learn=False)
        router._mean_output = 100.0                # 1 s of decode: capacity 4 requests/s
        router.indexes[0].insert(BlockRequest((1, 2, 3), (100,) * 3))
        for i in range(int(rate * 60)):            # a minute of requests through the prefix
            router.demand.record([1, 2, 3], i / rate)
        # Nothing in flight: worker 1's queueing term is the copy's cost alone.
        return router.estimates(req(0, [1, 2, 3, 4]), 60.0, [0, 0])[1].queueing

    cold, hot = copy_cost(0.5), copy_cost(2.0)     # 1/8 and 1/2 of a worker
    assert cold == pytest.approx(LBGRRouter(2, service=service).duplication(300, 0))
    assert hot == 0.0
    assert copy_cost(2.0, HOT_SHARE=0) == pytest.approx(cold)
    assert copy_cost(2.0, HOT_SHARE=0.6) == pytest.approx(cold)


def test_lbgr_lets_a_hot_group_take_a_second_worker():
    """Skewed groups (zipf 1.0: the hottest has 18% of the requests) on prefill-bound workers
    at 28 req/s: charged the second-copy cost, LBGR kept the hot group on a worker it
    overloaded; as a hot prefix the copy is free and the TTFT tail falls, at the same hit
    rate."""
    service = ServiceModel(miss_s_per_token=1.5e-4, hit_s_per_token=1e-6, decode_s_per_token=0.025,
                           slots=64, prefill_slots=1)
    runs = {}
    for seed in (0, 1, 2):
        pairs = shared_prefix(groups=128, prompts=32, prompt_tokens=2176, prefix_ratio=2048 / 2176,
                              output_tokens=256, zipf_alpha=1.0, seed=seed)
        requests = with_arrivals(pairs, poisson_arrivals(len(pairs), 28.0, seed))
        for name, cls in (("hot", LBGRRouter), ("always charged", with_constants(LBGRRouter, HOT_SHARE=0))):
            out = simulate(requests, cls(4, seed, service=service), policy="lru",
                           cache_tokens=65536, service=service, seed=seed)
            runs.setdefault(name, []).append((out.hit_rate, out.ttft_p95))
    hot, charged = np.array(runs["hot"]), np.array(runs["always charged"])
    assert hot[:, 1].mean() < 0.5 * charged[:, 1].mean(), runs
    assert hot[:, 0].mean() >= charged[:, 0].mean() - 0.005, runs


def test_shared_prefix_hit_ceilings_count_what_a_cluster_can_hold():
    """Two groups of two prompts (64-token prefix, 128-token prompts), in grouped order
    A A B B, a cluster holding one prefix: independent draws hit at most half the requests,
    on half their tokens; a policy counting prompts down holds, before each request, the
    group with the most left: 2/4, 2/3 (A has 1, B 2), 2/2, 1/1 of the requests."""
    from lcr.route.workload import shared_prefix_hit_ceilings

    pairs = shared_prefix(groups=2, prompts=2, prompt_tokens=128, prefix_ratio=0.5, block_tokens=32,
                          order="grouped")
    ceilings = shared_prefix_hit_ceilings(pairs, 64)
    assert ceilings["independent"] == pytest.approx(0.5 * 0.5)
    assert ceilings["count_aware"] == pytest.approx((2 / 4 + 2 / 3 + 1 + 1) / 4 * 0.5)
    # Half a prefix held: half of the largest group's share; everything held: every prefix token.
    assert shared_prefix_hit_ceilings(pairs, 32)["independent"] == pytest.approx(0.25 * 0.5)
    assert shared_prefix_hit_ceilings(pairs, 10_000) == pytest.approx({"independent": 0.5, "count_aware": 0.5})
    # Skewed groups: the largest groups' share, not a uniform one.
    skewed = shared_prefix(groups=8, prompts=50, prompt_tokens=128, prefix_ratio=0.5, zipf_alpha=1.2, seed=1)
    counts = sorted(np.bincount([r.paths[0] for r, _ in skewed]), reverse=True)
    assert shared_prefix_hit_ceilings(skewed, 2 * 64)["independent"] == pytest.approx(sum(counts[:2]) / 400 * 0.5)
    with pytest.raises(ValueError):
        shared_prefix_hit_ceilings([], 64)


def test_one_prefill_lane_queues_prefills_but_not_decodes():
    service = ServiceModel(miss_s_per_token=0.01, hit_s_per_token=0.0, decode_s_per_token=0.1,
                           slots=2, prefill_slots=1)
    requests = [RoutedRequest(0, 0.0, BlockRequest((0,), (10,)), 5),
                RoutedRequest(1, 0.0, BlockRequest((1,), (10,)), 5)]
    out = simulate(requests, make_router("round_robin", 1), cache_tokens=100, service=service)
    # Prefills 0.1 s each, one after the other: TTFTs 0.1 and 0.2. Decodes overlap: done at
    # 0.6 and 0.7. With a lane per slot both would have TTFT 0.1 and finish at 0.6.
    assert out.ttft_p50 == pytest.approx(0.15)
    assert out.latency_p95 == pytest.approx(0.6 + 0.95 * 0.1)
    parallel = simulate(requests, make_router("round_robin", 1), cache_tokens=100,
                        service=ServiceModel(0.01, 0.0, 0.1, slots=2))
    assert parallel.ttft_p95 == pytest.approx(0.1) and parallel.latency_p95 == pytest.approx(0.6)
    with pytest.raises(ValueError):
        ServiceModel(slots=2, prefill_slots=3)


def test_azure_arrivals_follow_the_trace_and_rescale():
    path = data_file("serving/AzureLLMInferenceTrace_conv.csv")
    raw = azure_arrivals(path, 500)
    assert raw[0] == 0 and np.all(np.diff(raw) >= 0)
    scaled = azure_arrivals(path, 30_000, rate=10.0)   # more than the trace: repeated
    assert len(scaled) == 30_000 and np.all(np.diff(scaled) >= 0)
    assert 30_000 / scaled[-1] == pytest.approx(10.0, rel=0.05)


def test_trace_arrivals_start_at_zero_and_rescale_to_the_mean_rate():
    from lcr.route.workload import trace_arrivals

    assert list(trace_arrivals([10.0, 11.0, 13.0, 16.0, 99.0], 4)) == [0.0, 1.0, 3.0, 6.0]
    assert list(trace_arrivals([10.0, 11.0, 13.0, 16.0], 4, rate=1.0)) == pytest.approx([0.0, 0.5, 1.5, 3.0])
    for times in (None, [1.0, 2.0], [3.0, 1.0, 2.0, 4.0]):   # none, too few, out of order
        with pytest.raises(ValueError):
            trace_arrivals(times, 4)


def test_sim_route_cli_runs_and_rejects_bad_input(tmp_path):
    def lcr(*args):
        return subprocess.run([sys.executable, "-m", "lcr", "sim-route", *args],
                              capture_output=True, text=True, timeout=120)

    ok = lcr("gsp:groups=4,prompts=4", "--workers", "2", "--routers", "cache_aware,lbgr:record=1,lbgr_paper",
             "--json", str(tmp_path / "r.json"))
    assert ok.returncode == 0, ok.stderr
    assert "cache_aware" in ok.stdout and (tmp_path / "r.json").exists()
    closed = lcr("gsp:groups=4,prompts=4", "--workers", "2", "--routers", "round_robin",
                 "--arrivals", "closed:clients=3")
    assert closed.returncode == 0 and "closed:clients=3" in closed.stdout, closed.stderr
    for bad in (["gsp:groups=0"], ["gsp", "--workers", "0"], ["gsp", "--routers", "nope"],
                ["gsp", "--arrivals", "poisson:rate=-1"], ["gsp", "--policies", "opt"],
                ["gsp", "--routers", "lbgr:queueing=none"], ["gsp", "--slots", "0"],
                ["gsp", "--limit", "0"], ["gsp", "--seed", "-1"],
                ["gsp", "--routers", "cache_aware:defaults=0.2"], ["gsp", "--arrivals", "closed:clients=0"],
                ["gsp", "--arrivals", "closed:rate=2"], ["gsp", "--service-jitter", "-1"]):
        out = lcr(*bad)
        assert out.returncode == 2, (bad, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    # An option lbgr does not take is named (the removed experiments among them).
    assert "unknown option(s) queueing" in lcr("gsp", "--routers", "lbgr:queueing=none").stderr


def test_serve_router_rejects_bad_input_in_one_line():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for bad in (["--worker-urls", "http://127.0.0.1:1", "--port", port],     # port in use
                    ["--worker-urls", "ftp://x"], ["--worker-urls", ","],
                    ["--worker-urls", "http://127.0.0.1:1", "--router", "lbgr:load=decay"],
                    ["--worker-urls", "http://127.0.0.1:1", "--port", "70000"]):
            out = subprocess.run([sys.executable, "-m", "lcr", "serve-router", *bad],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 2, (bad, out.stderr)
            assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, (bad, out.stderr)


def test_proxy_answers_503_when_no_worker_is_reachable_and_takes_them_out():
    import asyncio
    import json
    import socket

    from lcr.route.serve import RoutingProxy

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])      # closed again: connections are refused
    proxy = RoutingProxy([f"http://127.0.0.1:{p}" for p in ports], make_router("round_robin", 2))

    async def run():
        try:
            return await proxy.forward("/generate", json.dumps({"input_ids": [1, 2, 3]}).encode())
        finally:
            await proxy.close()

    status, _, worker = asyncio.run(run())
    metrics = proxy.metrics()
    assert status == 503 and worker is None and metrics["lost"] == 1 and metrics["retries"] == 1
    assert [w["alive"] for w in metrics["workers"]] == [False, False]
    assert proxy.outstanding == [0, 0]


def _through_proxy(workers, client_steps):
    """Serve a round-robin proxy over StubWorkers on a real port and run ``client_steps(url,
    proxy, session)``; returns its result and the proxy."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from lcr.route.serve import RoutingProxy, create_app

    async def run():
        urls = [await w.start() for w in workers]
        proxy = RoutingProxy(urls, make_router("round_robin", len(urls)))
        runner = web.AppRunner(create_app(proxy))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = "http://127.0.0.1:%d" % runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                return await client_steps(url, proxy, session), proxy
        finally:
            await runner.cleanup()
            for w in workers:
                await w.stop()

    return asyncio.run(run())


def test_stub_worker_refuses_what_is_not_http1_and_keeps_serving():
    """sglang-router probes its workers for gRPC (HTTP/2's preface) as well: the stand-in
    must answer that, a bad length and a body that is not a JSON object with a 400 and
    close, not fail inside its handler, and still serve HTTP/1.1."""
    import asyncio

    from lcr.route.stub_worker import StubWorker

    async def exchange(port, data, until_closed):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        # the refusal must close the connection; /health keeps it alive (2-byte body)
        reply = reader.read() if until_closed else reader.readuntil(b"\r\n\r\nok")
        reply = await asyncio.wait_for(reply, 5)
        writer.close()
        return reply

    async def run():
        worker = StubWorker()
        port = int((await worker.start()).rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        failures = []
        loop.set_exception_handler(lambda _loop, context: failures.append(context))
        try:
            refused = [await exchange(port, data, True) for data in (
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                b"POST /generate HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                b"POST /generate HTTP/1.1\r\nContent-Length: 3\r\n\r\n[1]")]
            health = await exchange(port, b"GET /health HTTP/1.1\r\n\r\n", False)
        finally:
            await worker.stop()
        return refused, health, failures

    refused, health, failures = asyncio.run(run())
    assert [reply.split(b"\r\n")[0] for reply in refused] == [b"HTTP/1.1 400 Bad Request"] * 3
    assert health.startswith(b"HTTP/1.1 200 ")
    assert failures == []


def test_proxy_streams_replies_through_byte_for_byte():
    from lcr.route.stub_worker import StubWorker

    body = {"text": "hello", "stream": True}
    expected = b"".join(b'data: {"text": "%s"}\n\n' % (b"x" * (i + 1)) for i in range(4)) + b"data: [DONE]\n\n"

    async def steps(url, proxy, session):
        async with session.post(url + "/generate", json=body) as reply:
            whole = (reply.status, reply.headers["X-Lcr-Worker"], await reply.read())
        async with session.post(url + "/generate", json={"text": "plain"}) as reply:
            plain = (reply.headers["X-Lcr-Worker"], await reply.json())
        return whole, plain

    (status, worker, data), plain = _through_proxy([StubWorker(), StubWorker()], steps)[0]
    assert (status, worker, data) == (200, "0", expected)       # byte for byte, as streamed
    assert plain == ("1", {"text": "xxxx", "meta_info": {}})


def test_proxy_counts_a_client_that_leaves_as_finished():
    import asyncio

    from lcr.route.stub_worker import StubWorker

    async def steps(url, proxy, session):
        reply = await session.post(url + "/generate", json={"text": "a", "stream": True})
        await reply.content.readany()
        reply.close()
        for _ in range(200):
            if proxy.outstanding == [0, 0]:
                break
            await asyncio.sleep(0.01)
        return list(proxy.outstanding)

    outstanding, proxy = _through_proxy([StubWorker(chunks=50, chunk_gap_s=0.02), StubWorker()], steps)
    assert outstanding == [0, 0]
    assert proxy.metrics()["workers"][0]["alive"] is True       # leaving is not the worker's fault


def test_proxy_ends_a_broken_stream_with_an_error_event_and_retries_a_worker_that_never_answered():
    from lcr.route.serve import StreamedReply
    from lcr.route.stub_worker import StubWorker

    async def steps(url, proxy, session):
        out = []
        for _ in range(2):
            async with session.post(url + "/generate", json={"text": "a", "stream": True}) as reply:
                out.append((reply.status, reply.headers.get("X-Lcr-Worker"), await reply.read()))
        return out

    # worker 0 dies after two events; worker 1 closes before its first byte, so the proxy
    # can still retry that request, on worker 2
    workers = [StubWorker(break_after=2), StubWorker(break_after=0), StubWorker()]
    (broken, retried), proxy = _through_proxy(workers, steps)
    assert broken[:2] == (200, "0") and broken[2].endswith(StreamedReply.ERROR_EVENT)
    assert broken[2].count(b"data: ") == 3          # two events, then the error
    assert retried[:2] == (200, "2") and retried[2].endswith(b"data: [DONE]\n\n")
    metrics = proxy.metrics()
    assert [w["alive"] for w in metrics["workers"]] == [False, False, True]
    assert metrics["retries"] == 1 and metrics["lost"] == 0
    assert proxy.outstanding == [0, 0, 0]


def test_prompt_blocks_share_ids_exactly_along_a_shared_prefix():
    from lcr.route.serve import prompt_blocks

    a = prompt_blocks({"input_ids": list(range(200))}, block_tokens=64)
    b = prompt_blocks({"input_ids": list(range(128)) + [9] * 72}, block_tokens=64)
    assert a.tokens == (64, 64, 64, 8)
    assert a.paths[:2] == b.paths[:2] and a.paths[2] != b.paths[2]
    text = prompt_blocks({"text": "x" * 300}, block_tokens=64)  # 256 characters per block
    assert text.tokens == (64, 11)
    with pytest.raises(ValueError):
        prompt_blocks({"input_ids": [[1, 2]]})


def test_simulated_workers_cache_with_the_request_index_as_the_clock(monkeypatch):
    """A worker's tree serves request i at time i, whatever order the cluster starts
    requests in, so policies that read per-request data (LPC's probabilities, an oracle's
    next use) find the request they serve. Round robin over 2 one-slot workers: request 2
    waits behind the long request 0 while request 3 starts on the idle worker first."""
    import lcr.route.sim as route_sim

    served = []

    class Recording(RadixTree):
        def serve(self, request, now):
            served.append((request.paths[0], now))
            return super().serve(request, now)

    monkeypatch.setattr(route_sim, "RadixTree", Recording)
    requests = [req(0, [10], out=50), req(1, [11], out=1, t=0.1), req(2, [12], out=1, t=0.2),
                req(3, [13], out=1, t=0.3)]
    simulate(requests, make_router("round_robin", 2), cache_tokens=1000,
             service=ServiceModel(0.001, 0.0, 0.1, slots=1))
    assert [path for path, _ in served] == [10, 11, 13, 12]    # started out of index order
    assert served == [(10, 0), (11, 1), (13, 3), (12, 2)]
    with pytest.raises(ValueError):                              # not in arrival order
        simulate([requests[1], requests[0]], make_router("round_robin", 2), cache_tokens=1000)


def test_sim_route_runs_lpc_on_the_sharegpt_replay_and_refuses_it_elsewhere(tmp_path):
    """The ShareGPT multi-turn replay as a routed workload, with the LPC policies (their
    per-request probabilities from the chat trace) and the replay's own arrival times."""
    chats = data_file("chat/sharegpt_v3_sample1000.jsonl")
    spec = f"sharegpt:path={chats},conversations=120"
    out = subprocess.run([sys.executable, "-m", "lcr", "sim-route", spec, "--workers", "2", "--cache-tokens", "4096",
                          "--routers", "cache_aware", "--policies", "lru,lpc:model=oracle,lpc:model=oracle;invert=1",
                          "--arrivals", "trace:rate=2", "--json", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    hit = {r["policy"]: r["hit_rate"] for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    # The oracle keeps the conversations that go on; inverted, it keeps those that ended.
    assert hit["lpc:model=oracle"] > 1.05 * hit["lru"] > 1.05 * hit["lpc:model=oracle,invert=1"], hit
    for bad in (["gsp:groups=4,prompts=4", "--policies", "lpc:model=oracle"],
                ["gsp:groups=4,prompts=4", "--arrivals", "trace"],
                [spec, "--arrivals", "trace:speed=2"]):
        run = subprocess.run([sys.executable, "-m", "lcr", "sim-route", *bad], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 2, (bad, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr, run.stderr


def test_route_sim_as_a_library_runs_every_policy_lcrs_tree_runs_lpc_included():
    """``lcr.route.sim`` imported alone (no CLI) registers LPC's policies itself, and its
    KV_POLICIES are the radix registry's policies for lcr's tree."""
    chats = data_file("chat/sharegpt_v3_sample1000.jsonl")
    code = f"""
import lcr.route.sim as route_sim
from lcr.kv import registry
from lcr.route.routers import make_router
from lcr.route.workload import RoutedRequest, from_trace
from lcr.traces import load_trace

ours = [name for name in registry.POLICIES
        if "lcr" in registry.policy(name).engines and not registry.policy(name).offline]
assert list(route_sim.KV_POLICIES) == ours and {{"lpc", "lpc-oracle", "laru-lpc", "fpb"}} <= set(ours), ours
assert "opt" not in ours  # a worker's future depends on the routing
trace = load_trace("sharegpt:path={chats},conversations=20")
requests = [RoutedRequest(i, float(i), r, out) for i, (r, out) in enumerate(from_trace(trace, 64))]
result = route_sim.simulate(requests, make_router("round_robin", 2), cache_tokens=2048,
                            policy="lpc:model=oracle", meta=trace.meta)
print(result.policy, result.requests)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "lpc:model=oracle"


def test_live_benchmarks_keep_one_entry_per_setting_and_a_rerun_overwrites_its_own(tmp_path):
    """benchmarks/routing_live.py and router_overhead.py write one results file each, keyed
    by setting: a re-run of a setting replaces its entry, other settings stay, and the
    routers compared or the repeats do not make a new setting."""
    import argparse

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from results_file import update_entry
    from routing_live import setting

    def args(**changes):
        base = dict(workers=2, clients=4, model="tiny", groups=8, prompts=6, prefix_words=300, suffix_words=100,
                    pool_tokens=2048, max_new_tokens=4, keep_alive=False, pin_workers=True,
                    routers="lcr:lbgr,sglang:cache_aware", repeats=3)
        return argparse.Namespace(**{**base, **changes})

    assert setting(args()) == setting(args(routers="lcr:cache_aware", repeats=6))
    keys = {setting(args()), setting(args(clients=16)), setting(args(keep_alive=True)), setting(args(pin_workers=False))}
    assert len(keys) == 4
    out = tmp_path / "live.json"
    update_entry(out, setting(args()), {"run": 1})
    update_entry(out, setting(args(clients=16)), {"run": 2})
    update_entry(out, setting(args()), {"run": 3})
    assert json.loads(out.read_text()) == {setting(args()): {"run": 3}, setting(args(clients=16)): {"run": 2}}
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    assert not list(results.glob("routing_live_*")) and not list(results.glob("router_overhead_*"))


def test_routing_docs_tables_are_the_results_files():
    """Every table row docs/routing.md shows for a benchmark is what
    benchmarks/routing_tables.py prints from benchmarks/results/: a re-run that leaves the
    docs behind (or a hand-edited number) fails here."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "routing_tables.py")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    docs = (root / "docs" / "routing.md").read_text().splitlines()
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 60
    assert [row for row in rows if row not in docs] == []


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(ROUTERS)),
       option=st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True),
       value=st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=8)))
def test_any_option_a_router_does_not_name_is_refused_in_one_line(name, option, value):
    """Fuzz: whatever option a router's OPTIONS do not name is refused with one line that
    names it, never accepted or raised as a traceback."""
    assume(option not in ROUTERS[name].OPTIONS and option not in ("workers", "seed", "service", "name"))
    with pytest.raises(LcrInputError) as refused:
        make_router(name, 2, **{option: value})
    message = str(refused.value)
    assert "\n" not in message and f"unknown option(s) {option};" in message


def test_routing_benchmark_rerun_of_some_sections_keeps_the_others():
    """benchmarks/routing.py writes one results file: a run of some sections replaces
    those and keeps the rest; a file from another setup is replaced whole."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from routing import merge_sections

    setup = {"service": {"slots": 64}, "gsp": {"prompt_tokens": 2176}, "seeds": [0, 1, 2]}
    full = {**setup, "sections": ["rates", "zipf"], "gsp_rates": [1], "gsp_zipf": [2], "seconds": 400}
    rerun = {**setup, "sections": ["zipf"], "gsp_zipf": [3], "seconds": 50}
    merged = merge_sections(full, rerun)
    assert merged["gsp_rates"] == [1] and merged["gsp_zipf"] == [3]
    assert merged["sections"] == ["rates", "zipf"] and merged["last_run_sections"] == ["zipf"]
    other = {**rerun, "seeds": [0]}
    assert merge_sections(full, other) == other
