"""LARU over another base order (``laru:base=s3fifo|lfu``): 1-consistency, the base's own
decisions when predictions say nothing, and the dry-run order itself."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lcr.errors import LcrInputError
from lcr.policies import LARU, make_policy
from lcr.predict import ArrayPredictor
from lcr.predict.experimental import constant_predictions, oracle_predictions
from lcr.sim import PolicySpec, replay, run_one
from lcr.sim.native import native_replay
from lcr.traces import Trace, generate

BASES = ["s3fifo", "lfu"]
TRACES = ["zipf:requests=5000,keys=700,alpha=0.9,seed=4", "scan:requests=5000,hot_keys=250,scan_length=300,scan_every=1200",
          "loop:requests=3000,keys=90"]


def laru_run(trace, capacity, values, **params):
    predictor = ArrayPredictor(values)
    policy = LARU(capacity, predictor, **params)
    return policy, replay(trace, policy, predictor, record_evictions=True)


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("source", TRACES)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_oracle_predictions_give_opt_over_any_base(base, source, mode):
    """l = k at each phase start: the window is the whole cache whatever the order."""
    trace = generate(source)
    for capacity in (3, 40, 200):
        opt = run_one(trace, PolicySpec("opt"), capacity).misses
        _, run = laru_run(trace, capacity, oracle_predictions(trace), mode=mode, base=base)
        assert len(trace) - int(run.hits.sum()) == opt


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("source", TRACES)
def test_predictions_that_say_nothing_give_the_base_policy(base, source):
    """Constant predictions tie everywhere, so every eviction (window or induced) is the
    base's head: decision by decision the base policy's spec."""
    trace = generate(source)
    for capacity in (1, 25, 120):
        _, run = laru_run(trace, capacity, constant_predictions(trace, 0.0, 0), base=base)
        heuristic = replay(trace, make_policy(base, capacity), record_evictions=True)
        assert np.array_equal(run.evicted, heuristic.evicted)
        assert np.array_equal(run.hits, heuristic.hits)


@pytest.mark.parametrize("base", BASES)
def test_window_of_one_is_the_base_victim_whatever_the_predictions(base):
    """k = 1 keeps l = 1: random predictions cannot move LARU off the base's decisions."""
    trace = generate(TRACES[0])
    values = np.random.default_rng(0).normal(size=len(trace))
    _, run = laru_run(trace, 1, values, base=base)
    assert np.array_equal(run.evicted, replay(trace, make_policy(base, 1), record_evictions=True).evicted)


@pytest.mark.parametrize("base", BASES)
def test_the_window_is_the_bases_next_victims(base):
    """eviction_order(k) lists every cached key once, and its head is the next victim."""
    trace = generate(TRACES[1])
    policy = make_policy(base, 60)
    for t, key in enumerate(trace.keys[:2000].tolist()):
        if policy.full and key not in policy:
            order = policy.eviction_order(policy.capacity)
            assert sorted(order) == sorted(policy)
            policy.access(key, t)
            assert policy.last_evicted == order[0]
        else:
            policy.access(key, t)


def test_random_predictions_evict_inside_the_base_window():
    """Every prediction-chosen victim lies in the first l keys of the S3-FIFO order."""
    trace = generate(TRACES[0])
    values = np.random.default_rng(1).normal(size=len(trace))
    predictor = ArrayPredictor(values)
    policy = LARU(50, predictor, base="s3fifo", b=1.5)
    for t, key in enumerate(trace.keys.tolist()):
        predictor.observe(key, t)
        l = policy.window if policy.old else policy.capacity  # a new phase resets lambda to 1
        window = policy.recency.oldest(l) if policy.full and key not in policy else None
        policy.access(key, t)
        if window is not None:
            assert policy.last_evicted in window


def test_default_base_is_lru_and_unknown_bases_are_refused():
    trace = generate(TRACES[0])
    values = oracle_predictions(trace) + np.random.default_rng(2).normal(0, 300, len(trace))
    _, default = laru_run(trace, 40, values, b=1.1)
    _, lru = laru_run(trace, 40, values, b=1.1, base="lru")
    assert np.array_equal(default.evicted, lru.evicted)
    assert np.array_equal(default.evicted, native_replay(trace, "laru", 40, values, mode="sync", b=1.1,
                                                         record_evictions=True).evicted)
    with pytest.raises(ValueError, match="base"):
        LARU(4, ArrayPredictor(values), base="arc")
    with pytest.raises(ValueError, match="no native core"):
        native_replay(trace, "laru", 40, values, base="s3fifo")
    with pytest.raises(LcrInputError, match="only base=lru has a native core"):
        run_one(trace, PolicySpec("laru", (("base", "s3fifo"),)), 40, engine="native")
    assert run_one(trace, PolicySpec("laru", (("base", "s3fifo"),)), 40).misses > 0  # auto: the spec


def test_theorem1_robustness_needs_the_recency_order():
    """Theorem 1 counts at most k base evictions per phase because LRU's victim is always an
    old item; LFU's is not: two hot keys pin LFU's cache, and LARU over LFU with predictions
    that say nothing misses every alternating request, far above (k + log_b k + 2) OPT + k,
    while LARU over LRU stays within it."""
    keys = np.array([0, 1] * 500 + [2, 3] * 2000)
    trace = Trace(keys)
    capacity, values = 3, constant_predictions(trace, 0.0, 0)
    opt = run_one(trace, PolicySpec("opt"), capacity).misses
    bound = (capacity + math.log(capacity, 2) + 2) * opt + capacity
    _, over_lfu = laru_run(trace, capacity, values, base="lfu")
    _, over_lru = laru_run(trace, capacity, values, base="lru")
    assert len(trace) - over_lru.hits.sum() <= bound < len(trace) - over_lfu.hits.sum()


def test_a_window_key_leaving_s3fifo_keeps_s3fifo_state():
    """A non-head key chosen by LARU leaves S into the ghost (so its return goes to M, as
    for S's own victims) and leaves M without a ghost entry; nothing else moves."""
    policy = make_policy("s3fifo", 20)  # S holds 2 keys, M 18
    for t, key in enumerate(range(20)):
        policy.access(key, t)
    small_key, main_key = list(policy.small)[-1], list(policy.main)[-1]
    before_small, before_main = list(policy.small), list(policy.main)
    policy.plan_eviction(small_key, head=False)
    policy.access(100, 20)
    assert policy.last_evicted == small_key and small_key in policy.ghost
    assert list(policy.main) == before_main and list(policy.small) == [k for k in before_small if k != small_key] + [100]
    policy.plan_eviction(main_key, head=False)
    policy.access(small_key, 21)  # back from the ghost: straight into M
    assert policy.last_evicted == main_key and main_key not in policy.ghost
    assert list(policy.main)[-1] == small_key
