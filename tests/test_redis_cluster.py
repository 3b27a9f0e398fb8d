"""RedisStore against a real Redis Cluster (3 masters, 3 replicas), through a master failover."""
from __future__ import annotations

import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
redis = pytest.importorskip("redis")

import lcr  # noqa: E402
from lcr.embedding.stores import RedisStore, StoreError  # noqa: E402
from ports import free_port  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
                                reason="redis-server/redis-cli not installed (.ci/run installs them)")


def free_cluster_ports(count: int) -> list[int]:
    """Ports p with p + 10000 (the cluster bus) free as well."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(offsets=(0, 10000))
        if port not in ports:
            ports.append(port)
    return ports


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster")
    ports = free_cluster_ports(6)
    servers = {}
    for port in ports:
        servers[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "1000",
             "--repl-diskless-sync-delay", "0",
             "--save", "", "--appendonly", "no", "--dir", str(directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for port in ports:
            wait_until(lambda: redis.Redis(port=port).ping(), 10, f"redis on {port}")
        subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        for port in ports:
            wait_until(lambda: redis.Redis(port=port).cluster("info")["cluster_state"] == "ok", 20,
                       f"cluster state ok on {port}")
        for port in ports:  # a replica that never synced would not take over
            wait_until(lambda: redis.Redis(port=port).info("replication").get("master_link_status", "up") == "up",
                       20, f"replica on {port} in sync")
        yield ports, servers
    finally:
        for server in servers.values():
            server.kill()
            server.wait(10)


def masters(ports, servers) -> list[int]:
    alive = next(p for p in ports if servers[p].poll() is None)
    nodes = redis.Redis(port=alive).cluster("nodes")
    return sorted(int(addr.split(":")[1].split("@")[0]) for addr, node in nodes.items()
                  if "master" in node["flags"] and "fail" not in node["flags"])


def test_batches_are_pipelined_per_hash_tag_and_round_trip(cluster):
    ports, servers = cluster
    table = np.random.default_rng(0).standard_normal((2000, 6)).astype(np.float32)
    store = RedisStore(f"redis://127.0.0.1:{ports[0]}/0", dim=6, prefix="rt:")
    assert store.cluster and "cluster" in repr(store)
    store.load(table)
    keys = torch.as_tensor(np.random.default_rng(1).permutation(2000)[:700])
    assert np.array_equal(store.fetch(keys).numpy(), table[keys.numpy()])
    slots = {redis.cluster.key_slot(store._key(r)) for r in keys.tolist()}
    assert len(slots) <= store.TAGS  # a batch is at most one MGET per hash tag, not one per row
    store.close()


def test_master_failover_leaves_every_answer_right(cluster):
    ports, servers = cluster
    rows, dim = 4000, 8
    table = np.random.default_rng(2).standard_normal((rows, dim)).astype(np.float32)
    store = RedisStore(f"redis://127.0.0.1:{ports[0]}/0", dim=dim, prefix="fo:", timeout=1.0)
    store.load(table)
    reference = torch.from_numpy(table)
    cache = lcr.SlabHashCache(8, dim, policy="lru")
    rng = np.random.default_rng(3)
    failed = served = 0
    first_failure, outage = None, 0.0
    victim = masters(ports, servers)[0]
    for batch in range(24):
        if batch == 6:
            servers[victim].send_signal(signal.SIGKILL)  # its replica must take over
        indices = torch.as_tensor(rng.integers(0, rows, size=300))
        offsets = torch.arange(0, 300, 30)
        expected = torch.nn.functional.embedding_bag(indices, reference, offsets, mode="sum")
        deadline = time.monotonic() + 30
        while True:
            keys_before, values_before = cache.meta.keys.clone(), cache.values.clone()
            try:
                got = lcr.sls(cache, store, indices, offsets)
                break
            except StoreError:
                failed += 1
                first_failure = first_failure or time.monotonic()
                outage = time.monotonic() - first_failure
                # A failed batch leaves the cache exactly as it was.
                assert torch.equal(cache.meta.keys, keys_before) and torch.equal(cache.values, values_before)
                assert time.monotonic() < deadline, "the cluster did not fail over"
                time.sleep(0.2)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        served += 1
    assert served == 24
    print(f"failover: {failed} failed attempts, outage {outage:.2f} s")
    cached = cache.meta.keys.cpu()
    slots = torch.nonzero(cached >= 0).flatten()
    assert torch.equal(cache.values[slots], reference[cached[slots]])  # every cached row is right
    # Nodes learn of the failure by gossip: the one asked may mark the dead master a moment after
    # its replica took over (CI saw the promoted replica listed beside a victim not yet flagged).
    wait_until(lambda: victim not in masters(ports, servers), 20, "the cluster to mark the killed master failed")
    store.close()
