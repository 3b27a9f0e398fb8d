"""benchmarks/model_cost.py's tradeoff settings: a setting changes only what it names (the
feature settings reach the features, the rest the model), and the summary's worst cell is
the one with the most misses over LRU's. Runs in about 2 s."""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lcr.traces import generate

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def cost():
    sys.path.insert(0, str(BENCHMARKS))  # model_cost imports learned_gap and results_file beside it
    spec = importlib.util.spec_from_file_location("model_cost", BENCHMARKS / "model_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_setting_changes_only_what_it_names(cost):
    trace = generate("zipf:requests=2000,keys=300,alpha=0.9,seed=1")
    capacity, default = cost.config_for(trace, 0.05, {})
    assert capacity == round(0.05 * trace.distinct_keys) and default == cost.learned_gap.variant_config("lightgbm", capacity, 0, trace)
    _, changed = cost.config_for(trace, 0.05, {"retrain_every": 5_000, "n_deltas": 4, "n_edcs": 2})
    assert changed == replace(default, retrain_every=5_000,
                              features=replace(default.features, n_deltas=4, n_edcs=2))
    assert cost.config_for(trace, 0.05, {}, seed=3)[1] == replace(default, seed=3)
    for name, changes in cost.TRADEOFFS.items():  # every entry names real settings
        cost.config_for(trace, 0.05, changes)


def test_the_worst_cell_has_the_most_misses_over_lru(cost):
    def cell(misses):
        return {"misses": misses, "us_per_request": 1.0, "cpu_us_per_request": None, "gap_closed": 0.5}

    rows = [{"lru": 100, "settings": {"a": cell(90)}}, {"lru": 50, "settings": {"a": cell(51)}}]
    summary = cost.summarize_tradeoffs(rows, ["a"])["a"]
    assert summary["worst_extra_misses_vs_lru"] == pytest.approx(0.02)
    assert summary["mean_cpu_us_per_request"] is None and summary["cells"] == 2
