"""LRU, OPT, SIEVE, CLOCK and the heuristics (ARC, LIRS, S3-FIFO, W-TinyLFU, LFU) make exactly as many
misses as libCacheSim's on the same requests."""
from __future__ import annotations

import numpy as np
import pytest

from lcr.sim import PolicySpec, run_one
from lcr.traces import NEVER, Trace, generate, load_trace

from conftest import data_file, real_trace

lcs = pytest.importorskip("libcachesim")

LIBCACHESIM = {"lru": "LRU", "opt": "Belady", "sieve": "Sieve", "clock": "Clock"}


def libcachesim_misses(trace: Trace, name: str, capacity: int) -> int:
    cache = getattr(lcs, LIBCACHESIM[name])(cache_size=capacity)
    request = lcs.Request()
    request.obj_size = 1
    misses = 0
    for t, (key, nxt) in enumerate(zip(trace.keys.tolist(), trace.next_use.tolist())):
        request.obj_id = key
        request.clock_time = t
        # libCacheSim counts virtual time from 1 and wants INT64_MAX for "never".
        request.next_access_vtime = nxt if nxt == NEVER else nxt + 1
        misses += not cache.get(request)
    return misses


def sources():
    yield "zipf", lambda: generate("zipf:requests=20000,keys=3000,alpha=0.9,seed=11")
    yield "loop", lambda: generate("loop:requests=5000,keys=300")
    for name in ("cloudphysics", "web07", "multi2"):
        yield name, lambda name=name: real_trace(name)


@pytest.mark.parametrize("name", sorted(LIBCACHESIM))
@pytest.mark.parametrize("source", [s for s, _ in sources()])
def test_miss_counts_match_libcachesim(name, source):
    trace = dict(sources())[source]()
    if len(trace) > 20_000:
        trace = trace.head(20_000)
    for capacity in (1, 10, 100, 1000):
        ours = run_one(trace, PolicySpec(name), capacity).misses
        assert ours == libcachesim_misses(trace, name, capacity), (name, capacity)


def test_mooncake_blocks_match_too():
    trace = real_trace("mooncake")
    assert run_one(trace, PolicySpec("opt"), 500).misses == libcachesim_misses(trace, "opt", 500)
    assert np.all(trace.keys >= 0)


# --- the heuristics a user would pick instead (issue 11) -----------------------------------

HEURISTICS = {"arc": "ARC", "lirs": "LIRS", "s3fifo": "S3FIFO", "wtinylfu": "WTinyLFU", "lfu": "LFU"}
# Below these sizes the definitions differ (docs/policies.md): libCacheSim's S3FIFO and
# W-TinyLFU admit nothing (its S3FIFO even exits the process below k = 10, so no test builds
# one there) and its LIRS can hold more than k keys.
AGREE_FROM = {"s3fifo": 20, "wtinylfu": 100, "lirs": 200}
HEURISTIC_SOURCES = {
    "zipf": lambda: generate("zipf:requests=20000,keys=3000,alpha=0.9,seed=11"),
    "scan": lambda: generate("loop:requests=6000,keys=400"),
    **{name: lambda name=name: real_trace(name)
       for name in ("cloudphysics", "web07", "multi2", "criteo", "mooncake", "switch_moe")},
    **{name: lambda name=name: load_trace(str(data_file(f"classic/lirs/{name}.trace.gz")), limit=20_000)
       for name in ("sprite", "2_pools")},
}


def heuristic_misses(trace: Trace, name: str, capacity: int) -> int:
    """libCacheSim's misses with no next-access times (its SLRU reads them: W-TinyLFU)."""
    # 2^16 hash buckets: the default 2^24 costs more to allocate than these slices to replay.
    cache = getattr(lcs, HEURISTICS[name])(cache_size=capacity, hashpower=16)
    request = lcs.Request()
    request.obj_size = 1
    misses = 0
    for key in trace.keys.tolist():
        request.obj_id = key
        misses += not cache.get(request)
    return misses


@pytest.mark.parametrize("source", sorted(HEURISTIC_SOURCES))
def test_heuristics_match_libcachesim(source):
    trace = HEURISTIC_SOURCES[source]().head(20_000)
    for name in sorted(HEURISTICS):
        for capacity in (1, 20, 100, 200, 1000):
            if capacity < AGREE_FROM.get(name, 1) or capacity >= trace.distinct_keys:
                continue
            ours = run_one(trace, PolicySpec(name), capacity, engine="native").misses
            assert ours == heuristic_misses(trace, name, capacity), (name, capacity)


@pytest.mark.parametrize("name", sorted(HEURISTICS))
def test_heuristic_specs_match_libcachesim(name):
    # The Python spec itself (the native core equals it: test_native_engine.py).
    for trace in (generate("zipf:requests=6000,keys=1500,alpha=0.8,seed=3"), real_trace("web07").head(6000)):
        for capacity in (200, 400):
            ours = run_one(trace, PolicySpec(name), capacity, engine="python").misses
            assert ours == heuristic_misses(trace, name, capacity), (name, capacity, trace.name)


def test_small_caches_where_libcachesim_admits_nothing():
    # The documented difference: libCacheSim's W-TinyLFU below k = 100 and S3FIFO below
    # k = 20 cache nothing; lcr's give the window / small queue one slot.
    trace = generate("zipf:requests=5000,keys=300,alpha=1.0,seed=2")
    assert heuristic_misses(trace, "wtinylfu", 50) == len(trace)
    assert heuristic_misses(trace, "s3fifo", 15) == len(trace)
    # ... while lcr's make fewer misses than LRU of the same size (1,654 vs 2,077; 2,533 vs 3,187).
    for name, capacity in (("wtinylfu", 50), ("s3fifo", 15)):
        for engine in ("python", "native"):
            ours = run_one(trace, PolicySpec(name), capacity, engine=engine).misses
            assert ours < run_one(trace, PolicySpec("lru"), capacity).misses, (name, engine)
