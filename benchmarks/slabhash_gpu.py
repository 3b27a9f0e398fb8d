"""SlabHashCache on a GPU: find and insert throughput, and SLS on hits against embedding_bag.

    PYTHONPATH=$PWD python benchmarks/slabhash_gpu.py [--out benchmarks/results/slabhash_gpu.json]

1. HierarchicalKV's setup: random int64 keys, a table of 2^24 slots (its keys array alone,
   128 MB, is well beyond the 50 MB L2 of an H100), load factor 0.5 / 0.75 / 1.0, value
   dim 8 / 32 / 128, 1M keys per call, queried in random order:
   - probe:  the probe kernel alone (slot of each key), keys/s;
   - find:   cache.find (probe + the miss read-back) then cache.gather of the values
             into a [1M, dim] output, keys/s (HierarchicalKV's find also returns values);
   - insert: 1M new keys into the table at that load (at 1.0 every one evicts): find +
             commit with their rows, keys/s.
   For scale, HierarchicalKV publishes find at 2.47 B-KV/s (A100, dim 8, load 0.5).
2. lcr.sls when every row is cached vs embedding_bag on a resident table (target >= 0.9x),
   for each batch size of --batches (bags of 50 lookups, dim 128), interleaved rounds,
   median and spread.
Fails (exit 1) without a GPU, and raises when torch sees one that lcr._cuda does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SLOTS = 1 << 24
BATCH = 1 << 20


def timed(fn, repeat=10):
    import torch
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def random_keys(n, generator):
    import torch
    return torch.randint(0, 1 << 62, (n,), device="cuda", generator=generator)


def fill(cache, count, generator):
    """Insert ``count`` distinct random keys (in chunks of BATCH); return them."""
    import torch
    keys = random_keys(int(count * 1.02) + 16, generator).unique()
    keys = keys[torch.randperm(keys.numel(), device="cuda", generator=generator)][:count]
    for chunk in keys.split(BATCH):
        cache.commit(cache.find(chunk))
    return keys


def table_throughput(dims=(8, 32, 128), loads=(0.5, 0.75, 1.0)):
    import torch
    from lcr.embedding.cache import SlabHashCache
    generator = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for dim in dims:
        for load in loads:
            cache = SlabHashCache(SLOTS // 64, dim, policy="lru", device="cuda")
            fill(cache, int(load * SLOTS), generator)
            resident = cache.meta.keys[cache.meta.keys >= 0]
            query = resident[torch.randint(0, resident.numel(), (BATCH,), device="cuda",
                                           generator=generator)]
            slot_of = torch.empty_like(query)
            readback = torch.zeros(2 + 2 * BATCH, dtype=torch.int64, device="cuda")
            probe = timed(lambda: cache.engine.probe(cache._view, query, slot_of, readback))

            def find():
                return cache.gather(cache.find(query))
            found = timed(find)
            assert cache.find(query).missing_keys.numel() == 0
            new_keys = [random_keys(BATCH, generator) for _ in range(4)]
            new_rows = torch.randn(BATCH, dim, device="cuda", generator=generator)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for keys in new_keys:
                cache.commit(cache.find(keys), new_rows)
            torch.cuda.synchronize()
            insert = (time.perf_counter() - start) / len(new_keys)
            rows.append(dict(dim=dim, load_factor=round(resident.numel() / cache.capacity, 3),
                             slots=cache.capacity, keys_per_call=BATCH,
                             probe_keys_per_s=BATCH / probe, find_keys_per_s=BATCH / found,
                             insert_keys_per_s=BATCH / insert))
            print(json.dumps(rows[-1]), flush=True)
            del cache
            torch.cuda.empty_cache()
    return rows


def resident_cache(rows=1 << 20, dim=128):
    """A cache holding every row of a random [rows, dim] table at load 0.5, its store and
    the table on the GPU."""
    import torch
    import lcr
    table = torch.randn(rows, dim)
    store = lcr.HostStore(table)
    cache = lcr.SlabHashCache(rows // 64 * 2, dim, policy="lru", device="cuda")
    for chunk in torch.arange(rows).split(1 << 18):
        lcr.sls(cache, store, chunk.cuda(), torch.tensor([0], device="cuda"))
    return cache, store, table.cuda()


def sls_on_hits(resident, batch=2048, pooling=50, rounds=7, repeat=20):
    import torch
    import torch.nn.functional as F
    import lcr
    cache, store, weight = resident
    rows, dim = weight.shape
    indices = torch.randint(0, rows, (batch * pooling,), device="cuda")
    offsets = torch.arange(0, batch * pooling, pooling, device="cuda")
    assert cache.find(indices).missing_keys.numel() == 0
    torch.testing.assert_close(lcr.sls(cache, store, indices, offsets),
                               F.embedding_bag(indices, weight, offsets, mode="sum"))
    ours, theirs = [], []
    for _ in range(rounds):  # interleaved, so drift hits both alike
        ours.append(timed(lambda: lcr.sls(cache, store, indices, offsets), repeat))
        theirs.append(timed(lambda: F.embedding_bag(indices, weight, offsets, mode="sum"), repeat))
    ratios = [t / o for o, t in zip(ours, theirs)]
    return dict(batch=batch, pooling=pooling, dim=dim, rows=rows, rounds=rounds, repeat=repeat,
                sls_ms_median=1e3 * statistics.median(ours),
                sls_ms_range=[1e3 * min(ours), 1e3 * max(ours)],
                embedding_bag_ms_median=1e3 * statistics.median(theirs),
                embedding_bag_ms_range=[1e3 * min(theirs), 1e3 * max(theirs)],
                speed_vs_embedding_bag_median=statistics.median(ratios),
                speed_vs_embedding_bag_range=[min(ratios), max(ratios)])


def device_copy_gb_per_s():
    """Bytes read plus written per second by a 256 MB device-to-device copy."""
    import torch
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    return 2 * big.numel() / timed(lambda: big.clone(), repeat=10) / 1e9


def profile():
    """Where the time of one find (1M resident keys) and one SLS-on-hits batch goes."""
    import torch
    import lcr
    from torch.profiler import ProfilerActivity, profile as torch_profile
    from lcr.embedding.cache import SlabHashCache
    generator = torch.Generator(device="cuda").manual_seed(1)
    cache = SlabHashCache(SLOTS // 64, 8, policy="lru", device="cuda")
    keys = fill(cache, SLOTS // 2, generator)
    query = keys[torch.randint(0, keys.numel(), (BATCH,), device="cuda", generator=generator)]
    table = torch.randn(1 << 16, 128)
    small = lcr.SlabHashCache(2048, 128, device="cuda")
    store = lcr.HostStore(table)
    lcr.sls(small, store, torch.arange(1 << 16, device="cuda"), torch.tensor([0], device="cuda"))
    indices = torch.randint(0, 1 << 16, (102400,), device="cuda")
    offsets = torch.arange(0, 102400, 50, device="cuda")
    new_rows = torch.randn(BATCH, 8, device="cuda", generator=generator)

    def insert():  # 1M new keys into the half-full table: all miss, few evict
        cache.commit(cache.find(random_keys(BATCH, generator)), new_rows)
    for name, fn in (("find", lambda: cache.find(query)),
                     ("sls", lambda: lcr.sls(small, store, indices, offsets)),
                     ("insert", insert)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"== {name}")
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


def environment():
    import torch

    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown"
    return dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                driver=run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
                nvcc=run(["nvcc", "--version"]).splitlines()[-1:] or "unknown")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/slabhash_gpu.json")
    parser.add_argument("--skip-table", action="store_true", help="only SLS on hits")
    parser.add_argument("--batches", default="2048",
                        help="comma-separated SLS batch sizes (bags of 50 lookups each)")
    parser.add_argument("--profile", action="store_true", help="profile find and sls, then stop")
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        parser.error(f"--batches: expected comma-separated positive integers, got {args.batches!r}")
    from lcr.cuda import gpu_available
    if not gpu_available():  # raises when torch sees a GPU that lcr._cuda does not
        print("slabhash_gpu: no CUDA GPU here (or lcr was built without nvcc); nothing measured.")
        return 1
    if args.profile:
        profile()
        return 0
    result = dict(environment=environment())
    print(json.dumps(result["environment"]), flush=True)
    resident = resident_cache()
    result["sls_on_hits"] = [sls_on_hits(resident, batch=b) for b in batches]
    print(json.dumps(result["sls_on_hits"], indent=1), flush=True)
    result["device_copy_gb_per_s"] = device_copy_gb_per_s()
    if not args.skip_table:
        result["table"] = table_throughput()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
