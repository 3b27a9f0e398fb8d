"""Backing stores under bad input and competing layouts: issue 39, item 3, and its fuzz suite.

- HostStore and RedisStore ``fetch`` with keys from the whole int64 range and beyond,
  floats, booleans, ragged lists, strings, None, any shape: the rows, a one-line
  ``StoreError`` for a row the store lacks, or a one-line ``TypeError``/``ValueError`` for
  keys that are not row ids; a later good call still answers right.
- RedisStore ``load`` with wrong shapes, dtypes, values outside the row dtype's range,
  bad ``start``/``chunk``: refused in one line before anything is written.
- A stateful test (hypothesis ``RuleBasedStateMachine``) of stores of several layouts
  opening, loading, reading and deleting one prefix of a real redis-server, and of a real
  Redis Cluster: whatever the order, rows are only written and served under the layout
  that claimed the prefix; every other store gets a one-line ``LayoutMismatch`` (or
  ``StoreUnavailable`` when it opens after the claim).

Run time about 20 s on 2 shared cores; the hypothesis tests take 600 (HostStore fetch) and
400 (RedisStore load and fetch) examples, and 150 (server) + 50 (cluster) runs of up to 12
steps of the state machine.
"""
from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, \
    run_state_machine_as_test

torch = pytest.importorskip("torch")
redis = pytest.importorskip("redis")

from lcr.embedding.stores import (HostStore, LayoutMismatch, RedisStore, StoreError,  # noqa: E402
                                  StoreUnavailable)
from test_redis_cluster import cluster  # noqa: E402,F401 - a real 6-node cluster, for this module
from test_redis_store import start_redis  # noqa: E402

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server not installed (.ci/run installs it)")
needs_cluster = pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
                                   reason="redis-server/redis-cli not installed (.ci/run installs them)")
INT64_MAX = 2 ** 63 - 1
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])


def one_line(err) -> str:
    text = str(err)
    assert text and "\n" not in text, f"not one line: {text!r}"
    return text


# Keys: what fetch is given --------------------------------------------------------------------------
def row_keys(rows: int):
    """(keys, expected): expected is the list of row ids when every key is an integer row id
    within int64, "missing" when some of them lie outside [0, rows), or "refused"."""
    ints = st.lists(st.integers(0, rows - 1), max_size=20)
    some = st.lists(st.integers(0, rows - 1), min_size=1, max_size=20)  # [] is float32 to torch
    anywhere = st.lists(st.one_of(st.integers(0, rows - 1), st.integers(-2 ** 63, INT64_MAX)),
                        min_size=1, max_size=8)

    def as_ids(keys):
        flat = [int(k) for k in np.asarray(keys, dtype=np.int64).reshape(-1)]
        return flat if all(0 <= k < rows for k in flat) else "missing"

    return st.one_of(
        some.map(lambda k: (k, k)),
        ints.map(lambda k: (torch.tensor(k, dtype=torch.int32), k)),
        ints.map(lambda k: (np.array(k, dtype=np.uint8) if max(k, default=0) < 256 else np.array(k), k)),
        ints.filter(lambda k: len(k) % 2 == 0).map(lambda k: (torch.tensor(k).reshape(-1, 2) if k else
                                                              torch.empty(0, 2, dtype=torch.int64), k)),
        anywhere.map(lambda k: (torch.tensor(k), as_ids(k))),
        st.lists(st.floats(allow_nan=True), min_size=1, max_size=4).map(lambda k: (k, "refused")),
        ints.filter(bool).map(lambda k: (torch.tensor(k, dtype=torch.float32), "refused")),
        st.lists(st.booleans(), min_size=1, max_size=4).map(lambda k: (torch.tensor(k), "refused")),
        st.lists(st.integers(2 ** 63, 2 ** 64 - 1), min_size=1, max_size=3).map(
            lambda k: (np.array(k, dtype=np.uint64), "refused")),
        st.lists(st.integers(2 ** 63, 2 ** 70), min_size=1, max_size=3).map(lambda k: (k, "refused")),
        st.sampled_from([[[1, 2], [3]], "abc", None, [None, 1], {"a": 1}]).map(lambda k: (k, "refused")),
    )


