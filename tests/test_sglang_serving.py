"""The SGLang driver as a live server uses it: serving-mode keys, one observation per
node per request, a predictor that must never stall eviction, the eviction-pass metric.
SGLang's real tree with a mock KV allocator (no model); skipped without SGLang."""
from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path

import pytest


sys.path.insert(0, str(Path(__file__).parent))
from sglang_server import import_sglang_or_skip  # noqa: E402

import_sglang_or_skip()

from sglang.srt.mem_cache.base_prefix_cache import EvictParams  # noqa: E402

from lcr.integrations import sglang as integ  # noqa: E402
from lcr.integrations.serving_predictor import GuardedPredictor  # noqa: E402
from lcr.integrations.sglang_sim import build_cache, replay_sglang  # noqa: E402
from lcr.kv import build_workload, make_radix_policy, replay_lcr  # noqa: E402
from lcr.kv.predictors import FeaturePredictor, RecentIntervalsPredictor  # noqa: E402
from lcr.traces import generate  # noqa: E402


def online_qa(conversations=40):
    return build_workload(generate(f"online_qa:conversations={conversations},seed=4"))


class Recording(RecentIntervalsPredictor):
    """Recent intervals, keeping every observation it was given."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[int, int]] = []

    def observe_node(self, key, t, tokens_from_root):
        self.seen.append((key, t))
        super().observe_node(key, t, tokens_from_root)


class NewestFirst(FeaturePredictor):
    """Predicts that the most recently used node returns last (wrong on chats): its
    victims come back, so it makes prediction-induced misses. Key-agnostic, so sim and
    serving keys must lead to the same choices."""

    def predict(self, keys, now):
        return [float(self.features.last.get(k, now)) for k in keys]


# Item 2 of issue 18: one observation per node per request -----------------------------
def test_each_node_is_observed_once_per_request_as_lcrs_tree_does():
    w = online_qa()
    capacity = w.distinct_tokens // 10
    runs = []
    for replay in (replay_lcr, replay_sglang):
        predictor = Recording()
        replay(w, capacity, make_radix_policy("laru", w, predictor=predictor))
        runs.append(predictor.seen)
    lcr_seen, sglang_seen = runs
    assert not [pair for pair, n in Counter(sglang_seen).items() if n > 1]
    assert sorted(sglang_seen) == sorted(lcr_seen)


def test_inserts_are_dated_at_their_requests_match():
    """Request A matches, B matches, then A inserts: A's new node is A's access (what a
    predictor observes), and recent as of B in the recency order (as SGLang's LRU dates
    an insert's path)."""
    w = online_qa(10)
    accesses = []

    class Recorded(type(make_radix_policy("lru", w))):
        def on_access(self, keys, now, depths=None):
            accesses.extend((key, now) for key in keys)
            super().on_access(keys, now, depths)

    policy = Recorded()
    cache, allocator = build_cache(policy, w.distinct_tokens)
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    class Req:
        session = None

        def __init__(self, rid):
            self.rid = rid

    a, b = Req("a"), Req("b")
    tokens_a, tokens_b = array("q", [7] * 5), array("q", [9] * 5)
    cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens_a), req=a))
    cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens_b), req=b))
    cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens_a), req=a))  # re-matched while waiting
    with cache.driver.inserting_for(a):
        cache.insert(InsertParams(key=RadixKey(tokens_a), value=allocator.alloc(5)))
    assert accesses == [(7, 0)] and policy.last_access[7] == 1 and cache.driver.now == 1


# Serving-mode keying (issue 12 item 6) ---------------------------------------------------
@pytest.mark.parametrize("name, predictor", [("laru", RecentIntervalsPredictor), ("laru", NewestFirst),
                                             ("hf", NewestFirst), ("lru", None)])
