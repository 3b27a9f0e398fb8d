"""Radix LARU's promises in replay (docs/kv.md), with the functions ``lcr sim-kv`` runs
(``make_radix_policy``, ``make_path_predictor``, ``replay_lcr``).

``cells``: the 12 cells of issue 12: Mooncake, Online-QA (2000 conversations), Aibrix (1000
sessions) and the ShareGPT chat replay at three cache sizes each (% of the trace's
distinct tokens, as ``lcr sim-kv`` rounds them). Per cell: LRU's and leaf-OPT's token hit
rates, then the default LARU's hit tokens with exact predictions over leaf-OPT's (p = 0),
with every prediction negated over LRU's (p = 1, ``PathOracle`` seed 0, as ``--noise
1``), and with the serving default predictor (``--predictor residual``) over LRU's.

``seeds``: the generated workloads (Online-QA 1000 conversations, Aibrix 500 sessions, the
chat replay's session order) at seeds 0-4 and 2/5/10%: learned and inverted LARU over
LRU, summarised per workload (lowest, median, cells at or above LRU).

    python benchmarks/kv_laru_cells.py [--plans cells,seeds] [--traces mooncake,online_qa,aibrix,chat]

Two worker processes; it prints markdown tables and writes its entries of
benchmarks/results/kv_laru_cells.json.
"""
from __future__ import annotations

import argparse
import statistics
import time
from multiprocessing import Pool
from pathlib import Path

from results_file import update_entry

from lcr.kv.cli import load_chat, parse_cache_tokens
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import build_workload
from lcr.kv.sim import make_radix_policy, replay_lcr
from lcr.traces import load_trace

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CHAT = "chat:" + str(DATA / "chat" / "sharegpt_v3_sample1000.jsonl")
TRACES = {  # name -> (lcr sim-kv TRACE, --cache-tokens, label)
    "mooncake": (str(DATA / "kv" / "mooncake_conversation_trace.jsonl"), "2%,5%,10%", "Mooncake"),
    "online_qa": ("online_qa:conversations=2000", "2.5%,5%,8%", "Online-QA (2000 conv.)"),
    "aibrix": ("aibrix:sessions=1000", "2%,5%,10%", "Aibrix (1000 sessions)"),
    "chat": (CHAT, "2%,5%,10%", "ShareGPT chat replay"),
}
SEEDED = {"online_qa": "online_qa:conversations=1000,seed={seed}", "aibrix": "aibrix:sessions=500,seed={seed}",
          "chat": CHAT + ",seed={seed}"}
SEEDS, SEED_SIZES = range(5), "2%,5%,10%"
MODES = {"p0": ("oracle", 0.0), "p1": ("oracle", 1.0), "learned": ("residual", 0.0)}
RESULTS = Path(__file__).parent / "results" / "kv_laru_cells.json"


def workload(spec: str):
    return load_chat(spec, None) if spec.startswith("chat:") else build_workload(load_trace(spec, None, None), 512)


def run_cell(job) -> dict:
    """One (trace spec, size, modes) cell: LRU, leaf-OPT and LARU in each mode."""
    spec, size, modes = job
    w = workload(spec)
    [capacity] = parse_cache_tokens(size, w.distinct_tokens)
    lru = replay_lcr(w, capacity, make_radix_policy("lru", w))
    opt = replay_lcr(w, capacity, make_radix_policy("opt", w))
    cell = {"spec": spec, "size": size, "cache_tokens": capacity, "lru_hit_rate": lru / w.total_tokens,
            "opt_hit_rate": opt / w.total_tokens, "laru": {}}
    for mode in modes:
        kind, noise = MODES[mode]
        started = time.perf_counter()
        policy = make_radix_policy("laru", w, predictor=make_path_predictor(kind, w, noise, 0))
        hits = replay_lcr(w, capacity, policy)
        extra = policy.stats.extra  # rule 7's races: the share the predictions win (docs/kv.md)
        cell["laru"][mode] = {"hit_tokens": hits, "ratio": hits / (opt if mode == "p0" else lru),
                              "races_won": extra["races_won"], "races_lost": extra["races_lost"],
                              "leads_forgiven": extra["leads_forgiven"], "seconds": round(time.perf_counter() - started, 2)}
    return cell


