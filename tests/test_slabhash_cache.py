"""SlabHashCache engines against the pure-Python batch reference, decision by decision.

Every batch compares, per deduplicated key, hit / inserted / bypassed and the key each
insertion evicted; the cached key sets are compared at the end. GPU tests (marked
``gpu``) hold the CUDA engine to the CPU engine, slot by slot.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding import record_bit_of, slabset_of  # noqa: E402
from lcr.embedding.cache import SlabHashCache, unique_in_order  # noqa: E402
from lcr.embedding.reference import (BYPASSED, HIT, INSERTED,  # noqa: E402
                                     BitsetRecord, SlabsetReference)
from lcr.embedding.slab_policies import SLAB_POLICIES  # noqa: E402

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")


def next_batch_times(batches: list[np.ndarray]) -> list[np.ndarray]:
    """For each batch and each of its keys, the index of the next batch holding the key."""
    upcoming: dict[int, float] = {}
    out = []
    for b in range(len(batches) - 1, -1, -1):
        keys = batches[b]
        out.append(np.array([upcoming.get(int(k), math.inf) for k in keys]))
        for k in keys:
            upcoming[int(k)] = float(b)
    return out[::-1]


def noisy(times: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Flip a fraction ``noise`` of the predictions to minus the true time (paper Fig. 5)."""
    flip = rng.random(len(times)) < noise
    return np.where(flip, -times, times)


def slot_counts(cache: SlabHashCache) -> dict[int, float]:
    """An LFU cache's request count per cached key: minus its slot's prediction."""
    slots = zip(cache.meta.keys.tolist(), cache.meta.predictions.tolist())
    return {key: -value for key, value in slots if key >= 0}


def spec_counts(reference: SlabsetReference) -> dict[int, int]:
    return {key: count for slabset in reference.slabsets for key, count in slabset.count.items()}


def replay(policy: str, num_slabsets: int, batches: list[np.ndarray], noise: float = 0.0,
           seed: int = 0, device: str = "cpu"):
    """Run reference and engine side by side; return both after asserting every decision."""
    reference = SlabsetReference(num_slabsets, policy)
    cache = SlabHashCache(num_slabsets, dim=4, policy=policy, device=device)
    rng = np.random.default_rng(seed)
    for batch, times in zip(batches, next_batch_times(batches)):
        expected = reference.access(batch)
        got = cache.access(torch.as_tensor(batch))
        assert got.keys.tolist() == expected.keys
        assert got.outcome.tolist() == expected.outcome
        assert got.evicted.tolist() == expected.evicted
        predictions = noisy(times, noise, rng)
        reference.set_predictions(batch, predictions)
        cache.set_predictions(batch, predictions)
        if policy == "lfu":  # predictions are ignored: the slots keep the spec's counts
            assert slot_counts(cache) == spec_counts(reference)
    assert cache.cached_keys() == reference.cached_keys()
    return reference, cache


def zipf_batches(rng, count, keys, size_range, alpha=1.1):
    weights = 1.0 / np.arange(1, keys + 1) ** alpha
    weights /= weights.sum()
    ids = rng.permutation(keys)
    return [ids[rng.choice(keys, size=int(rng.integers(*size_range)), p=weights)]
            for _ in range(count)]


