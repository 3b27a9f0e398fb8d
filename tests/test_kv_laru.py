"""Radix LARU: its rules (lambda, window, shrink), the incremental window against the
sorting reference (``RadixLARUSpec``), both promises on small workloads, and the learned
node predictor's start-up."""
from __future__ import annotations

import math

import pytest

from conftest import real_trace
from lcr.kv import PathOracle, RadixTree, build_workload, make_policy, replay_lcr
from lcr.kv.laru import RadixLARU
from lcr.kv.policies import CacheView
from lcr.kv.spec import RadixLARUSpec
from lcr.traces import generate


class Table:
    """Predictions from a dict (key -> predicted next use), recording every call."""

    def __init__(self, values):
        self.values = values
        self.calls: list[list[int]] = []

    def predict(self, keys, now):
        self.calls.append(list(keys))
        return [self.values.get(k, 0.0) for k in keys]


class Nodes(CacheView):
    """A flat cache of equal nodes, every one a leaf: the protocol without a tree."""

    capacity_tokens = 10**6

    def __init__(self, policy):
        self.policy = policy.bind(self)

    def cached_keys(self):
        return list(self.policy.last_access)

    def tokens_of(self, keys):
        return 10 * len(list(keys))


def filled(cls, n, values, **options):
    """A LARU over leaves 0..n-1 accessed in that order (0 oldest). No engine sends
    requests here, so the rules are pinned (``earned``, ``nodes``) unless given."""
    policy = cls(Table(values), **{"confidence": "earned", "phase": "nodes", **options})
    Nodes(policy)
    for key in range(n):
        policy.on_access([key], key, [10])
    return policy


@pytest.mark.parametrize("cls", [RadixLARU, RadixLARUSpec])
def test_the_window_is_exactly_the_floor_of_lambda_k_oldest_leaves(cls):
    # 10 leaves, lambda = 1/2 after one induced miss: l = floor(0.5 * 9) = 4 of the 9 left.
    policy = filled(cls, 10, {5: 100.0})
    policy.begin_eviction(None, 10)
    assert policy.pick_victim(set(range(10)), 10) == 5  # lambda = 1: every leaf is a candidate
    policy.on_evicted(5)
    policy.begin_eviction(5, 11)  # 5 was evicted by a prediction: induced miss
    assert policy.lam == 0.5
    leaves = set(range(10)) - {5}
    assert policy.pick_victim(leaves, 11) == 0  # the induced miss's round follows LRU
    policy.on_evicted(0)
    policy.predictor.calls.clear()
    policy.predictor.values = {4: 50.0, 6: 60.0}
    policy.begin_eviction(None, 12)
    assert policy.window == math.floor(0.5 * 8) == 4
    assert policy.pick_victim(leaves - {0}, 12) == 4  # 6 is the 5th oldest: outside
    assert sorted(policy.predictor.calls[0]) == [1, 2, 3, 4]


@pytest.mark.parametrize("shrink_every, lams", [(1, [0.5, 0.25, 0.125]), (2, [1.0, 0.5, 0.5])])
def test_lambda_shrinks_by_b_once_every_shrink_every_induced_misses(shrink_every, lams):
    policy = filled(RadixLARU, 64, {}, shrink_every=shrink_every)
    seen = []
    for i, key in enumerate([5, 6, 7]):  # each: evicted by prediction, then missed
        policy.predictor.values = {key: 1e9}
        policy.begin_eviction(None, 100 + 2 * i)
        assert policy.pick_victim(set(policy.last_access), 100 + 2 * i) == key
        policy.on_evicted(key)
        policy.begin_eviction(key, 101 + 2 * i)
        seen.append(policy.lam)
    assert seen == lams
    assert policy.stats.extra["prediction_induced_misses"] == 3


@pytest.mark.parametrize("confidence, after_miss, after_clean",
                         [("phase", 1.0, 1.0), ("earned", 0.5, 1.0), ("guarded", 0.25, 0.5)])
def test_phase_start_resets_lambda_or_earns_it_back(confidence, after_miss, after_clean):
    policy = filled(RadixLARU, 4, {2: 9.0}, confidence=confidence, induced="phase")
    policy.begin_eviction(None, 4)
    assert policy.pick_victim({0, 1, 2, 3}, 4) == 2
    policy.on_evicted(2)
    policy.begin_eviction(2, 5)
    assert policy.lam == 0.5
    policy.on_access([0, 1, 3], 6, [10, 10, 10])  # every old node requested: phase over
    policy.begin_eviction(2, 7)  # 2 was recorded in the previous phase: not induced now
    assert policy.stats.extra["phases"] == 2 and policy.lam == after_miss
    assert policy.stats.extra["prediction_induced_misses"] == 1
    policy.on_access([0, 1, 3], 8, [10, 10, 10])  # a phase without induced misses
    policy.begin_eviction(None, 9)
    assert policy.stats.extra["phases"] == 3 and policy.lam == after_clean


