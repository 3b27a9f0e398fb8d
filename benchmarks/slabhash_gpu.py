"""SlabHashCache on a GPU: find and insert throughput, and SLS on hits against embedding_bag.

    PYTHONPATH=$PWD python benchmarks/slabhash_gpu.py [--out F.json]

Writes benchmarks/results/slabhash_gpu_<device>.json by default (<device>: ``device_label``,
e.g. h100, h200), one file per device: a re-run overwrites it.

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
3. The fused SLS (lcr.embedding.fused, issue 37) against embedding_bag on a resident table,
   same run, same batches: on all-hit batches (targets >= 0.9x at 2,048 bags, >= 1.0x at
   65,536), timed both through its entry ``fused_sls`` (arguments read and checked every
   call) and through ``fused_pool`` (the kernels, arguments read once); and with
   --miss-rate of the lookups (default 1%) missing to the pinned host table, each miss a
   row never seen before (target >= 0.6x), with the bytes read from host memory and the
   time they take at the measured host-to-device bandwidth.
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


def interleaved(ours: dict, baseline, rounds: int, repeat: int) -> dict:
    """Time each of ``ours`` (name -> call) and ``baseline`` in interleaved rounds, so drift
    hits all alike; per name: median ms, range and the speed relative to the baseline."""
    times = {name: [] for name in (*ours, "embedding_bag")}
    for _ in range(rounds):
        for name, fn in ours.items():
            times[name].append(timed(fn, repeat))
        times["embedding_bag"].append(timed(baseline, repeat))
    out = {}
    for name, spans in times.items():
        ratios = [b / o for o, b in zip(spans, times["embedding_bag"])]
        out[name] = dict(ms_median=1e3 * statistics.median(spans),
                         ms_range=[1e3 * min(spans), 1e3 * max(spans)],
                         speed_vs_embedding_bag_median=statistics.median(ratios),
                         speed_vs_embedding_bag_range=[min(ratios), max(ratios)])
    return out


def fused_on_hits(resident, batch=2048, pooling=50, rounds=7, repeat=20):
    """The fused SLS on an all-hit batch against embedding_bag on the resident table."""
    import torch
    import torch.nn.functional as F
    from lcr.embedding import fused
    from lcr.embedding.sls import read_bags
    cache, store, weight = resident
    rows, dim = weight.shape
    indices = torch.randint(0, rows, (batch * pooling,), device="cuda")
    offsets = torch.arange(0, batch * pooling, pooling, device="cuda")
    bags = read_bags(indices, offsets, rows=store.rows, dtype=cache.dtype, device=cache.device)
    bags.check()
    misses = cache.misses
    torch.testing.assert_close(fused.fused_sls(cache, store, indices, offsets),
                               F.embedding_bag(indices, weight, offsets, mode="sum"))
    assert cache.misses == misses, "the resident cache missed"
    timings = interleaved({"fused_sls": lambda: fused.fused_sls(cache, store, indices, offsets),
                           "fused_pool": lambda: fused.fused_pool(cache, store, bags)},
                          lambda: F.embedding_bag(indices, weight, offsets, mode="sum"), rounds, repeat)
    return dict(batch=batch, pooling=pooling, dim=dim, rows=rows, rounds=rounds, repeat=repeat, **timings)


def host_to_device_gb_per_s():
    """Bytes per second of a 256 MB copy from pinned host memory to the GPU."""
    import torch
    host = torch.empty(1 << 28, dtype=torch.uint8).pin_memory()
    device = torch.empty_like(host, device="cuda")
    return host.numel() / timed(lambda: device.copy_(host, non_blocking=True), repeat=5) / 1e9


def fused_with_misses(batches, miss_rate, resident_rows=1 << 20, dim=128, pooling=50, rounds=5,
                      repeat=5):
    """The fused SLS with ``miss_rate`` of each batch's lookups on rows never seen before
    (read from the pinned host table, then inserted) against embedding_bag on the whole
    table resident on the GPU. The cache has room for every row inserted (load <= ~0.55),
    so the misses are exactly the fresh rows."""
    import torch
    import torch.nn.functional as F
    import lcr
    from lcr.embedding import fused
    per_batch = {b: max(1, round(miss_rate * b * pooling)) for b in batches}
    calls = 1 + rounds * (repeat + 1)  # the checked call, then each round's warm-up and repeats
    fresh_rows = sum(calls * k for k in per_batch.values())
    table = torch.randn(resident_rows + fresh_rows, dim)
    store = lcr.HostStore(table)  # pinned
    weight = table.cuda()
    cache = lcr.SlabHashCache(resident_rows // 64 * 4, dim, policy="lru", device="cuda")
    for chunk in torch.arange(resident_rows, device="cuda").split(1 << 18):
        fused.fused_sls(cache, store, chunk, torch.arange(0, chunk.numel(), 64, device="cuda"))
    next_fresh = resident_rows
    bandwidth = host_to_device_gb_per_s()
    results = []
    for batch in batches:
        n, k = batch * pooling, per_batch[batch]
        offsets = torch.arange(0, n, pooling, device="cuda")
        base = torch.randint(0, resident_rows, (n,), device="cuda")
        spots = torch.randperm(n, device="cuda")[:k]

        def next_batch():
            nonlocal next_fresh
            indices = base.clone()
            indices[spots] = torch.arange(next_fresh, next_fresh + k, device="cuda")
            next_fresh += k
            return indices
        supply = [next_batch() for _ in range(calls)]
        misses = cache.misses
        first = supply.pop()
        torch.testing.assert_close(fused.fused_sls(cache, store, first, offsets),
                                   F.embedding_bag(first, weight, offsets, mode="sum"))
        assert cache.misses - misses == k, "the batch did not miss exactly its fresh rows"
        timings = interleaved({"fused_sls": lambda: fused.fused_sls(cache, store, supply.pop(), offsets)},
                              lambda: F.embedding_bag(base, weight, offsets, mode="sum"), rounds, repeat)
        row_bytes = dim * 4
        host_bytes = k * row_bytes  # a missed row is read once: its insert copies the staged row
        results.append(dict(batch=batch, pooling=pooling, dim=dim, miss_rate=miss_rate,
                            misses_per_batch=k, rounds=rounds, repeat=repeat,
                            host_bytes_per_batch=host_bytes,
                            host_to_device_gb_per_s=bandwidth,
                            host_read_ms_at_that_bandwidth=1e3 * host_bytes / (bandwidth * 1e9),
                            **timings))
        print(json.dumps(results[-1]), flush=True)
    return results


def device_copy_gb_per_s():
    """Bytes read plus written per second by a 256 MB device-to-device copy."""
    import torch
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    return 2 * big.numel() / timed(lambda: big.clone(), repeat=10) / 1e9


def profile():
    """Where the time of one find (1M resident keys) and of SLS on all-hit batches (the
    fused path, 2,048 and 65,536 bags of 50) goes, host and device."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile
    from lcr.embedding import fused
    from lcr.embedding.cache import SlabHashCache
    generator = torch.Generator(device="cuda").manual_seed(1)
    cache = SlabHashCache(SLOTS // 64, 8, policy="lru", device="cuda")
    keys = fill(cache, SLOTS // 2, generator)
    query = keys[torch.randint(0, keys.numel(), (BATCH,), device="cuda", generator=generator)]
    resident, store, weight = resident_cache()
    new_rows = torch.randn(BATCH, 8, device="cuda", generator=generator)

    def insert():  # 1M new keys into the half-full table: all miss, few evict
        cache.commit(cache.find(random_keys(BATCH, generator)), new_rows)

    def hits(bags):
        indices = torch.randint(0, weight.shape[0], (bags * 50,), device="cuda")
        offsets = torch.arange(0, bags * 50, 50, device="cuda")
        return lambda: fused.fused_sls(resident, store, indices, offsets)
    for name, fn in (("find", lambda: cache.find(query)), ("insert", insert),
                     ("fused sls, 2048 bags on hits", hits(2048)),
                     ("fused sls, 65536 bags on hits", hits(65536))):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"== {name} (5 calls)")
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30))
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))


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