def assert_fetch(store, keys, expected, table):
    """The documented outcome of ``store.fetch(keys)``; ``table`` holds the rows as stored."""
    if expected == "refused":
        with pytest.raises((TypeError, ValueError)) as err:
            store.fetch(keys)
        assert "keys" in one_line(err.value)
    elif expected == "missing":
        with pytest.raises(StoreError) as err:
            store.fetch(keys)
        assert "row" in one_line(err.value)
    else:
        got = store.fetch(keys)
        assert got.shape == (len(expected), table.shape[1]) and got.dtype == store.dtype
        assert np.array_equal(got.numpy(), table[expected], equal_nan=True)


# HostStore ------------------------------------------------------------------------------------------
@settings(FUZZ, max_examples=600)
@given(data=st.data(), rows=st.integers(1, 40), dtype=st.sampled_from([torch.float32, torch.float16]))
def test_host_store_fetch_answers_rows_or_refuses_in_one_line(data, rows, dtype):
    table = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3).to(dtype)
    store = HostStore(table, pin=False)
    keys, expected = data.draw(row_keys(rows))
    assert_fetch(store, keys, expected, table.numpy())
    assert_fetch(store, [rows - 1, 0], [rows - 1, 0], table.numpy())  # a later good call


def test_an_empty_list_of_keys_fetches_no_rows_and_finds_no_keys():
    assert HostStore(torch.zeros(3, 2), pin=False).fetch([]).shape == (0, 2)
    from lcr import SlabHashCache

    cache = SlabHashCache(1, 2)
    assert cache.find([]).missing_keys.numel() == 0 and cache.access([]).keys.numel() == 0


@pytest.mark.parametrize("table, error", [
    (np.zeros(4, np.float32), ValueError),            # 1-D
    (np.zeros((2, 2, 2), np.float32), ValueError),    # 3-D
    (np.zeros((3, 2)), TypeError),                    # float64: no cache row dtype
    (np.zeros((3, 2), np.int64), TypeError),
    ([[1, 2], [3]], TypeError),                       # ragged
    ("table", TypeError),                             # not numbers
    (np.float32(1.0), ValueError),                    # 0-D
])
def test_host_store_refuses_a_table_the_cache_cannot_hold(table, error):
    with pytest.raises(error) as err:
        HostStore(table, pin=False)
    one_line(err.value)


# RedisStore: load and fetch -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (.ci/run installs it)")
    server, url = start_redis(tmp_path_factory.mktemp("faults"))
    yield url
    server.terminate()
    server.wait(timeout=10)


_prefixes = itertools.count()


def fresh_prefix() -> str:
    return f"fuzz{next(_prefixes)}:"


def keys_under(url: str, prefix: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(1 for _ in client.scan_iter(match=prefix + "*", count=1000))
    finally:
        client.close()


@st.composite
def loads(draw, dim: int, dtype: str):
    """(table, start, chunk, expected): expected is the stored rows (in ``dtype``), or the
    exception type of a refusal."""
    rows = draw(st.integers(0, 12))
    width = dim if draw(st.integers(0, 5)) else draw(st.integers(0, 6))
    shape = draw(st.sampled_from([(rows, width)] * 8 + [(rows,), (rows, width, 1)]))
    kind = draw(st.sampled_from(["float64"] * 3 + ["float32", "float16", "int64", "uint64", "bool", "str"]))
    special = st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 1e300, -1e300, 7e4, 6.5e4, 1e-8])
    values = draw(st.lists(st.one_of(st.floats(-100, 100), special), min_size=int(np.prod(shape)),
                           max_size=int(np.prod(shape))))
    table = np.array(values, dtype=np.float64).reshape(shape)
    if kind == "str":
        table = table.astype(str)
    elif kind in ("int64", "uint64", "bool"):
        table = np.nan_to_num(table, posinf=9, neginf=-9).clip(0 if kind == "uint64" else -9e18,
                                                               9e18).astype(kind)
    else:
        with np.errstate(over="ignore"):
            table = table.astype(kind)
    start = draw(st.one_of(st.integers(0, 50), st.integers(-5, -1), st.integers(INT64_MAX - 20, 2 ** 64)))
    chunk = draw(st.sampled_from([10_000, 1, 3, 0, -2]))
    if len(shape) != 2 or shape[1] != dim:
        return table, start, chunk, ValueError
    if kind in ("str", "bool"):
        return table, start, chunk, TypeError
    with np.errstate(over="ignore", invalid="ignore"):
        stored = table.astype(dtype)
    if (np.isinf(stored) & ~np.isinf(table.astype(np.float64))).any():
        return table, start, chunk, ValueError  # a value outside float16/float32's range
    if start < 0 or start + rows > 2 ** 63 or chunk < 1:
        return table, start, chunk, ValueError
    return table, start, chunk, stored


