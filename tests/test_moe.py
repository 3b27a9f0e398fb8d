"""MoE expert caching: layered policies (LLRU, the split variants), the routing generator
and readers, `lcr sim --domain moe`, and the ExpertCache."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lcr.errors import LcrInputError
from lcr.policies import make_policy
from lcr.policies.layered import LayeredRecency, LayerShape
from lcr.policies.split import layer_capacities
from lcr.sim import PolicySpec, replay, run_one
from lcr.traces import Trace, generate, read_trace
from lcr.traces.moe import check_layered, routing_trace, zipf_weights

ROUTER = Path(__file__).resolve().parents[2] / "shared" / "data" / "moe" / "router-trace.v2.json"

FLAT = {"opt", "lru", "marker", "laru", "fpb"}
LAYERED = {"llru", "lru_dist", "marker_dist", "opt_dist", "laru_llru"}


def misses(trace: Trace, name: str, capacity: int, noise: float = 0.0) -> int:
    params = {}
    if name in LAYERED:
        params = {"layers": trace.meta["layers"], "experts": trace.meta["experts"]}
        if trace.meta.get("rounds") == "native":
            params["native_rounds"] = 1
    return run_one(trace, PolicySpec(name, tuple(params.items())), capacity, noise=noise).misses


# --- LLRU -------------------------------------------------------------------------------------

def figure3_pages(layers=6, n=10):
    """The paper's Figure 3: l = 6; tokens 1 and 2 walked all layers, token 3 layers 1-3.
    Token i uses expert i at every layer, so page (layer, token) is unique."""
    keys = [(t % layers) * n + t // layers for t in range(15)]
    return keys, layers, n


def test_llru_order_on_the_paper_figure3_example():
    keys, layers, n = figure3_pages()
    order = LayeredRecency(LayerShape(layers, n))
    for key in keys:
        order.arrive(key)
        order.touch(key)
    order.arrive(3 * n + 9)  # token 3 now asks for a layer-4 page (0-based layer 3)
    assert order.now == 15
    got = [(key // n + 1, key % n + 1) for key in order.eviction_order()]  # (layer, token), 1-based
    assert got == [
        # R = 2: token 1's layers 3, 2, 1 (largest D first), then layer 4, whose turn is now (D = 0).
        (3, 1), (2, 1), (1, 1), (4, 1),
        # R = 1: token 2's layers 3, 2, 1, then token 1's layers 6, 5, then token 2's layer 4.
        (3, 2), (2, 2), (1, 2), (6, 1), (5, 1), (4, 2),
        # R = 0: token 3's layers 3, 2, 1, token 2's layers 6, 5.
        (3, 3), (2, 3), (1, 3), (6, 2), (5, 2)]
    # The figure's cached set (its pages numbered 1..11 by eviction priority) keeps that order.
    cached = [(3, 1), (2, 1), (1, 1), (3, 2), (2, 2), (1, 2), (3, 3), (2, 3), (1, 3), (6, 2), (5, 2)]
    assert [page for page in got if page in cached] == cached


def test_llru_policy_evicts_the_figure3_victim_and_lru_does_not():
    keys, layers, n = figure3_pages()
    request = 3 * n + 9
    llru = make_policy("llru", 15, layers=layers, experts=n)
    lru = make_policy("lru", 15)
    for t, key in enumerate(keys + [request]):
        llru.access(key, t)
        lru.access(key, t)
    assert llru.last_evicted == 2 * n + 0  # token 1's layer-3 page
    assert lru.last_evicted == keys[0]     # token 1's layer-1 page: needed again three steps later


def test_llru_evicts_by_round_then_by_how_far_away_the_layer_is():
    # l = 3, n = 4 (layer L holds pages 4L..4L+3), k = 5; six new pages walk two rounds.
    llru = make_policy("llru", 5, layers=3, experts=4)
    lru = make_policy("lru", 5)
    for t, key in enumerate([0, 4, 8, 1, 5, 9]):
        llru.access(key, t)
        lru.access(key, t)
    # t = 5 (layer 2): ages 5..1 give R = 1, 1, 1, 0, 0; in round 1, page 4 (layer 1) has
    # D = 2 > page 0's D = 1 (layer 0 comes next) > page 8's D = 0. LRU takes the oldest.
    assert (llru.last_evicted, lru.last_evicted) == (4, 0)
    llru.access(2, 6)  # page 0 (tau 0) is alone in round R = 2
    assert llru.last_evicted == 0
    llru.access(6, 7)  # R = 1 for pages 8, 1, 5; D = 1, 2, 0: page 1 (layer 0) goes
    assert llru.last_evicted == 1


def test_llru_with_one_layer_is_lru_decision_by_decision():
    keys = np.random.default_rng(4).integers(0, 40, 3000)
    trace = Trace(keys)
    lru = replay(trace, make_policy("lru", 12), record_evictions=True)
    llru = replay(trace, make_policy("llru", 12), record_evictions=True)
    assert np.array_equal(lru.evicted, llru.evicted)


def test_llru_native_rounds_share_one_step_per_layer():
    # l = 2, top-2 native: requests (0,a) (0,b) (1,c) (1,d) are steps 0 0 1 1.
    order = LayeredRecency(LayerShape(2, 4), native_rounds=True)
    steps = []
    for key in [0, 1, 4, 5, 2, 3, 6, 7]:
        steps.append(order.arrive(key))
        order.touch(key)
    assert steps == [0, 0, 1, 1, 2, 2, 3, 3]


def test_native_and_split_rounds_give_the_same_faults_when_top1():
    trace = generate("moe:layers=4,experts=6,top_k=1,tokens=300,seed=2")
    native = generate("moe:layers=4,experts=6,top_k=1,tokens=300,seed=2,rounds=native")
    assert np.array_equal(trace.keys, native.keys)
    for k in (3, 8, 15):
        assert misses(trace, "llru", k) == misses(native, "llru", k)


# --- split caches and OPT -------------------------------------------------------------------------

def test_layer_capacities_split_the_remainder_over_the_first_layers():
    assert layer_capacities(10, 4) == [3, 3, 2, 2]
    assert sum(layer_capacities(64, 32)) == 64
    with pytest.raises(ValueError, match="a split cache needs a slot per layer: k = 3 < 5 layers"):
        make_policy("lru_dist", 3, layers=5, experts=2)


@pytest.mark.parametrize("spec", ["mixtral:tokens=60,seed=1", "llama_moe:tokens=20,a=0.5,seed=2",
                                  "moe:layers=6,experts=5,top_k=1,a=2,tokens=300,seed=3"])
def test_opt_dist_never_beats_opt_and_split_lru_never_beats_opt_dist(spec):
    trace = generate(spec)
    pages = trace.meta["layers"] * trace.meta["experts"]
    for k in sorted({trace.meta["layers"], trace.meta["layers"] + 3, pages // 4, pages // 2, pages - 1}):
        opt, opt_dist = misses(trace, "opt", k), misses(trace, "opt_dist", k)
        assert opt <= opt_dist <= misses(trace, "lru_dist", k)
        assert opt <= misses(trace, "llru", k)


def test_opt_dist_is_worse_than_opt_on_an_unbalanced_workload():
    # Zipf a = 2 over 8 layers with k = 16: a split cache keeps 2 experts per layer, while
    # the shared one gives room to whichever layer's third expert is needed soonest.
    trace = generate("moe:layers=8,experts=8,top_k=1,a=2,tokens=400,seed=0")
    assert misses(trace, "opt_dist", 16) > 1.1 * misses(trace, "opt", 16)


@pytest.mark.parametrize("name", sorted(FLAT | LAYERED))
def test_a_cache_holding_every_expert_only_has_compulsory_faults(name):
    trace = generate("llama_moe:tokens=8,a=0.3,seed=5")
    pages = trace.meta["layers"] * trace.meta["experts"]
    assert misses(trace, name, pages) == trace.distinct_keys
    assert misses(trace, name, pages + 7) == trace.distinct_keys


def test_laru_over_llru_with_perfect_predictions_is_opt():
    trace = generate("mixtral:tokens=40,seed=3")
    for k in (20, 100, 200):
        assert misses(trace, "laru_llru", k) == misses(trace, "opt", k)


def test_laru_over_llru_runs_the_papers_rule_and_refuses_lcrs_extensions():
    """Credit and the guard count against plain LRU and the interval expert's shadows replay
    plain LARU, none of them LLRU's order: LARU over LLRU is Algorithm 1 (b = 2) whatever
    LARU's own defaults are, and refuses those options instead of running them wrong."""
    from lcr.policies.laru import PAPER_RULE
    from lcr.predict import ArrayPredictor

    predictor = ArrayPredictor(np.zeros(1))
    policy = make_policy("laru_llru", 8, predictor=predictor, layers=2, experts=4)
    assert (policy.b, policy.credit, policy.guard, policy.shadows, policy.lru_shadow) == \
        (PAPER_RULE["b"], False, None, None, None)
    assert make_policy("laru_llru", 8, predictor=predictor, layers=2, experts=4, b=1.5).b == 1.5
    for option in ("credit", "guard", "intervals"):
        with pytest.raises(TypeError, match=option):
            make_policy("laru_llru", 8, predictor=predictor, layers=2, experts=4, **{option: 1})


