"""The radix-tree cache simulator: prefix semantics, locks, policies, CLI errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import real_trace
from lcr.cli import main
from lcr.errors import LcrInputError
from lcr.kv import (BlockWorkload, PathOracle, RadixLARU, RadixLRU, RadixRLT, RadixTree,
                    build_workload, make_radix_policy, replay_lcr, run_radix_sweep)
from lcr.kv.tree import replay_served
from lcr.kv.policies import LeafPolicy, RadixFPB
from lcr.traces import Trace, generate


def workload(*chains: list[int], block_tokens: int = 10) -> BlockWorkload:
    """Requests given as raw block ids, each block ``block_tokens`` tokens."""
    keys = [b for chain in chains for b in chain]
    offsets = np.cumsum([0] + [len(c) for c in chains])
    trace = Trace(np.array(keys), "hand", request_offsets=offsets)
    return build_workload(trace, block_tokens)


def serve_all(w: BlockWorkload, capacity: int, policy: LeafPolicy) -> tuple[RadixTree, list[int]]:
    tree = RadixTree(capacity, policy)
    return tree, [tree.serve(r, t) for t, r in enumerate(w.requests)]


# The LRU twin -----------------------------------------------------------------------------

def test_the_tree_hands_in_an_empty_lru_twin_of_its_capacity():
    """Radix LARU's shadow serves on the engine's ``lru_twin()`` (lcr.kv.shadow)."""
    w = workload([1, 2, 3], [1, 2, 4])
    tree, _ = serve_all(w, 25, RadixLARU(PathOracle(w)))
    twin = tree.lru_twin()
    assert isinstance(twin, RadixTree) and type(twin.policy) is RadixLRU
    assert twin is not tree and twin.capacity_tokens == 25 and twin.used_tokens == 0
    assert [twin.serve(r, t) for t, r in enumerate(w.requests)] == serve_all(w, 25, RadixLRU())[1]


def test_a_view_without_an_lru_twin_cannot_be_made():
    from lcr.kv.policies import CacheView

    class NoTwin(CacheView):
        capacity_tokens = 10

        def cached_keys(self):
            return []

        def tokens_of(self, keys):
            return 0

    with pytest.raises(TypeError, match="lru_twin"):
        NoTwin()


# Prefix semantics -------------------------------------------------------------------------

def test_a_block_helps_only_behind_its_whole_prefix():
    w = workload([1, 2, 3], [9, 2, 3], [1, 2, 4], [1, 2, 3])
    _, hits = serve_all(w, 1000, RadixLRU())
    # [9,2,3] shares raw ids 2,3 but not their prefix: nothing cached for it.
    assert hits == [0, 0, 20, 30]


def test_divergence_inside_a_node_splits_it_and_keeps_both_parts():
    w = workload([1, 2, 3, 4], [1, 2, 7])
    tree, hits = serve_all(w, 1000, RadixLRU())
    assert hits == [0, 20]
    sizes = sorted(node.size for node in tree.nodes.values())
    assert sizes == [10, 20, 20]  # [1,2] above [3,4] and [7]
    assert tree.used_tokens == 50
    assert set(tree.leaves) == {w.requests[0].paths[2], w.requests[1].paths[2]}


def test_partial_last_blocks_take_their_size_from_input_length():
    trace = Trace(np.array([5, 6, 5, 7]), "t", request_offsets=np.array([0, 2, 4]),
                  meta={"input_lengths": [700, 600]})
    w = build_workload(trace, block_tokens=512)
    assert [r.tokens for r in w.requests] == [(512, 188), (512, 88)]
    assert w.total_tokens == 1300 and w.distinct_tokens == 512 + 188 + 88


def test_only_leaves_are_evicted_and_parents_go_after_their_children():
    # Shared prefix [1] under two branches; room for 3 blocks.
    w = workload([1, 2], [1, 3], [4])
    tree, hits = serve_all(w, 30, RadixLRU())
    # Serving [4] needs 10 tokens: the oldest leaf [2] goes, the shared [1] stays.
    assert hits == [0, 10, 0]
    assert tree.used_tokens == 30
    assert w.requests[0].paths[0] in tree.nodes and w.requests[0].paths[1] not in tree.nodes


def test_a_request_larger_than_the_cache_keeps_what_fits():
    w = workload([1, 2, 3, 4, 5])
    tree, hits = serve_all(w, 25, RadixLRU())
    assert hits == [0] and tree.used_tokens == 20


# Locks ------------------------------------------------------------------------------------

class GreedyPolicy(LeafPolicy):
    """Picks whatever it is offered first; records every offer."""
    name = "greedy"

    def __init__(self):
        super().__init__()
        self.offers: list[list[int]] = []

    def pick_victim(self, leaves, now):
        self.offers.append(list(leaves))
        return self.offers[-1][0]


def test_the_in_flight_request_path_is_never_offered_for_eviction():
    w = workload([1, 2], [1, 2, 3, 4], [8])
    policy = GreedyPolicy()
    tree, _ = serve_all(w, 40, policy)
    # Request 1 matched [1,2] (locked) and needed 20 more tokens with 20 free: no eviction.
    # Request 2 needs 10 with 0 free: the only leaf is [3,4].
    locked_path = set(w.requests[1].paths[:2])
    assert policy.offers and all(not locked_path & set(offer) for offer in policy.offers)


# Replaying as a live server serves (``replay_served``) ---------------------------------------

def test_served_one_at_a_time_with_no_output_is_replay_lcr():
    w = build_workload(generate("online_qa:conversations=60,seed=2"))
    capacity = w.distinct_tokens // 20
    for name in ("lru", "laru"):
        assert replay_served(w, capacity, make_radix_policy(name, w, predictor=PathOracle(w, 0.5))) == \
            replay_lcr(w, capacity, make_radix_policy(name, w, predictor=PathOracle(w, 0.5)))


def test_a_served_batch_is_matched_at_once_and_hits_the_batch_before():
    w = workload([1, 2], [1, 2], [1, 2])
    assert replay_served(w, 1000, RadixLRU(), batch=1) == 40
    assert replay_served(w, 1000, RadixLRU(), batch=2) == 20  # the second misses: same batch
    assert replay_served(w, 1000, RadixLRU(), batch=3) == 0
    laru = make_radix_policy("laru", w, predictor=PathOracle(w))
    replay_served(w, 1000, laru, batch=3)
    assert laru.shadow.hits == 0  # the twin caches a batch when the tree does


def test_a_served_batch_is_dated_at_its_last_request_when_cached():
    # SGLang dates an insert's path when it inserts: after the whole batch was matched.
    class Touches(RadixLRU):
        touched = []

        def on_touch(self, keys, now):
            self.touched.append((tuple(keys), now))
            super().on_touch(keys, now)

    w = workload([1, 2], [3], [1, 2, 4], [5])
    policy = Touches()
    replay_served(w, 1000, policy, batch=3)
    first, second = (r.paths[0] for r in w.requests[:2])  # each one node: its key
    assert policy.touched == [((first,), 2), ((second,), 2)]  # not the batch's last, nor one alone
    assert policy.last_access[first] == policy.last_access[second] == 2


class Newest(RadixLRU):
    """Evicts the most recently used leaf: what a prediction that a fresh prompt returns
    last does, and where holding the batch before matters."""

    def pick_victim(self, leaves, now):
        return max(leaves, key=lambda key: (self.last_access[key], key))


def test_the_batch_before_holds_its_prompts_through_the_next_eviction_pass():
    """Batches (A, B), (C, D), (E, F), (C, D) in 4 blocks of room: E and F's pass cannot
    take C and D, still decoding, so the last batch hits them."""
    w = workload([1], [2], [3], [4], [5], [6], [3], [4])
    assert replay_served(w, 40, Newest(), batch=2) == 20
    assert replay_served(w, 40, RadixLRU(), batch=2) == 20


class PassRecorder(RadixLRU):
    def __init__(self):
        super().__init__()
        self.passes: list[int | None] = []

    def begin_eviction(self, missing, now):
        self.passes.append(missing)
        super().begin_eviction(missing, now)


def test_a_served_batch_evicts_in_one_pass_that_sees_its_last_missing_block():
    w = workload([1], [2], [3], [4], [5], [6])  # the third batch needs the first one's room
    policy = PassRecorder()
    replay_served(w, 40, policy, batch=2)
    assert policy.passes == [w.requests[5].paths[0]]


def test_each_served_request_caches_its_output_as_a_leaf_no_prompt_hits():
    w = workload([1, 2], [1, 2, 3])
    tree_of = {}

    class Keep(RadixLRU):
        def bind(self, view):
            tree_of["tree"] = view
            return super().bind(view)

    assert replay_served(w, 100, Keep(), output_tokens=5) == 20
    tree = tree_of["tree"]
    prompt = tree.nodes[w.requests[0].paths[0]]
    outputs = [n for n in prompt.children.values() if n.size == 5]
    assert len(outputs) == 1 and not outputs[0].children and outputs[0].key > max(w.requests[1].paths)
    assert tree.used_tokens == 20 + 10 + 5 + 5  # two prompts' new blocks, two outputs
    with pytest.raises(ValueError, match="batch"):
        replay_served(w, 100, RadixLRU(), batch=0)


def test_a_request_admitted_before_another_is_cached_does_not_hit_it():
    """``admit`` then ``complete``, as a live server serves a request: the second request
    arrives while the first is in flight, so it cannot hit the first one's new blocks;
    the second completion finds them cached and inserts only the rest, once."""
    w = workload([1, 2, 3], [1, 2, 3, 4])
    first, second = w.requests
    tree = RadixTree(100, RadixLRU())
    a = tree.admit(first, 0)
    b = tree.admit(second, 1)
    assert a.hit_tokens == b.hit_tokens == 0
    tree.complete(a, 0)
    tree.complete(b, 1)
    assert sorted(tree.nodes) == [first.paths[0], second.paths[3]] and tree.used_tokens == 40
    assert all(node.locks == 0 for node in tree.nodes.values())
    # In sequence (serve), the second request hits the first's three blocks.
    tree = RadixTree(100, RadixLRU())
    assert [tree.serve(r, t) for t, r in enumerate(w.requests)] == [0, 30]


class _NewestLeaf(LeafPolicy):
    """Evicts the most recently used leaf: the node another request has just inserted."""

    name = "mru"

    def pick_victim(self, leaves, now):
        return max(leaves, key=lambda k: (self.last_access.get(k, -1), k))


def test_a_completion_never_evicts_the_node_its_insert_goes_under():
    """A request completed after another inserted part of its path walks again and ends on
    the other's node; that node must stay through the eviction that makes room, or the
    insert would hang the request's blocks under a node no longer in the tree."""
    w = workload([9], [1, 2, 3], [1, 2])
    old, long, short = w.requests
    tree = RadixTree(30, _NewestLeaf())
    tree.serve(old, 0)
    a, b = tree.admit(long, 1), tree.admit(short, 2)
    tree.complete(b, 2)  # [1, 2] cached, unlocked; [1, 2, 3] needs 10 more tokens, none free
    tree.complete(a, 1)
    assert old.paths[0] not in tree.nodes  # the room came from the only other leaf
    assert tree.match(long.paths)[1] == 3 and tree.used_tokens == 30
    assert all(node.locks == 0 for node in tree.nodes.values())


