"""Sparse prefix checkpoints: exact DP, heuristics, online re-planning, traces, CLI errors."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import lcr.cli
from lcr.checkpoints import cli as ckpt_cli
from lcr.checkpoints.cost import expected_recompute, resume_depths
from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.online import OnlinePlanner
from lcr.checkpoints.planners import (
    BalancedPlanner,
    BlockPlanner,
    DpPlanner,
    LastPlanner,
    balanced_uniform_cost,
    solve_native,
)
from lcr.checkpoints.reference import reference_dp
from lcr.checkpoints.synthetic import law_from_spec, multimodal_law, short_prefix_law, spike_law
from lcr.checkpoints.traces import law_from_trace, overlap_depths, read_mooncake_blocks
from lcr.errors import LcrInputError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MOONCAKE = DATA / "kv" / "mooncake_conversation_trace.jsonl"


def random_law(rng, length, integer=False, sparsity=0.5):
    w = rng.integers(0, 6, length + 1).astype(float) if integer else rng.random(length + 1)
    w[rng.random(length + 1) < sparsity] = 0.0  # gaps make ties and flat stretches of P
    w[rng.integers(0, length + 1)] += 1.0
    return OverlapLaw(w)


def brute_force(law, budget):
    return min(
        expected_recompute(law, subset)
        for k in range(budget + 1)
        for subset in itertools.combinations(range(1, law.length + 1), k)
    )


# --- the objective ---------------------------------------------------------------------


def test_expected_recompute_by_hand():
    law = OverlapLaw([1, 1, 1, 1, 1])  # depths 0..4, uniform
    assert list(resume_depths([2], 4)) == [0, 0, 2, 2, 2]
    # replays: 0,1,0,1,2 -> 4/5
    assert expected_recompute(law, [2]) == pytest.approx(0.8)
    assert expected_recompute(law, []) == pytest.approx(law.mean_depth()) == pytest.approx(2.0)


# --- exact DP ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_dp_equals_brute_force_on_small_prefixes(seed):
    rng = np.random.default_rng(seed)
    law = random_law(rng, int(rng.integers(1, 10)))
    budget = int(rng.integers(1, 5))
    best = brute_force(law, budget)
    costs, plans = solve_native(law, budget)
    plan = DpPlanner().plan(law, budget)
    assert len(plan.positions) <= budget
    assert costs[budget] == pytest.approx(best, abs=1e-12)
    assert plan.expected_recompute == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_convex_hull_dp_equals_reference_exactly_on_integer_weights(seed):
    # Integer weights keep every DP value an exact integer, so plans must coincide, ties included.
    rng = np.random.default_rng(1000 + seed)
    law = random_law(rng, int(rng.integers(20, 300)), integer=True, sparsity=rng.uniform(0, 0.9))
    budget = int(rng.integers(1, 24))
    costs, plans = solve_native(law, budget)
    for m in {1, budget // 2 or 1, budget}:
        ref_cost, ref_positions = reference_dp(law, m)
        assert plans[m] == ref_positions
        assert costs[m] == ref_cost


@pytest.mark.parametrize("seed", range(30))
def test_convex_hull_dp_equals_reference_on_real_valued_laws(seed):
    rng = np.random.default_rng(2000 + seed)
    law = random_law(rng, int(rng.integers(50, 400)), sparsity=rng.uniform(0, 0.95))
    budget = int(rng.integers(1, 40))
    ref_cost, _ = reference_dp(law, budget)
    plan = DpPlanner().plan(law, budget)
    assert plan.expected_recompute == pytest.approx(ref_cost, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("make_law", [spike_law, short_prefix_law, multimodal_law])
def test_convex_hull_dp_equals_reference_on_long_synthetic_prefixes(make_law):
    law = make_law(1200, 5)
    ref_cost, ref_positions = reference_dp(law, 24)
    plan = DpPlanner().plan(law, 24)
    assert plan.expected_recompute == pytest.approx(ref_cost, rel=1e-9)
    assert list(plan.positions) == ref_positions


def test_dp_costs_fall_with_budget_and_reach_zero_once_the_support_is_covered():
    law = OverlapLaw([0, 3, 0, 0, 5, 0, 2, 0])  # support {1, 4, 6}
    costs, plans = solve_native(law, 5)
    assert all(a >= b for a, b in zip(costs, costs[1:]))
    assert costs[3] == 0 and plans[3] == [1, 4, 6] and plans[5] == [1, 4, 6]
    assert plans[1] == [4]  # 4 saves 5*4 + 2*4 = 28; 6 saves 12; 1 saves 10


# --- heuristics ----------------------------------------------------------------------------


@pytest.mark.parametrize("length,budget", [(9, 1), (100, 7), (1000, 31), (257, 16), (50, 49), (20, 64)])
def test_balanced_is_the_closed_form_optimum_under_uniform_overlap(length, budget):
    law = OverlapLaw(np.ones(length + 1))
    balanced = BalancedPlanner().plan(law, budget)
    closed_form = balanced_uniform_cost(length, budget)
    assert balanced.expected_recompute == pytest.approx(closed_form, abs=1e-12)
    assert DpPlanner().plan(law, budget).expected_recompute == pytest.approx(closed_form, abs=1e-12)
    gaps = np.diff([0, *balanced.positions, length + 1])
    assert gaps.max() - gaps.min() <= 1


def test_balanced_closed_form_by_hand():
    assert balanced_uniform_cost(9, 1) == 2.0  # gaps 5 and 5: 2 * (0+1+2+3+4) / 10
    assert balanced_uniform_cost(10, 1) == pytest.approx((15 + 10) / 11)  # gaps 6 and 5
    assert balanced_uniform_cost(5, 5) == 0.0


def test_block_and_last_positions():
    law = OverlapLaw(np.ones(11))
    assert BlockPlanner(3).plan(law, 2).positions == (3, 6)
    assert BlockPlanner(3).plan(law, 10).positions == (3, 6, 9)
    assert LastPlanner().plan(law, 4).positions == (10,)


def test_dp_beats_every_heuristic_on_the_synthetic_shapes():
    for law in (spike_law(512, 0), short_prefix_law(512, 0), multimodal_law(512, 0)):
        for budget in (1, 4, 16):
            dp = DpPlanner().plan(law, budget).expected_recompute
            for planner in (BalancedPlanner(), BlockPlanner(), LastPlanner()):
                assert dp <= planner.plan(law, budget).expected_recompute + 1e-12
        assert DpPlanner().plan(law, 4).expected_recompute < 0.8 * BalancedPlanner().plan(law, 4).expected_recompute


# --- learning the law ----------------------------------------------------------------------


def test_empirical_histogram_plan_excess_shrinks_with_samples():
    law, budget = multimodal_law(200, seed=2), 6
    optimum = DpPlanner().plan(law, budget).expected_recompute
    excess = []
    for n in (30, 300, 30_000):
        gaps = []
        for seed in range(6):
            depths = np.random.default_rng(seed).choice(law.length + 1, size=n, p=law.probabilities)
            plan = DpPlanner().plan(OverlapLaw.from_samples(depths, law.length), budget)
            gaps.append(expected_recompute(law, plan.positions) - optimum)
        assert min(gaps) >= -1e-9  # nothing beats the optimum under the true law
        excess.append(float(np.mean(gaps)))
    assert excess[0] > excess[1] > excess[2]
    assert excess[2] < 0.01 * optimum < excess[0]


def test_online_planner_replans_when_the_law_drifts():
    length, budget = 256, 8
    before, after = short_prefix_law(length, 1), spike_law(length, 1)
    rng = np.random.default_rng(0)
    online = OnlinePlanner(length, budget, decay=0.995, refresh_every=10, replan_threshold=0.1)
    for d in rng.choice(length + 1, size=3000, p=before.probabilities):
        online.observe(int(d))
    replans_before, plan_before = online.replans, online.plan
    assert replans_before >= 1
    assert expected_recompute(before, plan_before.positions) < 1.25 * DpPlanner().plan(before, budget).expected_recompute

    flags = [online.observe(int(d)) for d in rng.choice(length + 1, size=3000, p=after.probabilities)]
    assert any(flags[:300])  # the shift is noticed within a few refreshes
    assert online.replans > replans_before
    best_after = DpPlanner().plan(after, budget).expected_recompute
    assert expected_recompute(after, online.plan.positions) < 1.25 * best_after
    assert expected_recompute(after, plan_before.positions) > 5 * best_after  # the stale plan was bad


def test_online_planner_stays_put_on_a_stationary_law_with_a_loose_threshold():
    law = multimodal_law(128, 3)
    online = OnlinePlanner(128, 4, decay=0.999, refresh_every=50, replan_threshold=0.5)
    for d in np.random.default_rng(1).choice(129, size=5000, p=law.probabilities):
        online.observe(int(d))
    assert online.replans <= 3


# --- traces --------------------------------------------------------------------------------


def test_overlap_depths_against_a_last_k_cache():
    requests = [[1, 2, 3], [1, 2, 4], [5], [1, 2, 3, 9], [7, 7]]
    assert list(overlap_depths(requests, cache_entries=1)) == [0, 2, 0, 0, 0]
    assert list(overlap_depths(requests, cache_entries=2)) == [0, 2, 0, 2, 0]  # [1, 2, 3] evicted
    assert list(overlap_depths(requests, cache_entries=3)) == [0, 2, 0, 3, 0]


def test_mooncake_reader_and_law(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [[1, 2, 3], [1, 2, 4, 5], [1, 2, 4, 5, 6]]
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 9, "output_length": 1,
                                         "hash_ids": ids}) + "\n" for i, ids in enumerate(rows)))
    assert read_mooncake_blocks(trace) == rows
    law = law_from_trace(trace)
    assert law.length == 4 and list(law.weights) == [1, 0, 1, 0, 1]


@pytest.mark.skipif(not MOONCAKE.exists(), reason="shared data not present")
def test_mooncake_trace_dp_beats_balanced():
    law = law_from_trace(MOONCAKE, cache_entries=1024)
    assert law.length > 50 and law.total > 10_000
    dp = [DpPlanner().plan(law, m).expected_recompute for m in (1, 8, 64)]
    balanced = [BalancedPlanner().plan(law, m).expected_recompute for m in (1, 8, 64)]
    assert dp[0] > dp[1] > dp[2]
    assert all(d < 0.8 * b for d, b in zip(dp, balanced))


# --- bad input -----------------------------------------------------------------------------


def test_bad_input_raises_one_line_errors(tmp_path):
    with pytest.raises(LcrInputError, match="negative probability -0.5 at depth 1"):
        OverlapLaw([0.2, -0.5, 1.0])
    with pytest.raises(LcrInputError, match="L must be >= 1"):
        OverlapLaw([1.0])
    with pytest.raises(LcrInputError, match="budget must be an integer >= 1, got 0"):
        DpPlanner().plan(OverlapLaw([1, 1]), 0)
    with pytest.raises(LcrInputError, match="budget"):
        BalancedPlanner().plan(OverlapLaw([1, 1]), 0)
    with pytest.raises(LcrInputError, match="length L must be >= 1"):
        law_from_spec("spike:length=0")
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"hash_ids": [1, 2]}\n{"hash_ids": [1, "x"]}\n')
    with pytest.raises(LcrInputError, match=f"{trace}:2: field 'hash_ids'"):
        read_mooncake_blocks(trace)
    trace.write_text('{"hash_ids": [1, 2]}\n\n{not json\n')
    with pytest.raises(LcrInputError, match=f"{trace}:3: not valid JSON"):
        read_mooncake_blocks(trace)


@pytest.fixture
def lcr_main(monkeypatch):
    # Only this subcommand: the other subcommands live on another branch.
    monkeypatch.setattr(lcr.cli, "_command_modules", lambda: [ckpt_cli])
    return lcr.cli.main


@pytest.mark.parametrize("argv,message", [
    (["nosuchlaw"], "neither a trace file nor a synthetic law"),
    (["uniform:length=0"], "length L must be >= 1"),
    (["uniform", "--budgets", "0,4"], "budget must be >= 1"),
    (["uniform", "--planners", "dp,magic"], "unknown planner 'magic'"),
])
def test_cli_exits_2_without_traceback(lcr_main, capsys, argv, message):
    assert lcr_main(["sim-ckpt", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_reports_malformed_trace_line(lcr_main, capsys, tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"hash_ids": [1]}\n[1, 2]\n')
    assert lcr_main(["sim-ckpt", str(trace)]) == 2
    assert f"{trace}:2:" in capsys.readouterr().err


def test_cli_table_json_and_plot(lcr_main, capsys, tmp_path):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    code = lcr_main(["sim-ckpt", "multimodal:length=300,seed=1", "--budgets", "1,2,4,...,16",
                     "--planners", "balanced,block,last,dp,online", "--requests", "2000",
                     "--json", str(out_json), "--plot", str(out_png)])
    assert code == 0
    table = capsys.readouterr().out
    assert "budget" in table and "dp" in table
    result = json.loads(out_json.read_text())
    assert result["budgets"] == [1, 2, 4, 8, 16] and result["length"] == 300
    dp = [p["reduction_factor"] for p in result["planners"]["dp"]]
    balanced = [p["reduction_factor"] for p in result["planners"]["balanced"]]
    assert all(d >= b for d, b in zip(dp, balanced)) and dp == sorted(dp)
    for point in result["planners"]["dp"]:
        assert len(point["positions"]) <= point["budget"]
        law = law_from_spec("multimodal:length=300,seed=1")
        assert expected_recompute(law, point["positions"]) == pytest.approx(point["recompute"])
    assert out_png.stat().st_size > 10_000


def test_budget_lists():
    assert ckpt_cli.parse_budgets("1,2,4,...,256") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert ckpt_cli.parse_budgets("16,32,...,64") == [16, 32, 48, 64]
    assert ckpt_cli.parse_budgets("3,5") == [3, 5]