def keys_in_slabset(slabset: int, num_slabsets: int, count: int, start: int = 0) -> list[int]:
    out, key = [], start
    while len(out) < count:
        if slabset_of(key, num_slabsets) == slabset:
            out.append(key)
        key += 1
    return out


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_random_zipf_batches_match_the_reference(policy, noise):
    rng = np.random.default_rng(7)
    batches = zipf_batches(rng, count=60, keys=3000, size_range=(1, 700), alpha=0.7)
    reference, cache = replay(policy, num_slabsets=4, batches=batches, noise=noise, seed=1)
    assert 0 < cache.hits and 0 < cache.misses  # the run exercised both paths
    assert cache.bypassed > 0  # batches of up to ~500 unique keys overflow 4 slabsets of 64


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_loops_larger_than_a_slabset_match_the_reference(policy):
    # One slabset, a loop of 80 keys read 16 at a time: the classic LRU worst case.
    loop = np.array(keys_in_slabset(0, 1, 80))
    batches = [np.roll(loop, -16 * i)[:16] for i in range(60)]
    reference, cache = replay(policy, num_slabsets=1, batches=batches)
    assert cache.misses > 80


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_adversarial_predictions_match_and_shrink_lambda(policy):
    rng = np.random.default_rng(3)
    batches = [rng.choice(keys_in_slabset(1, 2, 150), size=40) for _ in range(80)]
    reference, cache = replay(policy, num_slabsets=2, batches=batches, noise=1.0, seed=2)
    if policy == "laru":
        # Inverted predictions cause prediction-induced misses: lambda must have shrunk.
        assert int(cache.meta.lambda_shift[1]) > 0 or reference.slabsets[1].stats.extra[
            "prediction_induced_misses"] > 0


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_overfull_batch_pins_its_keys_and_bypasses_the_excess(policy):
    home = keys_in_slabset(0, 3, 200)
    cache = SlabHashCache(3, dim=2, policy=policy)
    reference = SlabsetReference(3, policy)
    first = home[:64]
    for engine in (cache, reference):
        engine.access(first)
    batch = home[:10] + home[64:134]  # 10 hits and 70 misses into one full slabset
    expected = reference.access(batch)
    got = cache.access(torch.tensor(batch))
    assert got.outcome.tolist() == expected.outcome
    assert got.evicted.tolist() == expected.evicted
    assert expected.outcome[:10] == [HIT] * 10
    assert expected.outcome[10:64] == [INSERTED] * 54  # the 54 unpinned slots are reused
    assert expected.outcome[64:] == [BYPASSED] * 16
    assert set(expected.evicted[10:64]) == set(home[10:64])  # only keys outside the batch left
    assert set(batch[:64]) == cache.cached_keys() & set(home)


def test_duplicates_count_once_in_order_of_first_occurrence():
    keys = torch.tensor([5, 3, 5, 9, 3, 1])
    unique, inverse = unique_in_order(keys)
    assert unique.tolist() == [5, 3, 9, 1]
    assert unique[inverse].tolist() == keys.tolist()
    cache = SlabHashCache(2, dim=2, policy="lru")
    result = cache.access(keys)
    assert result.keys.tolist() == [5, 3, 9, 1]
    assert result.outcome.tolist() == [INSERTED] * 4
    assert cache.access([1, 1]).outcome.tolist() == [HIT]


def test_bitset_record_collisions_are_modelled_identically():
    # Keys of one slabset whose record bits collide: the bitset answers "recorded" for a
    # key that never left by prediction. Engine and reference must agree regardless.
    record = BitsetRecord()
    by_bit: dict[int, list[int]] = {}
    for key in keys_in_slabset(0, 1, 30000):
        by_bit.setdefault(record_bit_of(key), []).append(key)
    a, b = next(keys for keys in by_bit.values() if len(keys) >= 2)[:2]
    record.add(a)
    assert b in record and a in record
    record.discard(a)
    assert a in record  # a bitset cannot forget one key without its neighbours
    record.clear()
    assert a not in record
    colliding = [keys for keys in by_bit.values() if len(keys) >= 2][:100]
    pool = np.array([k for keys in colliding for k in keys[:2]])
    rng = np.random.default_rng(5)
    batches = [rng.choice(pool, size=30) for _ in range(80)]
    replay("laru", num_slabsets=1, batches=batches, noise=0.5, seed=4)


def test_predictions_only_reach_cached_keys_and_nan_means_unknown():
    cache = SlabHashCache(1, dim=2, policy="fpb")
    cache.access([1, 2, 3])
    cache.set_predictions([1, 2, 3, 99], [float("nan"), 5.0, -1.0, 7.0])
    predictions = dict(zip(cache.meta.keys.tolist(), cache.meta.predictions.tolist()))
    assert predictions[1] == math.inf and predictions[2] == 5.0 and predictions[3] == -1.0
    assert 99 not in predictions


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="policy"):
        SlabHashCache(1, 4, policy="opt")
    with pytest.raises(ValueError, match="num_slabsets"):
        SlabHashCache(0, 4)
    with pytest.raises(ValueError, match="dtype"):
        SlabHashCache(1, 4, dtype="int8")
    with pytest.raises(ValueError, match="non-negative"):
        SlabHashCache(1, 4).access([-3])


