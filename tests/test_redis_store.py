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
