"""Miss counts of lcr's heuristics next to libCacheSim 0.3.5's on every shared trace.

    python benchmarks/libcachesim_parity.py [--fractions 0.01,0.05,0.1] [--policies arc,lirs,...]

For each trace (cloudPhysics, web07, LIRS multi2/sprite/2_pools, Criteo 999, MovieLens-100K,
Mooncake blocks, Switch MoE experts) and cache size (a fraction of the distinct keys), lcr's
native core replays the trace (it equals the Python spec decision by decision, see
tests/test_native_engine.py) and libCacheSim replays the same keys, unit sizes, from an
oracleGeneral file through its C reader. Prints one markdown row per trace x size with
both miss counts and the difference; writes benchmarks/results/libcachesim_parity.json.
Exit status 1 if any cell differs where the definitions agree (k >= 100: see
docs/policies.md for the small caches where the definitions differ).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lcr.sim.native import native_replay
from lcr.traces import Trace, load_trace

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "libcachesim_parity.json"
TRACES = {
    "cloudPhysics": "classic/cloudPhysicsIO.oracleGeneral.bin",
    "web07": "classic/cache2k_web07.trace.xz",
    "multi2": "classic/lirs/multi2.trace.gz",
    "sprite": "classic/lirs/sprite.trace.gz",
    "2_pools": "classic/lirs/2_pools.trace.gz",
    "criteo999": "embedding/criteo_kaggle_first999.tsv",
    "ml-100k": "recsys/ml-100k.inter",
    "mooncake": "kv/mooncake_conversation_trace.jsonl",
    "switch_moe": "moe/router-trace.v2.json",
}
LIBCACHESIM = {"arc": "ARC", "lirs": "LIRS", "s3fifo": "S3FIFO", "wtinylfu": "WTinyLFU", "lfu": "LFU",
               "lru": "LRU", "sieve": "Sieve"}
#: Below these sizes the definitions differ (docs/policies.md): libCacheSim's S3FIFO and
#: W-TinyLFU admit nothing (a zero-slot queue), its LIRS can hold more than k keys.
AGREE_FROM = {"s3fifo": 20, "wtinylfu": 100, "lirs": 200}


def movielens(path: Path) -> Trace:
    """MovieLens ratings replayed by timestamp (stable), the item id as the key."""
    rows = np.loadtxt(path, dtype=np.int64, skiprows=1, usecols=(1, 3))
    order = np.argsort(rows[:, 1], kind="stable")
    return Trace(rows[order, 0], name="ml-100k")


def load(name: str) -> Trace | None:
    path = DATA / TRACES[name]
    if not path.exists():
        return None
    return movielens(path) if name == "ml-100k" else load_trace(str(path))


def write_oracle_general(trace: Trace, path: Path) -> None:
    """oracleGeneral records <u32 time, u64 id, u32 size, i64 next>; next = 0, so that no
    policy sees the future (libCacheSim's SLRU skips promoting a key never used again)."""
    record = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")], align=False)
    rows = np.zeros(len(trace), dtype=record)
    rows["time"] = np.arange(len(trace), dtype=np.uint32)
    rows["id"] = trace.keys.view(np.uint64)
    rows["size"] = 1
    rows.tofile(path)


def libcachesim_misses(policy: str, path: Path, capacity: int, requests: int) -> tuple[int, float]:
    import libcachesim as lcs

    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, LIBCACHESIM[policy])(capacity)
    start = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    return round(miss_ratio * requests), time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fractions", default="0.01,0.05,0.1")
    ap.add_argument("--policies", default="arc,lirs,s3fifo,wtinylfu,lfu")
    ap.add_argument("--traces", default=",".join(TRACES))
    args = ap.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    policies = args.policies.split(",")
    cells, bad = [], 0
    print("| trace | requests | k | policy | lcr misses | libCacheSim misses | diff | lcr s | libCacheSim s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.traces.split(","):
            trace = load(name)
            if trace is None:
                print(f"| {name} | absent | | | | | | | |")
                continue
            path = Path(tmp) / f"{name}.oracleGeneral.bin"
            write_oracle_general(trace, path)
            for fraction in fractions:
                capacity = max(1, int(fraction * trace.distinct_keys))
                for policy in policies:
                    run = native_replay(trace, policy, capacity)
                    theirs, their_s = libcachesim_misses(policy, path, capacity, len(trace))
                    diff = run.misses - theirs
                    agree = capacity >= AGREE_FROM.get(policy, 1)
                    bad += bool(diff) and agree
                    cells.append(dict(trace=name, requests=len(trace), capacity=capacity, policy=policy,
                                      lcr_misses=run.misses, libcachesim_misses=theirs, diff=diff,
                                      lcr_s=run.seconds, libcachesim_s=their_s, definitions_agree=agree))
                    note = "" if agree else " (k below libCacheSim's minimum)"
                    print(f"| {name} | {len(trace):,} | {capacity:,} | {policy} | {run.misses:,} | {theirs:,} | "
                          f"{diff:+,}{note} | {run.seconds:.3f} | {their_s:.3f} |", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"cells": cells, "mismatches": bad}, indent=1))
    print(f"\n{bad} mismatching cell(s) where the definitions agree, of {len(cells)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
