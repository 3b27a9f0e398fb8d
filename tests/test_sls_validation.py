"""lcr.sls reads its arguments exactly as ``torch.nn.functional.embedding_bag`` does, and the
cache's lookup entry refuses what it cannot read: issue 39, item 4, and its fuzz suite.

The differential: for every input, either embedding_bag (on the full table, CPU) and lcr.sls
both refuse, lcr with a one-line ValueError/TypeError/IndexError naming the argument, or
both return the same tensor, bit for bit (the reduce runs over the same rows in the same
order). After every call, refused or not, a good call through the same cache still
equals embedding_bag. ``lengths`` (lcr's SparseLengthsSum form) must be non-negative
integers adding up to the number of indices; they then mean the offsets of their starts.

Where embedding_bag (torch 2.13, CPU) contradicts itself, lcr.sls does what its
documentation and its sum mode do, and the reference below says so:
- decreasing offsets: sum and mean refuse them, max returns an undefined result
  ([0, 2, 1, 5]: a non-zero "bag" from 2 back to 1); lcr.sls refuses them in every mode.
- include_last_offset with a last offset below len(indices): the last bag ends there
  ("the ending index position of the last bag"); sum drops the indices past it, but mean
  divides by the count up to the end of the indices and max takes them into the last bag.
  lcr.sls drops them in every mode (embedding_bag on the indices up to the last offset).
- max with no bag at all (empty offsets) and some indices crashes the process (SIGSEGV);
  lcr.sls answers [0, dim] as sum and mean do.

Run time about 15 s on 2 shared cores (torch on one thread): the hypothesis tests take 2000
(sls differential), 500 (cache lookups) and 400 (deferred checks) examples.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
F = torch.nn.functional

import lcr  # noqa: E402
from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding.cache import SlabHashCache  # noqa: E402
from lcr.embedding.reference import HIT, SlabsetReference  # noqa: E402
from lcr.embedding.sls import read_bags  # noqa: E402
from lcr.embedding.stores import HostStore  # noqa: E402

ARGUMENTS = ("indices", "offsets", "lengths", "per_sample_weights", "mode", "include_last_offset")
REFUSALS = (ValueError, TypeError, IndexError)
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
ANY_DTYPES = INT_DTYPES + [torch.float32, torch.float64]
INT64_MAX = 2 ** 63 - 1


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Thousands of tiny batches: torch's thread pool would cost 0.3-5 ms a call on 2 busy
    cores, against 5 us on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def table_of(rows: int, dim: int, dtype=torch.float32) -> torch.Tensor:
    """Small integer values: any summation order gives the same floats."""
    return (torch.arange(rows * dim, dtype=torch.float32).reshape(rows, dim) % 7 - 3).to(dtype)


def embedding_bag(table, indices, offsets=None, lengths=None, **kwargs):
    """embedding_bag's outcome (a tensor, or None where it refuses). ``lengths`` are read as
    lcr defines them: non-negative integers adding up to len(indices), meaning the offsets
    of their starts; decreasing offsets are refused in every mode (see the docstring).
    The default mode is lcr.sls's, sum (embedding_bag's own is mean)."""
    kwargs.setdefault("mode", "sum")
    if lengths is not None:
        if offsets is not None or kwargs.get("include_last_offset"):
            return None
        if indices.dim() != 1 or lengths.dim() != 1:
            return None
        try:  # lengths take the dtype rule of the offsets they stand for
            common = torch.promote_types(indices.dtype, lengths.dtype)
        except RuntimeError:
            return None
        if common not in (torch.int32, torch.int64):
            return None
        wide = lengths.long()
        if int(wide.sum()) != indices.numel() or (wide.numel() and (
                int(wide.min()) < 0 or int(wide.max()) > indices.numel())):
            return None
        offsets = (torch.cumsum(wide, 0) - wide).to(common)
    if (isinstance(offsets, torch.Tensor) and offsets.dim() == 1 and offsets.numel() > 1
            and not offsets.dtype.is_floating_point
            and bool((offsets.long()[1:] < offsets.long()[:-1]).any())):
        return None
    weights = kwargs.get("per_sample_weights")
    if weights is not None and weights.shape != indices.shape:
        return None
    last = (int(offsets[-1]) if isinstance(offsets, torch.Tensor) and offsets.dim() == 1
            and offsets.numel() and not offsets.dtype.is_floating_point else None)
    if kwargs.get("include_last_offset") is True and indices.dim() == 1 and last is not None \
            and 0 <= last < indices.numel():
        # The last bag ends at the last offset: embedding_bag's sum drops the indices past
        # it, its mean and max read them (see the docstring); lcr drops them in every mode.
        indices = indices[:last]
        if weights is not None:
            kwargs["per_sample_weights"] = weights[:last]
    if (kwargs["mode"] == "max" and weights is None and indices.dim() == 1 and indices.numel()
            and isinstance(offsets, torch.Tensor) and offsets.numel() <= kwargs.get("include_last_offset", 0)):
        kwargs["mode"] = "sum"  # no bag: embedding_bag's max crashes (SIGSEGV), sum answers []
    try:
        return F.embedding_bag(indices, table, offsets, **kwargs)
    except Exception:  # noqa: BLE001 - every refusal counts as one: RuntimeError, ValueError, ...
        return None


def lcr_sls(cache, store, indices, offsets=None, lengths=None, **kwargs):
    """lcr.sls's outcome (a tensor, or None where it refuses with a one-line error naming the
    argument)."""
    try:
        return lcr.sls(cache, store, indices, offsets, lengths=lengths, **kwargs)
    except REFUSALS as err:
        text = str(err)
        assert "\n" not in text and text, f"not one line: {text!r}"
        assert any(name in text for name in ARGUMENTS), f"names no argument: {text!r}"
        return None


def assert_same_outcome(expected, got, what):
    if expected is None or got is None:
        assert expected is None and got is None, (
            f"{what}: embedding_bag {'refused' if expected is None else 'answered'}, "
            f"lcr.sls {'refused' if got is None else 'answered'}")
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape, what
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True, msg=what)


def still_serves(cache, store, table):
    indices = torch.arange(table.shape[0]).flip(0)
    offsets = torch.tensor([0, indices.numel() // 2])
    assert torch.equal(lcr.sls(cache, store, indices, offsets),
                       F.embedding_bag(indices, table, offsets, mode="sum"))


# The cases: each failed before the fix -------------------------------------------------
def setup(rows=10, dim=3):
    table = table_of(rows, dim)
    return table, SlabHashCache(1, dim), HostStore(table, pin=False)


def test_lengths_that_do_not_add_up_are_refused():
    table, cache, store = setup()
    indices = torch.tensor([1, 2, 3, 4, 5])
    for lengths in ([1, 2], [1, 2, 3], [6, -1], [2, 4]):
        with pytest.raises(ValueError, match="lengths"):
            lcr.sls(cache, store, indices, lengths=torch.tensor(lengths))
    still_serves(cache, store, table)


def test_include_last_offset_ends_the_last_bag_at_the_last_offset():
    table, cache, store = setup()
    indices = torch.tensor([1, 2, 3, 4, 5])
    offsets = torch.tensor([0, 2, 4])
    got = lcr.sls(cache, store, indices, offsets, include_last_offset=True)
    assert torch.equal(got, F.embedding_bag(indices, table, offsets, mode="sum",
                                            include_last_offset=True))
    assert torch.equal(got[1], table[3] + table[4])  # indices[4] lies past the last offset
    # Indices past the last offset are not read at all: neither checked nor looked up.
    lcr.sls(cache, store, torch.tensor([1, 2, 99]), torch.tensor([0, 2]), include_last_offset=True)
    assert 99 not in cache.cached_keys()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_float_indices_are_refused_not_truncated(dtype):
    table, cache, store = setup()
    with pytest.raises(TypeError, match="indices"):
        lcr.sls(cache, store, torch.tensor([1.7, 2.2], dtype=dtype), torch.tensor([0]))
    with pytest.raises(TypeError, match="indices"):
        lcr.sls(cache, store, [1.7, 2.2], [0])
    with pytest.raises(TypeError, match="offsets"):
        lcr.sls(cache, store, torch.tensor([1, 2]), torch.tensor([0.0, 1.5]))
    still_serves(cache, store, table)


@pytest.mark.parametrize("offsets, ilo, argument", [
    ([1, 2], False, "offsets"),            # offsets[0] must be 0
    ([0, 3, 2], False, "offsets"),         # decreasing
    ([0, -1], False, "offsets"),           # negative
    ([0, 7], False, "offsets"),            # past the indices
    ([0, 2, 6], True, "offsets"),          # last offset past the indices
    ([], True, "offsets"),                 # include_last_offset needs the end of the last bag
])
def test_offsets_embedding_bag_refuses_are_refused(offsets, ilo, argument):
    table, cache, store = setup()
    indices = torch.tensor([1, 2, 3, 4, 5])
    offsets = torch.tensor(offsets, dtype=torch.int64)
    assert embedding_bag(table, indices, offsets, include_last_offset=ilo) is None
    with pytest.raises(ValueError, match=argument):
        lcr.sls(cache, store, indices, offsets, include_last_offset=ilo)
    still_serves(cache, store, table)


def test_indices_outside_the_table_are_refused_before_the_store_is_asked():
    table, cache, store = setup()
    for bad in (10, -1, INT64_MAX):
        with pytest.raises(IndexError, match="indices"):
            lcr.sls(cache, store, torch.tensor([1, bad]), torch.tensor([0]))
    still_serves(cache, store, table)


def test_modes_weights_and_2d_batches_match_embedding_bag():
    table, cache, store = setup(rows=20, dim=4)
    indices = torch.tensor([3, 7, 7, 19, 0, 5])
    offsets = torch.tensor([0, 2, 2, 5])
    weights = torch.tensor([0.5, 2.0, -1.0, 3.0, 1.0, 4.0])
    for mode in ("sum", "mean", "max"):
        assert torch.equal(lcr.sls(cache, store, indices, offsets, mode=mode),
                           F.embedding_bag(indices, table, offsets, mode=mode))
    assert torch.equal(lcr.sls(cache, store, indices, offsets, per_sample_weights=weights),
                       F.embedding_bag(indices, table, offsets, mode="sum",
                                           per_sample_weights=weights))
    square = indices.reshape(3, 2)
    assert torch.equal(lcr.sls(cache, store, square, mode="mean"),
                       F.embedding_bag(square, table, mode="mean"))
    for bad in (dict(mode="prod"), dict(mode="mean", per_sample_weights=weights),
                dict(per_sample_weights=weights[:5]), dict(per_sample_weights=weights.double()),
                dict(include_last_offset=1)):
        assert embedding_bag(table, indices, offsets, **bad) is None
        assert lcr_sls(cache, store, indices, offsets, **bad) is None, bad
    still_serves(cache, store, table)


def test_bool_and_small_integer_indices_read_as_embedding_bag_reads_them():
    """embedding_bag promotes indices with offsets: uint8/int16/bool indices pass with int64
    offsets (bool reads as 0 and 1), never with offsets of their own dtype."""
    table, cache, store = setup()
    for dtype in (torch.uint8, torch.int16, torch.bool):
        indices = torch.tensor([1, 0, 3]).to(dtype)
        for offsets in (torch.tensor([0, 1]), torch.tensor([0, 1]).to(dtype)):
            assert_same_outcome(embedding_bag(table, indices, offsets),
                                lcr_sls(cache, store, indices, offsets), f"{dtype} {offsets.dtype}")


# The fuzz suite: differential against embedding_bag --------------------------------------------
def one_in(draw, k: int) -> bool:
    """True about once in ``k`` draws (sampled_from draws evenly; integers favour ends)."""
    return draw(st.sampled_from(range(k))) == 0


def pick(draw, common: list, rare: list, rare_in: int):
    return draw(st.sampled_from(rare if one_in(draw, rare_in) else common))


@st.composite
def bag_batches(draw):
    """Random arguments for embedding_bag / lcr.sls: about half of them valid."""
    rows, dim = draw(st.integers(1, 12)), draw(st.integers(1, 4))
    table_dtype = pick(draw, [torch.float32], [torch.float16], 4)
    shape = pick(draw, ["1d", "1d", "1d", "2d"], ["0d", "3d"], 12)
    n = draw(st.integers(0, 12))
    wild = st.one_of(st.integers(-3, rows + 3), st.integers(-2 ** 63, INT64_MAX))
    values = draw(st.lists(st.integers(0, rows - 1) if not one_in(draw, 4) else wild,
                           min_size=n, max_size=n))
    index_dtype = pick(draw, [torch.int64, torch.int32], ANY_DTYPES, 4)
    indices = torch.tensor(values, dtype=torch.int64).to(index_dtype)
    if shape == "2d":
        width = 0 if one_in(draw, 10) else draw(st.integers(1, 4))
        indices = (indices[:(n // width) * width].reshape(-1, width) if width
                   else indices[:0].reshape(draw(st.integers(0, 2)), 0))
    elif shape == "0d":
        indices = indices[:1].reshape(()) if n else torch.tensor(1)
    elif shape == "3d":
        indices = indices.reshape(1, 1, -1)
    count = indices.numel() if indices.dim() else 1
    form = (pick(draw, ["none"], ["offsets", "lengths"], 6) if shape == "2d" else
            pick(draw, ["offsets", "offsets", "lengths"], ["none", "both"], 12))
    bag_lengths = _split(count, draw(st.lists(st.integers(0, count), max_size=5)))
    if one_in(draw, 6):  # lengths that need not fit
        bag_lengths = draw(st.lists(st.integers(0, 4), max_size=6))
    starts = np.cumsum([0] + bag_lengths)
    include_last = draw(st.booleans())
    if include_last and one_in(draw, 3):  # the last bag ends before the last index
        starts[-1] = draw(st.integers(int(starts[-2]) if len(starts) > 1 else 0, int(starts[-1])))
    offsets = lengths = None
    if form in ("offsets", "both"):
        offsets = _mutate(draw, list(starts if include_last else starts[:-1]), count)
        offsets = torch.tensor(offsets, dtype=torch.int64).to(
            pick(draw, [torch.int64, torch.int32], ANY_DTYPES, 5))
        if one_in(draw, 30):
            offsets = offsets.reshape(1, -1)
    if form in ("lengths", "both"):
        lengths = torch.tensor(_mutate(draw, list(bag_lengths), count), dtype=torch.int64).to(
            pick(draw, [torch.int64, torch.int32], ANY_DTYPES, 5))
    mode = pick(draw, ["sum", "sum", "mean", "max"], ["prod", "SUM"], 20)
    per_sample_weights = None
    if one_in(draw, 5):
        weights_shape = indices.shape if not one_in(draw, 6) else (count + 1,)
        weights_dtype = table_dtype if not one_in(draw, 6) else torch.float64
        per_sample_weights = torch.arange(math.prod(weights_shape), dtype=torch.float32).reshape(
            weights_shape).remainder(3).sub(1).to(weights_dtype)
    return dict(rows=rows, dim=dim, table_dtype=table_dtype, indices=indices, offsets=offsets,
                lengths=lengths, include_last_offset=include_last, mode=mode,
                per_sample_weights=per_sample_weights)


def _split(total: int, cuts: list[int]) -> list[int]:
    bounds = [0] + sorted(min(c, total) for c in cuts) + [total]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _mutate(draw, values: list[int], count: int) -> list[int]:
    """Now and then: one value made negative, huge, off by one, or the list emptied or
    reversed."""
    kind = pick(draw, ["keep"], ["negative", "huge", "plus", "minus", "empty", "reverse",
                                 "extra"], 4)
    values = [int(v) for v in values]
    if kind == "empty":
        return []
    if kind == "reverse":
        return values[::-1]
    if kind == "extra":
        return values + [draw(st.integers(-2, count + 2))]
    if not values or kind == "keep":
        return values
    at = draw(st.integers(0, len(values) - 1))
    values[at] = {"negative": -1 - values[at], "huge": draw(st.integers(2 ** 40, INT64_MAX)),
                  "plus": values[at] + 1, "minus": values[at] - 1}[kind]
    return values


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=bag_batches())
def test_sls_is_embedding_bag_or_both_refuse(batch):
    table = table_of(batch["rows"], batch["dim"], batch["table_dtype"])
    cache = SlabHashCache(1, batch["dim"], dtype=batch["table_dtype"])
    store = HostStore(table, pin=False)
    args = {k: batch[k] for k in ("indices", "offsets", "lengths")}
    kwargs = {k: batch[k] for k in ("include_last_offset", "mode", "per_sample_weights")}
    expected = embedding_bag(table, **args, **kwargs)
    got = lcr_sls(cache, store, **args, **kwargs)
    assert_same_outcome(expected, got, repr(batch))
    still_serves(cache, store, table)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=bag_batches())
def test_checks_deferred_to_the_gpu_sync_refuse_alike_and_read_in_bounds(batch):
    """On a GPU the value rules run after find's one synchronisation (``defer``); here the
    same path runs on the host: the same refusals, the same bags, and before the check the
    offsets a reduce reads stay monotone within the lookups whatever was given."""
    args = {k: batch[k] for k in ("indices", "offsets", "lengths", "include_last_offset", "mode",
                                  "per_sample_weights")}
    outcomes = []
    for defer in (False, True):
        try:
            bags = read_bags(**args, rows=batch["rows"], dtype=batch["table_dtype"], defer=defer)
            if bags.offsets is not None and bags.offsets.numel():
                offsets = bags.offsets
                assert int(offsets.min()) >= 0 and int(offsets.max()) <= bags.lookups.numel()
                assert bool((offsets[1:] >= offsets[:-1]).all())
            bags.check()
            outcomes.append((bags.lookups.tolist(), bags.shape, None if bags.offsets is None
                             else bags.offsets.tolist()))
        except REFUSALS as err:
            outcomes.append(f"{type(err).__name__}: {err}")
    assert outcomes[0] == outcomes[1]


# The cache's lookup entry: whole int64 range, wrong dtypes and shapes ---------------------------
class KeyedStore:
    """Every int64 row id has a row: its key spread over ``dim`` values."""

    def __init__(self, dim: int):
        self.dim = dim

    def fetch(self, keys):
        keys = keys.cpu().to(torch.float64)
        return torch.stack([keys.remainder(1000 + i) for i in range(self.dim)], 1).float()


GOOD_KEYS = st.lists(st.one_of(st.integers(0, 200), st.integers(0, INT64_MAX)), max_size=40)
BAD_KEYS = st.one_of(
    st.lists(st.integers(-2 ** 63, -1), min_size=1, max_size=5).map(lambda k: k + [3]),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5),
    st.lists(st.booleans(), min_size=1, max_size=5),
    st.lists(st.integers(2 ** 63, 2 ** 64 - 1), min_size=1, max_size=3),
    st.just([[1, 2], [3]]), st.just("abc"), st.just(None), st.just([None, 1]),
    st.lists(st.integers(0, 100), min_size=1, max_size=5).map(lambda k: np.array(k, np.float32)),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.one_of(GOOD_KEYS.map(lambda k: ("good", k)),
                                  BAD_KEYS.map(lambda k: ("bad", k))), min_size=1, max_size=6),
       policy=st.sampled_from(["lru", "laru"]))
def test_cache_lookups_refuse_bad_keys_and_keep_serving(batches, policy):
    """Good batches decide as the batch reference decides and gather their keys' rows;
    a bad batch raises one-line ValueError/TypeError and changes nothing."""
    dim = 2
    cache, reference, store = SlabHashCache(1, dim, policy=policy), SlabsetReference(1, policy), \
        KeyedStore(dim)
    for kind, keys in batches:
        before = {name: getattr(cache.meta, name).clone() for name in vars(cache.meta)}
        clock = cache.clock
        if kind == "bad":
            for call in (cache.find, cache.access):
                with pytest.raises((ValueError, TypeError)) as err:
                    call(keys)
                assert "\n" not in str(err.value) and "keys" in str(err.value)
            for name, tensor in before.items():
                assert torch.equal(getattr(cache.meta, name), tensor), name
            assert cache.clock == clock
            continue
        expected = reference.access(keys)
        plan = cache.find(torch.tensor(keys, dtype=torch.int64))
        cache.commit(plan, store.fetch(plan.missing_keys))
        assert plan.missing_keys.tolist() == [k for k, o in zip(expected.keys, expected.outcome)
                                              if o != HIT]
        rows = cache.gather(plan)
        assert torch.equal(rows, store.fetch(torch.tensor(keys, dtype=torch.int64)).reshape(-1, dim))
    assert cache.cached_keys() == reference.cached_keys()


# The check of values on a GPU: with mean, deferred to find's one synchronisation; with sum
# (the fused path: no synchronisation at all) raised by the next call or ``fused.check``.
@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("case", [
    dict(indices=[1, 2, 3], offsets=[1, 2]),
    dict(indices=[1, 2, 3], offsets=[0, 3, 2]),
    dict(indices=[1, 2, 3], offsets=[0, 9]),
    dict(indices=[1, 2, 3], offsets=[0, -1]),
    dict(indices=[1, 2, 3], lengths=[1, 1]),
    dict(indices=[1, 2, 3], lengths=[4, -1]),
    dict(indices=[1, -2, 3], offsets=[0]),
    dict(indices=[1, 20, 3], offsets=[0]),
    dict(indices=[1, 2, 3], offsets=[0, 2, 5], include_last_offset=True),
])
def test_bad_values_on_the_gpu_are_refused_and_leave_the_cache_working(case, mode):
    from lcr.embedding import fused
    table = table_of(10, 4)
    cache, store = SlabHashCache(1, 4, device="cuda"), HostStore(table)
    case = {k: torch.tensor(v, device="cuda") if isinstance(v, list) else v for k, v in case.items()}
    with pytest.raises(REFUSALS):
        lcr.sls(cache, store, mode=mode, **case)
        if mode == "sum":  # fused: refused once the device has passed the batch's checks
            fused.check(cache)
    torch.cuda.synchronize()  # no device-side fault
    assert all(0 <= key < 10 for key in cache.cached_keys())
    indices, offsets = torch.arange(10, device="cuda"), torch.tensor([0, 4], device="cuda")
    torch.testing.assert_close(lcr.sls(cache, store, indices, offsets, mode=mode).cpu(),
                               F.embedding_bag(indices.cpu(), table, offsets.cpu(), mode=mode))
