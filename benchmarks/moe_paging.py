"""Reproduce the layered-paging paper's Figures 4-6 on the synthetic MoE routers, and
measure the learning-augmented policies (LARU, FPB, LARU over LLRU) on layered traces.

    python benchmarks/moe_paging.py [--quick] [--only fig4,fig5,fig6,predictions]

Writes benchmarks/results/moe_paging.json and one PNG per figure next to it, and prints
the key numbers. Sized for a few minutes on two cores with the pure-Python spec.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lcr.policies import POLICIES
from lcr.policies.laru import PAPER_RULE
from lcr.sim import PolicySpec, run_one
from lcr.sim.moe import shape_params
from lcr.traces import Trace, generate

RESULTS = Path(__file__).resolve().parent / "results"
PLOTS = Path(__file__).resolve().parents[1] / "docs" / "img"


def misses(trace: Trace, name: str, k: int, predictor: str = "oracle", noise: float = 0.0,
           seed: int = 0, **params) -> int:
    if POLICIES[name].layered:
        params = {**shape_params(trace), **params}
    spec = PolicySpec(name, tuple(params.items()))
    return run_one(trace, spec, k, predictor, noise, seed).misses


def pages(trace: Trace) -> int:
    return trace.meta["layers"] * trace.meta["experts"]


def figure4(tokens: dict[str, int], points: int) -> dict:
    """Faults vs cache size, k = 1 .. n*l."""
    out = {}
    for preset, count in tokens.items():
        trace = generate(f"{preset}:tokens={count},seed=0")
        ell, total = trace.meta["layers"], pages(trace)
        sizes = sorted({1, *np.linspace(1, total, points).round().astype(int).tolist(), ell})
        curves = {}
        for name in ("opt", "marker", "lru", "llru", "lru_dist"):
            usable = [k for k in sizes if name != "lru_dist" or k >= ell]  # a split cache needs k >= l
            curves[name] = {int(k): misses(trace, name, int(k)) for k in usable}
        out[preset] = {"requests": len(trace), "tokens": count, "curves": curves}
    return out


def figure5(tokens: dict[str, int], seeds: int, k: int = 200) -> dict:
    """Faults / OPT faults at k = 200 over seeds."""
    out = {}
    for preset, count in tokens.items():
        ratios = {name: [] for name in ("marker", "lru", "lru_dist", "llru")}
        for seed in range(seeds):
            trace = generate(f"{preset}:tokens={count},seed={seed}")
            opt = misses(trace, "opt", k)
            for name in ratios:
                ratios[name].append(misses(trace, name, k, seed=seed) / opt)
        out[preset] = {"k": k, "tokens": count, "ratios": ratios}
    return out


def figure6(grid_max: int, tokens: int, a_values: list[float], seeds: int) -> dict:
    """OPT-Dist / OPT: over an n x l grid (Zipf a = 2, k = 16), and over a (k = 64, l = 32, n = 8)."""
    grid = np.ones((grid_max, grid_max))
    for ell in range(1, grid_max + 1):
        for n in range(1, grid_max + 1):
            trace = generate(f"moe:layers={ell},experts={n},top_k=1,a=2,tokens={tokens},seed={ell * 100 + n}")
            opt = misses(trace, "opt", 16)
            grid[n - 1, ell - 1] = misses(trace, "opt_dist", 16) / opt
    by_a = {}
    for a in a_values:
        ratios = []
        for seed in range(seeds):
            trace = generate(f"moe:layers=32,experts=8,top_k=1,a={a},tokens={tokens},seed={seed}")
            ratios.append(misses(trace, "opt_dist", 64) / misses(trace, "opt", 64))
        by_a[a] = float(np.mean(ratios))
    return {"grid": grid.tolist(), "grid_k": 16, "grid_a": 2.0, "by_a": by_a, "tokens": tokens}


def predictions(tokens: dict[str, int], sizes: dict[str, list[int]]) -> dict:
    """LLRU vs LARU, FPB and LARU over LLRU with oracle predictions, flipped with
    probability p (oracle noise) or scaled by lognormal noise."""
    noisy = [("oracle", 0.0), ("oracle", 0.1), ("oracle", 0.3), ("oracle", 1.0),
             ("lognormal", 0.5), ("lognormal", 2.0)]
    out = {}
    for preset, count in tokens.items():
        trace = generate(f"{preset}:tokens={count},seed=0")
        rows = {}
        for k in sizes[preset]:
            row = {"opt": misses(trace, "opt", k), "lru": misses(trace, "lru", k), "llru": misses(trace, "llru", k)}
            for predictor, noise in noisy:
                for name in ("laru", "fpb", "laru_llru"):
                    paper = PAPER_RULE if name == "laru" else {}  # the LLRU paper's flat LARU
                    row[f"{name}/{predictor}={noise:g}"] = misses(trace, name, k, predictor, noise, **paper)
            rows[k] = row
        out[preset] = {"tokens": count, "by_k": rows}
    return out


# --- plots ---------------------------------------------------------------------------------------

def plot_all(results: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if "fig4" in results:
        fig, axes = plt.subplots(1, len(results["fig4"]), figsize=(11, 4))
        for ax, (preset, data) in zip(np.atleast_1d(axes), results["fig4"].items()):
            for name, curve in data["curves"].items():
                ks = sorted(curve, key=int)
                ax.plot([int(k) for k in ks], [curve[k] for k in ks], label=name.upper().replace("_", "-"))
            ax.set(title=f"{preset} ({data['tokens']} tokens)", xlabel="cache size k", ylabel="faults")
            ax.legend()
        written.append(_save(fig, "moe_fig4_faults_vs_k.png"))
    if "fig5" in results:
        fig, axes = plt.subplots(1, len(results["fig5"]), figsize=(10, 4))
        for ax, (preset, data) in zip(np.atleast_1d(axes), results["fig5"].items()):
            names = list(data["ratios"])
            ax.boxplot([data["ratios"][n] for n in names])
            ax.set_xticks(range(1, len(names) + 1), [n.upper().replace("_", "-") for n in names])
            ax.set(title=f"{preset}, k = {data['k']}", ylabel="faults / OPT")
        written.append(_save(fig, "moe_fig5_normalized_faults.png"))
    if "fig6" in results:
        data = results["fig6"]
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        grid = np.array(data["grid"])
        image = left.imshow(grid, origin="lower", extent=(0.5, grid.shape[1] + 0.5, 0.5, grid.shape[0] + 0.5))
        fig.colorbar(image, ax=left, label="OPT-Dist / OPT")
        left.set(xlabel="layers l", ylabel="experts per layer n", title=f"Zipf a = 2, k = {data['grid_k']}")
        a_values = sorted(data["by_a"], key=float)
        right.plot([float(a) for a in a_values], [data["by_a"][a] for a in a_values], marker="o")
        right.set(xlabel="Zipf a", ylabel="OPT-Dist / OPT", title="k = 64, l = 32, n = 8")
        written.append(_save(fig, "moe_fig6_opt_dist.png"))
    if "predictions" in results:
        fig, axes = plt.subplots(1, len(results["predictions"]), figsize=(12, 4))
        for ax, (preset, data) in zip(np.atleast_1d(axes), results["predictions"].items()):
            k = max(data["by_k"], key=int)
            row = data["by_k"][k]
            labels = list(row)
            ax.barh(labels, [row[label] / row["opt"] for label in labels])
            ax.set(title=f"{preset}, k = {k}", xlabel="faults / OPT")
            ax.tick_params(axis="y", labelsize=7)
        written.append(_save(fig, "moe_predictions.png"))
    return written


def _save(fig, name: str) -> Path:
    path = PLOTS / name  # benchmarks/results holds one data file per benchmark; plots live with the docs
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


# --- summary -------------------------------------------------------------------------------------

def summarize(results: dict) -> None:
    if "fig4" in results:
        for preset, data in results["fig4"].items():
            curves = data["curves"]
            ks = [k for k in curves["lru_dist"]]
            mid = [k for k in ks if 0 < int(k) < pages_of(preset)]
            gaps = {name: np.mean([curves[name][k] / curves["opt"][k] for k in mid]) for name in curves}
            print(f"fig4 {preset}: mean faults/OPT over k in [l, nl): " +
                  ", ".join(f"{n} {v:.3f}" for n, v in gaps.items()))
    if "fig5" in results:
        for preset, data in results["fig5"].items():
            print(f"fig5 {preset} k={data['k']}: " + ", ".join(
                f"{n} {np.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]" for n, v in data["ratios"].items()))
    if "fig6" in results:
        grid = np.array(results["fig6"]["grid"])
        print(f"fig6a: OPT-Dist/OPT max {grid.max():.2f}, cells at 1.0: {(grid <= 1.0001).sum()}/{grid.size}")
        print("fig6b: " + ", ".join(f"a={a}: {v:.2f}" for a, v in results["fig6"]["by_a"].items()))
    if "predictions" in results:
        for preset, data in results["predictions"].items():
            for k, row in data["by_k"].items():
                print(f"predictions {preset} k={k}: " + ", ".join(f"{n} {v / row['opt']:.3f}" for n, v in row.items()))


def pages_of(preset: str) -> int:
    return {"mixtral": 256, "llama_moe": 512}[preset]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller traces, for a smoke run")
    parser.add_argument("--only", default="fig4,fig5,fig6,predictions")
    args = parser.parse_args()
    scale = 0.25 if args.quick else 1.0
    tokens = {"mixtral": int(300 * scale), "llama_moe": int(120 * scale)}
    parts = set(args.only.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "moe_paging.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    timings = results.setdefault("seconds", {})
    steps = {
        "fig4": lambda: figure4(tokens, points=24 if not args.quick else 8),
        "fig5": lambda: figure5(tokens, seeds=10 if not args.quick else 3),
        "fig6": lambda: figure6(15 if not args.quick else 6, int(400 * scale),
                                [0, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8], 3 if not args.quick else 1),
        "predictions": lambda: predictions({"mixtral": tokens["mixtral"], "llama_moe": tokens["llama_moe"]},
                                           {"mixtral": [64, 128], "llama_moe": [128, 256]}),
    }
    for name, step in steps.items():
        if name in parts:
            start = time.perf_counter()
            results[name] = step()
            timings[name] = round(time.perf_counter() - start, 1)
            print(f"{name}: {timings[name]} s", flush=True)
    path.write_text(json.dumps(results, indent=1))
    for written in plot_all(results):
        print("wrote", written)
    summarize(results)


if __name__ == "__main__":
    main()