def test_an_admitted_requests_path_stays_locked_until_it_completes():
    w = workload([1, 2], [5, 6], [7, 8])
    tree = RadixTree(40, RadixLRU())
    tree.serve(w.requests[0], 0)
    held = tree.admit(w.requests[0], 1)  # fully cached, in flight: its path is locked
    tree.serve(w.requests[1], 2)
    tree.serve(w.requests[2], 3)  # room for [7, 8] comes from [5, 6], not the held path
    assert w.requests[0].paths[0] in tree.nodes and w.requests[1].paths[0] not in tree.nodes
    tree.complete(held, 1)
    assert all(node.locks == 0 for node in tree.nodes.values())


def test_eviction_of_more_than_is_evictable_returns_what_it_freed():
    w = workload([1, 2], [3])
    tree, _ = serve_all(w, 100, RadixLRU())
    tree.lock(tree.nodes[w.requests[0].paths[0]])
    freed = tree.evict(10_000, None, now=5)
    assert freed == 10  # only [3] was unlocked
    assert w.requests[0].paths[0] in tree.nodes


def test_a_policy_choosing_a_locked_node_is_refused():
    class Rogue(LeafPolicy):
        name = "rogue"

        def pick_victim(self, leaves, now):
            return self.locked

    w = workload([1, 2], [3])
    rogue = Rogue()
    tree, _ = serve_all(w, 100, rogue)
    node = tree.nodes[w.requests[0].paths[0]]
    tree.lock(node)
    rogue.locked = node.key
    with pytest.raises(RuntimeError, match="not an evictable leaf"):
        tree.evict(10, None, now=3)


