"""Reuse distances (``lcr.kv.reuse``) and LARU's ``confidence=balance`` built on them."""
from __future__ import annotations

import random

from lcr.kv import PathOracle, build_workload, make_radix_policy, replay_lcr
from lcr.kv.laru import RadixLARU
from lcr.kv.reuse import TokenReuse
from lcr.lpc.workload import sharegpt

from conftest import data_file


def test_distinct_tokens_between_two_stamps_match_a_brute_force_count():
    rng = random.Random(4)
    reuse, latest = TokenReuse(), {}
    for t in range(3000):  # past the first growth of the Fenwick tree (1024)
        key, tokens = rng.randrange(200), rng.randrange(1, 40)
        reuse.requested(key, t, tokens)
        latest[key] = (t, tokens)
        if t % 37 == 0:
            a = rng.randrange(t + 1)
            b = rng.randrange(a, t + 2)
            assert reuse.between(a, b) == sum(n for s, n in latest.values() if a < s < b)


def workload():
    # The chat replay LPC runs on (lcr.lpc.workload), a slice: 150 conversations.
    return build_workload(sharegpt(str(data_file("chat/sharegpt_v3_sample1000.jsonl")), conversations=150))


class Constant:
    def predict(self, keys, now):
        return [0.0] * len(keys)


def test_balance_estimates_the_hit_tokens_gained_or_lost_against_lru():
    # slack so large that the predictions always act: the estimate must follow the
    # real difference from LRU, both when the predictions are exact and when inverted.
    w = workload()
    capacity = w.distinct_tokens // 10
    lru = replay_lcr(w, capacity, make_radix_policy("lru", w))
    for noise in (0.0, 1.0):
        policy = RadixLARU(PathOracle(w, noise), confidence="balance", slack=1e9)
        gained = replay_lcr(w, capacity, policy) - lru
        assert abs(policy.balance.total - gained) <= 0.1 * abs(gained)
        assert (gained > 0) == (noise == 0.0)
    # Predictions that tie everywhere make LARU LRU (ties go to the older leaf): the
    # estimate stays near zero.
    policy = RadixLARU(Constant(), confidence="balance", slack=1e9)
    assert replay_lcr(w, capacity, policy) == lru
    assert abs(policy.balance.total) <= 0.1 * lru


def test_balance_follows_good_predictions_and_falls_back_to_lru_on_inverted_ones():
    w = workload()
    capacity = w.distinct_tokens // 10
    lru = replay_lcr(w, capacity, make_radix_policy("lru", w))
    opt = replay_lcr(w, capacity, make_radix_policy("opt", w))
    assert replay_lcr(w, capacity, RadixLARU(PathOracle(w), confidence="balance")) >= 0.99 * opt
    guarded = RadixLARU(PathOracle(w, 1.0), confidence="balance")
    inverted = replay_lcr(w, capacity, guarded)
    assert guarded.stats.extra["prediction_induced_misses"] == 0  # the balance replaces them
    unguarded = replay_lcr(w, capacity, RadixLARU(PathOracle(w, 1.0), confidence="balance", slack=1e9))
    assert unguarded < 0.5 * lru
    # Measured 0.975: the bad evictions made before the balance turns (about one cache
    # of them) are all these adversarial predictions cost.
    assert inverted >= 0.97 * lru


def test_balance_switches_to_lru_only_past_slack_times_hits_plus_capacity():
    from lcr.kv.policies import CacheView

    class View(CacheView):
        capacity_tokens = 10_000

        def cached_keys(self):
            return []

        def tokens_of(self, keys):
            return 0

        def lru_twin(self):
            raise AssertionError("confidence=balance keeps no twin")

    policy = RadixLARU(PathOracle(workload()), confidence="balance")  # slack 0.02
    policy.bind(View())
    for total, hits, lam in ((-150.0, 0.0, 1.0),    # noise before the first hit: stays
                             (-250.0, 0.0, 0.0),    # 0.02 x (0 + 10,000) = 200
                             (-350.0, 10_000.0, 1.0), (-450.0, 10_000.0, 0.0)):
        policy.balance.total, policy.balance.hits = total, hits
        policy.begin_eviction(None, 1)
        assert policy.lam == lam, (total, hits)
