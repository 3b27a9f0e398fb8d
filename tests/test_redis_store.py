"""RedisStore against a real redis-server, started per test module on a unix socket."""
from __future__ import annotations

import shutil
import subprocess
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("redis")

import lcr  # noqa: E402
from lcr.embedding.stores import RedisStore, StoreError, StoreUnavailable  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server not installed (.ci/run installs it)")


def start_redis(directory):
    socket = directory / "redis.sock"
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", str(socket), "--save", "",
         "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not socket.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.02)
    return server, f"unix://{socket}"


@pytest.fixture
def redis_url(tmp_path):
    server, url = start_redis(tmp_path)
    yield url, server
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_round_trip_bit_exactly(redis_url, dtype):
    url, _ = redis_url
    table = np.random.default_rng(0).standard_normal((3000, 24)).astype(dtype)
    store = RedisStore(url, dim=24, dtype=dtype, batch=500)  # several MGETs per pipeline
    store.load(table, chunk=700)
    keys = torch.tensor([2999, 0, 17, 17, 1500])
    rows = store.fetch(keys)
    assert rows.dtype == getattr(torch, dtype)
    assert np.array_equal(rows.numpy(), table[keys.numpy()])


def test_sls_through_redis_equals_embedding_bag(redis_url):
    url, _ = redis_url
    table = np.random.default_rng(1).standard_normal((2000, 8)).astype(np.float32)
    store = RedisStore(url, dim=8)
    store.load(table)
    cache = lcr.SlabHashCache(2, 8, policy="laru")
    rng = np.random.default_rng(2)
    for _ in range(5):
        indices = torch.as_tensor(rng.integers(0, 2000, size=400))
        lengths = torch.full((20,), 20)
        got = lcr.sls(cache, store, indices, lengths=lengths)
        expected = torch.nn.functional.embedding_bag(indices, torch.from_numpy(table),
                                                     torch.arange(0, 400, 20), mode="sum")
        torch.testing.assert_close(got, expected)


def test_unreachable_redis_fails_at_construction(tmp_path):
    with pytest.raises(StoreUnavailable, match="cannot reach redis"):
        RedisStore(f"unix://{tmp_path}/nothing.sock", dim=4, timeout=0.5)


def test_missing_row_and_dead_server_raise_without_touching_the_cache(redis_url):
    url, server = redis_url
    store = RedisStore(url, dim=4, timeout=1.0)
    store.load(np.ones((100, 4), dtype=np.float32))
    cache = lcr.SlabHashCache(1, 4)
    lcr.sls(cache, store, torch.arange(50), lengths=torch.full((5,), 10))
    with pytest.raises(StoreError, match="no valid row 100"):
        lcr.sls(cache, store, torch.tensor([1, 100]), lengths=torch.tensor([2]))
    keys_before, values_before = cache.meta.keys.clone(), cache.values.clone()
    server.terminate()
    server.wait(timeout=10)
    with pytest.raises(StoreError, match="failed"):
        lcr.sls(cache, store, torch.arange(40, 90), lengths=torch.full((5,), 10))
    assert torch.equal(cache.meta.keys, keys_before)
    assert torch.equal(cache.values, values_before)
    # Hits alone need no store: the cache still serves them.
    out = lcr.sls(cache, store, torch.arange(10), lengths=torch.tensor([10]))
    assert torch.equal(out, torch.full((1, 4), 10.0))


class WrongRowsStore:
    """A store with a bug: it answers rows of another shape or dtype."""

    def __init__(self, rows):
        self.rows = rows

    def fetch(self, keys):
        return self.rows(len(keys))


@pytest.mark.parametrize("make_rows", [
    lambda n: torch.ones(n, 3),                        # wrong width
    lambda n: torch.ones(max(n - 1, 0), 4),            # a row short
    lambda n: torch.ones(n, 4, dtype=torch.float64),   # wrong dtype
    lambda n: torch.ones(n * 4, dtype=torch.float32),  # flat
])
def test_wrong_rows_fail_the_batch_and_leave_the_cache_untouched(make_rows):
    cache = lcr.SlabHashCache(1, 4)
    good = lcr.embedding.stores.HostStore(torch.arange(400.0).reshape(100, 4), pin=False)
    lcr.sls(cache, good, torch.arange(20), lengths=torch.full((2,), 10))
    keys_before, stamps_before, values_before = (cache.meta.keys.clone(), cache.meta.stamps.clone(),
                                                 cache.values.clone())
    with pytest.raises(StoreError, match="wrong rows"):
        lcr.sls(cache, WrongRowsStore(make_rows), torch.arange(10, 40), lengths=torch.full((3,), 10))
    assert torch.equal(cache.meta.keys, keys_before) and torch.equal(cache.meta.stamps, stamps_before)
    assert torch.equal(cache.values, values_before)
    out = lcr.sls(cache, good, torch.arange(10, 40), lengths=torch.full((3,), 10))  # still right
    expected = torch.nn.functional.embedding_bag(torch.arange(10, 40), good.table, torch.tensor([0, 10, 20]),
                                                 mode="sum")
    assert torch.equal(out, expected)