# Policies ---------------------------------------------------------------------------------

def small_online_qa():
    return build_workload(generate("online_qa:conversations=300,seed=1"))


def hit_rate(w, capacity, name, noise=0.0, **kw):
    predictor = PathOracle(w, noise) if name in ("laru", "fpb", "hf") else None
    policy = make_radix_policy(name, w, predictor=predictor, **kw)
    return replay_lcr(w, capacity, policy) / w.total_tokens


def test_opt_tree_is_the_best_and_laru_with_an_oracle_matches_it():
    w = small_online_qa()
    capacity = w.distinct_tokens // 20
    rates = {name: hit_rate(w, capacity, name) for name in ("lru", "laru", "fpb", "hf", "rlt", "opt")}
    assert rates["laru"] >= rates["lru"]
    assert rates["laru"] >= 0.98 * rates["opt"]
    assert rates["opt"] >= max(rates.values()) - 1e-12


def test_laru_under_fully_inverted_predictions_stays_near_lru_and_beats_fpb():
    w = build_workload(generate("online_qa:conversations=600,seed=2"))
    capacity = w.distinct_tokens * 8 // 100
    missed = lambda rate: 1 - rate  # noqa: E731
    lru = missed(hit_rate(w, capacity, "lru"))
    laru = missed(hit_rate(w, capacity, "laru", noise=1.0))
    fpb = missed(hit_rate(w, capacity, "fpb", noise=1.0))
    assert laru <= 1.25 * lru
    assert laru < fpb