# --- routing traces and the generator -------------------------------------------------------------

def test_generator_per_layer_frequencies_follow_the_zipf_law():
    a, b, n = 1.2, 0.5, 8
    trace = generate(f"moe:layers=4,experts={n},top_k=1,a={a},b={b},tokens=30000,seed=7")
    check_layered(trace)
    weights = zipf_weights(n, a, b)
    layer = trace.keys // n
    for ell in range(4):
        counts = np.bincount(trace.keys[layer == ell] - ell * n, minlength=n)
        freq = counts / counts.sum()
        assert np.abs(freq - trace.meta["popularity"][ell]).max() < 0.01
        assert np.allclose(np.sort(freq)[::-1], weights, atol=0.01)  # the law, up to the permutation
    # Each layer ranks its experts independently.
    assert len({int(np.argmax(p)) for p in trace.meta["popularity"]}) > 1


def test_generator_top_k_picks_distinct_experts_and_presets_have_the_paper_shapes():
    mixtral, llama = generate("mixtral:tokens=50"), generate("llama_moe:tokens=50")
    assert (mixtral.meta["layers"], mixtral.meta["experts"], mixtral.meta["top_k"]) == (32, 8, 2)
    assert (llama.meta["layers"], llama.meta["experts"], llama.meta["top_k"]) == (32, 16, 4)
    assert len(mixtral) == 50 * 2 * 32 and len(llama) == 50 * 4 * 32
    native = generate("llama_moe:tokens=50,rounds=native")
    per_token_layer = native.keys.reshape(50, 32, 4)
    assert all(len(set(row)) == 4 for row in per_token_layer.reshape(-1, 4).tolist())
    assert sorted(native.keys.tolist()) == sorted(llama.keys.tolist())
    check_layered(native)


