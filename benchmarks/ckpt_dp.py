"""Time the exact checkpoint-placement DP (C++ convex-hull trick) at L = 100,000, m = 256.

    python benchmarks/ckpt_dp.py [--length 100000] [--budget 256] [--repeats 3]

Prints the timings and writes benchmarks/results/ckpt_dp.json with a machine description.
Target: under one second per solve.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from lcr.checkpoints.law import OverlapLaw
from lcr.checkpoints.planners import solve_native
from lcr.checkpoints.synthetic import multimodal_law

RESULTS = Path(__file__).resolve().parent / "results" / "ckpt_dp.json"


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def time_solve(law: OverlapLaw, budget: int, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        solve_native(law, budget)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    laws = {
        # Dense random weights: every depth is a candidate, the hull is at its busiest.
        "random": OverlapLaw(np.random.default_rng(0).random(args.length + 1)),
        "multimodal": multimodal_law(args.length, seed=0),
    }
    runs = {}
    for name, law in laws.items():
        times = time_solve(law, args.budget, args.repeats)
        runs[name] = {"best_s": min(times), "median_s": statistics.median(times), "times_s": times}
        print(f"dp L={args.length} m={args.budget} law={name}: best {min(times):.3f} s, "
              f"median {statistics.median(times):.3f} s over {args.repeats} runs")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "checkpoint placement DP (monotone convex-hull trick, C++)",
        "length": args.length, "budget": args.budget, "repeats": args.repeats,
        "target_s": 1.0, "runs": runs, "machine": machine(),
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