def test_serving_keys_make_the_same_choices_as_path_ids(name, predictor):
    """Hash keys of the prefix through each node's first page, re-keyed on splits, with
    prediction-induced misses found from the first missing page: the same hits and the
    same counters as lcr's path ids, on pages that recur under different parents."""
    w = online_qa()
    capacity = w.distinct_tokens // 10
    stats = []
    for keys in ("sim", "serving"):
        policy = make_radix_policy(name, w, predictor=predictor() if predictor else None)
        hits = replay_sglang(w, capacity, policy, keys=keys)
        stats.append((hits, policy.stats.as_dict()))
    assert stats[0] == stats[1]
    if predictor is NewestFirst and name == "laru":
        assert stats[1][1]["prediction_induced_misses"] > 0


def test_serving_keys_tell_equal_pages_apart_by_their_parents():
    from lcr.integrations.sglang_sim import serving_tokens

    w = online_qa()
    firsts = Counter(tokens[0] for tokens in serving_tokens(w))
    assert max(firsts.values()) > 1  # the workload does repeat first pages
    policy = make_radix_policy("lru", w)
    cache, _ = build_cache(policy, w.distinct_tokens, sim_keys=False)
    replay_sglang(w, w.distinct_tokens, policy, keys="serving", cache=(cache, _))
    nodes = list(cache.driver._cached_nodes())
    assert len({cache.driver.key_of(n) for n in nodes}) == len(nodes)
    pages = Counter(int(n.key.token_ids[0]) for n in nodes)
    assert max(pages.values()) > 1  # equal first pages, distinct keys


def test_a_split_keeps_the_upper_key_and_rekeys_the_lower_part():
    from array import array

    from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    w = online_qa(10)
    policy = make_radix_policy("lru", w)
    cache, allocator = build_cache(policy, 100, sim_keys=False)
    long, short = array("q", [5, 6, 7, 8]), array("q", [5, 6, 9])
    cache.match_prefix(MatchPrefixParams(key=RadixKey(long)))
    cache.insert(InsertParams(key=RadixKey(long), value=allocator.alloc(4)))
    (node,) = cache.driver._cached_nodes()
    whole = cache.driver.key_of(node)
    assert whole == integ.prefix_key(0, (5,))
    cache.match_prefix(MatchPrefixParams(key=RadixKey(short)))
    cache.insert(InsertParams(key=RadixKey(short), value=allocator.alloc(3)))
    keys = {tuple(n.key.token_ids): cache.driver.key_of(n) for n in cache.driver._cached_nodes()}
    assert keys[(5, 6)] == whole
    assert keys[(7, 8)] == integ.prefix_key(whole, (7,))
    assert keys[(9,)] == integ.prefix_key(whole, (9,))
    assert policy.last_access[keys[(7, 8)]] == 0 and policy.last_access[whole] == 1


def served_laru():
    """LARU (recent intervals) after serving online_qa through SGLang's tree."""
    w = online_qa()
    capacity = w.distinct_tokens // 10
    policy = make_radix_policy("laru", w, predictor=RecentIntervalsPredictor())
    cache, allocator = build_cache(policy, capacity)
    replay_sglang(w, capacity, policy, cache=(cache, allocator))
    return w, capacity, policy, cache, allocator


# Item 6 of issue 18: the eviction pass ---------------------------------------------------
def test_a_pass_keys_each_leaf_once_and_builds_no_sglang_heap(monkeypatch):
    from sglang.srt.mem_cache.unified_cache.components.full import FullComponent

    def heap_build(*_):  # SGLang's LRU walk starts by readying the heap's priorities
        raise AssertionError("SGLang's eviction heap was built")

    monkeypatch.setattr(FullComponent, "_ensure_eviction_strategy", heap_build)
    w = online_qa()
    policy = make_radix_policy("lru", w)
    cache, allocator = build_cache(policy, w.distinct_tokens, sim_keys=False)
    replay_sglang(w, w.distinct_tokens, policy, keys="serving", cache=(cache, allocator))
    nodes = len(list(cache.driver._cached_nodes()))
    leaves = len(cache.tree_core.evictable_device_leaves)
    assert leaves > 10
    calls = Counter()
    key_of = cache.driver.key_of
    monkeypatch.setattr(cache.driver, "key_of", lambda node: calls.update([node.id]) or key_of(node))
    cache.evict(EvictParams(num_tokens=w.distinct_tokens))
    assert policy.stats.evictions >= nodes
    assert max(calls.values()) == 1  # each node keyed once in the pass, not once per victim