def test_routing_trace_splits_top_k_into_rounds():
    trace = routing_trace([[[1, 2], [0, 3]]], layers=2, experts=4)
    assert trace.keys.tolist() == [1, 4, 2, 7]
    native = routing_trace([[[1, 2], [0, 3]]], layers=2, experts=4, rounds="native")
    assert native.keys.tolist() == [1, 2, 4, 7]


@pytest.mark.parametrize("selections,message", [
    ([[[1], [8]]], "token 0 layer 1: expert 8 out of range 0..7"),
    ([[[1], [2]], [[-1], [2]]], "token 1 layer 0: expert -1 out of range 0..7"),
    ([[[1], [2], [3]]], "token 0: routes through 3 layers, expected 2"),
    ([[[1, 2], [3]]], "must select the same number of experts"),
])
def test_bad_routing_gets_a_one_line_error(selections, message):
    with pytest.raises(LcrInputError, match=message) as err:
        routing_trace(selections, layers=2, experts=8)
    assert "\n" not in str(err.value)


def test_a_stream_with_layers_out_of_order_is_refused():
    trace = Trace(np.array([0, 8, 16, 0, 16, 8]), "swapped", meta={"layers": 3, "experts": 8})
    with pytest.raises(LcrInputError, match="request 4: layer 2 out of order, expected layer 1"):
        check_layered(trace)
    with pytest.raises(LcrInputError, match="page 30 is outside 3 layers x 8 experts"):
        check_layered(Trace(np.array([0, 30]), meta={"layers": 3, "experts": 8}))
    with pytest.raises(LcrInputError, match="not a MoE trace"):
        check_layered(Trace(np.array([0, 1])))


