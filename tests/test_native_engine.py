"""The native engine (C++ cores in lcr._native) against the Python spec, decision by decision.

Every comparison replays the same trace and predictions through both engines and
requires the same hit/miss sequence, the same evicted key at every request and the
same counters (LARU: the same final lambda too).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lcr.cli
from lcr.errors import LcrInputError
from lcr.policies import make_policy
from lcr.policies.laru import PAPER_RULE
from lcr.predict.experimental import ArrayPredictor, lognormal_predictions, oracle_predictions
from lcr.sim.native import dense_ids, native_replay
from lcr.sim.runner import replay
from lcr.sim.sweep import PolicySpec, run_one, uses_native
from lcr.traces import Trace, generate, load_trace

from conftest import real_trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# (policy, params): every native core, with the parameters that change its decisions.
VARIANTS = [
    ("lru", {}),
    ("opt", {}),
    ("sieve", {}),
    ("clock", {}),
    ("marker", {"seed": 7}),
    ("fpb", {}),
    ("fpb", {"mode": "async"}),
    ("hf", {}),
    ("hf", {"window": 32, "mode": "async"}),
    ("laru", {}),  # the default: credit, guard and the interval and frequency experts on
    ("laru", {"mode": "async"}),
    ("laru", dict(PAPER_RULE)),  # Algorithm 1 as the paper writes it
    ("laru", {**PAPER_RULE, "shrink_every": 3, "b": 1.5}),
    ("laru", {**PAPER_RULE, "mode": "async", "b": 4.0, "shrink_every": 2}),
    ("laru", {**PAPER_RULE, "credit": 1, "b": 1.5}),
    ("laru", {**PAPER_RULE, "mode": "async", "credit": 1, "b": 1.1}),
    ("laru", {**PAPER_RULE, "guard": 0.0, "b": 1.5}),
    ("laru", {**PAPER_RULE, "mode": "async", "credit": 1, "b": 1.05, "guard": 0.02}),
    ("laru", {**PAPER_RULE, "intervals": 1, "b": 1.5}),
    ("laru", {"mode": "async", "credit": 1, "b": 1.05, "guard": 0.02, "intervals": 1}),
    ("laru", {"mode": "async", "credit": 0, "b": 2.0, "shrink_every": 2, "guard": "none", "intervals": 1}),
    ("laru", {"intervals": 1, "guard": "none"}),
    ("arc", {}),
    ("lirs", {}),
    ("s3fifo", {}),
    ("s3fifo", {"move_to_main": 1, "small_ratio": 0.25, "ghost_ratio": 0.5}),
    ("wtinylfu", {}),
    ("wtinylfu", {"window": 0.2}),
    ("lfu", {}),
    ("lfu", {"aging": 37}),
]


def assert_same_decisions(trace: Trace, name: str, capacity: int, predictions=None, **params):
    from lcr.policies import POLICIES

    capacity = max(capacity, POLICIES[name].min_capacity)
    predictor = ArrayPredictor(predictions) if make_policy_uses_predictions(name) else None
    spec = make_policy(name, capacity, predictor=predictor, next_use=trace.next_use, **params)
    expected = replay(trace, spec, predictor, record_evictions=True)
    got = native_replay(trace, name, capacity, predictions, record_evictions=True, **params)
    where = f"{name} {params} k={capacity} on {trace.name}"
    mismatch = np.flatnonzero((expected.hits != got.hits) | (expected.evicted != got.evicted))
    assert mismatch.size == 0, f"{where}: first different decision at request {mismatch[:1]}"
    stats = dict(got.stats)
    if name == "laru":
        assert stats.pop("final_lambda") == spec.lam, where
    assert stats == expected.stats, where
    return got


def make_policy_uses_predictions(name: str) -> bool:
    from lcr.policies import POLICIES

    return POLICIES[name].uses_predictions


# --- generated traces ----------------------------------------------------------------

# (trace, cache sizes): the Python spec costs O(k) per eviction for FPB, HF and LARU,
# so the largest caches get the shorter traces.
WORKLOADS = [
    ("zipf:requests=6000,keys=1500,alpha=0.9,seed=1", (1, 2, 3, 16, 100)),
    ("zipf:requests=3000,keys=4000,alpha=0.6,seed=2", (300, 1000)),
    ("zipf:requests=5000,keys=300,alpha=1.2,seed=3", (1, 7, 64, 299, 300)),
    ("loop:requests=4000,keys=257", (1, 2, 50, 256, 257)),
]


@pytest.mark.parametrize("workload,capacities", WORKLOADS, ids=[w for w, _ in WORKLOADS])
@pytest.mark.parametrize("noise", [0.0, 0.3, 1.0])
def test_generated_traces_oracle_noise(workload, capacities, noise):
    trace = generate(workload)
    predictions = oracle_predictions(trace, noise, seed=11)
    for capacity in capacities:
        for name, params in VARIANTS:
            if noise and not make_policy_uses_predictions(name):  # reads no predictions: one level is enough
                continue
            assert_same_decisions(trace, name, capacity, predictions, **params)


@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_lognormal_predictions(sigma):
    trace = generate("zipf:requests=5000,keys=800,alpha=1.0,seed=4")
    predictions = lognormal_predictions(trace, sigma, seed=5)
    for capacity in (2, 40, 200):
        for name, params in VARIANTS:
            if make_policy_uses_predictions(name):
                assert_same_decisions(trace, name, capacity, predictions, **params)


def test_laru_shrinks_lambda_and_counts_like_the_spec():
    # All-flipped oracle predictions make LARU evict exactly the keys it needs next, so
    # prediction-induced misses shrink lambda: the path worth checking.
    trace = generate("zipf:requests=8000,keys=400,alpha=0.8,seed=6")
    predictions = oracle_predictions(trace, 1.0)
    for shrink_every in (1, 2, 5):
        got = assert_same_decisions(trace, "laru", 40, predictions, **dict(PAPER_RULE, shrink_every=shrink_every))
        assert got.stats["prediction_induced_misses"] > 0
        assert got.stats["phases"] > 1


def test_laru_follows_its_heuristic_experts_like_the_spec():
    # Answers that say nothing (constant) or little (a noisy oracle): an expert's shadow
    # leads, the path worth checking (the noisy oracle of the tests above mostly keeps the
    # predictions ahead). The loop is the interval expert's case, the scan the others'; at
    # k = 300 the first-seen expert's probation holds 3 keys (1 below k = 200).
    followed = 0
    for workload, values in (("loop:requests=5000,keys=300", "constant"),
                             ("scan:requests=6000,hot_keys=200,scan_length=300,scan_every=800,seed=2", "constant"),
                             ("zipf:requests=6000,keys=800,alpha=0.9,seed=2", "noisy")):
        trace = generate(workload)
        predictions = np.zeros(len(trace)) if values == "constant" else oracle_predictions(trace, 0.6, seed=3)
        for capacity, guard in ((30, 0.01), (120, "none"), (300, 0.01)):  # 300: a probation of 3
            params = dict(mode="async", b=1.05, credit=1, guard=guard)
            got = assert_same_decisions(trace, "laru", capacity, predictions, **params, intervals=1)
            alone = native_replay(trace, "laru", capacity, predictions, record_evictions=True, **params, intervals=0)
            followed += not np.array_equal(got.evicted, alone.evicted)
    assert followed >= 4  # the experts changed the decisions


def test_laru_follows_its_model_expert_like_the_spec():
    # A model right on 70% of the keys: LARU's window falls to recency while the model
    # expert (its answers over the whole cache) leads (test_policy_spec) and is followed.
    trace = generate("zipf:requests=6000,keys=800,alpha=0.8,seed=1")
    predictions = oracle_predictions(trace, 0.3, seed=3)
    for capacity in (60, 150):
        got = assert_same_decisions(trace, "laru", capacity, predictions, mode="async")
        without = native_replay(trace, "laru", capacity, predictions, mode="async", intervals=0)
        assert got.stats["expert_evictions"] > 0 and got.stats["misses"] < 0.975 * without.stats["misses"]


def test_laru_first_seen_tie_break_slack_like_the_spec():
    # No answers at all (NaN): every pick is a tie the first-seen expert may break, and its
    # shadow runs a few misses behind the predictions' (LRU's) between scans, where the
    # guard's slack decides (11 misses apart from a rule without it).
    trace = generate("scan:requests=30000,hot_keys=2000,alpha=0.8,scan_length=1600,scan_every=4000,seed=2")
    got = assert_same_decisions(trace, "laru", 498, np.full(len(trace), np.nan), mode="async")
    assert got.stats["expert_tie_breaks"] > 0


def test_laru_guard_evicts_by_recency_like_the_spec():
    # Inverted predictions put LARU over its miss budget against LRU again and again.
    trace = generate("zipf:requests=8000,keys=400,alpha=0.8,seed=6")
    predictions = oracle_predictions(trace, 1.0)
    for guard, credit in ((0.0, 0), (0.02, 1)):
        got = assert_same_decisions(trace, "laru", 40, predictions,
                                    **dict(PAPER_RULE, guard=guard, credit=credit, b=1.05))
        assert got.stats["guarded_evictions"] > 0
        if not credit:  # the guard's shadow LRU must not turn credit on
            assert got.stats["credited_hits"] == 0


def test_laru_guard_budget_grows_with_the_best_shadow_like_the_spec():
    # swim: test_policy_spec's guard-budget case, where the wider budget decides (6,864
    # misses without it); twolf (5%, 30% negated): where its cap decides (3,771 without it).
    # swim with every answer negated: the interval expert's shadow widens it (6,864 misses
    # with the predictions' shadow alone).
    for name, capacity, noise, most in (("swim", 33, 0.5, 6700), ("twolf", 92, 0.3, 3950), ("swim", 33, 1.0, 6600)):
        trace = real_trace(name)
        got = assert_same_decisions(trace, "laru", capacity, oracle_predictions(trace, noise, seed=3), mode="async")
        assert got.stats["guarded_evictions"] > 0 and got.stats["misses"] < most


def test_long_trace_small_cache_exercises_tree_compaction():
    # Positions run out every ~k touches: many compactions of the recency tree.
    trace = generate("zipf:requests=30000,keys=200,alpha=0.7,seed=8")
    predictions = oracle_predictions(trace, 0.3, seed=9)
    for name, params in (("laru", {}), ("hf", {"window": 3}), ("fpb", {})):
        assert_same_decisions(trace, name, 5, predictions, **params)


# --- real traces -----------------------------------------------------------------------

REAL_TRACES = ["kv/mooncake_conversation_trace.jsonl", "classic/cloudPhysicsIO.oracleGeneral.bin",
               "classic/cloudPhysicsIO.csv", "classic/cache2k_web07.trace.xz",
               "classic/lirs/multi2.trace.gz", "classic/lirs/sprite.trace.gz", "classic/lirs/cpp.trace.gz",
               "classic/lirs/2_pools.trace.gz", "classic/lirs/loop.trace.gz", "classic/lirs/scan.trace.gz",
               "embedding/criteo_kaggle_first999.tsv", "moe/router-trace.v2.json"]


@pytest.mark.parametrize("relative", REAL_TRACES)
def test_real_trace_slices(relative):
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent")
    try:
        trace = load_trace(str(path), limit=20_000)
    except LcrInputError as err:
        pytest.skip(f"the trace reader rejects {relative}: {err}")
    trace = trace.head(20_000)
    predictions = oracle_predictions(trace, 0.5, seed=1)
    capacity = min(64, max(2, trace.distinct_keys // 100))
    for name, params in VARIANTS:
        assert_same_decisions(trace, name, capacity, predictions, **params)


# --- property tests ----------------------------------------------------------------------

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, 2.5, -3.0]
prediction_value = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True),
                             st.integers(-5, 5).map(float))


@st.composite
def small_cases(draw):
    n = draw(st.integers(1, 80))
    alphabet = draw(st.integers(1, 12))
    keys = draw(st.lists(st.integers(0, alphabet - 1).map(lambda k: k * 1_000_003 - 40), min_size=n, max_size=n))
    predictions = draw(st.lists(prediction_value, min_size=n, max_size=n))
    name, params = draw(st.sampled_from(VARIANTS))
    params = dict(params)
    if name == "hf":
        params["window"] = draw(st.integers(1, 6))
    if name == "laru":
        params["b"] = draw(st.sampled_from([1.01, 1.5, 2.0, 3.0]))
        params["shrink_every"] = draw(st.integers(1, 4))
    if name == "marker":
        params["seed"] = draw(st.integers(0, 2**64 - 1))
    capacity = draw(st.integers(1, 10))
    return Trace(np.array(keys, dtype=np.int64)), np.array(predictions, dtype=np.float64), name, capacity, params


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_property_same_decisions_on_small_random_traces(case):
    trace, predictions, name, capacity, params = case
    assert_same_decisions(trace, name, capacity, predictions, **params)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=200))
def test_property_dense_ids_number_keys_by_first_appearance(keys):
    trace = Trace(np.array(keys, dtype=np.int64))
    ids, distinct = dense_ids(trace)
    assert np.array_equal(distinct[ids], trace.keys)
    first = list(dict.fromkeys(keys))
    assert distinct.tolist() == first


# --- engine selection, CLI, errors --------------------------------------------------------

def test_dense_ids_are_recomputed_for_a_new_key_array():
    trace = generate("zipf:requests=1000,keys=100,seed=1")
    ids, _ = dense_ids(trace)
    head = trace.head(10)
    head_ids, head_keys = dense_ids(head)
    assert len(head_ids) == 10 and np.array_equal(head_keys[head_ids], head.keys)
    assert dense_ids(trace)[0] is ids  # cached per trace


def test_run_one_engines_agree_and_auto_is_native():
    trace = generate("zipf:requests=4000,keys=500,alpha=1.0,seed=2")
    for text in ("lru", "opt", "laru:mode=async", "fpb", "hf:window=8", "marker", "sieve"):
        spec = PolicySpec.parse(text)
        python = run_one(trace, spec, 50, noise=0.5, seed=3, engine="python")
        native = run_one(trace, spec, 50, noise=0.5, seed=3, engine="native")
        auto = run_one(trace, spec, 50, noise=0.5, seed=3, engine="auto")
        native.stats.pop("final_lambda", None)
        auto.stats.pop("final_lambda", None)
        assert (python.misses, python.stats) == (native.misses, native.stats) == (auto.misses, auto.stats)


def test_engine_choice_errors():
    trace = generate("zipf:requests=500,keys=50,seed=2")
    with pytest.raises(LcrInputError, match="no native engine"):
        run_one(trace, PolicySpec.parse("predictive_marker"), 5, engine="native")
    with pytest.raises(LcrInputError, match="unknown engine"):
        run_one(trace, PolicySpec.parse("lru"), 5, engine="gpu")
    with pytest.raises(LcrInputError, match="b > 1"):
        run_one(trace, PolicySpec.parse("laru:b=1"), 5, engine="native")
    with pytest.raises(LcrInputError, match="unexpected keyword"):
        run_one(trace, PolicySpec.parse("hf:foo=1"), 5, engine="native")
    with pytest.raises(LcrInputError, match="runs in Python"):
        run_one(trace, PolicySpec.parse("laru"), 5, predictor_name="lightgbm", engine="native")
    assert not uses_native(PolicySpec.parse("laru"), "auto", "lightgbm")  # the sync online model
    assert uses_native(PolicySpec.parse("laru"), "auto", "lightgbm:async")  # replayed: an array
    assert uses_native(PolicySpec.parse("lru"), "auto", "lightgbm")  # reads no predictions
    assert uses_native(PolicySpec.parse("hf"), "auto", "oracle:async")
    # Policies without a core still run under auto.
    assert run_one(trace, PolicySpec.parse("predictive_marker"), 5, engine="auto").misses > 0


def test_native_replay_rejects_bad_input():
    trace = generate("zipf:requests=100,keys=20,seed=2")
    with pytest.raises(ValueError, match="one per request"):
        native_replay(trace, "laru", 4, np.zeros(99))
    with pytest.raises(ValueError, match="needs predictions"):
        native_replay(trace, "fpb", 4)
    with pytest.raises(ValueError, match="at least 1"):
        native_replay(trace, "lru", 0)
    with pytest.raises(ValueError, match="no native core"):
        native_replay(trace, "blind_oracle_lru", 4, np.zeros(100))


def test_cli_engines_print_the_same_table(capsys, tmp_path):
    argv = ["sim", "zipf:requests=5000,keys=800,alpha=0.9", "--cache", "1%,5%",
            "--policies", "lru,opt,laru,fpb,hf:window=8,sieve,marker", "--noise", "0,1"]
    tables = {}
    for engine in ("python", "native", "auto"):
        out = tmp_path / f"{engine}.json"
        assert lcr.cli.main([*argv, "--engine", engine, "--json", str(out)]) == 0
        tables[engine] = capsys.readouterr().out
        results = json.loads(out.read_text())["results"]
        assert len(results) == 2 * (4 + 3 * 2)
    assert tables["python"] == tables["native"] == tables["auto"]
    with pytest.raises(SystemExit):
        lcr.cli.main([*argv, "--engine", "fast"])


def test_learned_async_predictions_run_natively_with_the_same_decisions():
    pytest.importorskip("lightgbm")
    # Long enough for the model to fit and answer (the first half is NaN while it warms up).
    trace = generate("zipf:requests=20000,keys=300,alpha=1.0,seed=3")
    for text in ("laru", "hf:window=8"):
        spec = PolicySpec.parse(text)
        python = run_one(trace, spec, 30, predictor_name="lightgbm:async", engine="python")
        native = run_one(trace, spec, 30, predictor_name="lightgbm:async", engine="native")
        native.stats.pop("final_lambda", None)
        assert (python.misses, python.stats) == (native.misses, native.stats)
        assert native.stats["predictor_calls"] == len(trace)  # async: one call per request


def test_cli_runs_the_heuristics_without_a_predictor(capsys):
    # Prediction-free: no noise column, no predictor calls, same table from both engines.
    argv = ["sim", "zipf:requests=4000,keys=600,alpha=0.9", "--cache", "2%,10%",
            "--policies", "arc,lirs,s3fifo,wtinylfu,lfu:aging=500", "--predictor", "lightgbm"]
    tables = {}
    for engine in ("python", "native"):
        assert lcr.cli.main([*argv, "--engine", engine]) == 0
        tables[engine] = capsys.readouterr().out
    assert tables["python"] == tables["native"]
    rows = [line.split() for line in tables["native"].splitlines() if line.startswith(("arc", "lirs", "s3", "wt", "lfu"))]
    assert len(rows) == 10 and all(row[2] == "-" and row[-1] == "0" for row in rows)
