"""Replay throughput of lcr's native cores next to libCacheSim's, in one run.

    python benchmarks/sim_throughput.py [--requests 10000000] [--keys 1000000] [--repeats 3] [--heuristics]
    python benchmarks/sim_throughput.py --laru-rules --requests 2000000 --keys 200000

Trace: Zipf alpha = 1.0 over 1M keys, 10M requests, unit sizes, cache = 1% of the keys.
lcr replays LRU, OPT, LARU (oracle predictions, and p = 0.5 noise), FPB and HF; libCacheSim
(pip install libcachesim) replays LRU and Belady from an oracleGeneral binary file through
its C trace reader. Engines run interleaved, ``--repeats`` rounds, best time kept, because
the machine is shared. lcr's time includes remapping keys to dense ids (done once per
trace in a sweep, but counted here in every replay); OPT and Belady both get the
precomputed next-use array for free.

``--heuristics`` adds ARC, LIRS, S3-FIFO, W-TinyLFU and LFU on both sides (libCacheSim's
W-TinyLFU reads the file's next-access times, which skip some SLRU promotions, so its miss
ratio here is not the parity one; benchmarks/libcachesim_parity.py checks misses).

``--laru-rules`` instead times LARU's own settings side by side on oracle predictions (no
libCacheSim): the default (with its heuristic experts and their shadows), the default
without experts, and the paper's Algorithm 1; entry ``laru_rules``.

Prints Mreq/s, ratios to libCacheSim and peak memory; writes
the entry ``core`` (or ``heuristics``) of benchmarks/results/sim_throughput.json, with a machine
description.
Targets: LRU >= 1.0x libCacheSim LRU, OPT >= 1.0x Belady, LARU >= 0.6x libCacheSim LRU,
peak memory < 1 GB.
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from lcr.policies.laru import PAPER_RULE
from lcr.predict.experimental import oracle_predictions
from lcr.sim.native import native_replay
from results_file import update_entry
from lcr.sim.report import machine_description
from lcr.traces import NEVER, Trace, generate

RESULTS = Path(__file__).resolve().parent / "results" / "sim_throughput.json"
TARGETS = {"lru": ("libcachesim LRU", 1.0), "opt": ("libcachesim Belady", 1.0),
           "laru (oracle)": ("libcachesim LRU", 0.6), "laru (p=0.5)": ("libcachesim LRU", 0.6)}
# lcr policy -> libCacheSim class, for --heuristics; target: within 2x of libCacheSim's speed.
HEURISTICS = {"arc": "ARC", "lirs": "LIRS", "s3fifo": "S3FIFO", "wtinylfu": "WTinyLFU", "lfu": "LFU"}
HEURISTIC_TARGET = 0.5


def write_oracle_general(trace: Trace, path: Path) -> None:
    """libCacheSim's oracleGeneral records: <u32 time, u64 id, u32 size, i64 next vtime>."""
    record = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")], align=False)
    with open(path, "wb") as out:
        for start in range(0, len(trace), 1 << 20):  # in chunks, to keep the peak memory down
            stop = min(start + (1 << 20), len(trace))
            rows = np.empty(stop - start, dtype=record)
            rows["time"] = np.arange(start, stop, dtype=np.uint32)
            rows["id"] = trace.keys[start:stop].view(np.uint64)
            rows["size"] = 1
            # Belady reads next_access_vtime: never again must be INT64_MAX (not -1) to go first.
            nxt = trace.next_use[start:stop]
            rows["next"] = np.where(nxt == NEVER, np.iinfo(np.int64).max, nxt + 1)
            rows.tofile(out)


def lcr_runs(trace: Trace, capacity: int) -> dict:
    oracle = oracle_predictions(trace, 0.0)
    noisy = oracle_predictions(trace, 0.5, seed=1)
    return {"lru": ("lru", None), "opt": ("opt", None), "laru (oracle)": ("laru", oracle),
            "laru (p=0.5)": ("laru", noisy), "fpb": ("fpb", oracle), "hf": ("hf", oracle)}


def laru_rule_runs(trace: Trace) -> dict:
    oracle = oracle_predictions(trace, 0.0)
    return {"laru (default)": ("laru", oracle, {}), "laru (no experts)": ("laru", oracle, {"intervals": 0}),
            "laru (paper's rule)": ("laru", oracle, dict(PAPER_RULE))}


def time_lcr(trace: Trace, name: str, capacity: int, predictions, **params) -> tuple[float, int]:
    start = time.perf_counter()
    trace._dense_ids = None  # count the key remapping in every replay
    run = native_replay(trace, name, capacity, predictions, **params)
    return time.perf_counter() - start, run.misses


