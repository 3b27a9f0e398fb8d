"""How much of the LRU->OPT gap learned eviction closes on the shared real traces.

Every shared trace x cache = 1/5/10% of its distinct keys x {LRU, the heuristics a user
would pick instead (ARC, LIRS, S3-FIFO, W-TinyLFU, where registered), OPT, and LARU
driven by the online LightGBM model in each variant}. With no flags it runs the
defaults, what ``lcr sim TRACE --predictor lightgbm --policies laru`` runs (column
``laru+lightgbm``), beside the paper's Algorithm 1 over the same model (``laru-paper``)
and the weak model (``+weak``). The learned predictions are the async ones (the model
queried right after each access), computed in one pass per (trace, size, variant) and
replayed on the native engines. Reports hit ratio, gap closed = (X - LRU) / (OPT - LRU)
and model time per request (feature updates, sampling, fits and predictions, all on one
core); writes benchmarks/results/learned_gap.json and, with --plot, a PNG. The model
reads the static metadata each trace carries (embedding table, tokens from root, object
size: ``lcr.traces.static``) unless --no-static. Traces longer than --max-requests are
cut to their first requests. ``--trace FILE`` (repeatable) runs the same table on your
own traces instead, any format ``lcr sim`` reads.

``--generated`` also runs the same cells on lcr's generated traces (zipf, loop, scan and a
planted-periodic trace), summarized apart: a check that a choice tuned on the shared
traces does not hurt elsewhere. The model passes are kept on disk (``model_pass``), so
LARU rules re-run on the same predictions in seconds.

The shared traces (``TRACES``: all of ``classic/`` and the embedding, recsys and KV
traces) fall in two fixed halves (``HALVES``, rule in ``split``): choices are made on the
tuning half, and the report half is the one results are claimed on; both are run and
summarized separately (``--half`` runs one).

    python benchmarks/learned_gap.py [--data ../shared/data] [--plot docs/img/learned_gap.png]
    python benchmarks/learned_gap.py --half tuning    # the half choices are made on
    python benchmarks/learned_gap.py --generated --half none --out /tmp/generated.json
    python benchmarks/learned_gap.py --trace my.trace [--format oracleGeneral] --out my_gap.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from lcr.atomic import write_atomic
from lcr.errors import LcrInputError
from lcr.policies import POLICIES
from lcr.policies.laru import PAPER_RULE
from lcr.predict import learned_config
from lcr.predict.features import FeatureConfig
from lcr.predict.lightgbm_model import LightGBMConfig
from lcr.predict.replayed import replay_model
from lcr.sim.native import native_replay
from lcr.sim.predictions import predictor_code_digest, default_directory, trace_digest
from lcr.sim.report import machine_description
from lcr.sim.sweep import PolicySpec, run_one
from lcr.traces import Trace, generate, load_trace
from lcr.traces.static import static_fields

#: Every shared trace, relative to --data: all of classic/ (cloudPhysicsIO.csv is the
#: .oracleGeneral.bin's trace again) and the embedding, recsys and KV traces.
TRACES = ["classic/cloudPhysicsIO.oracleGeneral.bin", "classic/cache2k_web07.trace.xz",
          *(f"classic/address/{name}.trace.gz" for name in ("gcc", "gzip", "swim", "twolf")),
          "classic/corda/trace_vaultservice.gz",
          *(f"classic/lirs/{name}.trace.gz" for name in ("2_pools", "backf", "cpp", "cs", "gli", "loop", "multi1",
                                                         "multi2", "multi3", "ps", "scan", "sprite", "zigzag")),
          "embedding/criteo_kaggle_first999.tsv", "recsys/ml-100k.inter",
          "kv/mooncake_conversation_trace.jsonl"]


#: Every trace a choice of lcr's learned policy has been made or checked on before the
#: traces of issue 40 arrived: the 8 the settings were tuned on, and the three LIRS traces
#: measured once after the fact. They can only be the tuning half.
SEEN = ("classic/cloudPhysicsIO.oracleGeneral.bin", "classic/cache2k_web07.trace.xz",
        "classic/lirs/multi2.trace.gz", "classic/lirs/sprite.trace.gz", "classic/lirs/2_pools.trace.gz",
        "embedding/criteo_kaggle_first999.tsv", "recsys/ml-100k.inter", "kv/mooncake_conversation_trace.jsonl",
        "classic/lirs/cpp.trace.gz", "classic/lirs/loop.trace.gz", "classic/lirs/scan.trace.gz")


def split(traces: list[str]) -> dict[str, str]:
    """Each trace's half, fixed before anything was measured on the traces added in issue
    40: every trace already seen (``SEEN``) is the tuning half, and the traces nobody has
    made or checked a choice on (the CPU address traces, Corda and seven LIRS traces) are
    the report half. A report trace stays one: once a choice has looked at it, it cannot
    be moved back, only retired."""
    return {relative: "tuning" if relative in SEEN else "report" for relative in traces}


HALVES = split(TRACES)
TUNING = [t for t in TRACES if HALVES[t] == "tuning"]
REPORT = [t for t in TRACES if HALVES[t] == "report"]
GENERATED = ["zipf:requests=200000,keys=20000,alpha=0.9,seed=1", "loop:requests=100000,keys=3000",
             "scan:requests=200000,hot_keys=5000,alpha=0.8,scan_length=4000,seed=2", "planted-periodic"]
SIZES = (0.01, 0.05, 0.10)
HEURISTICS = ("arc", "lirs", "s3fifo", "wtinylfu")
#: Where the model passes are kept (beside ``lcr sim``'s prediction arrays).
PASSES = default_directory().parent / "learned_gap"
#: The model variants: ``lightgbm`` is ``lcr sim --predictor lightgbm``'s model (the
#: classifier on its default schedule, ``lcr.predict.learned_config``); ``weak`` the
#: robustness model, one tree over one feature (the key id). Variants that lost (the old
#: schedule, the regression, the classifier ranked as a time, fits every 1,000 accesses)
#: are in docs/history.md with the commit that last ran them, not options here.
VARIANTS = ("lightgbm", "weak")
DEFAULT_VARIANTS = VARIANTS
#: Policies driven by each variant's predictions: (label, native core, parameters).
#: ``laru`` is the spec's defaults (the measured best); ``laru-paper`` the paper's Algorithm 1.
LEARNED_POLICIES = (("laru", "laru", {}), ("laru-paper", "laru", dict(PAPER_RULE)))


def variant_config(variant: str, capacity: int, seed: int = 0, trace: Trace | None = None) -> LightGBMConfig:
    """The model of ``variant`` for a cache of ``capacity`` keys, reading the static
    metadata ``trace`` carries (None: none), fitted inline (reproducible)."""
    if variant == "lightgbm":
        return learned_config("lightgbm", seed, trace, capacity)
    features = FeatureConfig(static_fields=static_fields(trace) if trace is not None else ())
    return LightGBMConfig(background=False, capacity=capacity, seed=seed, features=features, weak=True)


def load_movielens(path: Path) -> Trace:
    """MovieLens ratings in timestamp order; each rating looks up its user's and its
    item's embedding row (users even keys and table 0, items odd keys and table 1)."""
    data = np.genfromtxt(path, delimiter="\t", skip_header=1, dtype=np.int64, usecols=(0, 1, 3))
    data = data[np.argsort(data[:, 2], kind="stable")]
    keys = np.empty(2 * len(data), dtype=np.int64)
    keys[0::2], keys[1::2] = 2 * data[:, 0], 2 * data[:, 1] + 1
    return Trace(keys, name=path.name, tables=(keys & 1).astype(np.int16))


