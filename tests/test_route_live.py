"""lcr serve-router in front of real SGLang CPU workers: it routes, survives a dead worker,
and decides exactly as the router object the simulator uses."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sglang_server import Server, free_port, pythonpath, sglang_serves  # noqa: E402
from test_sglang_e2e import conversations  # noqa: E402

from lcr.route.routers import CacheAwareRouter  # noqa: E402

if not sglang_serves():
    pytest.skip("SGLang cannot serve here (not installed with its serving dependencies)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    from sglang_e2e_model import build_tiny_llama

    root = tmp_path_factory.mktemp("route-live")
    model = build_tiny_llama(root / "tiny-llama")
    servers = [Server(model, "lru", root / f"worker{i}.log", pool_tokens=1024) for i in range(2)]
    try:
        for server in servers:
            server.wait_ready()
        yield servers
    finally:
        for server in servers:
            server.stop()


class Router:
    def __init__(self, urls, router: str | None, log: Path):
        """``router`` None: serve-router's default."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": pythonpath()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lcr", "serve-router", "--worker-urls", ",".join(urls),
             *(["--router", router] if router else []), "--port", str(self.port)],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(log.read_text())

    def metrics(self) -> dict:
        with urllib.request.urlopen(self.url + "/lcr/metrics", timeout=10) as reply:
            return json.loads(reply.read())

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(30)


def generate(url, ids):
    """The reply's JSON and the worker the router says answered it (X-Lcr-Worker)."""
    body = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
    request = urllib.request.Request(url + "/generate", body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:     # raises on any non-2xx
        return json.loads(reply.read()), int(reply.headers["X-Lcr-Worker"])


def test_router_streams_what_the_worker_streams(workers, tmp_path):
    """A streamed /generate through the router ends as the worker's own stream does, with
    the same final text as the unstreamed reply (greedy decoding)."""
    router = Router([w.url for w in workers], None, tmp_path / "router.log")
    try:
        ids = next(iter(conversations(count=1, turns=1)))
        unstreamed, worker = generate(router.url, ids)
        body = json.dumps({"input_ids": ids, "stream": True,
                           "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
        request = urllib.request.Request(router.url + "/generate", body.encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            assert reply.headers["Content-Type"].startswith("text/event-stream")
            assert int(reply.headers["X-Lcr-Worker"]) == worker     # the prefix's worker again
            events = [line[5:].strip() for line in reply if line.startswith(b"data:")]
        assert events[-1] == b"[DONE]" and len(events) >= 2
        assert json.loads(events[-2])["text"] == unstreamed["text"]
        assert router.metrics()["outstanding"] == [0, 0]
    finally:
        router.stop()


def test_router_routes_and_survives_a_killed_worker(workers, tmp_path):
    router = Router([w.url for w in workers], None, tmp_path / "router.log")   # the default, LBGR
    try:
        prompts = list(conversations(count=6, turns=4))
        answered = cached = 0
        served_by = []
        for i, ids in enumerate(prompts):
            if i == len(prompts) // 2:
                os.killpg(workers[1].proc.pid, signal.SIGKILL)
                workers[1].proc.wait(30)
            out, worker = generate(router.url, ids)
            answered += 1
            served_by.append(worker)
            cached += out["meta_info"].get("cached_tokens", 0)
        metrics = router.metrics()
        assert answered == len(prompts) and metrics["lost"] == 0
        # The header names the worker that answered: none after the kill is the dead one,
        # and the counts agree with the router's own.
        assert set(served_by[len(prompts) // 2:]) == {0}
        assert served_by.count(0) == metrics["workers"][0]["routed"] - metrics["workers"][0]["failed"]
        assert cached > 0
        assert metrics["workers"][1]["alive"] is False
        assert metrics["workers"][0]["routed"] > len(prompts) // 2
        assert metrics["route_us_per_request"] < 50_000
    finally:
        router.stop()


def test_live_decisions_equal_the_router_objects(workers, tmp_path):
    """The proxy calls the router object the simulator uses: replaying its recorded inputs
    through a fresh CacheAwareRouter gives the same worker every time."""
    from lcr.route.serve import RoutingProxy

    alive = [w for w in workers if w.proc.poll() is None]
    proxy = RoutingProxy([w.url for w in alive], CacheAwareRouter(len(alive)), record=True)

    async def run():
        for ids in conversations(count=4, turns=3):
            status, _, _ = await proxy.forward("/generate", json.dumps(
                {"input_ids": ids, "sampling_params": {"max_new_tokens": 1}}).encode())
            assert status == 200
        await proxy.close()

    asyncio.run(run())
    fresh = CacheAwareRouter(len(alive))
    assert len(proxy.decisions) == 12
    for request, outstanding, worker in proxy.decisions:
        assert fresh.route(request, request.arrival, outstanding) == worker