def test_router_file_with_an_out_of_range_expert_names_the_file(tmp_path):
    bad = tmp_path / "router.json"
    bad.write_text(json.dumps({"expertsPerLayer": 4, "layers": 2, "selections": [[[0], [4]]]}))
    with pytest.raises(LcrInputError, match=r"router\.json: token 0 layer 1: expert 4 out of range"):
        read_trace(str(bad))


# --- lcr sim --domain moe -------------------------------------------------------------------------

def lcr(*args):
    return subprocess.run([sys.executable, "-m", "lcr", *args], capture_output=True, text=True, timeout=300)


def test_sim_domain_moe_on_the_real_capture(tmp_path):
    if not ROUTER.exists():
        pytest.skip(f"{ROUTER} not present (shared data is optional)")
    out = lcr("sim", str(ROUTER), "--domain", "moe", "--cache", "8,16,24",
              "--policies", "opt,lru,llru,lru_dist,opt_dist,laru_llru", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    rows = {(r["policy"].split(":")[0], r["capacity"]): r for r in doc["results"]}
    assert {p for p, _ in rows} == {"opt", "lru", "llru", "lru_dist", "opt_dist", "laru_llru"}
    assert any(r["policy"] == "llru:layers=6,experts=8" for r in doc["results"])
    trace = read_trace(str(ROUTER))
    for k in (8, 16, 24):
        assert rows[("llru", k)]["misses"] == misses(trace, "llru", k)
        assert rows[("opt", k)]["misses"] <= rows[("opt_dist", k)]["misses"] <= rows[("lru_dist", k)]["misses"]
        assert rows[("laru_llru", k)]["misses"] == rows[("opt", k)]["misses"]


def test_sim_domain_moe_on_the_generator_with_defaults_and_its_errors():
    out = lcr("sim", "mixtral:tokens=20", "--domain", "moe")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("llru:")]
    assert [row[0] for row in rows] == ["llru:layers=32,experts=8"] * 3
    assert [int(row[1]) for row in rows] == [64, 128, 192]  # 25/50/75% of 256 experts
    native = lcr("sim", "mixtral:tokens=10,rounds=native", "--domain", "moe", "--policies", "llru")
    assert "llru:layers=32,experts=8,native_rounds=1" in native.stdout
    bad = lcr("sim", "zipf:requests=100", "--domain", "moe")
    assert bad.returncode == 2 and "not a MoE trace" in bad.stderr and bad.stderr.count("\n") == 1


# --- ExpertCache ----------------------------------------------------------------------------------

def tiny_moe(torch, layers=4, experts=6, dim=8, hidden=16, seed=0):
    torch.set_num_threads(1)  # tiny matrices: threads only add contention
    torch.manual_seed(seed)
    nn = torch.nn
    gates = nn.ModuleList(nn.Linear(dim, experts) for _ in range(layers))
    table = [[nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)) for _ in range(experts)]
             for _ in range(layers)]
    return gates, table


