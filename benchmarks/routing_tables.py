"""docs/routing.md's result tables, printed as Markdown from benchmarks/results/.

    python benchmarks/routing_tables.py [--results benchmarks/results]

Reads routing.json (benchmarks/routing.py), routing_live.json (benchmarks/routing_live.py,
one entry per setting) and router_overhead.json (benchmarks/router_overhead.py, likewise).
Simulator cells: mean of the seeds, spread (max - min) in brackets. Live cells: mean over
the interleaved repeats, ± half their range.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Router labels as the docs name them (benchmarks/routing.py's labels on the left).
SIM_NAMES = {"round_robin": "round_robin", "cache_aware": "CA 0.3.2", "cache_aware:0.1.9": "CA 0.1.9",
             "lbgr_paper": "lbgr_paper", "lbgr": "**lbgr**"}
LIVE_NAMES = {"lcr:lbgr": "lcr lbgr", "lcr:cache_aware": "lcr cache_aware (same proxy)",
              "sglang:cache_aware": "sglang-router 0.3.2 cache_aware"}


def rates_table(rows):
    """The 4-worker section: every rate side by side, per router + policy."""
    rates = sorted({r["rate"] for r in rows})
    cell = {(r["router"], r["policy"], r["rate"]): r for r in rows}
    last = rates[-1]
    joined = lambda key, fmt, name, policy, among=rates: " / ".join(format(cell[(name, policy, x)][key], fmt) for x in among)
    hot = [x for x in rates if x >= 20] or rates
    tag = " / ".join(f"{x:g}" for x in hot)
    out = [f"| router + policy | hit rate, {' / '.join(f'{x:g}' for x in rates)} req/s | spread at {last:g} | "
           f"TTFT p50 (s), {tag} | TTFT p95 (s), {tag} | req/s at {last:g} | CA bal, {tag} |", "|---|---|---|---|---|---|---|"]
    for name, policy in dict.fromkeys((r["router"], r["policy"]) for r in rows):
        bal = joined("balanced", ",.0f", name, policy, hot) if name.startswith("cache_aware") else ""
        out.append(f"| {SIM_NAMES.get(name, name)} + {policy} | {joined('hit_rate', '.3f', name, policy)} | "
                   f"{cell[(name, policy, last)]['hit_rate_spread']:.3f} | {joined('ttft_p50', '.2f', name, policy, hot)} | "
                   f"{joined('ttft_p95', '.1f', name, policy, hot)} | {cell[(name, policy, last)]['throughput']:.1f} | {bal} |")
    return out


def sim_table(rows, title):
    """Router x policy rows of one simulator cell."""
    out = [f"| {title} | hit rate | TTFT p50 (s) | TTFT p95 (s) | req/s | CA bal |", "|---|---|---|---|---|---|"]
    for r in rows:
        name = SIM_NAMES.get(r["router"], r["router"])
        bal = f"{r['balanced']:,.0f}" if r["router"].startswith("cache_aware") else ""
        out.append(f"| {name} + {r['policy']} | {r['hit_rate']:.3f} ({r['hit_rate_spread']:.3f}) | "
                   f"{r['ttft_p50']:.2f} | {r['ttft_p95']:.2f} ({r['ttft_p95_spread']:.1f}) | "
                   f"{r['throughput']:.1f} | {bal} |")
    return out


def hit_grid(rows, key, routers, policies=("lru", "rlt")):
    """Hit rate per ``key`` value (rows) and router (columns), lru / rlt in each cell."""
    values = list(dict.fromkeys(r[key] for r in rows))
    cell = {(r[key], r["router"], r["policy"]): r for r in rows}
    out = [f"| {key} | " + " | ".join(SIM_NAMES.get(n, n) for n in routers) + " | TTFT p50 CA 0.3.2+lru / lbgr+rlt (s) |",
           "|---" * (len(routers) + 2) + "|"]
    for v in values:
        hits = [" / ".join(f"{cell[(v, n, p)]['hit_rate']:.3f}" for p in policies) for n in routers]
        ttft = f"{cell[(v, 'cache_aware', 'lru')]['ttft_p50']:.2f} / {cell[(v, 'lbgr', 'rlt')]['ttft_p50']:.2f}"
        rate = f" ({cell[(v, 'lbgr', 'rlt')]['rate']:g} req/s)" if "rate" in cell[(v, "lbgr", "rlt")] else ""
        out.append(f"| {v:g}{rate} | " + " | ".join(hits) + f" | {ttft} |")
    return out


def other_table(earlier, mooncake):
    """The earlier setup and the Mooncake trace: one row per router."""
    e = {(r["router"], r["policy"]): r for r in earlier}
    m = {(r["router"], r["policy"]): r for r in mooncake}
    out = ["| router | earlier setup: hit lru / rlt | TTFT p95 lru (s) | Mooncake: hit lru / rlt | TTFT p50 lru (s) |",
           "|---|---|---|---|---|"]
    for name in dict.fromkeys(r["router"] for r in earlier):
        out.append(f"| {SIM_NAMES.get(name, name)} | {e[(name, 'lru')]['hit_rate']:.3f} / {e[(name, 'rlt')]['hit_rate']:.3f} | "
                   f"{e[(name, 'lru')]['ttft_p95']:.2f} | "
                   + (f"{m[(name, 'lru')]['hit_rate']:.3f} / {m[(name, 'rlt')]['hit_rate']:.3f} | {m[(name, 'lru')]['ttft_p50']:.2f} |"
                      if (name, "lru") in m else "– | – |"))
    return out


def policy_grid(rows, policies, title):
    """ShareGPT: hit rate per router (rows) and KV policy (columns)."""
    cell = {(r["router"], r["policy"]): r for r in rows}
    routers = list(dict.fromkeys(r["router"] for r in rows))
    shown = [("lpc (trained)" if p.startswith("lpc:model=") and p != "lpc:model=oracle" else p) for p in policies]
    out = [f"| {title} | " + " | ".join(shown) + " | TTFT p50 / p95 (s), lru |", "|---" * (len(policies) + 2) + "|"]
    for n in routers:
        lru = cell[(n, "lru")]
        out.append(f"| {SIM_NAMES.get(n, n)} | " + " | ".join(f"{cell[(n, p)]['hit_rate']:.3f}" for p in policies)
                   + f" | {lru['ttft_p50']:.2f} / {lru['ttft_p95']:.2f} |")
    return out


def live_table(results):
    """Every live setting, one row per router."""
    out = ["| setting | router | cached ratio | per repeat | TTFT p50 (s) | TTFT p99 (s) | req/s | moved off home |",
           "|---|---|---|---|---|---|---|---|"]
    for key, entry in results.items():
        for i, (name, s) in enumerate(entry["summary"].items()):
            moves = " ".join(str(m["moved"]) for m in s.get("lbgr_moves", [])) or "–"
            out.append(f"| {key if i == 0 else ''} | {LIVE_NAMES.get(name, name)} | "
                       f"{s['cached_ratio'][0]:.3f} ± {s['cached_ratio'][1] / 2:.3f} | "
                       f"{' '.join(f'{x:.3f}' for x in s['per_repeat']['cached_ratio'])} | "
                       f"{s['ttft_p50'][0]:.3f} ± {s['ttft_p50'][1] / 2:.3f} | {s['ttft_p99'][0]:.2f} | "
                       f"{s['req_per_s'][0]:.1f} | {moves} |")
    return out


def overhead_table(results):
    out = ["| setting | direct TTFT p50 / p99 (ms) | added p50: lcr | sglang-router 0.3.2 | added p99: lcr | sglang-router 0.3.2 |",
           "|---|---|---|---|---|---|"]

    def spread(values):
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    for key, entry in results.items():
        runs = entry["runs"]
        direct, lcr = runs["direct"], runs["this tree"]
        sgl = next((v for k, v in runs.items() if k.startswith("sglang-router")), None)
        out.append(f"| {key} | {statistics.median(direct['p50_ms']):.1f} / {statistics.median(direct['p99_ms']):.1f} | "
                   f"{spread(lcr['added_p50_ms'])} | {spread(sgl['added_p50_ms']) if sgl else '–'} | "
                   f"{spread(lcr['added_p99_ms'])} | {spread(sgl['added_p99_ms']) if sgl else '–'} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    sim = json.loads((args.results / "routing.json").read_text())
    blocks = [rates_table(sim["gsp_rates"])]
    routers = ["cache_aware", "cache_aware:0.1.9", "lbgr_paper", "lbgr"]
    blocks.append(hit_grid(sim["gsp_workers"], "workers", routers))
    blocks.append(hit_grid(sim["gsp_workers_scaled"], "workers", routers))
    blocks.append(sim_table(sim["gsp_zipf"], "zipf(1.0), 28 req/s"))
    blocks.append(other_table(sim["gsp_parallel_prefill"], sim.get("mooncake", [])))
    if "sharegpt" in sim:
        policies = list(dict.fromkeys(r["policy"] for r in sim["sharegpt"]))
        for rate in (2.0, 4.0):
            rows = [r for r in sim["sharegpt"] if r["rate"] == rate]
            blocks.append(policy_grid(rows, policies, f"ShareGPT, {rate:g} req/s: hit rate"))
    live = json.loads((args.results / "routing_live.json").read_text())
    blocks.append(live_table(live))
    blocks.append(overhead_table(json.loads((args.results / "router_overhead.json").read_text())))
    print("\n\n".join("\n".join(b) for b in blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