@needs_redis
@settings(FUZZ, max_examples=400)
@given(data=st.data(), dim=st.integers(1, 5), dtype=st.sampled_from(["float32", "float16"]))
def test_redis_store_load_and_fetch_answer_or_refuse_in_one_line(redis_server, data, dim, dtype):
    prefix = fresh_prefix()
    store = RedisStore(redis_server, dim, dtype=dtype, prefix=prefix, batch=4)
    table, start, chunk, expected = data.draw(loads(dim, dtype))
    if isinstance(expected, type):
        with pytest.raises(expected) as err:
            store.load(table, start=start, chunk=chunk)
        one_line(err.value)
        assert keys_under(redis_server, prefix) == 0  # refused before anything was written
        expected = np.empty((0, dim), dtype=dtype)
        start = 0
    else:
        store.load(table, start=start, chunk=chunk)
    # Rows are read back as stored, whatever else is asked for alongside.
    loaded = np.full((start + len(expected) if start < 1000 else 0, dim), np.nan, dtype=dtype)
    if start < 1000:
        loaded[start:] = expected
        present = list(range(start, start + len(expected)))
        rows = len(loaded)
        keys, answer = data.draw(row_keys(max(rows, 1)))
        if isinstance(answer, list) and not all(k in present for k in answer):
            answer = "missing"
        assert_fetch(store, keys, answer, loaded)
    else:  # rows near 2^63: read the last one back
        assert np.array_equal(store.fetch([start + len(expected) - 1]).numpy()[0], expected[-1],
                              equal_nan=True) if len(expected) else True
    good = np.arange(dim, dtype=dtype).reshape(1, dim)
    store.load(good, start=3)  # a later good call still works
    assert np.array_equal(store.fetch(torch.tensor([3])).numpy(), good)


@pytest.mark.parametrize("kwargs", [
    dict(dim=0), dict(dim=-3), dict(dim=2.5), dict(dim=True), dict(dim=4, dtype="int8"),
    dict(dim=4, dtype="float64"), dict(dim=4, dtype=torch.bfloat16), dict(dim=4, dtype=None),
    dict(dim=4, batch=0), dict(dim=4, prefix=b"bytes:"), dict(dim=4, timeout=0),
    dict(dim=4, timeout=float("nan")),
])
def test_redis_store_settings_are_refused_in_one_line(redis_server, kwargs):
    with pytest.raises(StoreUnavailable) as err:
        RedisStore(redis_server, **kwargs)
    one_line(err.value)


# Layouts competing for one prefix: a state machine ----------------------------------------------------
LAYOUTS = [(4, "float32"), (8, "float16"), (2, "float32"), (4, "float16")]  # (4, f32) and (8, f16): same bytes


