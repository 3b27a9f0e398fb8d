"""Routers x KV policies on a simulated serving cluster (the RLT/LBGR paper's comparison).

    python benchmarks/routing.py [--sections rates,workers,...] [--rates 12,20,24]
                                 [--out benchmarks/results/routing.json] [--plot docs/routing/routing.png]

The paper's setup: SGLang's generated shared prefix with bench_serving's lengths (128 groups
x 32 prompts, 2,048-token system prompt + 128-token question, 256 output tokens, groups
shuffled) on workers whose prefill is compute-bound (one prompt prefilled at a time, decode
batched over 64 running requests: PREFILL_BOUND), each with 32,768 cache tokens (4 workers
hold half of the 262,144 distinct system-prompt tokens). Routers: round_robin, cache_aware
(sglang-router's rule with 0.3.2's defaults and with 0.1.9's), lbgr_paper (the paper's greedy
rule) and lbgr (lcr's), each x {lru, rlt}; 3 arrival seeds, mean and spread (max - min). The
rates section also prints two ceilings on the cluster hit rate
(``lcr.route.workload.shared_prefix_hit_ceilings``).
1. rates: 4 workers at 12, 20 and 24 req/s (light, near saturation, overloaded).
2. workers: 2-10 workers at the paper's fixed 12 req/s (it only queues at 2 workers);
   workers_scaled: 2-10 workers at 6 req/s per worker, so every size is loaded.
3. zipf: skewed groups (bench_serving's zipf, alpha 1.0), 4 workers x 65,536 tokens, 28 req/s:
   the hot group's worker overloads and cache_aware's imbalance rule fires.
4. earlier: the earlier setup, for contrast: 1,024-token prompts (prefix ratio 0.5), 128 output
   tokens, every slot prefilling on its own (ServiceModel's defaults), 16,384 tokens, 10 req/s.
5. mooncake: Mooncake conversation requests with Azure conversation-trace arrivals (when ../shared/data
   is present).
6. sharegpt: the ShareGPT multi-turn replay (the held-out half, 1,762 turns; each turn's prompt is
   the conversation so far), Poisson 2 and 4 req/s in the replay's order, 4 workers x 8,192
   tokens, ServiceModel's defaults; KV policies lru, rlt and LPC with the oracle
   (`--lpc-model PATH` adds LPC with a model from `lcr lpc-train`).
All numbers are simulated seconds. The results file (--out) is the benchmark's one file: a
run of some sections replaces those and keeps the others (``merge_sections``).
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
                                shared_prefix_hit_ceilings, with_arrivals)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# cache_aware twice: sglang-router 0.3.2's defaults (installed) and 0.1.9's (the release
# current when the paper ran its cache-aware baseline: it balances far more readily).
ROUTERS = [("round_robin", {}), ("cache_aware", {}), ("cache_aware", {"defaults": "0.1.9"}),
           ("lbgr_paper", {}), ("lbgr", {})]
SECTIONS = ("rates", "workers", "workers_scaled", "zipf", "earlier", "mooncake", "sharegpt")
POLICIES = ("lru", "rlt")
SEEDS = (0, 1, 2)
# Of the order of Llama-3.1-8B on one L40 (the paper's main hardware): 6,700 prefill tokens/s,
# cached tokens almost free, 25 ms per decode step, 64 running requests.
PREFILL_BOUND = ServiceModel(miss_s_per_token=1.5e-4, hit_s_per_token=1e-6, decode_s_per_token=0.025,
                             slots=64, prefill_slots=1)
GSP = dict(prompt_tokens=2048 + 128, prefix_ratio=2048 / (2048 + 128), output_tokens=256)


def label(name, params):
    return ":".join([name, *map(str, params.values())])


def cell(requests_for_seed, workers, cache_tokens, service, routers=ROUTERS, policies=POLICIES, meta=None):
    rows = []
    for name, params in routers:
        for policy in policies:
            runs, balanced = [], []
            for seed in SEEDS:
                router = make_router(name, workers, seed, service=service, **params)
                runs.append(simulate(requests_for_seed(seed), router, policy=policy,
                                     cache_tokens=cache_tokens, service=service, seed=seed, meta=meta))
                balanced.append(getattr(router, "balanced", 0))
            metrics = {}
            for key in ("hit_rate", "ttft_p50", "ttft_p95", "latency_p50", "latency_p95", "throughput"):
                values = np.array([getattr(r, key) for r in runs])
                metrics[key] = float(values.mean())
                metrics[key + "_spread"] = float(values.max() - values.min())
            rows.append({"router": label(name, params), "policy": policy, "workers": workers,
                         "cache_tokens": cache_tokens, "balanced": float(np.mean(balanced)), **metrics})
    return rows


def print_rows(title, rows):
    print(f"\n## {title}")
    print(f"{'router':<30} {'policy':<16} {'W':>3} {'hit rate':>14} {'TTFT p50':>9} {'TTFT p95':>15} "
          f"{'lat p50':>8} {'req/s':>6} {'CA bal':>7}")
    for r in rows:
        print(f"{r['router']:<30} {r['policy']:<16} {r['workers']:>3} {r['hit_rate']:>7.4f} ({r['hit_rate_spread']:.3f}) "
              f"{r['ttft_p50']:>9.2f} {r['ttft_p95']:>8.2f} ({r['ttft_p95_spread']:.2f}) "
              f"{r['latency_p50']:>8.2f} {r['throughput']:>6.2f} {r['balanced']:>7.0f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/routing.json")
    parser.add_argument("--plot", default="docs/routing/routing.png")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, from {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--rates", default="12,20,24", help="arrival rates of the 4-worker section")
    parser.add_argument("--per-worker-rate", type=float, default=6.0,
                        help="req/s per worker of the workers_scaled section")
    parser.add_argument("--lpc-model", help="sharegpt section: also LPC with this model (lcr lpc-train)")
    args = parser.parse_args()
    sections = [x for x in args.sections.split(",") if x]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {', '.join(sorted(unknown))}; valid: {', '.join(SECTIONS)}")
    if args.lpc_model and not Path(args.lpc_model).is_file():
        parser.error(f"--lpc-model: no such file: {args.lpc_model}")
    routers = ROUTERS
    started = time.time()
    result = {"service": PREFILL_BOUND.__dict__, "gsp": GSP, "seeds": list(SEEDS), "sections": sections}
    gsp = {seed: shared_prefix(seed=seed, **GSP) for seed in SEEDS}

    def poisson(pairs, rate):
        return lambda seed: with_arrivals(pairs[seed], poisson_arrivals(len(pairs[seed]), rate, seed))

    def over_workers(rate_for):
        rows = []
        for workers in (2, 4, 6, 8, 10):
            rate = rate_for(workers)
            cell_rows = cell(poisson(gsp, rate), workers, 32_768, PREFILL_BOUND, routers)
            for r in cell_rows:
                r["rate"] = rate
            print_rows(f"GSP, {workers} workers x 32,768 tokens, prefill-bound, Poisson {rate:g} req/s",
                       cell_rows)
            rows += cell_rows
        return rows

    paper = scaling = None
    if "rates" in sections:
        ceilings = [shared_prefix_hit_ceilings(gsp[seed], 4 * 32_768) for seed in SEEDS]
        result["gsp_4_workers_hit_ceilings"] = {key: float(np.mean([c[key] for c in ceilings]))
                                                for key in ceilings[0]}
        print("4 workers x 32,768 tokens, ceilings on the cluster hit rate (mean of the seeds):",
              ", ".join(f"{key} {value:.3f}" for key, value in result["gsp_4_workers_hit_ceilings"].items()))
        paper = []
        for rate in (float(x) for x in args.rates.split(",") if x):
            rows = cell(poisson(gsp, rate), 4, 32_768, PREFILL_BOUND, routers)
            for r in rows:
                r["rate"] = rate
            print_rows(f"GSP, 4 workers x 32,768 tokens, prefill-bound, Poisson {rate:g} req/s", rows)
            paper += rows
        result["gsp_rates"] = paper
        print_relative(paper, "rate")
    if "workers" in sections:
        scaling = over_workers(lambda workers: 12.0)
        result["gsp_workers"] = scaling
        print_relative(scaling, "workers")
    if "workers_scaled" in sections:
        rows = over_workers(lambda workers: args.per_worker_rate * workers)
        result["gsp_workers_scaled"] = rows
        print_relative(rows, "workers")

    if "zipf" in sections:
        zipf = {seed: shared_prefix(seed=seed, zipf_alpha=1.0, **GSP) for seed in SEEDS}
        rows = cell(poisson(zipf, 28.0), 4, 65_536, PREFILL_BOUND, routers)
        print_rows("GSP with zipf(1.0) groups, 4 workers x 65,536 tokens, prefill-bound, Poisson 28 req/s",
                   rows)
        result["gsp_zipf"] = rows

    if "earlier" in sections:
        earlier = {seed: shared_prefix(seed=seed) for seed in SEEDS}
        rows = cell(poisson(earlier, 10.0), 4, 16_384, ServiceModel(), routers)
        print_rows("Earlier setup: GSP 1,024-token prompts (ratio 0.5), 128 output tokens, "
                   "parallel prefill (ServiceModel defaults), 4 x 16,384 tokens, 10 req/s", rows)
        result["gsp_parallel_prefill"] = rows

    mooncake = DATA / "kv" / "mooncake_conversation_trace.jsonl"
    azure = DATA / "serving" / "AzureLLMInferenceTrace_conv.csv"
    if "mooncake" in sections and mooncake.exists() and azure.exists():
        from lcr.traces import load_trace
        # load_trace's limit counts block references, not requests: slice requests instead.
        pairs = from_trace(load_trace(str(mooncake)), 512)[:3000]
        arrivals = azure_arrivals(azure, len(pairs), rate=1.5)
        rows = cell(lambda seed: with_arrivals(pairs, arrivals), 4, 200_000, ServiceModel(), routers)
        print_rows("Mooncake conversations (3,000 requests), Azure conv arrivals at 1.5 req/s, "
                   "4 workers x 200,000 tokens", rows)
        result["mooncake"] = rows
    chat = DATA / "chat" / "sharegpt_v3_sample1000.jsonl"
    if "sharegpt" in sections and chat.exists():
        import lcr.lpc  # noqa: F401  (registers the sharegpt generator and LPC's radix policies)
        from lcr.traces import load_trace
        trace = load_trace(f"sharegpt:path={chat},half=eval")
        pairs = from_trace(trace, 64)
        policies = POLICIES + ("lpc:model=oracle",) + ((f"lpc:model={args.lpc_model}",) if args.lpc_model else ())
        result["sharegpt"] = []
        for rate in (2.0, 4.0):
            rows = cell(poisson({seed: pairs for seed in SEEDS}, rate), 4, 8_192, ServiceModel(), routers,
                        policies=policies, meta=trace.meta)
            for r in rows:
                r["rate"] = rate
            print_rows(f"ShareGPT multi-turn replay ({len(pairs):,} turns, held-out half), Poisson {rate:g} "
                       "req/s, 4 workers x 8,192 tokens", rows)
            result["sharegpt"] += rows
    result["seconds"] = time.time() - started
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps(merge_sections(previous, result), indent=1))
    if args.plot and paper and scaling:
        plot(paper, scaling, args.plot)
    print(f"\n{result['seconds']:.0f} s; wrote {args.out}")
    return 0


SETUP = ("service", "gsp", "seeds")


def merge_sections(previous: dict, result: dict) -> dict:
    """The results file after a run: the sections it ran replace theirs, the others stay
    (one file for the benchmark; a re-run of some sections overwrites only those);
    ``seconds`` and ``last_run_sections`` are the last run's. A file from another setup
    (service model, workload, seeds) is replaced whole."""
    if any(previous.get(key) != result[key] for key in SETUP):
        return result
    kept = [s for s in previous.get("sections", []) if s not in result["sections"]]
    return {**previous, **result, "sections": kept + result["sections"], "last_run_sections": result["sections"]}


def print_relative(rows, key):
    """LBGR + RLT's hit rate relative to cache_aware + LRU, for each cache_aware default
    set: the paper's headline comparison."""
    print(f"\nLBGR + rlt hit rate relative to cache_aware + lru, by {key}")
    for value in dict.fromkeys(r[key] for r in rows):
        mine = {(r["router"], r["policy"]): r["hit_rate"] for r in rows if r[key] == value}
        lbgr = mine[("lbgr", "rlt")]
        parts = [f"vs {ca} {lbgr / mine[(ca, 'lru')] - 1:+.1%}" for ca in ("cache_aware", "cache_aware:0.1.9")]
        print(f"  {key} {value:g}: " + ", ".join(parts))


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
    axes[2].set(xlabel="workers (12 req/s)", ylabel="cluster token hit rate")
    axes[0].legend(fontsize=7)
    fig.suptitle("lcr sim-route: generated shared prefix (128 groups x 32 prompts, 2,048 + 128 tokens), "
                 "prefill-bound workers, 32,768 cache tokens each")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
