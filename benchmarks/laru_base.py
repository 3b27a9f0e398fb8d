"""LARU's window over another base order (``laru:base=lru|s3fifo|lfu``) on learned_gap's cells.

Per cell (trace slice x cache size): LRU, OPT and the heuristics on the native cores; the
online LightGBM boundary classifier's async answers (``belady-p``, as in
benchmarks/learned_gap.py) replayed once and fed to the pure-Python LARU spec for every
base and b, so bases compare on identical predictions. ``--weak`` adds the weakest model
(1 tree, 1 feature) at b = 1.03: the robustness check. The spec is Python, so traces are
cut to their first --max-requests requests, and the cells are the ones named below.

    python benchmarks/laru_base.py [--max-requests 40000] [--cells multi2:0.1,...] [--bases lru,s3fifo,lfu] [--weak]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from learned_gap import HEURISTICS, TRACES, gap_closed, load
from lcr.policies import LARU
from lcr.predict import ArrayPredictor
from lcr.predict.lightgbm_model import LightGBMConfig
from lcr.predict.replayed import replay_model
from lcr.sim import replay
from lcr.sim.native import native_replay
from lcr.sim.sweep import PolicySpec, run_one
from lcr.traces import generate

#: Where LARU+belady-p trails the heuristics most, sprite 10% (its worst cell vs LRU),
#: and two generated traces (zipf, where frequency wins, and loop, where LRU gets 0 hits).
CELLS = "multi2:0.1,criteo:0.05,criteo:0.1,cloudPhysics:0.01,web07:0.01,sprite:0.1,zipf:0.01,loop:0.1"
GENERATED = {"zipf": "zipf:requests=200000,keys=20000,alpha=0.9,seed=1", "loop": "loop:requests=100000,keys=3000"}
BASES = ("lru", "s3fifo", "lfu")
BS = (1.03, 2.0)


def trace_for(name: str, data: Path, max_requests: int):
    if name in GENERATED:
        trace = generate(GENERATED[name])
        return trace.head(max_requests) if len(trace) > max_requests else trace
    relative = next(r for r in TRACES if name in r)
    return load(data / relative, max_requests)


def laru_misses(trace, k: int, values: np.ndarray, **params) -> int:
    predictor = ArrayPredictor(values)
    run = replay(trace, LARU(k, predictor, mode="async", **params), predictor)
    return len(trace) - int(run.hits.sum())


def run_cell(trace, fraction: float, weak: bool, bases=BASES) -> dict:
    k = max(1, round(fraction * trace.distinct_keys))
    misses = {n: run_one(trace, PolicySpec(n), k).misses for n in ("lru", "opt", *HEURISTICS, "lfu")}
    models = {"belady-p": LightGBMConfig(background=False, capacity=k, objective="belady", rank="probability")}
    if weak:
        models["weak"] = LightGBMConfig(background=False, capacity=k, weak=True)
    for model, config in models.items():
        values = replay_model(trace, config).values
        for b in BS if model == "belady-p" else (1.03,):
            for base in bases:
                misses[f"laru:b={b},base={base}+{model}"] = laru_misses(trace, k, values, b=b, base=base)
            native = len(trace) - int(native_replay(trace, "laru", k, values, mode="async", b=b).hits.sum())
            assert native == misses[f"laru:b={b},base=lru+{model}"], "spec and native LARU disagree"
    best = min(misses[h] for h in HEURISTICS)
    return {"trace": trace.name, "requests": len(trace), "fraction": fraction, "capacity": k, "misses": misses,
            "hit_ratio": {n: 1 - m / len(trace) for n, m in misses.items()},
            "gap_closed": {n: gap_closed(-m, -misses["lru"], -misses["opt"]) for n, m in misses.items()},
            "vs_lru": {n: m / misses["lru"] - 1 for n, m in misses.items()},
            "beats_best_heuristic": {n: m <= best for n, m in misses.items()}}


def markdown(rows: list[dict]) -> str:
    names = [n for n in rows[0]["misses"] if n.startswith("laru")]
    lines = ["| cell | k | LRU hit | OPT hit | best heur (gap) | " + " | ".join(
        n.replace("laru:", "").replace("+belady-p", "") for n in names) + " |", "|---|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        hit, gap = r["hit_ratio"], r["gap_closed"]
        best = max(HEURISTICS, key=lambda h: hit[h])
        cells = [f"{gap[n]:+.0%} ({r['vs_lru'][n]:+.1%}){'*' if r['beats_best_heuristic'][n] else ''}" for n in names]
        lines.append(f"| {r['trace'][:16]} {r['fraction']:.0%} | {r['capacity']} | {hit['lru']:.3f} | {hit['opt']:.3f} | "
                     f"{best} {hit[best]:.3f} ({gap[best]:+.0%}) | " + " | ".join(cells) + " |")
    lines += ["", "| variant | mean gap closed | cells >= best heuristic | worst misses vs LRU |", "|---|---|---|---|"]
    for n in names + list(HEURISTICS) + ["lfu"]:
        lines.append(f"| {n} | {np.mean([r['gap_closed'][n] for r in rows]):+.1%} | "
                     f"{sum(r['beats_best_heuristic'][n] for r in rows)}/{len(rows)} | "
                     f"{max(r['vs_lru'][n] for r in rows):+.2%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "laru_base.json"))
    parser.add_argument("--max-requests", type=int, default=40_000)
    parser.add_argument("--cells", default=CELLS, help="comma-separated trace:fraction (trace: a substring)")
    parser.add_argument("--bases", default="lru,s3fifo", help=f"comma-separated subset of {', '.join(BASES)}")
    parser.add_argument("--weak", action="store_true", help="also the 1-tree 1-feature model at b = 1.03")
    args = parser.parse_args()
    rows, start, traces = [], time.perf_counter(), {}
    for cell in args.cells.split(","):
        name, fraction = cell.split(":")
        if name not in traces:
            traces[name] = trace_for(name, Path(args.data), args.max_requests)
        cell_start = time.perf_counter()
        rows.append(run_cell(traces[name], float(fraction), args.weak, args.bases.split(",")))
        r = rows[-1]
        print(f"{cell} k={r['capacity']} ({time.perf_counter() - cell_start:.0f} s): " + ", ".join(
            f"{n} {g:+.0%}" for n, g in r["gap_closed"].items() if n not in ("lru", "opt")), flush=True)
    print(markdown(rows))
    print(f"total {time.perf_counter() - start:.0f} s, max {args.max_requests} requests per trace")
    Path(args.out).write_text(json.dumps({"max_requests": args.max_requests, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
