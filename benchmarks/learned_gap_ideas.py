"""Ranking and LARU-parameter ideas tried on learned_gap's replayed predictions.

The model's answers are replayed once per (trace, size) (deterministic, as in
benchmarks/learned_gap.py), then LARU runs on the native core with each idea applied to
the boundary classifier's output, so ideas compare cell by cell on identical predictions.
Ideas: b (1.1, 1.03, 1.01), the LLM shrink (k/32) at b = 1.1, p rounded down to 1/m
(m = 2, 4, 10), and the classifier ranked as a time at scale c (last + c*B*p/(1-p)).
The overdue rule measured in docs/predictor.md lives in commit c820935 (reverted).

    python benchmarks/learned_gap_ideas.py [--traces cloudPhysics,web07]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from learned_gap import HEURISTICS, SIZES, TUNING, gap_closed, load
from lcr.policies.laru import PAPER_RULE  # the ideas were tried on Algorithm 1
from lcr.predict.lightgbm_model import LightGBMConfig
from lcr.predict.replayed import replay_model
from lcr.sim.native import native_replay
from lcr.sim.sweep import PolicySpec, run_one


def ideas(p: np.ndarray, boundary: np.ndarray, k: int) -> dict:
    """label -> (answers, LARU parameters), all from one classifier's p and boundary."""
    t = np.arange(len(p), dtype=np.float64)
    odds = p / np.maximum(1 - p, 1e-12)
    out = {f"p b={b}": (p, {**PAPER_RULE, "b": b}) for b in (1.1, 1.03, 1.01)}
    out["p b=1.1 llm"] = (p, {**PAPER_RULE, "b": 1.1, "shrink_every": max(1, k // 32)})
    out.update({f"floor(p*{m})/{m} b=1.1": (np.floor(p * m) / m, {**PAPER_RULE, "b": 1.1}) for m in (2, 4, 10)})
    out.update({f"time c={c} b=1.1": (t + c * boundary * odds, {**PAPER_RULE, "b": 1.1}) for c in (4, 16, 64)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--traces", help="comma-separated substrings of the trace paths")
    parser.add_argument("--max-requests", type=int, default=300_000)
    args = parser.parse_args()
    gaps: dict[str, list[float]] = {}
    for relative in TUNING:  # ideas are tried on the tuning half only
        path = Path(args.data) / relative
        if (args.traces and not any(s in relative for s in args.traces.split(","))) or not path.exists():
            continue
        trace = load(path, args.max_requests)
        for fraction in SIZES:
            k = max(1, round(fraction * trace.distinct_keys))
            lru, opt = (run_one(trace, PolicySpec(n), k).misses for n in ("lru", "opt"))
            best = min(run_one(trace, PolicySpec(h), k).misses for h in HEURISTICS)
            model = replay_model(trace, LightGBMConfig(background=False, capacity=k, objective="belady",
                                                       rank="probability"))
            line = []
            for label, (answers, params) in ideas(model.values, model.boundary, k).items():
                misses = len(trace) - int(native_replay(trace, "laru", k, answers, mode="async", **params).hits.sum())
                gaps.setdefault(label, []).append((gap_closed(-misses, -lru, -opt), misses <= best, misses / lru - 1))
                line.append(f"{label} {gaps[label][-1][0]:+.0%}")
            print(f"{trace.name[:20]} {fraction:.0%}: " + ", ".join(line), flush=True)
    for label, cells in gaps.items():
        g, wins, worst = zip(*cells)
        print(f"{label:22s} mean {np.mean(g):+.1%}  >= best heuristic {sum(wins)}/{len(cells)}  "
              f"worst {max(worst):+.2%} misses vs LRU")


if __name__ == "__main__":
    main()