def test_prediction_induced_misses_shrink_the_window_towards_lru():
    w = build_workload(generate("online_qa:conversations=600,seed=2"))
    capacity = w.distinct_tokens * 8 // 100
    policy = RadixLARU(PathOracle(w, 1.0))
    replay_lcr(w, capacity, policy)
    assert policy.stats.extra["prediction_induced_misses"] > 0
    assert policy.stats.lru_evictions > 0


def test_a_failing_predictor_falls_back_to_lru_and_is_counted(caplog):
    class Broken:
        def predict(self, keys, now):
            raise TimeoutError("predictor timed out")

    w = small_online_qa()
    capacity = w.distinct_tokens // 20
    lru = replay_lcr(w, capacity, RadixLRU())
    for policy in (RadixLARU(Broken()), RadixFPB(Broken())):
        assert replay_lcr(w, capacity, policy) == lru
        assert policy.stats.extra["predictor_fallbacks"] > 0
    assert sum("predictor failed" in r.message for r in caplog.records) == 2  # once per policy


def test_rlt_is_seeded_and_spares_marked_leaves():
    w = small_online_qa()
    capacity = w.distinct_tokens // 20
    assert replay_lcr(w, capacity, RadixRLT(seed=3)) == replay_lcr(w, capacity, RadixRLT(seed=3))
    rlt = RadixRLT(seed=0)
    RadixTree(1000, rlt)  # binds the policy to a tree
    rlt.marked = {1}
    assert rlt.pick_victim([1, 2], now=0) == 2