class LayoutMachine(RuleBasedStateMachine):
    """Stores of several layouts on one prefix. Model: the layout that claimed the prefix
    (None until a load) and the rows written under it, as its stores read them."""

    url: str = ""

    def __init__(self):
        super().__init__()
        self.prefix = fresh_prefix()
        self.stores: list[RedisStore] = []
        self.claimed = None
        self.rows: dict[int, np.ndarray] = {}

    @initialize(layout=st.sampled_from(LAYOUTS))
    def first_store(self, layout):
        self.open(layout)

    @rule(layout=st.sampled_from(LAYOUTS))
    def open(self, layout):
        dim, dtype = layout
        if self.claimed not in (None, layout):
            with pytest.raises(StoreUnavailable, match="written as") as err:
                RedisStore(self.url, dim, dtype=dtype, prefix=self.prefix, batch=3)
            one_line(err.value)
            return
        self.stores.append(RedisStore(self.url, dim, dtype=dtype, prefix=self.prefix, batch=3))

    def layout_of(self, store):
        return (store.dim, str(store.dtype).removeprefix("torch."))

    @rule(data=st.data())
    def load(self, data):
        store = data.draw(st.sampled_from(self.stores))
        start, count = data.draw(st.integers(0, 20)), data.draw(st.integers(1, 8))
        table = data.draw(st.integers(0, 2 ** 16)) + np.arange(count * store.dim).reshape(count, store.dim)
        table = (table % 1000).astype(self.layout_of(store)[1])
        if self.claimed not in (None, self.layout_of(store)):
            with pytest.raises(LayoutMismatch) as err:
                store.load(table, start=start, chunk=data.draw(st.sampled_from([1, 3, 100])))
            assert self.prefix in one_line(err.value) and "this store reads" in str(err.value)
            return
        store.load(table, start=start, chunk=data.draw(st.sampled_from([1, 3, 100])))
        self.claimed = self.layout_of(store)
        self.rows.update({start + i: row for i, row in enumerate(table)})

    @rule(data=st.data())
    def fetch(self, data):
        store = data.draw(st.sampled_from(self.stores))
        keys = data.draw(st.lists(st.integers(0, 30), min_size=1, max_size=10))
        if self.claimed not in (None, self.layout_of(store)):
            with pytest.raises(LayoutMismatch) as err:
                store.fetch(torch.tensor(keys))
            assert self.prefix in one_line(err.value)
        elif all(k in self.rows for k in keys):
            assert np.array_equal(store.fetch(torch.tensor(keys)).numpy(),
                                  np.stack([self.rows[k] for k in keys]))
        else:
            with pytest.raises(StoreError, match="no valid row") as err:
                store.fetch(torch.tensor(keys))
            one_line(err.value)

    @precondition(lambda self: self.claimed is not None)
    @rule()
    def delete_prefix(self):
        client = self.stores[0].client
        for name in list(client.scan_iter(match=self.prefix + "*", count=1000)):
            client.delete(name)
        self.claimed, self.rows = None, {}

    @invariant()
    def stores_stay_usable(self):
        assert all(store.client is not None for store in self.stores)

    def teardown(self):
        for store in self.stores:
            store.close()


@needs_redis
def test_layouts_on_one_redis_prefix_never_mix(redis_server):
    LayoutMachine.url = redis_server
    run_state_machine_as_test(LayoutMachine, settings=settings(
        max_examples=150, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


@pytest.fixture(scope="module")
def cluster_url(cluster):
    ports, _ = cluster
    return f"redis://127.0.0.1:{ports[0]}/0"


@needs_cluster
def test_layouts_on_one_cluster_prefix_never_mix(cluster_url):
    """The same on a Redis Cluster, where a batch's rows spread over many hash slots:
    each slot's rows are written and read with that slot's layout record."""
    store = RedisStore(cluster_url, 4, prefix="probe:")
    assert store.cluster
    store.close()
    LayoutMachine.url = cluster_url
    run_state_machine_as_test(LayoutMachine, settings=settings(
        max_examples=50, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


@needs_cluster
def test_two_layouts_on_one_cluster_prefix_cannot_both_write(cluster_url):
    first = RedisStore(cluster_url, 16, prefix="two:")
    second = RedisStore(cluster_url, 32, dtype="float16", prefix="two:")
    table = np.random.default_rng(6).standard_normal((600, 16)).astype(np.float32)  # every hash tag
    first.load(table, chunk=100)
    with pytest.raises(LayoutMismatch, match="dim=16,dtype=float32.*dim=32,dtype=float16"):
        second.load(np.zeros((600, 32), np.float16))
    with pytest.raises(LayoutMismatch):
        second.fetch(torch.arange(600))
    assert np.array_equal(first.fetch(torch.arange(600)).numpy(), table)
