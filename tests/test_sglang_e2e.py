"""End to end on CPU: SGLang serves a tiny random Llama with --cache-policy laru and lru.

Needs SGLang (sglang_patch/requirements-cpu.txt plus its serving dependencies); skipped
otherwise. The sgl_kernel and torchvision stand-ins in tests/sglang_stubs are test-only.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

STUBS = Path(__file__).parent / "sglang_stubs"
REPO = Path(__file__).resolve().parents[1]
POOL_TOKENS = 1024


def _pythonpath() -> str:
    """The stand-ins first, then the repository, then whatever the caller had."""
    return os.pathsep.join(filter(None, [str(STUBS), str(REPO), os.environ.get("PYTHONPATH")]))


def _sglang_serves() -> bool:
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    probe = "import uvicorn, fastapi, sglang.srt.entrypoints.http_server"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          timeout=300).returncode == 0


if not _sglang_serves():
    pytest.skip("SGLang cannot serve here (not installed with its serving dependencies)",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, doc: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


class Server:
    def __init__(self, model: Path, policy: str, log: Path, extra_args: tuple[str, ...] = ()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": _pythonpath()}
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_patch.launch_server", "--cache-policy", policy,
             "--model-path", str(model), "--device", "cpu", "--attention-backend", "torch_native",
             "--max-total-tokens", str(POOL_TOKENS), "--port", str(self.port), "--skip-server-warmup",
             "--log-level", "info", *extra_args],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 400) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=5)
                return
            except OSError:
                time.sleep(2)
        raise AssertionError(f"server not ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def conversations(count: int = 10, turns: int = 4, first: int = 120, step: int = 60):
    """Multi-turn chats, interleaved turn by turn; each turn re-sends the whole history."""
    import random

    rng = random.Random(0)
    histories = [[1] + [rng.randrange(3, 1000) for _ in range(first)] for _ in range(count)]
    for _ in range(turns):
        for history in histories:
            yield list(history)
            history.extend(rng.randrange(3, 1000) for _ in range(step))


def lcr_counters(metrics_text: str) -> dict[str, float]:
    """``sglang:lcr_<name>_total`` series from a Prometheus exposition, summed over labels."""
    out: dict[str, float] = {}
    for name, value in re.findall(r"^sglang:lcr_(\w+?)_total(?:\{[^}]*\})? ([0-9.e+-]+)$", metrics_text, re.M):
        out[name] = out.get(name, 0.0) + float(value)
    return out


def serve_workload(model: Path, policy: str, log: Path, extra_args: tuple[str, ...] = ()) -> dict:
    server = Server(model, policy, log, extra_args)
    metrics = {}
    try:
        server.wait_ready()
        prompt = cached = answers = 0
        for ids in conversations():
            out = _post(server.url + "/generate", {"input_ids": ids, "sampling_params":
                                                   {"max_new_tokens": 2, "temperature": 0}})
            answers += bool(out.get("output_ids") or out.get("text") is not None)
            prompt += out["meta_info"]["prompt_tokens"]
            cached += out["meta_info"].get("cached_tokens", 0)
        if "--enable-metrics" in extra_args:
            with urllib.request.urlopen(server.url + "/metrics", timeout=30) as reply:
                metrics = lcr_counters(reply.read().decode())
    finally:
        server.stop()
    text = log.read_text()
    evictions = [int(m) for m in re.findall(r"prediction_evictions=(\d+)", text)]
    return {"answers": answers, "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate": cached / prompt, "prediction_evictions": max(evictions, default=0),
            "exported": metrics}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from sglang_e2e_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def test_laru_serves_multi_turn_chat_on_cpu(tiny_llama, tmp_path):
    laru = serve_workload(tiny_llama, "laru", tmp_path / "laru.log", ("--enable-metrics",))
    assert laru["answers"] == 40
    assert laru["cached_tokens"] > 0
    assert laru["prediction_evictions"] > 0, (tmp_path / "laru.log").read_text()[-3000:]
    # --enable-metrics: lcr's counters sit beside SGLang's own in /metrics.
    exported = laru["exported"]
    assert exported.get("prediction_evictions", 0) > 0, exported
    assert exported["evictions"] >= exported["prediction_evictions"]
    lru = serve_workload(tiny_llama, "lru", tmp_path / "lru.log")
    assert lru["answers"] == 40
    print(f"\nCPU end-to-end hit rates: lru {lru['hit_rate']:.4f}, laru {laru['hit_rate']:.4f}")
    (Path(os.environ.get("LCR_E2E_OUT", tmp_path)) / "e2e.json").write_text(
        json.dumps({"lru": lru, "laru": laru}, indent=1))
