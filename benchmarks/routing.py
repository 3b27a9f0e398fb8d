"""Routers x KV policies on a simulated serving cluster (the RLT/LBGR paper's comparison).

    python benchmarks/routing.py [--out benchmarks/results/routing.json] [--plot docs/routing/routing.png]

1. The paper's setup: 4 workers, SGLang's generated shared prefix (128 groups x 32 prompts,
   prefix ratio 0.5), Poisson arrivals at rates from light load to queueing; every router
   (random, round_robin, cache_aware, LBGR with the paper's features and with the authors'
   intercept only) x {lru, rlt}; 3 arrival seeds each, mean and spread.
2. Worker counts 2-10 at a fixed load per worker.
3. Mooncake conversation requests with Azure conversation-trace arrivals (when ../shared/data
   is present).
All numbers are simulated seconds under lcr.route.service.ServiceModel's defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from lcr.route.routers import make_router
from lcr.route.service import ServiceModel
from lcr.route.sim import simulate
from lcr.route.workload import (azure_arrivals, from_trace, poisson_arrivals, shared_prefix,
                                with_arrivals)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ROUTERS = [("random", {}), ("round_robin", {}), ("cache_aware", {}),
           ("lbgr", {"features": "paper"}), ("lbgr", {"features": "intercept"})]
POLICIES = ("lru", "rlt")
SEEDS = (0, 1, 2)


def label(name, params):
    return name if not params else f"{name}:{params['features']}"


def cell(requests_for_seed, workers, cache_tokens, service):
    rows = []
    for name, params in ROUTERS:
        for policy in POLICIES:
            runs = [simulate(requests_for_seed(seed), make_router(name, workers, seed, service=service, **params),
                             policy=policy, cache_tokens=cache_tokens, service=service, seed=seed)
                    for seed in SEEDS]
            metrics = {}
            for key in ("hit_rate", "ttft_p50", "ttft_p95", "latency_p50", "latency_p95", "throughput"):
                values = np.array([getattr(r, key) for r in runs])
                metrics[key] = float(values.mean())
                metrics[key + "_spread"] = float(values.max() - values.min())
            rows.append({"router": label(name, params), "policy": policy, "workers": workers,
                         "cache_tokens": cache_tokens, **metrics})
    return rows


def print_rows(title, rows):
    print(f"\n## {title}")
    print(f"{'router':<18} {'policy':<6} {'W':>3} {'hit rate':>9} {'TTFT p50':>9} {'TTFT p95':>9} "
          f"{'lat p50':>8} {'lat p95':>8} {'req/s':>6}")
    for r in rows:
        print(f"{r['router']:<18} {r['policy']:<6} {r['workers']:>3} {r['hit_rate']:>9.4f} "
              f"{r['ttft_p50']:>9.2f} {r['ttft_p95']:>9.2f} {r['latency_p50']:>8.2f} "
              f"{r['latency_p95']:>8.2f} {r['throughput']:>6.2f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/routing.json")
    parser.add_argument("--plot", default="docs/routing/routing.png")
    args = parser.parse_args()
    service = ServiceModel()
    started = time.time()
    result = {"service": service.__dict__, "seeds": list(SEEDS)}

    gsp = {seed: shared_prefix(seed=seed) for seed in SEEDS}
    paper = []
    for rate in (6.0, 10.0, 12.0):
        rows = cell(lambda seed: with_arrivals(gsp[seed], poisson_arrivals(len(gsp[seed]), rate, seed)),
                    4, 16_384, service)
        for r in rows:
            r["rate"] = rate
        print_rows(f"GSP, 4 workers, 16,384 cache tokens each, Poisson {rate:g} req/s", rows)
        paper += rows
    result["gsp_rates"] = paper

    scaling = []
    for workers in (2, 4, 6, 8, 10):
        rate = 2.5 * workers  # about 85% of the default service model's capacity
        rows = cell(lambda seed: with_arrivals(gsp[seed], poisson_arrivals(len(gsp[seed]), rate, seed)),
                    workers, 16_384, service)
        for r in rows:
            r["rate"] = rate
        print_rows(f"GSP, {workers} workers, Poisson {rate:g} req/s", rows)
        scaling += rows
    result["gsp_workers"] = scaling

    mooncake = DATA / "kv" / "mooncake_conversation_trace.jsonl"
    azure = DATA / "serving" / "AzureLLMInferenceTrace_conv.csv"
    if mooncake.exists() and azure.exists():
        from lcr.traces import load_trace
        pairs = from_trace(load_trace(str(mooncake), limit=3000), 512)
        arrivals = azure_arrivals(azure, len(pairs), rate=1.5)
        rows = cell(lambda seed: with_arrivals(pairs, arrivals), 4, 200_000, service)
        print_rows("Mooncake conversations (3,000 requests), Azure conv arrivals at 1.5 req/s, "
                   "4 workers x 200,000 tokens", rows)
        result["mooncake"] = rows
    result["seconds"] = time.time() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    if args.plot:
        plot(paper, scaling, args.plot)
    print(f"\n{result['seconds']:.0f} s; wrote {args.out}")
    return 0


def plot(paper, scaling, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name in sorted({r["router"] for r in paper}):
        for policy, style in (("lru", "--"), ("rlt", "-")):
            rows = [r for r in paper if r["router"] == name and r["policy"] == policy]
            axes[0].plot([r["rate"] for r in rows], [r["hit_rate"] for r in rows], style, marker="o",
                         label=f"{name}+{policy}")
            axes[1].plot([r["rate"] for r in rows], [r["ttft_p50"] for r in rows], style, marker="o")
            rows = [r for r in scaling if r["router"] == name and r["policy"] == policy]
            axes[2].plot([r["workers"] for r in rows], [r["hit_rate"] for r in rows], style, marker="o")
    axes[0].set(xlabel="arrival rate (req/s), 4 workers", ylabel="cluster token hit rate")
    axes[1].set(xlabel="arrival rate (req/s), 4 workers", ylabel="TTFT p50 (s)", yscale="log")
    axes[2].set(xlabel="workers (2.5 req/s each)", ylabel="cluster token hit rate")
    axes[0].legend(fontsize=7)
    fig.suptitle("lcr sim-route: generated shared prefix (128 groups x 32 prompts, prefix ratio 0.5)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