def device_label() -> str:
    """The GPU's model in lower case, as results files name it: "NVIDIA H100 80GB HBM3" -> h100."""
    import re

    import torch
    name = torch.cuda.get_device_name()
    model = re.search(r"\b[A-Z]+\d{2,4}[A-Z]*\b", name)
    return (model.group(0) if model else re.sub(r"\W+", "_", name)).lower()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: benchmarks/results/slabhash_gpu_<device>.json")
    parser.add_argument("--device-label", action="store_true",
                        help="print the device's name as results files use it, then stop")
    parser.add_argument("--skip-table", action="store_true", help="only SLS on hits")
    parser.add_argument("--batches", default="2048",
                        help="comma-separated SLS batch sizes (bags of 50 lookups each)")
    parser.add_argument("--profile", action="store_true",
                        help="profile find, insert and the fused SLS on hits, then stop")
    parser.add_argument("--skip-fused", action="store_true", help="leave out the fused SLS")
    parser.add_argument("--miss-rate", default="0.01",
                        help="fraction of the fused SLS's lookups missing to the host table")
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        parser.error(f"--batches: expected comma-separated positive integers, got {args.batches!r}")
    try:
        miss_rate = float(args.miss_rate)
    except ValueError:
        miss_rate = -1.0
    if not 0 < miss_rate < 1:
        parser.error(f"--miss-rate: expected a fraction between 0 and 1, got {args.miss_rate!r}")
    from lcr.cuda import gpu_available
    if not gpu_available():  # raises when torch sees a GPU that lcr._cuda does not
        print("slabhash_gpu: no CUDA GPU here (or lcr was built without nvcc); nothing measured.")
        return 1
    if args.device_label:
        print(device_label())
        return 0
    if args.profile:
        profile()
        return 0
    import torch
    result = dict(environment=environment())
    print(json.dumps(result["environment"]), flush=True)
    resident = resident_cache()
    result["sls_on_hits"] = [sls_on_hits(resident, batch=b) for b in batches]
    print(json.dumps(result["sls_on_hits"], indent=1), flush=True)
    if not args.skip_fused:
        result["fused_on_hits"] = [fused_on_hits(resident, batch=b) for b in batches]
        print(json.dumps(result["fused_on_hits"], indent=1), flush=True)
        del resident
        torch.cuda.empty_cache()
        result["fused_with_misses"] = fused_with_misses(batches, miss_rate)
    result["device_copy_gb_per_s"] = device_copy_gb_per_s()
    if not args.skip_table:
        result["table"] = table_throughput()
    out = args.out or f"benchmarks/results/slabhash_gpu_{device_label()}.json"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