def planted_periodic(seed: int = 0, length: int = 100_000) -> Trace:
    """400 keys each repeating with its own period (200..8000 requests) interleaved
    with one-off keys: a pattern the deltas reveal and recency does not."""
    rng = np.random.default_rng(seed)
    periods, phases = rng.integers(200, 8000, 400), rng.integers(0, 8000, 400)
    events = [(phase + j * period, key) for key, (period, phase) in enumerate(zip(periods, phases))
              for j in range(length // period + 1) if phase + j * period < length]
    events += [(t, 1000 + i) for i, t in enumerate(rng.integers(0, length, length // 3).tolist())]
    events.sort()
    return Trace(np.array([key for _, key in events]), name="planted-periodic")


def load(path: Path, max_requests: int, fmt: str | None = None) -> Trace:
    trace = load_movielens(path) if path.suffix == ".inter" and fmt is None else load_trace(str(path), fmt)
    return first_requests(trace, max_requests)


def first_requests(trace: Trace, max_requests: int) -> Trace:
    return trace.head(max_requests) if len(trace) > max_requests else trace


def gap_closed(x: float, lru: float, opt: float) -> float:
    return (x - lru) / (opt - lru) if opt > lru else 0.0


def warm_up(variants: list[str]) -> None:
    """One small pass per variant (past its first fits) before anything is timed: the
    first pass in a process pays one-time costs, about 1 s of importing LightGBM and its
    dependencies, that are no part of the model's cost per request."""
    trace = generate("zipf:requests=12000,keys=2000,alpha=0.8,seed=0")
    for variant in variants:
        replay_model(trace, variant_config(variant, 100))


def model_pass(trace: Trace, config: LightGBMConfig) -> tuple[np.ndarray, float]:
    """The model's answer at every request and its seconds per request, computed once per
    (trace, model settings, ``lcr.predict`` sources) and then read from ``PASSES``: the
    LARU rules re-run on the same predictions in seconds. The time is the one measured
    when the pass ran (``replay_model`` does all of the model's work, feature updates,
    sampling, fits and predictions, in this thread, on one core)."""
    digest = hashlib.sha256(f"{trace_digest(trace)} {config!r} {predictor_code_digest()}".encode()).hexdigest()[:32]
    array, meta = PASSES / f"{digest}.npy", PASSES / f"{digest}.json"
    if array.exists() and meta.exists():
        return np.load(array), json.loads(meta.read_text())["seconds_per_request"]
    start = time.perf_counter()
    values = replay_model(trace, config).values
    seconds = (time.perf_counter() - start) / len(trace)
    PASSES.mkdir(parents=True, exist_ok=True)
    write_atomic(array, lambda f: np.save(f, values))
    write_atomic(meta, json.dumps({"trace": trace.name, "seconds_per_request": seconds}))
    return values, seconds


def run_trace(trace: Trace, variants: list[str], heuristics: list[str], seed: int = 0,
              static: bool = True, half: str = "yours") -> list[dict]:
    """The cells of one trace; ``half`` labels them (tuning, report, generated, yours).
    ``static``: the models read the metadata the trace carries (table, tokens from root,
    size), as a cache would pass it."""
    rows = []
    for fraction in SIZES:
        k = max(1, round(fraction * trace.distinct_keys))
        misses = {name: run_one(trace, PolicySpec(name), k).misses for name in ("lru", "opt", *heuristics)}
        timing = {}
        for variant in variants:
            values, timing[variant] = model_pass(trace, variant_config(variant, k, seed, trace if static else None))
            for label, policy, params in LEARNED_POLICIES:
                run = native_replay(trace, policy, k, values, mode="async", **params)
                misses[f"{label}+{variant}"] = len(trace) - int(run.hits.sum())
        n = len(trace)
        hit = {name: 1 - m / n for name, m in misses.items()}
        row = {"trace": trace.name, "half": half, "requests": n, "fraction": fraction, "capacity": k,
               "hit_ratio": hit, "misses": misses,
               "gap_closed": {name: gap_closed(h, hit["lru"], hit["opt"]) for name, h in hit.items()},
               "model_us_per_request": {v: s * 1e6 for v, s in timing.items()}}
        rows.append(row)
        best_h = max((hit[h] for h in heuristics), default=float("nan"))
        print(f"{trace.name[:28]:28s} {fraction:4.0%} k={k:6d} LRU {hit['lru']:.4f} OPT {hit['opt']:.4f} "
              f"best-heur {best_h:.4f} | " + " ".join(
                  f"{name} {row['gap_closed'][name]:+.0%}" for name in hit if "+" in name), flush=True)
    return rows


def summarize(rows: list[dict], heuristics: list[str]) -> dict:
    """Per policy over ``rows`` (one half): mean and median gap closed, worst cell against
    LRU, cells at or above the best heuristic; and the mean model time per request per variant."""
    learned = sorted({name for r in rows for name in r["hit_ratio"] if name.startswith("laru")})
    variants = sorted({v for r in rows for v in r["model_us_per_request"]})
    out = {}
    for name in learned + heuristics:
        gaps = [r["gap_closed"][name] for r in rows]
        worst = max(r["misses"][name] / r["misses"]["lru"] - 1 for r in rows)
        beats = sum(r["hit_ratio"][name] >= max(r["hit_ratio"][h] for h in heuristics) for r in rows) \
            if heuristics else None
        out[name] = {"mean_gap_closed": float(np.mean(gaps)), "median_gap_closed": float(np.median(gaps)),
                     "worst_extra_misses_vs_lru": worst, "cells_beating_best_heuristic": beats,
                     "cells": len(rows)}
    return {"policies": out, "model_us_per_request": {
        v: float(np.mean([r["model_us_per_request"][v] for r in rows])) for v in variants}}


def summarize_halves(rows: list[dict], heuristics: list[str]) -> dict:
    """``summarize`` for each half the rows hold, in a fixed order."""
    halves = [h for h in ("tuning", "report", "generated", "yours") if any(r["half"] == h for r in rows)]
    return {h: summarize([r for r in rows if r["half"] == h], heuristics) for h in halves}


def print_summary(half: str, summary: dict) -> None:
    print(f"-- {half} half: model time per request " + ", ".join(
        f"{v} {us:.1f} us" for v, us in summary["model_us_per_request"].items()))
    for name, s in summary["policies"].items():
        print(f"{name:24s} mean gap closed {s['mean_gap_closed']:+.1%} (median {s['median_gap_closed']:+.1%}); "
              f"worst cell {s['worst_extra_misses_vs_lru']:+.2%} misses vs LRU; "
              f"beats best heuristic in {s['cells_beating_best_heuristic']}/{s['cells']}")


def markdown(rows: list[dict], summary: dict, heuristics: list[str]) -> str:
    """The tables of docs/predictor.md for one half: one row per trace (its cache sizes
    side by side; gap closed in %, best heuristic = the best of ``heuristics`` per cell)
    and the summary."""
    learned = [n for n in rows[0]["gap_closed"] if "+" in n]
    by_trace: dict[str, list[dict]] = {}
    for r in rows:
        by_trace.setdefault(r["trace"], []).append(r)

    def per_size(cells, value) -> str:
        return "/".join(value(r) for r in cells)

    sizes = "/".join(f"{f:.0%}" for f in SIZES)
    lines = [f"| trace ({sizes}) | LRU hit ratio | OPT | best heuristic | " + " | ".join(learned) + " |",
             "|---|---|---|---|" + "---|" * len(learned)]
    for trace, cells in by_trace.items():
        best = per_size(cells, lambda r: f"{100 * max(r['gap_closed'][h] for h in heuristics):.0f}") if heuristics else "-"
        lines.append(f"| {trace[:24]} | {per_size(cells, lambda r: format(r['hit_ratio']['lru'], '.2f'))} | "
                     f"{per_size(cells, lambda r: format(r['hit_ratio']['opt'], '.2f'))} | {best} | "
                     + " | ".join(per_size(cells, lambda r, n=n: f"{100 * r['gap_closed'][n]:.0f}") for n in learned) + " |")
    lines += ["", "| policy | mean gap closed | median | worst cell (misses vs LRU) | cells >= best heuristic |",
              "|---|---|---|---|---|"]
    for name, s in summary["policies"].items():
        lines.append(f"| {name} | {s['mean_gap_closed']:+.1%} | {s['median_gap_closed']:+.1%} | "
                     f"{s['worst_extra_misses_vs_lru']:+.2%} | {s['cells_beating_best_heuristic']}/{s['cells']} |")
    lines += ["", "model time per request (features, sampling, fits, predictions; one core): " + ", ".join(
        f"{v} {us:.1f} µs" for v, us in summary["model_us_per_request"].items())]
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in rows[0]["gap_closed"]  # the heuristics and LARU on the default model
             if n not in ("lru", "opt") and ("+" not in n or n.endswith("+lightgbm"))]
    labels = [f"{r['half'][0].upper()} {r['trace'][:14]} {r['fraction']:.0%}" for r in rows]  # T/R: the half
    x = np.arange(len(rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(10, 0.5 * len(rows)), 4.5))
    for i, name in enumerate(names):
        ax.bar(x + i * width, [max(r["gap_closed"][name], -0.5) for r in rows], width, label=name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x + 0.4, labels, rotation=70, fontsize=7)
    ax.set_ylabel("share of the LRU->OPT gap closed (clipped at -50%)")
    ax.legend(fontsize=7, ncol=3)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "learned_gap.json"))
    parser.add_argument("--plot", help="write the gap-closed bar chart here")
    parser.add_argument("--max-requests", type=int, default=300_000)
    parser.add_argument("--traces", help="comma-separated substrings: only traces whose path has one")
    parser.add_argument("--half", choices=("tuning", "report", "both", "none"), default="both",
                        help="which half of the shared traces to run (default both, summarized apart)")
    parser.add_argument("--trace", action="append", metavar="FILE",
                        help="run on this trace file instead of the shared ones (repeatable)")
    parser.add_argument("--format", help="the --trace files' format, as lcr sim --format (default: detected)")
    parser.add_argument("--variants", help=f"comma-separated subset of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the tables of docs/predictor.md")
    parser.add_argument("--seed", type=int, default=0,
                        help="the models' seed (training-sample draws and LightGBM): the spread across seeds")
    parser.add_argument("--generated", action="store_true",
                        help="also lcr's generated traces, summarized apart (--half none: only them)")
    parser.add_argument("--no-static", dest="static", action="store_false",
                        help="leave out the traces' static metadata (table, tokens from root, size) as features")
    args = parser.parse_args()
    heuristics = [h for h in HEURISTICS if h in POLICIES]
    variants = args.variants.split(",") if args.variants else list(DEFAULT_VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise LcrInputError(f"--variants: unknown {', '.join(map(repr, unknown))}; valid: {', '.join(VARIANTS)}")
    rows, start = [], time.perf_counter()
    warm_up(variants)
    if args.generated:
        for spec in GENERATED:
            if not args.traces or any(s in spec for s in args.traces.split(",")):
                trace = first_requests(planted_periodic() if spec == "planted-periodic" else generate(spec),
                                       args.max_requests)
                rows += run_trace(trace, variants, heuristics, args.seed, args.static, "generated")
    for relative in [] if args.half == "none" else args.trace or TRACES:
        if args.traces and not any(s in relative for s in args.traces.split(",")):
            continue
        half = "yours" if args.trace else HALVES[relative]
        if args.half != "both" and half != args.half:
            continue
        path = Path(relative) if args.trace else Path(args.data) / relative
        if not path.exists() and not args.trace:
            print(f"skipping {path}: not present")
            continue
        rows += run_trace(load(path, args.max_requests, args.format), variants, heuristics, args.seed, args.static,
                          half)
    if not rows:
        raise LcrInputError("no trace to run: --traces / --half left none, or the shared data is absent")
    summary = summarize_halves(rows, heuristics)
    for half, half_summary in summary.items():
        print_summary(half, half_summary)
    print(f"total {time.perf_counter() - start:.0f} s; heuristics: {', '.join(heuristics) or 'none registered'}")
    if args.markdown:
        for half, half_summary in summary.items():
            print(f"\n### {half} half\n")
            print(markdown([r for r in rows if r["half"] == half], half_summary, heuristics))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # summary: {half: {"policies": {policy: ...}, "model_us_per_request": {variant: mean µs}}}
    Path(args.out).write_text(json.dumps({"machine": machine_description(), "max_requests": args.max_requests,
                                          "seed": args.seed, "static_features": args.static,
                                          "heuristics": heuristics, "halves": HALVES, "rows": rows,
                                          "summary": summary}, indent=1))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    try:
        main()
    except LcrInputError as err:
        print(f"learned_gap.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
