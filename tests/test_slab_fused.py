"""The fused SLS (lcr.embedding.fused, csrc/common/slab_fused.h) on the host warp model,
against the Python reference, the two-step path (find + commit on the CPU engine) and
embedding_bag on the full table.

After every batch: every metadata array equals the two-step path's, the cached keys equal
the reference's, the hits / misses / bypassed counters and the clock equal both, every
cached row is its table row, and the pooled sums equal embedding_bag bit for bit (rows of
small integers, so no summation order changes a float). GPU tests (marked ``gpu``) count
the fused path's host synchronisations: none.

Run time about 40 s on 2 shared cores; the hypothesis test takes 100 examples.
"""
from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
F = torch.nn.functional

import lcr  # noqa: E402
from lcr import _native  # noqa: E402
from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding import fused  # noqa: E402
from lcr.embedding.cache import SlabHashCache, StalePlan  # noqa: E402
from lcr.embedding.reference import BYPASSED, HIT, SlabsetReference  # noqa: E402
from lcr.embedding.slab_policies import SLAB_POLICIES  # noqa: E402
from lcr.embedding.sls import read_bags  # noqa: E402

from test_slabhash_cache import (keys_in_slabset, next_batch_times, noisy,  # noqa: E402
                                 slot_counts, spec_counts, zipf_batches)

META = ("keys", "tags", "stamps", "predictions", "old", "lambda_shift", "old_count", "record")
BIG = 1 << 31  # keys from here on: the table's row arithmetic must be 64-bit
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")