def cells(pool: Pool, traces: list[str]) -> None:
    jobs = [(TRACES[name][0], size, tuple(MODES)) for name in traces for size in TRACES[name][1].split(",")]
    labels = [f"{TRACES[name][2]}, {size}" for name in traces for size in TRACES[name][1].split(",")]
    results = []
    print("| trace, cache | LRU | leaf-OPT | p = 0: LARU / leaf-OPT | p = 1: LARU / LRU | "
          "residual: LARU / LRU |\n|---|---|---|---|---|---|", flush=True)
    for label, cell in zip(labels, pool.imap(run_cell, jobs)):
        cell["label"] = label
        results.append(cell)
        ratios = " | ".join(f"{cell['laru'][mode]['ratio']:.4f}" for mode in MODES)
        print(f"| {label} | {cell['lru_hit_rate']:.4f} | {cell['opt_hit_rate']:.4f} | {ratios} |", flush=True)
    update_entry(RESULTS, "cells", {"traces": traces, "cells": results})
    for mode, name in (("p1", "inverted"), ("learned", "residual")):
        shares = [won / (won + lost) for cell in results
                  for won, lost in [(cell["laru"][mode]["races_won"], cell["laru"][mode]["races_lost"])]
                  if won + lost >= 30]  # rule 7's races, where a cell decides enough of them
        if shares:
            print(f"races the {name} predictions win: {min(shares):.1%}-{max(shares):.1%} "
                  f"({len(shares)} cells deciding 30 or more)", flush=True)
    print_forgiven(results)


def print_forgiven(results: list[dict]) -> None:
    """Rule 6's forgiven leads, over every LARU run of ``results``: a replay's twin is
    exact, so a stretch that falls behind it has shown a cost first (docs/kv.md)."""
    forgiven = sum(run["leads_forgiven"] for cell in results for run in cell["laru"].values())
    print(f"trusted stretches behind the twin forgiven (rule 6): {forgiven}", flush=True)


def seeds(pool: Pool, traces: list[str]) -> None:
    names = [name for name in traces if name in SEEDED]
    jobs = [(SEEDED[name].format(seed=seed), size, ("learned", "p1"))
            for name in names for seed in SEEDS for size in SEED_SIZES.split(",")]
    owners = [name for name in names for _ in SEEDS for _ in SEED_SIZES.split(",")]
    results = list(pool.imap(run_cell, jobs))
    for name, cell in zip(owners, results):
        cell["workload"] = name
    summary = {}
    print("\n| workload (seeds 0-4 x 2/5/10%) | learned / LRU: lowest | median | cells >= LRU | "
          "inverted / LRU: lowest |\n|---|---|---|---|---|")
    for name in names:
        mine = [c for c in results if c["workload"] == name]
        learned = [c["laru"]["learned"]["ratio"] for c in mine]
        inverted = [c["laru"]["p1"]["ratio"] for c in mine]
        summary[name] = {"learned_min": min(learned), "learned_median": statistics.median(learned),
                         "cells_at_or_above_lru": sum(r >= 1 for r in learned), "cells": len(learned),
                         "inverted_min": min(inverted)}
        s = summary[name]
        print(f"| {name} | {s['learned_min']:.4f} | {s['learned_median']:.4f} | "
              f"{s['cells_at_or_above_lru']} of {s['cells']} | {s['inverted_min']:.4f} |")
    print_forgiven(results)
    update_entry(RESULTS, "seeds", {"summary": summary, "cells": results})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", default="cells,seeds")
    parser.add_argument("--traces", default=",".join(TRACES))
    args = parser.parse_args()
    traces = args.traces.split(",")
    with Pool(2) as pool:
        if "cells" in args.plans.split(","):
            cells(pool, traces)
        if "seeds" in args.plans.split(","):
            seeds(pool, traces)


if __name__ == "__main__":
    main()
