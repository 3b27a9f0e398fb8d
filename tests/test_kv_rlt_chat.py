"""RLT as its authors run it (tail blocks of a random unmarked leaf), the ShareGPT chat
replay, and the learned node predictor's start-up."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import data_file
from lcr.cli import main
from lcr.kv import RadixRLT, RadixTree, build_workload, make_radix_policy, replay_lcr
from lcr.kv.chat import chat_workload
from lcr.kv.laru import RadixLARU
from lcr.traces import Trace, generate


def workload(*chains, block_tokens=10):
    keys = [b for chain in chains for b in chain]
    offsets = np.cumsum([0] + [len(c) for c in chains])
    return build_workload(Trace(np.array(keys), "hand", request_offsets=offsets), block_tokens)


def test_rlt_evicts_one_tail_block_of_its_leaf_and_whole_leaf_keeps_the_node_rule():
    w = workload([1, 2, 3], [7])  # one 3-block node, then a 1-block request
    tail = RadixRLT(seed=0)
    tree = RadixTree(30, tail)
    tree.serve(w.requests[0], 0)
    tail.marked.clear()  # leave the 3-block node unmarked
    tree.serve(w.requests[1], 1)
    node = tree.nodes[w.requests[0].paths[0]]
    assert node.paths == w.requests[0].paths[:2] and tree.used_tokens == 30  # lost one tail block

    whole = RadixRLT(seed=0, whole_leaf=True)
    tree = RadixTree(30, whole)
    tree.serve(w.requests[0], 0)
    whole.marked.clear()
    tree.serve(w.requests[1], 1)
    assert w.requests[0].paths[0] not in tree.nodes and tree.used_tokens == 10


def test_rlt_clears_marks_when_marked_tokens_reach_the_capacity():
    w = workload([1], [2], [3])
    rlt = RadixRLT()
    tree = RadixTree(30, rlt)
    tree.serve(w.requests[0], 0)
    tree.serve(w.requests[1], 1)
    assert rlt.stats.extra["phases"] == 0 and len(rlt.marked) == 2
    tree.serve(w.requests[2], 2)  # 30 marked tokens == capacity: a new phase
    assert rlt.stats.extra["phases"] == 1 and rlt.marked == {w.requests[2].paths[0]}


def test_rlt_tail_is_seeded_and_differs_from_whole_leaf():
    w = build_workload(generate("online_qa:conversations=200,seed=1"))
    capacity = w.distinct_tokens // 20
    runs = [replay_lcr(w, capacity, make_radix_policy("rlt", w, seed=3)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0] != replay_lcr(w, capacity, make_radix_policy("rlt", w, seed=3, whole_leaf=True))


def test_chat_replay_turns_extend_their_session_prefix():
    path = data_file("chat/sharegpt_v3_sample1000.jsonl")
    w = chat_workload(path, sessions=40, active=4)
    assert len(w) > 40
    # A later turn of a session starts with every full block of an earlier one.
    prefixes = {r.paths for r in w.requests}
    extended = sum(any(r.paths[:len(p) - 1] == p[:-1] and len(p) > 1 and len(r.paths) > len(p)
                       for p in prefixes) for r in w.requests)
    assert extended > len(w) // 4
    lru = replay_lcr(w, w.distinct_tokens // 10, make_radix_policy("lru", w))
    assert 0 < lru < w.total_tokens


def test_chat_replay_cli_and_bad_file(tmp_path, capsys):
    path = data_file("chat/sharegpt_v3_sample1000.jsonl")
    assert main(["sim-kv", f"chat:{path},sessions=30", "--cache-tokens", "10%", "--policies", "lru,opt"]) == 0
    assert "sharegpt-chat(30 sessions)" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversations": [{"from": "human", "value": "hi"}]}) + "\n{oops\n")
    assert main(["sim-kv", f"chat:{bad}", "--cache-tokens", "10%"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and err.count("\n") == 1
    assert main(["sim-kv", f"chat:{tmp_path / 'missing.jsonl'}", "--cache-tokens", "10%"]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl: cannot read" in err and err.count("\n") == 1


def test_learned_predictor_serves_intervals_until_its_early_first_fit():
    pytest.importorskip("lightgbm")
    from lcr.kv.predictors import LearnedNodePredictor

    w = build_workload(generate("online_qa:conversations=300,seed=1"))
    predictor = LearnedNodePredictor(background=False, first_fit=400)
    policy = RadixLARU(predictor)
    tree = RadixTree(w.distinct_tokens // 20, policy)
    names = []
    for now, request in enumerate(w.requests):
        tree.serve(request, now)
        names.append(policy.predictor_name)
    assert names[0] == "intervals" and names[-1] == "lightgbm"
    # Labels must be ripe (a boundary old) before they train anything, so the first fit
    # comes some hundreds of requests in; the old start (10,000 accesses) never came here.
    assert predictor.lightgbm.model.metrics["fits"] >= 1
    assert predictor._observed < 10_000
    assert predictor.lightgbm.model.metrics["observed"] == predictor._observed
    # Repeating an observation of the same (key, time) adds nothing.
    before = predictor._observed
    key = w.requests[-1].paths[0]
    predictor.observe_node(key, len(w) - 1, 10)
    assert predictor._observed == before