def time_libcachesim(cls, path: Path, capacity: int) -> tuple[float, float]:
    import libcachesim as lcs

    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    # 2^20 buckets for 1M keys: its fastest setting here (the default 24 was ~2x slower).
    cache = cls(capacity, hashpower=20)
    start = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - start, miss_ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--cache", type=float, default=0.01, help="cache size as a fraction of the keys")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--heuristics", action="store_true", help="also ARC, LIRS, S3-FIFO, W-TinyLFU, LFU")
    ap.add_argument("--laru-rules", action="store_true",
                    help="only LARU: its default, without experts, and the paper's rule (entry laru_rules)")
    args = ap.parse_args()
    if args.laru_rules:
        return laru_rules(args)
    import libcachesim as lcs

    trace = generate(f"zipf:requests={args.requests},keys={args.keys},alpha={args.alpha},seed=0")
    capacity = max(1, round(args.cache * args.keys))
    trace.next_use  # computed once, outside every timing (Belady's file carries it too)
    runs = lcr_runs(trace, capacity)
    theirs = {"libcachesim LRU": lcs.LRU, "libcachesim Belady": lcs.Belady}
    targets = dict(TARGETS)
    if args.heuristics:
        for name, cls in HEURISTICS.items():
            runs[name] = (name, None)
            theirs[f"libcachesim {cls}"] = getattr(lcs, cls)
            targets[name] = (f"libcachesim {cls}", HEURISTIC_TARGET)
    times: dict[str, list[float]] = {}
    misses: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "zipf.oracleGeneral.bin"
        write_oracle_general(trace, path)
        for _ in range(args.repeats):
            for label, (name, predictions) in runs.items():
                seconds, miss = time_lcr(trace, name, capacity, predictions)
                times.setdefault(label, []).append(seconds)
                misses[label] = miss / len(trace)
            for label, cls in theirs.items():
                seconds, miss_ratio = time_libcachesim(cls, path, capacity)
                times.setdefault(label, []).append(seconds)
                misses[label] = miss_ratio
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rows = {}
    for label, ts in times.items():
        best = min(ts)
        rows[label] = {"best_s": best, "median_s": float(np.median(ts)), "times_s": ts,
                       "mreq_per_s": len(trace) / best / 1e6, "miss_ratio": misses[label]}
    for label, (reference, target) in targets.items():
        ratio = rows[reference]["best_s"] / rows[label]["best_s"]
        rows[label].update(vs=reference, ratio=ratio, target=target, meets_target=ratio >= target)
    print(f"# {trace.name}: {len(trace):,} requests, cache {capacity:,} items, best of {args.repeats}")
    print(f"{'engine':<20} {'Mreq/s':>8} {'best s':>7} {'miss ratio':>10}  ratio (target)")
    for label, r in rows.items():
        ratio = f"{r['ratio']:.2f}x {r['vs']} (>= {r['target']})" if "ratio" in r else ""
        print(f"{label:<20} {r['mreq_per_s']:>8.2f} {r['best_s']:>7.3f} {r['miss_ratio']:>10.4f}  {ratio}")
    print(f"peak memory (max RSS): {peak_mb:.0f} MB (target < 1024)")
    setting = "heuristics" if args.heuristics else "core"
    update_entry(RESULTS, setting, {
        "benchmark": "trace replay throughput, lcr native cores vs libcachesim",
        "trace": f"zipf:requests={args.requests},keys={args.keys},alpha={args.alpha},seed=0",
        "requests": len(trace), "capacity": capacity, "repeats": args.repeats,
        "libcachesim": lcs.__version__, "peak_rss_mb": peak_mb, "runs": rows,
        "machine": machine_description()})
    print(f"wrote {RESULTS} ({setting})")


def laru_rules(args) -> None:
    """LARU's settings side by side, interleaved, best of ``--repeats``."""
    trace = generate(f"zipf:requests={args.requests},keys={args.keys},alpha={args.alpha},seed=0")
    capacity = max(1, round(args.cache * args.keys))
    runs = laru_rule_runs(trace)
    times: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for label, (name, predictions, params) in runs.items():
            times.setdefault(label, []).append(time_lcr(trace, name, capacity, predictions, **params)[0])
    rows = {label: {"best_s": min(ts), "times_s": ts, "mreq_per_s": len(trace) / min(ts) / 1e6}
            for label, ts in times.items()}
    print(f"# {trace.name}: {len(trace):,} requests, cache {capacity:,} items, oracle predictions, best of {args.repeats}")
    for label, r in rows.items():
        print(f"{label:<22} {r['mreq_per_s']:>6.2f} Mreq/s")
    update_entry(RESULTS, "laru_rules", {
        "benchmark": "LARU's settings side by side (native core, oracle predictions)",
        "trace": f"zipf:requests={args.requests},keys={args.keys},alpha={args.alpha},seed=0",
        "requests": len(trace), "capacity": capacity, "repeats": args.repeats, "runs": rows,
        "machine": machine_description()})
    print(f"wrote {RESULTS} (laru_rules)")


if __name__ == "__main__":
    main()
