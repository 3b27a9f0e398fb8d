"""``--predictor-url`` against a real ``lcr serve-predictor``: SGLang's tree (mock KV
allocator) serves while the service runs, is killed, hangs, and comes back.
Skipped without SGLang or without the service's FastAPI/uvicorn."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(Path(__file__).parent))
from sglang_server import import_sglang_or_skip  # noqa: E402

import_sglang_or_skip("fastapi", "uvicorn")

from lcr.integrations.serving_predictor import ServiceNodePredictor  # noqa: E402
from lcr.integrations.sglang_config import PolicyConfig, build_policy  # noqa: E402
from lcr.integrations.sglang_sim import build_cache, replay_sglang  # noqa: E402
from lcr.kv import build_workload  # noqa: E402
from lcr.traces import generate  # noqa: E402
from sglang_patch.launch_server import translate  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, port: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "lcr", "serve-predictor", "--port", str(port),
                                      "--retrain-every", "500"], env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        while time.time() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()[-2000:]
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        self.kill()
        raise AssertionError("predictor service did not start")

    def metrics(self) -> dict:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as reply:
            return json.loads(reply.read())

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def port():
    return _free_port()


def test_serving_survives_the_service_dying_hanging_and_coming_back(port):
    w = build_workload(generate("online_qa:conversations=60,seed=4"))
    capacity = w.distinct_tokens // 10
    n = len(w.requests)
    parts = [type(w)(w.requests[n * i // 4:n * (i + 1) // 4], f"part {i}") for i in range(4)]
    service = Service(port)
    try:
        # The launcher accepts the live service (and would refuse a dead one).
        assert "lcr-laru" in translate(["--cache-policy", "laru", "--predictor-url", service.url])
        config = PolicyConfig.parse("laru", {"predictor_url": service.url, "predictor_timeout_ms": 2000,
                                             "predictor_backoff_s": 0.5})
        policy = build_policy(config, capacity)
        guard = policy.predictor
        assert isinstance(guard.inner, ServiceNodePredictor)
        assert guard.round_trip  # so LARU asks once a pass (tests/test_kv_laru.py)
        cache = build_cache(policy, capacity)
        stats = policy.stats

        # 1. Serving with the service: observations and predictions reach it.
        replay_sglang(parts[0], capacity, policy, cache=cache)
        # (The service's model has not fitted yet: its answers are NaN, so the choices are LRU's.)
        assert stats.predictor_calls > 0 and stats.extra["predictor_fallbacks"] == 0
        guard.inner.client.flush()
        seen = service.metrics()
        assert seen["observe_requests"] > 0 and seen["predict_requests"] > 0

        # 2. Killed: serving goes on with LRU, each outage costing at most one timeout.
        service.kill()
        before = stats.extra["predictor_fallbacks"]
        started = time.perf_counter()
        replay_sglang(parts[1], capacity, policy, cache=cache)
        assert stats.extra["predictor_fallbacks"] > before
        assert guard.backoffs <= (time.perf_counter() - started) / 0.5 + 1

        # 3. Back on the same port: predictions resume after the back-off.
        service = Service(port)
        time.sleep(0.6)
        before_fallbacks, before_calls = stats.extra["predictor_fallbacks"], stats.predictor_calls
        replay_sglang(parts[2], capacity, policy, cache=cache)
        resumed_fallbacks = stats.extra["predictor_fallbacks"] - before_fallbacks
        assert stats.predictor_calls - before_calls > resumed_fallbacks + 5
        assert service.metrics()["predict_requests"] > 5

        # 4. Hung (stopped, connections accepted but never answered): bounded time.
        os.killpg(service.proc.pid, signal.SIGSTOP)
        try:
            backoffs, started = guard.backoffs, time.perf_counter()
            replay_sglang(parts[3], capacity, policy, cache=cache)
            elapsed = time.perf_counter() - started
        finally:
            os.killpg(service.proc.pid, signal.SIGCONT)
        hangs = guard.backoffs - backoffs
        assert 1 <= hangs <= elapsed / 0.5 + 1
        # At most the first call after the restart fails (on the dead server's connection).
        assert resumed_fallbacks <= 1
    finally:
        service.kill()


def test_a_dead_service_at_launch_is_a_one_line_error(port):
    from lcr.errors import LcrInputError

    with pytest.raises(LcrInputError, match=f"predictor service http://127.0.0.1:{port} is unreachable"):
        ServiceNodePredictor(f"http://127.0.0.1:{port}")