def test_laru_predicts_each_leaf_once_per_pass_not_once_per_victim(monkeypatch):
    # Within a pass ``now`` does not move, so a prediction stays exact: the window of
    # every later pick asks only about its newcomers (a victim's parent), one batch each
    # (its decisions are the same: test_kv_sglang compares them with lcr's tree).
    from lcr.kv.laru import RadixLARU

    asked = []  # (pass, keys) of every predictor call
    predict = RadixLARU.predict
    monkeypatch.setattr(RadixLARU, "predict", lambda self, keys, now: asked.append(
        (self.view.eviction_passes, list(keys))) or predict(self, keys, now))
    w, capacity, policy, cache, allocator = served_laru()
    m = cache.driver.metrics()
    assert m["evictions"] > m["eviction_passes"]  # some passes have several victims
    per_pass = Counter()
    for done, keys in asked:
        per_pass.update((done, key) for key in keys)
    assert per_pass and max(per_pass.values()) == 1
    assert len({done for done, _ in asked}) < len(asked)  # some passes asked again, for newcomers only


def test_the_metric_covers_whole_passes():
    w, capacity, policy, cache, allocator = served_laru()
    m = cache.driver.metrics()
    assert 0 < m["eviction_passes"] < m["evictions"]
    assert m["eviction_seconds"] > m["policy_seconds"] > 0


# Item 3 of issue 18: a slow or hung predictor ---------------------------------------------
class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Slow:
    name = "slow"

    def __init__(self, clock, seconds):
        self.clock, self.seconds, self.calls = clock, seconds, 0

    def predict(self, keys, now):
        self.calls += 1
        self.clock.t += self.seconds
        return [float(now)] * len(keys)


def test_a_slow_predictor_is_backed_off_after_its_first_slow_answer(caplog):
    clock = Clock()
    slow = Slow(clock, 0.2)
    guard = GuardedPredictor(slow, timeout_s=0.05, backoff_s=10, pass_budget_s=1.0, clock=clock)
    with caplog.at_level(logging.WARNING, "lcr.sglang"):
        assert guard.predict([1, 2], 3) == [3.0, 3.0]  # slow, but the answer is used
        for _ in range(5):
            guard.begin_pass()
            with pytest.raises(RuntimeError, match="backed off"):
                guard.predict([1], 3)
    assert slow.calls == 1 and guard.backoffs == 1
    assert "predictor slow was slow (200 ms); evicting by LRU for 10 s" in caplog.text
    clock.t += 10
    guard.predict([1], 3)  # the back-off is over: asked again
    assert slow.calls == 2


def test_predictor_time_per_pass_is_bounded():
    clock = Clock()
    inner = Slow(clock, 0.03)  # under the timeout, but they add up
    guard = GuardedPredictor(inner, timeout_s=0.05, backoff_s=10, pass_budget_s=0.1, clock=clock)
    guard.begin_pass()
    answered = 0
    for _ in range(10):
        try:
            guard.predict([1], 0)
            answered += 1
        except RuntimeError as err:
            assert "budget" in str(err)
    assert answered == 4  # 0.03 s each: the fourth crosses 0.1 s, the rest are refused
    guard.begin_pass()
    guard.predict([1], 0)
    assert inner.calls == 5


