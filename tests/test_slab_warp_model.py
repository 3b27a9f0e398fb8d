"""The CUDA engine's kernels, run on the host warp model, against the CPU engine and the
Python reference, slot by slot (csrc/common/slab_kernels.h, csrc/cpu/warp_model.h).

The model runs 32 cooperative lanes per warp in random order, resuming one lane at a
time; collectives are meeting points that abort on divergence or a partial mask. So
this is the GPU's decision logic, checked in CI without a GPU.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import lcr  # noqa: E402
from lcr import _native  # noqa: E402
from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding.cache import SlabHashCache  # noqa: E402
from lcr.embedding.hashing import slabset_of, tag_of  # noqa: E402
from lcr.embedding.reference import SlabsetReference  # noqa: E402
from lcr.embedding.slab_policies import SLAB_POLICIES  # noqa: E402

from test_slabhash_cache import (keys_in_slabset, next_batch_times, noisy,  # noqa: E402
                                 slot_counts, spec_counts, zipf_batches)

META = ("keys", "tags", "stamps", "predictions", "old", "lambda_shift", "old_count", "record")
BIG = 1 << 40  # keys >= 2^31: the high bits must survive every path


def test_the_model_aborts_on_divergent_collectives_and_partial_masks():
    _native.warp_model.selftest("ok")
    with pytest.raises(RuntimeError, match="divergent collectives"):
        _native.warp_model.selftest("divergent")
    with pytest.raises(RuntimeError, match="partial mask"):
        _native.warp_model.selftest("partial")


def three_way(policy, num_slabsets, batches, seed, noise=0.3):
    """CPU engine, warp-model engine and reference on the same batches: every decision
    and, after every batch, every metadata array must agree."""
    _native.warp_model.set_seed(seed)
    reference = SlabsetReference(num_slabsets, policy)
    cpu = SlabHashCache(num_slabsets, dim=2, policy=policy)
    model = SlabHashCache(num_slabsets, dim=2, policy=policy, engine="warp-model")
    rng = np.random.default_rng(seed)
    for batch, times in zip(batches, next_batch_times(batches)):
        expected = reference.access(batch)
        a, b = cpu.access(batch), model.access(batch)
        assert a.keys.tolist() == expected.keys
        assert a.outcome.tolist() == expected.outcome
        assert a.evicted.tolist() == expected.evicted
        for field in ("keys", "slots", "evicted", "outcome"):
            assert getattr(b, field).tolist() == getattr(a, field).tolist(), field
        # Per lookup, not per key: repeated keys get different (noisy) values, the last wins.
        predictions = noisy(times, noise, rng)
        for engine in (reference, cpu, model):
            engine.set_predictions(batch, predictions)
        for name in META:
            assert torch.equal(getattr(cpu.meta, name), getattr(model.meta, name)), name
        if policy == "lfu":  # and the counts both keep are the spec's
            assert slot_counts(cpu) == spec_counts(reference)
    assert cpu.hits == model.hits and cpu.misses == model.misses
    assert cpu.bypassed == model.bypassed
    return cpu


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_zipf_batches_with_duplicates_overflow_and_big_keys(policy):
    # 3 slabsets (not a power of two) of 64 slots for 2000 keys: constant eviction, and
    # batches of up to ~250 distinct keys overflow a slabset (bypass).
    rng = np.random.default_rng(21)
    batches = [b + BIG for b in zipf_batches(rng, count=15, keys=2000, size_range=(100, 450),
                                             alpha=0.8)]
    cpu = three_way(policy, 3, batches, seed=5)
    assert cpu.hits > 0 and cpu.misses > 0 and cpu.bypassed > 0
    assert int(cpu.meta.keys.max()) >= BIG


def test_many_misses_take_the_device_path_with_the_same_decisions(monkeypatch):
    import lcr.embedding.cache as cache_module
    monkeypatch.setattr(cache_module, "READBACK_MISSES", 8)  # most batches exceed it
    rng = np.random.default_rng(22)
    batches = [b + BIG for b in zipf_batches(rng, count=8, keys=2000, size_range=(50, 400),
                                             alpha=0.8)]
    cpu = three_way("laru", 3, batches, seed=6)
    assert cpu.readbacks > len(batches)  # the second read of the long miss lists happened


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_one_hot_slabset_under_adversarial_predictions(policy):
    # Every key in slabset 1 of 5: each miss evicts, LARU starts phases, and inverted
    # predictions drive its record and lambda.
    rng = np.random.default_rng(8)
    pool = keys_in_slabset(1, 5, 150)
    batches = [rng.choice(pool, size=40) for _ in range(25)]
    cpu = three_way(policy, 5, batches, seed=9, noise=1.0)
    if policy == "laru":
        assert int(cpu.meta.lambda_shift[1]) > 0 or int(cpu.meta.record.ne(0).sum()) > 0


def expected_tags(keys: torch.Tensor) -> list[int]:
    return [tag_of(k) if k >= 0 else 0 for k in keys.tolist()]


ENGINES = ["native", "warp-model",
           pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
               not gpu_available(), reason="no CUDA GPU")])]


def cache_on(engine: str, num_slabsets: int, **kwargs) -> SlabHashCache:
    device = "cuda" if engine == "cuda" else "cpu"
    return SlabHashCache(num_slabsets, dim=2, device=device, engine=engine, **kwargs)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("num_slabsets", [5, 80])  # evicting all along; partly free
def test_every_slot_carries_its_keys_tag_and_free_slots_zero(engine, num_slabsets):
    rng = np.random.default_rng(23)
    cache = cache_on(engine, num_slabsets, policy="laru")
    for batch in zipf_batches(rng, count=12, keys=3000, size_range=(50, 400), alpha=0.8):
        cache.access(batch + BIG)
    keys = cache.meta.keys
    assert int((keys >= 0).sum()) > 0 and (num_slabsets == 5) == bool((keys >= 0).all())
    assert cache.meta.tags.tolist() == expected_tags(keys)


def same_tag_keys(slabset: int, num_slabsets: int, count: int) -> list[int]:
    """``count`` keys of one slabset that share one tag (so every probe meets collisions)."""
    by_tag: dict[int, list[int]] = {}
    key = BIG
    while True:
        if slabset_of(key, num_slabsets) == slabset:
            group = by_tag.setdefault(tag_of(key), [])
            group.append(key)
            if len(group) == count:
                return group
        key += 1


@pytest.mark.parametrize("engine", ENGINES)
def test_a_probe_checks_the_key_behind_every_matching_tag(engine):
    # 66 keys with one tag in one slabset: a probe that took the first tag match for the
    # key would serve most of them from the wrong slot.
    keys = same_tag_keys(1, 3, 66)
    cache = cache_on(engine, 3)
    cache.access(keys[:64])  # fills slabset 1: every slot has the same tag
    plan = cache.find(keys)
    slots = plan.slot_of.tolist()
    assert [cache.meta.keys[s].item() for s in slots[:64]] == keys[:64]
    assert slots[64:] == [-1, -1] and plan.missing_keys.tolist() == keys[64:]


CRITEO = Path(__file__).resolve().parents[1] / "../shared/data/embedding/criteo_kaggle_first999.tsv"


@pytest.mark.skipif(not CRITEO.exists(), reason="shared data absent")
@pytest.mark.parametrize("policy", ["lru", "laru", "lfu"])
def test_real_criteo_lookups(policy):
    # 22,873 real (field, value) lookups: keys (field << 32 | value) mostly >= 2^32.
    from lcr.traces import load_trace
    lookups = load_trace(str(CRITEO)).keys[:4000]
    assert (lookups >= 1 << 31).mean() > 0.9
    three_way(policy, 7, np.array_split(lookups, 20), seed=3)


def test_an_all_hit_batch_reads_back_once_and_reduces_with_one_embedding_bag():
    """The two-step path (here: mean pooling, which the fused path does not take)."""
    table = torch.randn(500, 4)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(16, 4, policy="laru", engine="warp-model")
    indices = torch.arange(0, 500, 3)
    lengths = torch.full((indices.numel() // 7 + 1,), 7)
    lengths[-1] = indices.numel() - 7 * (lengths.numel() - 1)
    lcr.sls(cache, store, indices, lengths=lengths, mode="mean")  # warm: everything inserted
    before = cache.readbacks
    calls = []
    original = F.embedding_bag
    F.embedding_bag = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        out = lcr.sls(cache, store, indices, lengths=lengths, mode="mean")
        assert cache.readbacks - before == 1 and len(calls) == 1
        # sum pooling from a HostStore takes the fused path: nothing read back, no reduce
        fused = lcr.sls(cache, store, indices, lengths=lengths)
        assert cache.readbacks - before == 1 and len(calls) == 1
    finally:
        F.embedding_bag = original
    offsets = torch.cumsum(lengths, 0) - lengths
    torch.testing.assert_close(out, original(indices, table, offsets, mode="mean"))
    torch.testing.assert_close(fused, original(indices, table, offsets, mode="sum"))


def test_threads_sharing_a_cache_get_the_serial_answers():
    table = torch.randn(4000, 8)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(4, 8, policy="lru")
    rng = np.random.default_rng(0)
    work = [torch.as_tensor(rng.integers(0, 4000, size=600)) for _ in range(48)]
    lengths = torch.full((60,), 10)
    offsets = torch.cumsum(lengths, 0) - lengths
    errors = []

    def serve(part):
        try:
            for indices in part:
                got = lcr.sls(cache, store, indices, lengths=lengths)
                torch.testing.assert_close(got, F.embedding_bag(indices, table, offsets, mode="sum"))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=serve, args=(work[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    distinct = sum(len(np.unique(w.numpy())) for w in work)
    assert cache.hits + cache.misses == distinct
    assert cache.clock == 2 * sum(w.numel() for w in work)