def test_spec_policies_decide_as_before_when_nothing_is_pinned():
    # The pinning hook is inert by default: LRU through RecencyOrder is still plain LRU.
    from lcr.policies import LRU
    lru = LRU(2)
    for t, key in enumerate([1, 2, 1, 3]):
        lru.access(key, t)
    assert lru.last_evicted == 2


def lfu_steps() -> list[tuple[list[int], list[int], list[int]]]:
    """Batches into one LFU slabset with the hand-computed outcome and evicted key per
    distinct key (the victim is the unpinned key with the fewest requests since it was
    loaded, the one that reached that count first on ties). Key k sits in slot k."""
    b2 = [63, 63] + [k for k in range(62, -1, -1) if k not in (3, 7)]
    cached = [k for k in range(62) if k not in (3, 7)] + [100, 106, 107, 108]
    return [
        (list(range(64)), [INSERTED] * 64, [-1] * 64),
        # All but 3 and 7 reach count 2, 63 first (counted once though looked up twice).
        (b2, [HIT] * 62, [-1] * 62),
        ([100], [INSERTED], [3]),  # count 1: 3 and 7, 3 reached it first
        ([101], [INSERTED], [7]),
        ([100, 102], [HIT, INSERTED], [-1, 101]),  # 100 now has 2: 101 (LRU would take 63)
        ([103], [INSERTED], [102]),
        # 105 finds 104 (pinned) alone at count 1: the key that reached 2 first leaves, 63
        # (not key 0 in the lowest slot, not 100 which reached 2 last).
        ([104, 105], [INSERTED] * 2, [103, 63]),
        ([63], [INSERTED], [104]),  # 63 is back with count 1: its 2 was forgotten
        ([106, 107, 108], [INSERTED] * 3, [105, 63, 62]),  # so it leaves before any count 2
        # Every cached key pinned: 200 is bypassed, unseen by LFU; every count goes up.
        (cached + [200], [HIT] * 64 + [BYPASSED], [-1] * 65),
        ([201], [INSERTED], [106]),  # count 2: 106, 107, 108 in that order (LRU: key 0)
    ]


def test_lfu_evicts_the_fewest_requests_that_reached_their_count_first():
    from lcr import _native
    _native.warp_model.set_seed(1)
    reference = SlabsetReference(1, "lfu")
    engines = [SlabHashCache(1, dim=2, policy="lfu"),
               SlabHashCache(1, dim=2, policy="lfu", engine="warp-model")]
    for batch, outcome, evicted in lfu_steps():
        expected = reference.access(batch)
        assert (expected.outcome, expected.evicted) == (outcome, evicted)
        for cache in engines:
            got = cache.access(batch)
            assert (got.outcome.tolist(), got.evicted.tolist()) == (outcome, evicted)
            # Predictions are ignored: the slot holds minus the key's count, the spec's.
            cache.set_predictions(batch, [0.0] * len(batch))
            assert slot_counts(cache) == spec_counts(reference)


def gpu_vs_cpu(policy, batches, num_slabsets=64, device="cuda", seed=11):
    """The CUDA engine against the CPU engine, every decision and every metadata array."""
    rng = np.random.default_rng(seed)
    cpu = SlabHashCache(num_slabsets, dim=4, policy=policy, device="cpu")
    gpu_cache = SlabHashCache(num_slabsets, dim=4, policy=policy, device=device)
    for batch, times in zip(batches, next_batch_times(batches)):
        a = cpu.access(torch.as_tensor(batch))
        b = gpu_cache.access(torch.as_tensor(batch).to(gpu_cache.device))
        for field in ("keys", "slots", "evicted", "outcome"):
            assert getattr(b, field).cpu().tolist() == getattr(a, field).tolist(), field
        predictions = noisy(times, 0.3, rng)  # per lookup: repeated keys, last one wins
        cpu.set_predictions(batch, predictions)
        gpu_cache.set_predictions(batch, predictions)
        for name in ("keys", "tags", "stamps", "predictions", "old", "lambda_shift", "old_count", "record"):
            assert torch.equal(getattr(cpu.meta, name), getattr(gpu_cache.meta, name).cpu()), name
    assert (cpu.hits, cpu.misses, cpu.bypassed) == (gpu_cache.hits, gpu_cache.misses,
                                                     gpu_cache.bypassed)
    return cpu