def integer_table(rows: int, dim: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    """Small integers: sums are exact in any order, in float32 and float16 alike."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-4, 5, (rows, dim), generator=generator).to(dtype)


@pytest.fixture(scope="module")
def big_table(tmp_path_factory):
    """[2^31 + 4096, 2] float32 in a sparse file: rows at keys >= 2^31 without 16 GB of memory.
    Rows 0..4095 and 2^31..2^31+4095 hold small integers, the rest zeros."""
    path = tmp_path_factory.mktemp("fused") / "table.f32"
    array = np.memmap(path, dtype=np.float32, mode="w+", shape=(BIG + 4096, 2))
    values = integer_table(4096, 2, seed=1).numpy()
    array[:4096] = values
    array[BIG:] = values
    return torch.from_numpy(array)


def bag_starts(rng, n: int) -> torch.Tensor:
    """Offsets of 1 to 40 bags over n lookups, some of them empty."""
    bags = int(rng.integers(1, 41))
    return torch.as_tensor(np.concatenate([[0], np.sort(rng.integers(0, n + 1, size=bags - 1))]))


def assert_same_state(fused_cache: SlabHashCache, two_step: SlabHashCache) -> None:
    for name in META:
        assert torch.equal(getattr(fused_cache.meta, name), getattr(two_step.meta, name)), name
    for counter in ("hits", "misses", "bypassed", "clock"):
        assert getattr(fused_cache, counter) == getattr(two_step, counter), counter


def assert_rows_cached(cache: SlabHashCache, table: torch.Tensor) -> None:
    keys = cache.meta.keys.cpu()
    cached = keys >= 0
    assert torch.equal(cache.values.cpu()[cached], table[keys[cached]].to(cache.dtype))


def lockstep(policy: str, num_slabsets: int, batches, table, seed: int, noise: float = 0.3):
    """Reference, two-step (CPU engine) and fused (warp model) on the same bags."""
    _native.warp_model.set_seed(seed)
    store = lcr.HostStore(table, pin=False)
    dim, dtype = table.shape[1], table.dtype
    reference = SlabsetReference(num_slabsets, policy)
    two_step = SlabHashCache(num_slabsets, dim, dtype=dtype, policy=policy)
    model = SlabHashCache(num_slabsets, dim, dtype=dtype, policy=policy, engine="warp-model")
    rng = np.random.default_rng(seed)
    hits = misses = bypassed = 0
    for batch, times in zip(batches, next_batch_times(batches)):
        indices, offsets = torch.as_tensor(batch), bag_starts(rng, len(batch))
        expected = F.embedding_bag(indices, table.float(), offsets, mode="sum").to(dtype)
        outcome = reference.access(batch)
        hits += outcome.outcome.count(HIT)
        misses += len(outcome.keys) - outcome.outcome.count(HIT)
        bypassed += outcome.outcome.count(BYPASSED)
        assert torch.equal(lcr.sls(two_step, store, indices, offsets), expected)
        assert torch.equal(fused.fused_sls(model, store, indices, offsets), expected)
        assert_same_state(model, two_step)
        assert model.cached_keys() == reference.cached_keys()
        if policy == "lfu":  # the fused probe counts LFU's requests as the refresh does
            assert slot_counts(model) == spec_counts(reference)
        assert (model.hits, model.misses, model.bypassed) == (hits, misses, bypassed)
        assert_rows_cached(model, table)
        predictions = noisy(times, noise, rng)  # per lookup: a repeated key keeps its last
        for engine in (reference, two_step, model):
            engine.set_predictions(batch, predictions)
    return model


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_zipf_bags_with_repeats_overflow_and_keys_past_2_31(policy, big_table):
    # 3 slabsets (192 slots) for 2000 keys: every batch evicts, and batches of up to ~250
    # distinct keys overflow a slabset (bypass).
    rng = np.random.default_rng(21)
    batches = [b + BIG for b in zipf_batches(rng, count=10, keys=2000, size_range=(100, 450),
                                             alpha=0.8)]
    cache = lockstep(policy, 3, batches, big_table, seed=5)
    assert cache.hits > 0 and cache.misses > 0 and cache.bypassed > 0
    assert int(cache.meta.keys.min()) >= BIG


@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_one_hot_slabset_under_adversarial_predictions(policy):
    # Every key in slabset 1 of 5: each miss evicts, LARU starts phases, and inverted
    # predictions drive its record and lambda.
    rng = np.random.default_rng(8)
    pool = keys_in_slabset(1, 5, 150)
    batches = [rng.choice(pool, size=40) for _ in range(20)]
    cache = lockstep(policy, 5, batches, integer_table(max(pool) + 1, 3), seed=9, noise=1.0)
    if policy == "laru":
        assert int(cache.meta.lambda_shift[1]) > 0 or int(cache.meta.record.ne(0).sum()) > 0


@pytest.mark.parametrize("policy", ["lru", "laru", "lfu"])
def test_many_misses_per_slabset(policy):
    # 7 slabsets, batches of up to 1500 lookups over 20,000 keys: hundreds of misses per
    # slabset (the insert's sorts run many passes), repeats among them, mostly bypassed.
    rng = np.random.default_rng(22)
    batches = zipf_batches(rng, count=4, keys=20_000, size_range=(600, 1500), alpha=0.5)
    cache = lockstep(policy, 7, batches, integer_table(20_000, 2), seed=6)
    assert cache.misses > 2000 and cache.bypassed > 1000


@pytest.mark.parametrize("policy", ["fpb", "laru"])
def test_misses_past_the_staging_rows_are_read_from_the_table(policy, monkeypatch):
    # Room for 5 staged rows a batch: most inserted rows come from the table instead.
    monkeypatch.setattr(fused, "STAGING_BYTES", 5 * 2 * 4)
    rng = np.random.default_rng(23)
    batches = zipf_batches(rng, count=5, keys=2000, size_range=(100, 400), alpha=0.8)
    lockstep(policy, 3, batches, integer_table(2000, 2), seed=7)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(list(SLAB_POLICIES)), num_slabsets=st.integers(1, 4),
       batches=st.lists(st.lists(st.integers(0, 299), max_size=120), min_size=1, max_size=4),
       width=st.sampled_from([(torch.float32, 2), (torch.float32, 3), (torch.float16, 8)]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_fuzzed_batches_keep_the_two_step_state_and_sums(policy, num_slabsets, batches, width,
                                                          seed):
    dtype, dim = width
    lockstep(policy, num_slabsets, [np.array(b, dtype=np.int64) for b in batches],
             integer_table(300, dim, dtype), seed=seed)


# -- the sums: every row width, dtype and form of embedding_bag's arguments ------------------

WIDTHS = [(torch.float32, dim) for dim in (1, 2, 3, 4, 6, 40, 128, 200)] + \
         [(torch.float16, dim) for dim in (1, 2, 3, 4, 8, 24, 136, 264)]


@pytest.mark.parametrize("dtype,dim", WIDTHS, ids=[f"{d}-{n}" for d, n in WIDTHS])
def test_sums_equal_embedding_bag_for_every_row_width_and_form(dtype, dim):
    # 2 slabsets: hits, evictions and bypass; rows of 4 to 1056 bytes read in pieces of
    # 2 to 16 bytes, several lookups per warp step (narrow rows) or several windows (wide).
    table = integer_table(700, dim, dtype)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(2, dim, dtype=dtype, policy="lru", engine="warp-model")
    rng = np.random.default_rng(dim)
    want = table.float()
    for _ in range(2):
        indices = torch.as_tensor(rng.integers(0, 700, size=180))
        lengths = torch.as_tensor(np.diff(bag_starts(rng, 180).numpy(), append=180))
        starts = torch.cumsum(lengths, 0) - lengths
        bounds = torch.cat([starts, torch.tensor([180])])
        by_offsets = F.embedding_bag(indices, want, starts, mode="sum").to(dtype)
        forms = {
            "offsets": fused.fused_sls(cache, store, indices, starts),
            "lengths": fused.fused_sls(cache, store, indices, lengths=lengths),
            "include_last_offset": fused.fused_sls(cache, store, indices, bounds,
                                                   include_last_offset=True),
        }
        for form, got in forms.items():
            assert got.dtype == dtype and torch.equal(got, by_offsets), form
        square = indices[:175].reshape(35, 5)  # 2-D: a bag per row
        assert torch.equal(fused.fused_sls(cache, store, square),
                           F.embedding_bag(square, want, mode="sum").to(dtype))
        assert_rows_cached(cache, table)
    assert cache.hits > 0 and cache.bypassed > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_random_rows_sum_close_to_embedding_bag(dtype):
    table = torch.randn(2000, 24, generator=torch.Generator().manual_seed(3)).to(dtype)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(4, 24, dtype=dtype, policy="laru", engine="warp-model")
    rng = np.random.default_rng(4)
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=2e-2)
    for _ in range(3):
        indices = torch.as_tensor(rng.integers(0, 2000, size=400))
        offsets = bag_starts(rng, 400)
        got = fused.fused_sls(cache, store, indices, offsets)
        want = F.embedding_bag(indices, table.float(), offsets, mode="sum")
        torch.testing.assert_close(got.float(), want, **tolerance)


@pytest.mark.parametrize("dim", [8, 3])  # 16-byte pieces of 8 halves; 2-byte pieces
def test_half_sums_round_as_torch_does(dim):
    # Bags of one and of two rows: the float sum is the same in any order, so the half
    # each rounds to must be torch's, across subnormals, ties and overflow to inf.
    bits = np.random.default_rng(dim).integers(0, 1 << 16, size=(4000, dim), dtype=np.uint16)
    bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF  # no inf / nan in the table
    table = torch.from_numpy(bits.view(np.float16).copy())
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(4, dim, dtype=torch.float16, engine="warp-model")
    indices = torch.arange(4000)
    ones = fused.fused_sls(cache, store, indices, torch.arange(4000))
    assert torch.equal(ones.view(torch.int16), table.view(torch.int16))
    pairs = fused.fused_sls(cache, store, indices, torch.arange(0, 4000, 2))
    want = (table[0::2].float() + table[1::2].float()).half()
    assert torch.equal(pairs.view(torch.int16), want.view(torch.int16))


# -- the cache's contract holds across both paths ---------------------------------------

def test_fused_and_two_step_batches_interleave_on_one_cache():
    table = integer_table(3000, 4)
    store = lcr.HostStore(table, pin=False)
    mixed = SlabHashCache(3, 4, policy="laru", engine="warp-model")
    two_step = SlabHashCache(3, 4, policy="laru")
    rng = np.random.default_rng(11)
    for i, batch in enumerate(zipf_batches(rng, count=8, keys=3000, size_range=(50, 300))):
        indices, offsets = torch.as_tensor(batch), bag_starts(rng, len(batch))
        serve = fused.fused_sls if i % 2 else lcr.sls
        assert torch.equal(serve(mixed, store, indices, offsets), lcr.sls(two_step, store, indices, offsets))
        assert_same_state(mixed, two_step)


def test_a_plan_found_before_a_fused_batch_is_stale():
    table = integer_table(100, 2)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(1, 2, engine="warp-model")
    plan = cache.find(torch.tensor([1, 2]))
    fused.fused_sls(cache, store, torch.tensor([3, 4]), torch.tensor([0]))
    with pytest.raises(StalePlan):
        cache.commit(plan, table[plan.missing_keys])
    assert cache.cached_keys() == {3, 4}


def test_refused_arguments_change_nothing():
    table = integer_table(100, 2)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(1, 2, engine="warp-model")
    fused.fused_sls(cache, store, torch.tensor([1, 2, 3]), torch.tensor([0, 1]))
    before = [getattr(cache.meta, name).clone() for name in META] + [cache.clock, cache.hits]
    for bad in (dict(indices=torch.tensor([1, 100]), offsets=torch.tensor([0])),
                dict(indices=torch.tensor([1, -1]), offsets=torch.tensor([0])),
                dict(indices=torch.tensor([1, 2]), offsets=torch.tensor([0, 3])),
                dict(indices=torch.tensor([1.0]), offsets=torch.tensor([0]))):
        with pytest.raises((IndexError, ValueError, TypeError)) as err:
            fused.fused_sls(cache, store, **bad)
        assert "\n" not in str(err.value)
    after = [getattr(cache.meta, name) for name in META] + [cache.clock, cache.hits]
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
               for a, b in zip(before, after))


def test_unchecked_bad_values_read_nothing_out_of_bounds_and_cache_no_bad_key():
    # As on a GPU before the deferred checks run: indices outside the table, offsets out
    # of order and past the end reach the kernels.
    table = integer_table(50, 4)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(1, 4, engine="warp-model")
    indices = torch.tensor([3, 50, -7, 3, 1 << 40, 9, 2 ** 63 - 1])
    # The offsets reach the kernel as given (fused_sls leaves their bounds to bag_bounds and
    # the facts its checks read to the kernel).
    bags = read_bags(indices, torch.tensor([0, 5, 2, 99]), rows=50, defer=True, reader_checks=True)
    assert bags.offsets.tolist() == [0, 5, 2, 99]
    out = fused.fused_pool(cache, store, bags)
    ok = (indices >= 0) & (indices < 50)
    padded = torch.cat([table, torch.zeros(1, 4)])  # bad lookups sum as zeros
    # Each bag clamped into the batch, never reversed: [0, 5), [5, 5), [2, 7), [7, 7).
    want = F.embedding_bag(torch.where(ok, indices, 50)[[0, 1, 2, 3, 4, 2, 3, 4, 5, 6]], padded,
                           torch.tensor([0, 5, 5, 10]), mode="sum")
    assert torch.equal(out, want)
    assert cache.cached_keys() == {3, 9}
    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        bags.check()  # the first rule the batch breaks
    # Offsets that make every lookup fall in 40 bags: 40x more probes than the scratch
    # holds misses for; the kernel lists at most n of them and touches nothing past it.
    keys = torch.arange(200) % 50
    bags = read_bags(keys, torch.tensor([0, 200] * 40), rows=50, defer=True, reader_checks=True)
    out = fused.fused_pool(SlabHashCache(4, 4, engine="warp-model"), store, bags)
    assert out.shape == (80, 4) and torch.equal(out[1::2], torch.zeros(40, 4))
    with pytest.raises(ValueError, match="non-decreasing"):
        bags.check()


BAD_BATCHES = [  # (indices, offsets or None, lengths or None): each breaks one rule or more
    ([1, 2, 3], [1, 2], None), ([1, 2, 3], [0, 3, 2], None), ([1, 2, 3], [0, 9], None),
    ([1, 2, 3], [0, -1], None), ([1, 2, 3], [-4, 0], None), ([1, 2, 3], None, [1, 1]),
    ([1, 2, 3], None, [4, -1]), ([1, -2, 3], [0], None), ([1, 20, 3], [0], None),
    ([-9, 20, -3, 70], [0, 2], None), ([-9, 20, -3, 70], None, [2, 2]), ([[1, 2], [-5, 30]], None, None),
    ([7, 9, 20], [0, 1, 1], None), ([0, 19], [0, 1], None), ([0, 19], None, [0, 2]), ([], [0], None),
]


@pytest.mark.parametrize("indices,offsets,lengths", BAD_BATCHES)
def test_the_kernels_facts_refuse_exactly_what_the_checks_of_read_bags_refuse(indices, offsets, lengths):
    """A deferred check whose facts the fused kernel gathered (reader_checks) raises the
    same refusal, word for word, as one whose facts read_bags computed; valid batches pass
    both (the last three)."""
    table = integer_table(20, 2)
    store = lcr.HostStore(table, pin=False)

    def refusal(reader_checks):
        cache = SlabHashCache(1, 2, engine="warp-model")
        bags = read_bags(torch.tensor(indices, dtype=torch.int64),
                         None if offsets is None else torch.tensor(offsets),
                         None if lengths is None else torch.tensor(lengths),
                         rows=20, defer=True, reader_checks=reader_checks)
        fused.fused_pool(cache, store, bags)
        try:
            bags.check()
        except (ValueError, IndexError) as err:
            return type(err), str(err)
        return None
    assert refusal(True) == refusal(False)


def test_what_the_fused_path_does_not_serve_is_refused_in_one_line():
    table = integer_table(10, 2)
    model = SlabHashCache(1, 2, engine="warp-model")
    cases = [(SlabHashCache(1, 2), lcr.HostStore(table, pin=False), {}, "engine"),
             (model, object(), {}, "HostStore"),
             (model, lcr.HostStore(table.half(), pin=False), {}, "differ"),
             (model, lcr.HostStore(integer_table(10, 3), pin=False), {}, "differ"),
             (model, lcr.HostStore(table, pin=False), {"mode": "mean"}, "mode"),
             (model, lcr.HostStore(table, pin=False), {"per_sample_weights": torch.ones(2)}, "mode")]
    for cache, store, pooling, words in cases:
        assert not fused.applies(cache, store, **pooling)
        assert words in fused.refusal(cache, store, **pooling)
    bags = read_bags(torch.tensor([1]), torch.tensor([0]), mode="mean")
    with pytest.raises(ValueError, match="mode='sum'"):
        fused.fused_pool(model, lcr.HostStore(table, pin=False), bags)
    assert fused.applies(model, lcr.HostStore(table, pin=False))


def test_threads_sharing_a_cache_get_the_full_tables_sums():
    table = integer_table(2000, 4)
    store = lcr.HostStore(table, pin=False)
    cache = SlabHashCache(2, 4, policy="lru", engine="warp-model")
    errors: list = []

    def serve(seed):
        rng = np.random.default_rng(seed)
        try:
            for i in range(6):
                indices = torch.as_tensor(rng.integers(0, 2000, size=120))
                offsets = bag_starts(rng, 120)
                serve_batch = fused.fused_sls if i % 2 else lcr.sls
                if not torch.equal(serve_batch(cache, store, indices, offsets),
                                   F.embedding_bag(indices, table, offsets, mode="sum")):
                    errors.append("a sum differs from embedding_bag on the full table")
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(repr(err))

    threads = [threading.Thread(target=serve, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert_rows_cached(cache, table)


# -- on a GPU: no host synchronisation -----------------------------------------------------

def _cuda_batch(rows: int, n: int, bag: int, seed: int, low: int = 0):
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randint(low, rows, (n,), generator=generator).cuda()
    return indices, torch.arange(0, n, bag, device="cuda")


def _never_waits(cache, store, table, indices, offsets, serve=None):
    """Run one fused batch (``serve(indices, offsets)``, default ``fused.fused_sls``)
    behind a long device sleep: the host must get the call back while the sleep still runs
    (no synchronisation of any kind), and torch must see no synchronising call; then the
    sums must be embedding_bag's."""
    torch.cuda.synchronize()
    torch.cuda._sleep(1 << 30)  # about half a second of GPU time queued before the batch
    asleep = torch.cuda.Event()
    asleep.record()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = (serve or functools.partial(fused.fused_sls, cache, store))(indices, offsets)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not asleep.query(), "the fused batch waited for the device"
    torch.cuda.synchronize()
    want = F.embedding_bag(indices, table.cuda().float(), offsets, mode="sum").to(table.dtype)
    torch.testing.assert_close(out, want, rtol=1e-2, atol=2e-2)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_fused_cuda_batch_never_synchronises_hits_or_misses(dtype):
    table = torch.randn(8192, 128).to(dtype)
    store = lcr.HostStore(table)  # pinned: the GPU reads missed rows there
    cache = SlabHashCache(128, 128, dtype=dtype, device="cuda")  # 8192 slots
    hot = _cuda_batch(4096, 20_000, 20, seed=0)
    fused.fused_sls(cache, store, *hot)  # warm: rows cached, scratch allocated
    fused.fused_sls(cache, store, *hot)
    misses_before = cache.misses
    _never_waits(cache, store, table, *hot)  # every lookup hits
    cold = _cuda_batch(8192, 20_000, 20, seed=1, low=4096)  # none of these is cached
    _never_waits(cache, store, table, *cold)
    assert cache.misses > misses_before


@pytest.mark.gpu
@needs_gpu
def test_lcr_sls_with_an_async_batch_predictor_never_synchronises():
    """The predictor's answers go in (pinned copies) and the batch's lookups go to its
    thread (a pinned copy behind an event) without the host waiting for the device."""
    from lcr.embedding.predictions import BatchPredictor, TracePredictor
    table = torch.randn(8192, 128)
    store = lcr.HostStore(table)
    cache = SlabHashCache(128, 128, policy="laru", device="cuda")
    indices, offsets = _cuda_batch(8192, 20_000, 20, seed=0)
    oracle = TracePredictor(np.arange(200_000, dtype=np.float64), 8192)
    with BatchPredictor(oracle) as predictor:
        for step in range(3):  # warm up; answers come back and go in
            lcr.sls(cache, store, indices, offsets, predictor=predictor, now=20_000 * step)
            torch.cuda.synchronize()
            deadline = time.monotonic() + 10
            while predictor.seen < 20_000 * (step + 1) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert predictor.seen == 60_000 and predictor.failures == 0
        _never_waits(cache, store, table, indices, offsets,
                     serve=lambda i, o: lcr.sls(cache, store, i, o, predictor=predictor, now=60_000))
        deadline = time.monotonic() + 10
        while predictor.seen < 80_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert predictor.seen == 80_000 and predictor.failures == 0


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("policy", list(SLAB_POLICIES))
def test_fused_cuda_batches_keep_the_cpu_two_step_state(policy):
    rng = np.random.default_rng(12)
    table = integer_table(3000, 8)
    store = lcr.HostStore(table)
    gpu_cache = SlabHashCache(3, 8, policy=policy, device="cuda")
    cpu_cache = SlabHashCache(3, 8, policy=policy)
    batches = zipf_batches(rng, count=12, keys=3000, size_range=(50, 600), alpha=0.8)
    for batch, times in zip(batches, next_batch_times(batches)):
        indices, offsets = torch.as_tensor(batch), bag_starts(rng, len(batch))
        got = fused.fused_sls(gpu_cache, store, indices.cuda(), offsets.cuda())
        assert torch.equal(got.cpu(), F.embedding_bag(indices, table, offsets, mode="sum"))
        lcr.sls(cpu_cache, store, indices, offsets)
        for name in META:
            assert torch.equal(getattr(gpu_cache.meta, name).cpu(), getattr(cpu_cache.meta, name)), name
        for counter in ("hits", "misses", "bypassed", "clock"):
            assert getattr(gpu_cache, counter) == getattr(cpu_cache, counter), counter
        predictions = noisy(times, 0.3, rng)
        for cache in (gpu_cache, cpu_cache):
            cache.set_predictions(batch, predictions)
    assert_rows_cached(gpu_cache, table)


@pytest.mark.gpu
@needs_gpu
def test_a_bad_index_on_the_gpu_is_refused_by_the_next_call():
    table = integer_table(100, 4)
    store = lcr.HostStore(table)
    cache = SlabHashCache(2, 4, device="cuda")
    fused.fused_sls(cache, store, torch.tensor([1, 200], device="cuda"), torch.tensor([0], device="cuda"))
    assert 200 not in cache.cached_keys()
    torch.cuda.synchronize()
    with pytest.raises(IndexError, match="earlier fused batch.*200"):
        fused.fused_sls(cache, store, torch.tensor([1], device="cuda"), torch.tensor([0], device="cuda"))
    fused.fused_sls(cache, store, torch.tensor([1, 300], device="cuda"), torch.tensor([0], device="cuda"))
    with pytest.raises(IndexError, match="300"):
        fused.check(cache)
