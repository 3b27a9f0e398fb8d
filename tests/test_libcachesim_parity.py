"""LRU, OPT and SIEVE make exactly as many misses as libCacheSim's on the same requests."""
from __future__ import annotations

import numpy as np
import pytest

from lcr.sim import PolicySpec, run_one
from lcr.traces import NEVER, Trace, generate

from conftest import real_trace

lcs = pytest.importorskip("libcachesim")

LIBCACHESIM = {"lru": "LRU", "opt": "Belady", "sieve": "Sieve"}


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