def test_a_store_reading_rows_with_another_layout_is_refused(redis_url):
    url, _ = redis_url
    table = np.random.default_rng(4).standard_normal((50, 8)).astype(np.float32)
    RedisStore(url, dim=8, dtype="float32").load(table)
    # float16 x 16 has the same byte length as float32 x 8: it would read garbage.
    with pytest.raises(StoreUnavailable, match="written as dim=8,dtype=float32"):
        RedisStore(url, dim=16, dtype="float16")
    # A float16 cache over the float32 store converts the values correctly.
    store = RedisStore(url, dim=8, dtype="float32")
    cache = lcr.SlabHashCache(1, 8, dtype="float16")
    out = lcr.sls(cache, store, torch.arange(50), lengths=torch.full((5,), 10))
    expected = torch.from_numpy(table.astype(np.float16)).reshape(5, 10, 8).float().sum(1)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)


def test_the_password_never_appears(tmp_path, capsys):
    import json

    from lcr.cli import main

    secret = "s3cret-Pa55"
    socket_path = tmp_path / "auth.sock"
    server = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(socket_path), "--save", "",
                               "--appendonly", "no", "--requirepass", secret, "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        url = f"unix://{socket_path}?password={secret}"
        store = RedisStore(url, dim=4)
        assert secret not in repr(store) and "***" in repr(store)
        with pytest.raises(StoreUnavailable) as err:
            RedisStore(f"unix://{socket_path}?password=wrong-{secret}", dim=4)
        assert secret not in str(err.value)
        out = tmp_path / "bench.json"
        assert main(["bench", "sls", "--store", url, "--table-rows", "200", "--dim", "4", "--batch-sizes", "8",
                     "--pooling", "4", "--batches", "1", "--warmup", "0", "--policies", "lru",
                     "--cache-ratio", "0.1", "--json", str(out)]) == 0
        printed = capsys.readouterr()
        assert secret not in printed.out + printed.err and secret not in out.read_text()
        assert json.loads(out.read_text())["args"]["store"].endswith("password=***")
    finally:
        server.kill()
        server.wait(10)


# Issue 39, item 3: the layout record is checked by every load and fetch batch, atomically --------
def layout_error(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_two_layouts_on_one_empty_prefix_cannot_both_write(redis_url):
    """Both open the empty prefix (the check at construction passes for both); the first
    load claims it, the second is refused before it writes a row, and each store reads only
    rows written in its own layout. float32 x 16 and float16 x 32 rows have the same size."""
    url, _ = redis_url
    first, second = RedisStore(url, 16), RedisStore(url, 32, dtype="float16")
    table = np.random.default_rng(5).standard_normal((40, 16)).astype(np.float32)
    first.load(table)
    with pytest.raises(StoreError) as err:
        second.load(np.ones((40, 32), dtype=np.float16))
    text = layout_error(err)
    assert "'lcr:row:'" in text and "dim=16,dtype=float32" in text and "dim=32,dtype=float16" in text
    assert np.array_equal(first.fetch(torch.arange(40)).numpy(), table)  # not overwritten
    with pytest.raises(StoreError, match="dim=16,dtype=float32.*dim=32,dtype=float16"):
        second.fetch(torch.arange(3))


def test_a_reader_opened_before_another_layout_was_loaded_refuses_its_rows(redis_url):
    url, _ = redis_url
    reader = RedisStore(url, 16)  # the prefix is empty: nothing to refuse yet
    RedisStore(url, 32, dtype="float16").load(np.zeros((10, 32), dtype=np.float16))
    cache = lcr.SlabHashCache(1, 16)
    with pytest.raises(StoreError, match="dim=32,dtype=float16") as err:
        lcr.sls(cache, reader, torch.arange(10), lengths=torch.tensor([10]))
    layout_error(err)
    assert cache.cached_keys() == set() and cache.clock == 0  # the cache is as it was


def test_racing_loads_of_two_layouts_leave_one_layout(redis_url):
    """Two threads load many chunks into one empty prefix at once: exactly one load is
    refused, and every row there is the winner's."""
    import threading

    url, _ = redis_url
    stores = [RedisStore(url, 8, batch=100), RedisStore(url, 16, dtype="float16", batch=100)]
    tables = [np.full((3000, 8), 1.5, np.float32), np.full((3000, 16), -2.0, np.float16)]
    barrier, errors = threading.Barrier(2), [None, None]

    def load(i):
        barrier.wait()
        try:
            stores[i].load(tables[i], chunk=50)
        except StoreError as err:
            errors[i] = err

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(e is not None for e in errors) == 1, errors
    winner = errors.index(None)
    assert np.array_equal(stores[winner].fetch(torch.arange(3000)).numpy(), tables[winner])
    with pytest.raises(StoreError, match="written as"):
        stores[1 - winner].fetch(torch.arange(5))
