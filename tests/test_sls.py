"""lcr.sls equals embedding_bag(mode="sum") on the full table, whatever the cache does."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import lcr  # noqa: E402
from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding.predictions import TracePredictor  # noqa: E402
from lcr.embedding.stores import StoreError  # noqa: E402
from lcr.predict.experimental import oracle_predictions  # noqa: E402
from lcr.traces import Trace  # noqa: E402

ROWS, DIM = 5000, 16
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=1e-2, atol=2e-2)}


def zipf_bags(rng, batch, pooling, rows=ROWS, alpha=1.05):
    lengths = rng.integers(0, 2 * pooling, size=batch)
    ranks = np.minimum(rng.zipf(alpha, size=int(lengths.sum())), rows) - 1
    hot_first = np.random.default_rng(rows).permutation(rows)  # the same popularity every batch
    return torch.as_tensor(hot_first[ranks]), torch.as_tensor(lengths)


def reference(table, indices, lengths):
    offsets = torch.cumsum(lengths, 0) - lengths
    return F.embedding_bag(indices, table.float(), offsets, mode="sum")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("policy", ["lru", "laru"])
def test_sls_equals_embedding_bag_over_many_batches(dtype, policy):
    rng = np.random.default_rng(0)
    table = torch.randn(ROWS, DIM, generator=torch.Generator().manual_seed(0)).to(dtype)
    store = lcr.HostStore(table)
    # 2 slabsets (128 slots) for 5000 rows: constant eviction, and bypass on big batches.
    cache = lcr.SlabHashCache(2, DIM, dtype=dtype, policy=policy, device="cpu")
    for _ in range(12):
        indices, lengths = zipf_bags(rng, batch=int(rng.integers(1, 96)), pooling=20)
        got = lcr.sls(cache, store, indices, lengths=lengths)
        assert got.dtype == dtype and got.shape == (lengths.numel(), DIM)
        torch.testing.assert_close(got.float(), reference(table, indices, lengths),
                                   **TOLERANCE[dtype])
    assert cache.hits > 0 and cache.misses > 0 and cache.bypassed > 0


def test_offsets_and_lengths_forms_agree_and_empty_bags_are_zero():
    table = torch.randn(100, 4)
    cache, store = lcr.SlabHashCache(2, 4), lcr.HostStore(table)
    indices = torch.tensor([3, 7, 7, 50, 99])
    lengths = torch.tensor([2, 0, 3])
    by_lengths = lcr.sls(cache, store, indices, lengths=lengths)
    by_offsets = lcr.sls(cache, store, indices, torch.tensor([0, 2, 2]))
    by_last = lcr.sls(cache, store, indices, torch.tensor([0, 2, 2, 5]), include_last_offset=True)
    torch.testing.assert_close(by_lengths, reference(table, indices, lengths))
    torch.testing.assert_close(by_offsets, by_lengths)
    torch.testing.assert_close(by_last, by_lengths)
    assert torch.all(by_lengths[1] == 0)
    with pytest.raises(ValueError, match="exactly one"):
        lcr.sls(cache, store, indices)


def test_cached_rows_are_the_store_rows():
    table = torch.randn(300, 8)
    cache, store = lcr.SlabHashCache(2, 8, policy="fpb"), lcr.HostStore(table)
    lcr.sls(cache, store, torch.arange(300), lengths=torch.full((30,), 10))
    keys = cache.meta.keys
    cached = keys >= 0
    assert int(cached.sum()) == 128
    assert torch.equal(cache.values[cached], table[keys[cached]])


class FailingStore:
    def __init__(self, inner):
        self.inner = inner
        self.fail = False

    def fetch(self, keys):
        if self.fail:
            raise StoreError("backend went away")
        return self.inner.fetch(keys)


def test_a_store_failure_leaves_the_cache_untouched():
    table = torch.randn(1000, 4)
    store = FailingStore(lcr.HostStore(table))
    cache = lcr.SlabHashCache(2, 4, policy="laru")
    lcr.sls(cache, store, torch.arange(200), lengths=torch.full((20,), 10))
    before = {name: getattr(cache.meta, name).clone() for name in vars(cache.meta)}
    values, clock = cache.values.clone(), cache.clock
    store.fail = True
    with pytest.raises(StoreError):
        lcr.sls(cache, store, torch.arange(150, 400), lengths=torch.full((25,), 10))
    for name, tensor in before.items():
        assert torch.equal(getattr(cache.meta, name), tensor), name
    assert torch.equal(cache.values, values) and cache.clock == clock
    store.fail = False
    indices = torch.arange(150, 400)
    lengths = torch.full((25,), 10)
    torch.testing.assert_close(lcr.sls(cache, store, indices, lengths=lengths),
                               reference(table, indices, lengths))


def test_oracle_predictions_reach_the_cache_after_each_batch():
    rng = np.random.default_rng(1)
    batches = [zipf_bags(rng, batch=16, pooling=10, rows=2000) for _ in range(30)]
    flat = np.concatenate([b[0].numpy() for b in batches])
    oracle = oracle_predictions(Trace(flat))
    table = torch.randn(2000, 4)
    results = {}
    for policy in ("lru", "fpb"):
        predictor = TracePredictor(oracle, rows=2000)
        cache, store = lcr.SlabHashCache(2, 4, policy=policy), lcr.HostStore(table)
        position, predicted = 0, 0
        for indices, lengths in batches:
            predictor.observe_batch(indices.numpy(), position)
            lcr.sls(cache, store, indices, lengths=lengths, predictor=predictor, now=position)
            position += indices.numel()
            predicted += int(torch.isfinite(cache.meta.predictions).sum())
        results[policy] = cache.hit_ratio
        assert predicted > 0
    assert results["fpb"] > results["lru"]  # the oracle beats recency on a Zipf stream


def test_importing_lcr_does_not_import_torch():
    code = "import sys, lcr; assert 'torch' not in sys.modules; lcr.__version__"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sls_on_cuda_equals_embedding_bag(dtype):
    rng = np.random.default_rng(2)
    table = torch.randn(ROWS, DIM).to(dtype)
    store = lcr.HostStore(table)
    cache = lcr.SlabHashCache(8, DIM, dtype=dtype, policy="laru", device="cuda")
    for _ in range(10):
        indices, lengths = zipf_bags(rng, batch=int(rng.integers(1, 64)), pooling=20)
        got = lcr.sls(cache, store, indices.cuda(), lengths=lengths.cuda())
        assert got.is_cuda
        torch.testing.assert_close(got.float().cpu(), reference(table, indices, lengths),
                                   **TOLERANCE[dtype])


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")
def test_sls_on_cuda_with_a_predictor_matches_the_cpu_engine():
    rng = np.random.default_rng(3)
    batches = [zipf_bags(rng, batch=32, pooling=10, rows=3000) for _ in range(25)]
    oracle = oracle_predictions(Trace(np.concatenate([b[0].numpy() for b in batches])))
    table = torch.randn(3000, 8)
    caches = {d: lcr.SlabHashCache(3, 8, policy="laru", device=d) for d in ("cpu", "cuda")}
    for device, cache in caches.items():
        predictor, store, position = TracePredictor(oracle, rows=3000), lcr.HostStore(table), 0
        for indices, lengths in batches:
            predictor.observe_batch(indices.numpy(), position)
            got = lcr.sls(cache, store, indices, lengths=lengths, predictor=predictor, now=position)
            torch.testing.assert_close(got.cpu(), reference(table, indices, lengths))
            position += indices.numel()
    for name in ("keys", "stamps", "predictions", "lambda_shift", "record"):
        assert torch.equal(getattr(caches["cpu"].meta, name), getattr(caches["cuda"].meta, name).cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")
def test_an_all_hit_cuda_batch_synchronises_once_on_the_two_step_path():
    """Mean pooling takes find/commit (sum from a HostStore is fused: no sync at all,
    tests/test_slab_fused.py)."""
    table = torch.randn(4096, 16)
    cache, store = lcr.SlabHashCache(128, 16, device="cuda"), lcr.HostStore(table)
    indices = torch.randint(0, 4096, (20_000,), device="cuda")
    offsets = torch.arange(0, 20_000, 20, device="cuda")
    lcr.sls(cache, store, torch.arange(4096, device="cuda"), torch.tensor([0], device="cuda"))
    torch.cuda.synchronize()
    before = cache.readbacks
    torch.cuda.set_sync_debug_mode("error")  # any other synchronising call raises
    try:
        out = lcr.sls(cache, store, indices, offsets, mode="mean")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert cache.readbacks - before == 1
    torch.testing.assert_close(out, F.embedding_bag(indices, table.cuda(), offsets, mode="mean"))
