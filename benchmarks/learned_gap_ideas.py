"""LARU's heuristic experts compared on learned_gap's model passes (the tuning half).

Each (trace, size) replays learned_gap's cached model passes (``model_pass``: computed
once, then read from disk) through LARU on the native core with each set of experts, so
the sets compare cell by cell on identical predictions, for the default model and the
weak one. What it printed is in docs/predictor.md ("Choosing the experts").

    python benchmarks/learned_gap_ideas.py [--traces cloudPhysics,web07] [--max-requests N]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from learned_gap import HEURISTICS, SIZES, TUNING, gap_closed, load, model_pass, variant_config
from lcr.sim.native import native_replay
from lcr.sim.sweep import PolicySpec, run_one

#: label -> LARU's expert switch (the rest of LARU at its defaults). The sets with one
#: expert alone lost and are no option any more: ``git show 0624585:benchmarks/learned_gap_ideas.py``.
EXPERT_SETS = {"none": dict(intervals=0), "intervals+decay": dict(intervals=1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--traces", help="comma-separated substrings: only tuning traces whose path has one")
    parser.add_argument("--max-requests", type=int, default=300_000)
    args = parser.parse_args()
    rows = []
    for relative in TUNING:
        if args.traces and not any(s in relative for s in args.traces.split(",")):
            continue
        trace = load(Path(args.data) / relative, args.max_requests)
        for fraction in SIZES:
            k = max(1, round(fraction * trace.distinct_keys))
            misses = {n: run_one(trace, PolicySpec(n), k).misses for n in ("lru", "opt", *HEURISTICS)}
            for variant in ("lightgbm", "weak"):
                values, _ = model_pass(trace, variant_config(variant, k, 0, trace))
                for label, experts in EXPERT_SETS.items():
                    run = native_replay(trace, "laru", k, values, mode="async", **experts)
                    misses[f"{label}+{variant}"] = len(trace) - int(run.hits.sum())
            rows.append(misses)
            print(f"{trace.name[:24]:24s} {fraction:4.0%} " + " ".join(
                f"{label} {gap_closed(-misses[label + '+lightgbm'], -misses['lru'], -misses['opt']):+.0%}"
                for label in EXPERT_SETS), flush=True)
    print("| experts | mean gap closed | median | cells >= best heuristic | worst cell vs LRU "
          "| weak model: mean | weak: worst cell vs LRU |\n|---|---|---|---|---|---|---|")
    for label in EXPERT_SETS:
        def gaps(variant):
            return [gap_closed(-m[f"{label}+{variant}"], -m["lru"], -m["opt"]) for m in rows]

        def worst(variant):
            return max(m[f"{label}+{variant}"] / m["lru"] - 1 for m in rows)

        beats = sum(m[f"{label}+lightgbm"] <= min(m[h] for h in HEURISTICS) for m in rows)
        print(f"| {label} | {np.mean(gaps('lightgbm')):+.1%} | {np.median(gaps('lightgbm')):+.1%} | "
              f"{beats}/{len(rows)} | {worst('lightgbm'):+.2%} | {np.mean(gaps('weak')):+.1%} | {worst('weak'):+.2%} |")


if __name__ == "__main__":
    main()
