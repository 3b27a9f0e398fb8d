"""The whole learned sweep: one trace, 3 cache sizes x 4 policies, online LightGBM predictions.

    python benchmarks/learned_sweep.py [--trace zipf:requests=5000000,keys=1000000,alpha=0.9]
                                       [--sizes 1%,5%,10%] [--policies lru,laru,fpb,hf]

What ``lcr sim TRACE --predictor lightgbm --cache 1%,5%,10% --policies lru,laru,fpb,hf --jobs 3``
does, timed: load or generate the trace, then the sweep (OPT at every size for the cost
ratios, the predictive policies on the native cores), twice:

- cold: an empty prediction cache, so the sweep computes the learned pass itself;
- warm: the same cache folder again, as a rerun finds it.

Reports wall and CPU seconds of each phase, the number of prediction passes computed
and loaded (the target is 1 per trace and predictor, and cache size for ``lightgbm``), the machine and its load average
(the machine may be shared; CPU seconds are what the work costs). Writes
benchmarks/results/learned_sweep.json. Target: the cold sweep under 300 s on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from lcr.sim import PolicySpec, run_sweep
from lcr.sim.args import parse_sizes
from lcr.sim.predictions import PredictionCache
from lcr.sim.report import format_table, machine_description
from lcr.traces import load_trace

RESULTS = Path(__file__).resolve().parent / "results" / "learned_sweep.json"


class Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="zipf:requests=5000000,keys=1000000,alpha=0.9,seed=0")
    parser.add_argument("--sizes", default="1%,5%,10%")
    parser.add_argument("--policies", default="lru,laru,fpb,hf")
    parser.add_argument("--predictor", default="lightgbm")
    parser.add_argument("--jobs", type=int, default=3,
                        help="learned passes at once (lcr sim --jobs; default: one per size)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    with Clock() as load:
        trace = load_trace(args.trace)
    print(f"trace: {len(trace):,} requests, {trace.distinct_keys:,} keys; {load.wall:.1f} s wall, "
          f"{load.cpu:.1f} s CPU", flush=True)
    sizes = parse_sizes(args.sizes, trace.distinct_keys, "--sizes")
    specs = [PolicySpec.parse(p) for p in args.policies.split(",")]
    phases = {"load": {"wall_s": load.wall, "cpu_s": load.cpu}}
    with tempfile.TemporaryDirectory() as folder:
        for phase in ("cold", "warm"):
            cache = PredictionCache(folder)
            with Clock() as clock:
                results = run_sweep(trace, specs, sizes, args.predictor, predictions=cache, jobs=args.jobs)
            phases[phase] = {"wall_s": clock.wall, "cpu_s": clock.cpu, "passes_computed": cache.passes,
                             "passes_loaded": cache.loaded, "pass_wall_s": cache.pass_seconds["wall"],
                             "pass_cpu_s": cache.pass_seconds["cpu"], "load_average": os.getloadavg()}
            print(f"{phase}: {clock.wall:.1f} s wall, {clock.cpu:.1f} s CPU (prediction pass "
                  f"{cache.pass_seconds['cpu']:.1f} s CPU); {cache.summary()}; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(format_table(results))
    total = phases["load"]["wall_s"] + phases["cold"]["wall_s"]
    total_cpu = phases["load"]["cpu_s"] + phases["cold"]["cpu_s"]
    doc = {"trace": args.trace, "requests": len(trace), "distinct_keys": trace.distinct_keys,
           "sizes": sizes, "policies": args.policies, "predictor": args.predictor, "jobs": args.jobs,
           "phases": phases, "total_cold_wall_s": total, "total_cold_cpu_s": total_cpu, "target_s": 300,
           "load_average": os.getloadavg(), "machine": machine_description(),
           "results": [r.as_dict() for r in results]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, default=float))
    print(f"total (load + cold sweep): {total:.1f} s wall, {total_cpu:.1f} s CPU; load average {os.getloadavg()[0]:.1f}; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
