"""Hit ratio of LRU, LARU/FPB/HF with the online LightGBM model, and OPT on the real traces.

Predictions are the async ones (the model queried right after each access, refitted every
10,000 accesses on the latest 25,000), replayed on the native engine. Also the weak model
(1 tree, 1 feature) of the paper's robustness experiment. Prints a table with the share of
the LRU->OPT gap that each policy closes and writes benchmarks/results/predictor_hit_ratio.json.

    python benchmarks/predictor_hit_ratio.py [--data ../shared/data]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from lcr.sim import PolicySpec, run_sweep
from lcr.sim.report import machine_description
from lcr.traces import load_trace

TRACES = ["classic/cloudPhysicsIO.oracleGeneral.bin", "classic/cache2k_web07.trace.xz",
          "classic/lirs/multi2.trace.gz"]
POLICIES = [PolicySpec(name) for name in ("lru", "opt", "laru", "fpb", "hf")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "predictor_hit_ratio.json"))
    args = parser.parse_args()
    rows = []
    for relative in TRACES:
        path = Path(args.data) / relative
        if not path.exists():
            print(f"skipping {path}: not present")
            continue
        trace = load_trace(str(path))
        capacities = [max(1, round(f * trace.distinct_keys)) for f in (0.01, 0.05, 0.1)]
        for predictor in ("lightgbm:async", "lightgbm-weak:async"):
            results = run_sweep(trace, POLICIES, capacities, predictor, [0.0], seed=0)
            for k in capacities:
                at = {r.policy: r for r in results if r.capacity == k}
                lru, opt = at["lru"].hit_ratio, at["opt"].hit_ratio
                row = {"trace": trace.name, "predictor": predictor, "capacity": k, "lru": lru, "opt": opt}
                for name in ("laru", "fpb", "hf"):
                    row[name] = at[name].hit_ratio
                    row[f"{name}_gap_closed"] = (at[name].hit_ratio - lru) / (opt - lru) if opt > lru else 0.0
                    row[f"{name}_misses_vs_lru"] = at[name].misses / at["lru"].misses
                rows.append(row)
                print(f"{trace.name:34s} {predictor:20s} k={k:5d} LRU {lru:.4f} OPT {opt:.4f} | "
                      + " | ".join(f"{n.upper()} {row[n]:.4f} ({row[n + '_gap_closed']:+.0%}, "
                                   f"misses x{row[n + '_misses_vs_lru']:.3f})" for n in ("laru", "fpb", "hf")),
                      flush=True)
    Path(args.out).write_text(json.dumps({"machine": machine_description(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
