"""SlabHashCache's batch contract under misuse and faults: stale plans are refused, a
commit that cannot allocate changes nothing, and threads / CUDA streams sharing one cache
get the sums of the full table."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F

from lcr import SlabHashCache
from lcr.cuda import gpu_available
from lcr.embedding.cache import StalePlan
from lcr.embedding.stores import HostStore
from lcr.embedding.sls import sls


def _state(cache: SlabHashCache) -> tuple:
    meta = cache.meta
    return (meta.keys.clone(), meta.stamps.clone(), meta.tags.clone(), cache.values.clone(),
            cache.clock, cache.hits, cache.misses)


def _same(a: tuple, b: tuple) -> bool:
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_a_plan_found_before_another_commit_is_refused_and_changes_nothing():
    cache = SlabHashCache(2, 4, policy="lru")
    table = torch.arange(400, dtype=torch.float32).reshape(100, 4)
    first, second = cache.find(torch.tensor([1, 2, 3])), cache.find(torch.tensor([3, 4]))
    cache.commit(first, table[first.missing_keys])
    before = _state(cache)
    with pytest.raises(ValueError, match="stale plan"):
        cache.commit(second, table[second.missing_keys])
    assert _same(before, _state(cache))
    again = cache.find(torch.tensor([3, 4]))  # found afresh it commits
    cache.commit(again, table[again.missing_keys])
    assert cache.cached_keys() == {1, 2, 3, 4}


def test_a_plan_is_committed_once():
    cache = SlabHashCache(1, 2)
    plan = cache.find(torch.tensor([7, 8]))
    cache.commit(plan, torch.ones(2, 2))
    before = _state(cache)
    with pytest.raises(StalePlan):
        cache.commit(plan, torch.ones(2, 2))
    assert _same(before, _state(cache))


def test_a_plan_of_another_cache_is_refused():
    a, b = SlabHashCache(1, 2), SlabHashCache(1, 2)
    plan = a.find(torch.tensor([1]))
    with pytest.raises(StalePlan, match="another cache"):
        b.commit(plan, torch.ones(1, 2))
    assert b.cached_keys() == set()


# Run in a child: the address-space limit makes the commit's scratch allocation fail for
# real (torch's allocator raises), and must not touch the test process.
_OUT_OF_MEMORY = textwrap.dedent("""
    import resource, sys, torch
    from lcr import SlabHashCache
    dim = 1 << 18                                   # 1 MiB rows: 64 slots = 64 MiB of values
    cache = SlabHashCache(1, dim)
    keys = torch.arange(32)
    rows = torch.full((32, dim), 2.0)
    plan = cache.find(keys)
    before = (cache.meta.keys.clone(), cache.meta.stamps.clone(), cache.clock)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (40 << 20), hard))  # scratch needs 96 MiB
    try:
        cache.commit(plan, rows)
        sys.exit("the commit allocated 96 MiB under a 40 MiB allowance")
    except RuntimeError as err:
        assert "memory" in str(err).lower(), err
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    after = (cache.meta.keys, cache.meta.stamps, cache.clock)
    assert torch.equal(before[0], after[0]), "keys were inserted before the rows could be stored"
    assert torch.equal(before[1], after[1]) and before[2] == after[2]
    assert cache.cached_keys() == set() and cache.misses == 0
    cache.commit(plan, rows)                         # the same plan, once memory allows
    assert cache.cached_keys() == set(range(32))
    assert torch.equal(cache.gather(cache.find(keys)), rows)
    print("ok")
""")


def test_a_commit_that_runs_out_of_memory_leaves_the_cache_as_it_was():
    done = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _hammer(cache, table, batches: int, seed: int, errors: list, stream=None, mode="sum"):
    generator = torch.Generator().manual_seed(seed)
    store = HostStore(table)
    try:
        for _ in range(batches):
            indices = torch.randint(0, table.shape[0], (40,), generator=generator)
            lengths = torch.tensor([10, 0, 20, 10])
            offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
            device_table = table.to(cache.device)
            with torch.cuda.stream(stream) if stream is not None else _nothing():
                got = sls(cache, store, indices.to(cache.device), offsets.to(cache.device), mode=mode)
                want = F.embedding_bag(indices.to(cache.device), device_table,
                                       offsets.to(cache.device), mode=mode)
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-4):
                    errors.append("a sum differs from embedding_bag on the full table")
                    return
    except Exception as err:  # noqa: BLE001 - reported to the main thread
        errors.append(repr(err))


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_threads_sharing_one_cache_get_the_full_tables_sums():
    table = torch.randn(500, 8)
    cache = SlabHashCache(2, 8, policy="lru")  # 128 slots: most batches miss and evict
    errors: list = []
    threads = [threading.Thread(target=_hammer, args=(cache, table, 150, seed, errors))
               for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("mode", ["sum", "mean"])  # the fused path; find/commit
def test_two_streams_and_two_threads_hammering_one_cuda_cache_get_the_full_tables_sums(mode):
    table = torch.randn(5000, 32)
    cache = SlabHashCache(8, 32, policy="lru", device="cuda")  # 512 slots: constant eviction
    errors: list = []
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    threads = [threading.Thread(target=_hammer, args=(cache, table, 5000, seed, errors, stream, mode))
               for seed, stream in enumerate(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.synchronize()
    assert errors == []