@pytest.mark.parametrize("confidence, later_victim", [("earned", 3), ("guarded", 1)])
def test_guarded_confidence_follows_lru_for_the_rest_of_an_induced_miss_phase(confidence, later_victim):
    policy = filled(RadixLARU, 6, {2: 9.0, 3: 8.0}, confidence=confidence)
    policy.begin_eviction(None, 6)
    assert policy.pick_victim(set(range(6)), 6) == 2
    policy.on_evicted(2)
    policy.begin_eviction(2, 7)  # induced: this round is LRU under every rule
    assert policy.pick_victim({0, 1, 3, 4, 5}, 7) == 0
    policy.on_evicted(0)
    policy.begin_eviction(None, 8)  # same phase (1, 3, 4, 5 still unrequested), a new round
    assert policy.stats.extra["phases"] == 1
    assert policy.pick_victim({1, 3, 4, 5}, 8) == later_victim  # earned: window {1, 3}


def test_stale_induced_miss_needs_a_node_unrequested_since_that_eviction():
    policy = filled(RadixLARU, 4, {2: 9.0}, induced="stale")
    policy.begin_eviction(None, 4)
    assert policy.pick_victim({0, 1, 2, 3}, 4) == 2
    policy.on_evicted(2)
    policy.on_access([0, 1, 3], 5, [10, 10, 10])  # everything cached was requested since
    policy.begin_eviction(2, 6)
    assert policy.stats.extra["prediction_induced_misses"] == 0 and policy.lam == 1.0
    policy.predictor.values = {1: 9.0}
    assert policy.pick_victim({0, 1, 3}, 6) == 1
    policy.on_evicted(1)
    policy.begin_eviction(1, 7)  # 0 and 3 not requested since 1 went: induced
    assert policy.stats.extra["prediction_induced_misses"] == 1 and policy.lam == 0.5


def test_only_decisive_predictions_count_and_are_recorded():
    policy = filled(RadixLARU, 4, {0: 9.0})  # the prediction agrees with LRU
    policy.begin_eviction(None, 4)
    assert policy.pick_victim({0, 1, 2, 3}, 4) == 0
    assert policy.stats.prediction_evictions == 0 and policy.stats.lru_evictions == 1
    assert not policy.evicted_by_prediction


def recorded(cls, w, capacity, predictor, **options):
    class Recording(cls):
        def on_evicted(self, key):
            self.victims.append(key)
            super().on_evicted(key)

    policy = Recording(predictor, **options)
    policy.victims = []
    hits = replay_lcr(w, capacity, policy)
    return hits, policy.victims, policy.stats


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("options", [{}, {"check": "insert", "record": "phase", "fallback": "one"},
                                     {"shrink_every": 0, "phase": "tokens", "induced": "phase",
                                      "confidence": "phase"},
                                     {"phase": "tokens", "confidence": "guarded"},
                                     {"phase": "nodes", "confidence": "earned"}])
def test_incremental_window_makes_the_spec_decisions_victim_by_victim(noise, options):
    trace = real_trace("mooncake")
    w = build_workload(trace.head(int(trace.request_offsets[600])))
    capacity = w.distinct_tokens // 20
    fast = recorded(RadixLARU, w, capacity, PathOracle(w, noise, seed=3), **options)
    spec = recorded(RadixLARUSpec, w, capacity, PathOracle(w, noise, seed=3), **options)
    assert len(fast[1]) > 100
    assert fast[1] == spec[1] and fast[0] == spec[0]
    # One batch per round at most, plus one per newcomer pick: far fewer than the spec's.
    assert fast[2].predictor_calls < spec[2].predictor_calls