@pytest.mark.parametrize("engine", ["lcr", "sglang"])
def test_every_tree_engine_gives_each_eviction_pass_a_fresh_budget(engine):
    """The pass budget restarts with every eviction pass, in lcr's tree as in SGLang's: a
    budget that never restarts answers its first few calls, then LRU for good."""
    clock = Clock()
    inner = Slow(clock, 0.03)  # four calls spend a 0.1 s pass budget
    guard = GuardedPredictor(inner, timeout_s=0.05, backoff_s=10, pass_budget_s=0.1, clock=clock)
    w = online_qa()
    capacity = w.distinct_tokens // 20
    policy = make_radix_policy("laru", w, predictor=guard)
    (replay_lcr if engine == "lcr" else replay_sglang)(w, capacity, policy)
    assert policy.stats.extra["phases"] > 2
    assert inner.calls > 20  # a budget spent for good: 4 calls, then every call refused
    assert guard.refused < inner.calls


def test_a_hung_predictor_costs_one_timeout_not_one_per_victim():
    """Inside SGLang's tree: the predictor hangs (sleeps past the timeout) on every call."""
    import time as _time

    class Hung(RecentIntervalsPredictor):
        calls = 0

        def predict(self, keys, now):
            Hung.calls += 1
            _time.sleep(0.06)
            return super().predict(keys, now)

    w = online_qa()
    capacity = w.distinct_tokens // 10
    guard = GuardedPredictor(Hung(), timeout_s=0.02, backoff_s=3600, pass_budget_s=0.05)
    policy = make_radix_policy("laru", w, predictor=guard)
    hits = replay_sglang(w, capacity, policy)
    assert Hung.calls == 1
    assert policy.stats.extra["predictor_fallbacks"] > 10
    assert hits == replay_lcr(w, capacity, make_radix_policy("laru", w, predictor=GuardedPredictor(
        Hung(), timeout_s=0.02, backoff_s=3600, pass_budget_s=0.05)))


# Item 5 of issue 18: the start-up line names the predictor ----------------------------------
def test_startup_log_names_the_serving_predictor(caplog):
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    from lcr.integrations.sglang_sim import MockAllocator

    for config, name in (({"predictor": "intervals"}, "intervals"), ({"predictor": "lightgbm"}, "lightgbm"),
                         ({"predictor": "residual"}, "residual"), ({}, "residual")):
        params = CacheInitParams(disable=False, req_to_token_pool=None,
                                 token_to_kv_pool_allocator=MockAllocator(4096), page_size=1,
                                 tree_components=(ComponentType.FULL,), eviction_policy_config=config)
        caplog.clear()
        with caplog.at_level(logging.INFO, "lcr.sglang"):
            integ.LARURadixCache(params)
        assert f"predictor {name}" in caplog.text, caplog.text


def test_a_flush_restarts_the_policy_and_keeps_the_counters():
    """/flush_cache empties the tree: LARU's keys, phase and records must go with it, and
    so must its LRU twin, which held the flushed tree's contents: a twin that kept them
    would count hits the emptied cache cannot have, and distrust LARU for no fault."""
    w, capacity, policy, cache, allocator = served_laru()
    before = cache.driver.metrics()
    assert before["evictions"] > 0 and policy.shadow.hits > 0 and policy.last_access and policy._phase_seen
    cache.reset()
    allocator.clear()  # as the scheduler's flush_cache does after the tree's reset
    fresh = cache.driver.policy
    assert fresh is not policy and fresh.shadow is None and fresh.hit_tokens == 0
    assert not (fresh.last_access or fresh._phase_seen or fresh.evicted_by_prediction or fresh._size)
    assert cache.driver.metrics()["evictions"] == before["evictions"]
    assert replay_sglang(w, capacity, fresh, cache=(cache, allocator)) > 0
    # served again from empty, beside a new, empty twin: LRU's own hits from empty
    assert fresh.shadow.hits == replay_lcr(w, capacity, make_radix_policy("lru", w))
    assert fresh.stats.extra["phases"] > 0
    assert cache.driver.metrics()["evictions"] == before["evictions"] + fresh.stats.evictions