def decode(torch, gates, fetch, tokens, top_k, prefetch=None, routing=None):
    """Run tokens one at a time through the layers; ``fetch(layer, expert)`` gives the module.
    Returns the outputs and the routing [token][layer][rank] the gates chose."""
    outputs, chosen = [], []
    with torch.no_grad():
        for token, h in enumerate(tokens):
            per_layer = []
            for layer, gate in enumerate(gates):
                weights, experts = torch.topk(torch.softmax(gate(h), -1), top_k)
                per_layer.append(experts.tolist())
                out = sum(w * fetch(layer, e)(h) for w, e in zip(weights, experts.tolist()))
                if prefetch is not None and layer + 1 < len(gates):
                    prefetch(layer + 1, routing[token][layer + 1])
                h = h + out
            outputs.append(h)
            chosen.append(per_layer)
    return torch.stack(outputs), chosen


@pytest.mark.parametrize("policy,capacity,top_k,use_prefetch", [
    ("llru", 5, 2, False), ("llru", 9, 1, False), ("lru", 7, 2, False), ("lru_dist", 8, 2, False),
    ("marker", 6, 3, False), ("llru", 6, 2, True)])
def test_expert_cache_matches_the_model_and_the_simulator(policy, capacity, top_k, use_prefetch):
    torch = pytest.importorskip("torch")
    from lcr.moe import ExpertCache

    layers, experts = 4, 6
    gates, table = tiny_moe(torch, layers, experts)
    tokens = torch.randn(40, 8, generator=torch.Generator().manual_seed(1))
    expected, routing = decode(torch, gates, lambda layer, e: table[layer][e], tokens, top_k)

    cache = ExpertCache(table, capacity, policy=policy, device="cpu")
    most = []

    def fetch(layer, expert):
        module = cache.get(layer, expert)
        most.append(len(cache))
        return module

    prefetch = cache.prefetch if use_prefetch else None
    got, cached_routing = decode(torch, gates, fetch, tokens, top_k, prefetch, routing)
    assert torch.equal(got, expected) and cached_routing == routing
    assert max(most) <= capacity and all(p.device.type == "cpu" for p in table[0][0].parameters())

    trace = routing_trace(routing, layers, experts, rounds="native")
    assert cache.stats.faults == misses(trace, policy, capacity)
    assert cache.stats.hits + cache.stats.faults == len(trace)
    if use_prefetch:
        assert cache.stats.prefetched == (layers - 1) * top_k * len(tokens)


def test_expert_cache_holding_everything_only_loads_each_expert_once():
    torch = pytest.importorskip("torch")
    from lcr.moe import ExpertCache

    gates, table = tiny_moe(torch, 3, 4)
    cache = ExpertCache(table, 100, device="cpu")
    _, routing = decode(torch, gates, cache.get, torch.randn(30, 8), 2)
    used = {(layer, e) for token in routing for layer, row in enumerate(token) for e in row}
    assert cache.stats.faults == len(used) and cache.stats.evictions == 0
    assert cache.resident() == sorted(used)
    with pytest.raises(IndexError, match=r"expert \(3, 0\) outside 3 layers x 4"):
        cache.get(3, 0)


def test_expert_handle_refuses_use_after_its_slot_was_reused():
    """A handle whose slot a later get/prefetch reloaded must not run the new weights
    (on CUDA it would race the copy); handles of still-resident experts keep working."""
    torch = pytest.importorskip("torch")
    from lcr.moe import ExpertCache, StaleExpertError

    _, table = tiny_moe(torch, 2, 3)
    cache = ExpertCache(table, 2, policy="lru", device="cpu")
    h = torch.randn(8)
    first, second = cache.get(0, 0), cache.get(0, 1)
    assert torch.equal(first(h), table[0][0](h))
    assert torch.equal(cache.get(0, 0)(h), table[0][0](h))  # a hit keeps both handles valid
    cache.prefetch(1, [2])  # LRU evicts (0, 1): its slot now holds (1, 2)
    assert torch.equal(first(h), table[0][0](h))
    with pytest.raises(StaleExpertError, match=r"expert \(0, 1\) was evicted"):
        second(h)
    with pytest.raises(StaleExpertError):
        second.module
    again = cache.get(0, 1)  # reloaded: a new handle is valid, the old one stays stale
    assert torch.equal(again(h), table[0][1](h))
    with pytest.raises(StaleExpertError):
        second(h)
