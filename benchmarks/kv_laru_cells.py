"""Radix LARU's three promises in the 12 cells of issue 12 (docs/kv.md): Mooncake,
Online-QA (2000 conversations), Aibrix (1000 sessions) and the ShareGPT chat replay, at
three cache sizes each (% of the trace's distinct tokens, as ``lcr sim-kv`` rounds them).

Per cell: LRU's and leaf-OPT's token hit rates, then the default LARU's hit tokens with
exact predictions over leaf-OPT's (p = 0), with every prediction negated over LRU's
(p = 1, ``PathOracle`` seed 0, as ``--noise 1``), and with the learned node predictor
over LRU's (``--predictor lightgbm-belady``). The same functions as
``lcr sim-kv`` (``make_radix_policy``, ``make_path_predictor``, ``replay_lcr``); it prints
markdown tables and writes benchmarks/results/kv_laru_cells.json.

    python benchmarks/kv_laru_cells.py [--traces mooncake,online_qa,aibrix,chat]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lcr.kv.cli import load_chat, parse_cache_tokens
from lcr.kv.predictors import make_path_predictor
from lcr.kv.requests import build_workload
from lcr.kv.sim import make_radix_policy, replay_lcr
from lcr.traces import load_trace

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
TRACES = {  # name -> (lcr sim-kv TRACE, --cache-tokens, label)
    "mooncake": (str(DATA / "kv" / "mooncake_conversation_trace.jsonl"), "2%,5%,10%", "Mooncake"),
    "online_qa": ("online_qa:conversations=2000", "2.5%,5%,8%", "Online-QA (2000 conv.)"),
    "aibrix": ("aibrix:sessions=1000", "2%,5%,10%", "Aibrix (1000 sessions)"),
    "chat": ("chat:" + str(DATA / "chat" / "sharegpt_v3_sample1000.jsonl"), "2%,5%,10%", "ShareGPT chat replay"),
}
MODES = {"p0": ("oracle", 0.0), "p1": ("oracle", 1.0), "learned": ("lightgbm-belady", 0.0)}


def workload(spec: str):
    return load_chat(spec, None) if spec.startswith("chat:") else build_workload(load_trace(spec, None, None), 512)


def run_cell(w, capacity: int) -> dict:
    lru = replay_lcr(w, capacity, make_radix_policy("lru", w))
    opt = replay_lcr(w, capacity, make_radix_policy("opt", w))
    cell = {"cache_tokens": capacity, "lru_hit_rate": lru / w.total_tokens, "opt_hit_rate": opt / w.total_tokens,
            "lru_hit_tokens": lru, "opt_hit_tokens": opt, "laru": {}}
    for mode, (kind, noise) in MODES.items():
        started = time.perf_counter()
        policy = make_radix_policy("laru", w, predictor=make_path_predictor(kind, w, noise, 0))
        hits = replay_lcr(w, capacity, policy)
        cell["laru"][mode] = {"hit_tokens": hits, "ratio": hits / (opt if mode == "p0" else lru),
                              "seconds": round(time.perf_counter() - started, 2)}
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "kv_laru_cells.json"))
    args = parser.parse_args()
    results = []
    for name in args.traces.split(","):
        spec, sizes, label = TRACES[name]
        w = workload(spec)
        for capacity, size in zip(parse_cache_tokens(sizes, w.distinct_tokens), sizes.split(",")):
            cell = run_cell(w, capacity)
            cell.update(trace=name, label=f"{label}, {size}")
            results.append(cell)
            print(json.dumps({k: cell[k] for k in ("label", "lru_hit_rate", "opt_hit_rate")}),
                  {m: round(v["ratio"], 4) for m, v in cell["laru"].items()},
                  flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"cells": results}, indent=1))
    print("\n| trace, cache | LRU | leaf-OPT | p = 0: LARU / leaf-OPT | p = 1: LARU / LRU | "
          "lightgbm-belady: LARU / LRU |\n|---|---|---|---|---|---|")
    for cell in results:
        ratios = " | ".join(f"{cell['laru'][mode]['ratio']:.4f}" for mode in MODES)
        print(f"| {cell['label']} | {cell['lru_hit_rate']:.4f} | {cell['opt_hit_rate']:.4f} | {ratios} |")


if __name__ == "__main__":
    main()