def test_oracle_laru_equals_leaf_opt_and_inverted_stays_near_lru():
    # The earned/nodes rules (the pre-shadow default). The shadow default is 0.943 of
    # LRU at 5% here: LRU's first hit comes at request 1,420, so nothing can be judged
    # before it (docs/kv.md); it is checked on the 2.5% Online-QA cell below.
    w = build_workload(generate("online_qa:conversations=400,seed=2"))
    for capacity in (w.distinct_tokens * 5 // 100, w.distinct_tokens * 10 // 100):
        opt = replay_lcr(w, capacity, make_policy("opt", w))
        lru = replay_lcr(w, capacity, make_policy("lru", w))
        assert replay_lcr(w, capacity, RadixLARU(PathOracle(w))) >= 0.995 * opt
        rules = dict(confidence="earned", phase="nodes")
        assert replay_lcr(w, capacity, RadixLARU(PathOracle(w, 1.0), **rules)) >= 0.98 * lru


def test_the_tree_tells_the_policy_each_miss():
    w = build_workload(generate("online_qa:conversations=50,seed=1"))

    class Watch(RadixLARU):
        misses: list = []

        def on_miss(self, key, now):
            self.misses.append((key, now))
            super().on_miss(key, now)

    policy = Watch(PathOracle(w))
    tree = RadixTree(w.distinct_tokens, policy)
    for now, request in enumerate(w.requests):
        tree.serve(request, now)
    assert len(policy.misses) == sum(1 for _ in w.requests) - sum(
        1 for t, r in enumerate(w.requests) if all(w.next_use(p, -1) < t for p in r.paths))


def test_a_split_counts_as_a_request_of_the_node_so_its_lower_part_does_not_hold_the_phase():
    policy = filled(RadixLARU, 2, {})
    policy.begin_eviction(None, 2)  # phase 1: O = {0, 1}
    policy.on_split(0, 100)  # a request diverged inside node 0
    policy.on_access([0, 1], 3, [10, 20])
    policy.begin_eviction(None, 4)
    assert policy.stats.extra["phases"] == 2


def test_shrink_every_defaults_to_every_miss_and_zero_means_k_over_32():
    assert RadixLARU(Table({})).shrink_every == 1
    assert RadixLARU(Table({}), shrink_every=None).shrink_every == 1
    policy = filled(RadixLARU, 100, {}, shrink_every=0)
    policy.begin_eviction(None, 100)
    assert policy.shrink_every == 100 // 32


@pytest.mark.parametrize("rules", [{}, {"phase": "tokens", "confidence": "guarded"}],
                         ids=["shadow-default", "guarded"])
def test_default_and_guarded_rules_keep_inverted_laru_within_2_percent_of_lru_on_a_tiny_cache(rules):
    # Online-QA at 2.5%: LRU hits 1.2% of the tokens, so a few bad evictions are a large
    # share; earned/nodes lose 3.6% here, Algorithm 1's phase reset 10% (docs/kv.md),
    # the shadow default and guarded 1.4%.
    w = build_workload(generate("online_qa:conversations=2000"))
    capacity = round(w.distinct_tokens * 0.025)
    lru = replay_lcr(w, capacity, make_policy("lru", w))
    inverted = RadixLARU(PathOracle(w, 1.0), **rules)
    assert replay_lcr(w, capacity, inverted) >= 0.98 * lru
    if not rules:  # the shadow is LRU exactly: same hit tokens as LRU's own replay
        assert inverted.shadow.hits == lru
    assert replay_lcr(w, capacity, RadixLARU(PathOracle(w), **rules)) == \
        replay_lcr(w, capacity, make_policy("opt", w))


def test_a_shadow_phase_follows_predictions_only_within_slack_of_lru_and_drops_when_behind():
    def policy_at(hits, shadow_hits):
        policy = filled(RadixLARU, 6, {2: 9.0}, confidence="shadow")
        policy.on_request([0], [10], 6)  # the engine's first request makes the shadow
        policy.hit_tokens, policy.shadow.hits = hits, shadow_hits
        policy.begin_eviction(None, 6)
        return policy

    assert policy_at(99, 100).pick_victim(set(range(6)), 6) == 2  # 1% behind: trusted, lambda 1
    assert policy_at(98, 100).pick_victim(set(range(6)), 6) == 0  # 2% behind: an LRU phase
    policy = policy_at(100, 100)
    assert policy.trusted and policy.pick_victim(set(range(6)), 6) == 2
    policy.on_evicted(2)
    policy.shadow.hits = 200  # the trusted phase fell behind: LRU for its rest
    policy.begin_eviction(None, 7)
    assert not policy.trusted and policy.pick_victim({0, 1, 3, 4, 5}, 7) == 0
    # An engine that sends no requests leaves no shadow: guarded's rules.
    policy = filled(RadixLARU, 6, {2: 9.0}, confidence="shadow")
    policy.begin_eviction(None, 6)
    assert policy.shadow is None and policy.pick_victim(set(range(6)), 6) == 2