@gpu
@needs_gpu
@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_cuda_engine_matches_cpu_engine_slot_by_slot(policy):
    rng = np.random.default_rng(11)
    # 7 slabsets (not a power of two) for 50k keys: evictions, and bypass on big batches.
    batches = zipf_batches(rng, count=40, keys=50_000, size_range=(1, 5000))
    cpu = gpu_vs_cpu(policy, batches, num_slabsets=7)
    assert cpu.bypassed > 0 and cpu.hits > 0


@gpu
@needs_gpu
@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_cuda_engine_on_one_overfull_slabset_with_big_keys(policy):
    rng = np.random.default_rng(4)
    pool = [k + (1 << 40) for k in range(0, 400_000) if slabset_of(k + (1 << 40), 3) == 1][:300]
    batches = [rng.choice(pool, size=int(rng.integers(20, 200))) for _ in range(30)]
    gpu_vs_cpu(policy, batches, num_slabsets=3, device="cuda:0", seed=5)


@gpu
@needs_gpu
def test_cuda_engine_on_a_side_stream():
    rng = np.random.default_rng(12)
    batches = zipf_batches(rng, count=15, keys=20_000, size_range=(1, 3000))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        gpu_vs_cpu("laru", batches, num_slabsets=13)
    stream.synchronize()


@gpu
@needs_gpu
def test_cuda_engine_matches_the_reference_on_an_overfull_slabset():
    replay("laru", num_slabsets=2, batches=[np.array(keys_in_slabset(0, 2, 100))] * 3,
           device="cuda")


def gather_case(device: str, dim: int, dtype: str):
    """A cache holding every other row of a 300-row table (the same table for a given dim
    and dtype), and 500 lookups about half of which miss."""
    import lcr
    table = torch.randn(300, dim, generator=torch.Generator().manual_seed(dim)).to(
        getattr(torch, dtype))
    cache = SlabHashCache(8, dim, dtype=dtype, device=device)
    lcr.sls(cache, lcr.HostStore(table, pin=False), torch.arange(0, 300, 2).to(device),
            torch.tensor([0], device=device))
    lookups = torch.as_tensor(np.random.default_rng(dim).integers(0, 300, 500))
    return table, cache, lookups


@pytest.mark.parametrize("dim,dtype", [(8, "float32"), (3, "float16")])
def test_gather_reads_the_cached_rows_and_zeros_for_misses(dim, dtype):
    table, cache, lookups = gather_case("cpu", dim, dtype)
    plan = cache.find(lookups)
    got = cache.gather(plan)
    cached = plan.slot_of >= 0
    assert 0 < int(cached.sum()) < lookups.numel()
    assert torch.equal(got[cached], table[lookups[cached]])
    assert not got[~cached].any()
    cache.commit(plan, table[plan.missing_keys])
    assert torch.equal(cache.gather(plan), table[lookups])  # after commit: every lookup served


@gpu
@needs_gpu
@pytest.mark.parametrize("dim,dtype", [(8, "float32"), (2, "float32"), (1, "float32"),
                                       (1, "float16"), (3, "float16")])  # 16/8/4/2/2-byte pieces
def test_cuda_gather_equals_the_cpu_gather(dim, dtype):
    table, cpu, lookups = gather_case("cpu", dim, dtype)
    _, gpu_cache, _ = gather_case("cuda", dim, dtype)
    a, b = cpu.find(lookups), gpu_cache.find(lookups.cuda())
    assert torch.equal(a.slot_of, b.slot_of.cpu())
    got = gpu_cache.gather(b).cpu()
    assert torch.equal(cpu.gather(a), got) and got.any()