def test_sweep_reports_cost_ratio_against_opt():
    w = small_online_qa()
    results = run_radix_sweep(w, [w.distinct_tokens // 20], ["lru", "laru", "opt"], [0.0, 1.0])
    by = {(r.policy, r.noise): r for r in results}
    assert by[("opt", None)].cost_ratio == 1.0
    assert by[("lru", None)].cost_ratio >= 1.0
    assert len(results) == 4


def test_mooncake_slice_laru_beats_lru():
    w = build_workload(real_trace("mooncake"))
    capacity = w.distinct_tokens // 20
    assert hit_rate(w, capacity, "laru") > hit_rate(w, capacity, "lru")


# CLI --------------------------------------------------------------------------------------

def test_cli_prints_token_hit_rates_and_writes_json_and_plot(tmp_path, capsys):
    out = tmp_path / "r.json"
    plot = tmp_path / "r.png"
    rc = main(["sim-kv", "online_qa:conversations=100", "--cache-tokens", "5%",
               "--policies", "lru,laru,fpb,hf,rlt,opt", "--noise", "0,1",
               "--json", str(out), "--plot", str(plot)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "token hit rate" in text and "laru" in text
    doc = json.loads(out.read_text())
    assert {r["policy"] for r in doc["results"]} == {"lru", "laru", "fpb", "hf", "rlt", "opt"}
    assert plot.stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["online_qa:conversations=10", "--cache-tokens", "1000", "--policies", "lru,belady"],
     "unknown policy 'belady'; valid: lru, laru, fpb, hf, rlt, opt"),
    (["online_qa:conversations=10", "--cache-tokens", "lots"], "--cache-tokens: 'lots'"),
    (["online_qa:conversations=10", "--cache-tokens", "0"], "gives no room"),
    (["online_qa:conversations=10", "--cache-tokens", "1000", "--noise", "2"], "probability"),
    (["online_qa:conversations=10", "--cache-tokens", "1000", "--predictor", "psychic"],
     "unknown predictor 'psychic'"),
    (["zipf:requests=100", "--cache-tokens", "1000"], "not a prefix-block trace"),
])
def test_cli_bad_input_is_one_line(argv, message, capsys):
    assert main(["sim-kv", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_malformed_mooncake_line_names_the_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"hash_ids": [1, 2], "input_length": 900}\n{"hash_ids": "oops"}\n')
    assert main(["sim-kv", str(path), "--cache-tokens", "1000"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and err.count("\n") == 1


def test_workload_rejects_flat_traces():
    with pytest.raises(LcrInputError, match="not a prefix-block trace"):
        build_workload(Trace(np.arange(5), "flat"))


def test_node_features_follow_real_accesses():
    from lcr.kv.features import HISTORY, WIDTH
    from lcr.kv.predictors import FeaturePredictor, RecentIntervalsPredictor

    class Full(FeaturePredictor):  # every feature, EDCs included
        predict = RecentIntervalsPredictor.predict

    w = workload([1, 2], [1, 3], [1, 2], [4])
    predictor, full = RecentIntervalsPredictor(), Full()
    serve_all(w, 1000, RadixLARU(predictor))
    serve_all(w, 1000, RadixLARU(full))
    shared, branch = w.requests[0].paths[0], w.requests[0].paths[1]
    for f in (predictor.features, full.features):
        assert f.last[shared] == 2 and f.intervals[shared] == [1, 1]
        assert f.depth[shared] == 10 and f.depth[branch] == 20  # tokens from the root
    with pytest.raises(ValueError, match="no EDCs"):
        predictor.features.matrix([shared], now=3)  # the estimate's features keep none
    rows = full.features.matrix([shared, branch, 999], now=3)
    assert rows.shape == (3, WIDTH)
    assert list(rows[0, :2]) == [1, 1] and rows[1, 0] == 2  # newest interval first
    assert rows[0, HISTORY] > rows[1, HISTORY] > 0  # more recent, more frequent: larger EDC
    assert np.isnan(rows[2]).all()
    assert predictor.predict([shared, 999], now=3)[0] == 3.0


def test_node_features_are_bounded_and_drop_the_least_recently_seen():
    from lcr.kv.features import NodeFeatures

    f = NodeFeatures(max_keys=2)
    f.observe(1, 0, 10)
    f.observe(2, 1, 10)
    f.observe(1, 2, 10)
    f.observe(3, 3, 10)
    assert set(f.last) == {1, 3} and 2 not in f.depth
