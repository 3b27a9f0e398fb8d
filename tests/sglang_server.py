"""Start and talk to ``python -m sglang_patch.launch_server`` on CPU with the tiny model
(tests/sglang_e2e_model.py); shared by the end-to-end test and benchmarks/sglang_serving.py.

SGLang's scheduler runs in spawned processes that load lcr's backends through the
``sglang.srt.plugins`` entry point, so lcr must be installed (``pip install -e .``) or its
metadata be on PYTHONPATH. The sgl_kernel and torchvision stand-ins in sglang_stubs are
for CPU-only machines.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ports import free_port

STUBS = Path(__file__).parent / "sglang_stubs"
REPO = Path(__file__).resolve().parents[1]


def pythonpath() -> str:
    """The stand-ins first, then the repository, then whatever the caller had."""
    return os.pathsep.join(filter(None, [str(STUBS), str(REPO), os.environ.get("PYTHONPATH")]))


def use_stubs_if_needed() -> None:
    """Put the stand-ins on this process's path where torchvision does not import: the PyPI
    wheels link CUDA, and SGLang only imports it (CPU-only machines)."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        sys.path.insert(0, str(STUBS))


def import_sglang_or_skip(*extra: str) -> None:
    """Import SGLang's radix cache (and ``extra`` modules) in this process, or skip the
    calling test module (``use_stubs_if_needed`` first)."""
    import importlib

    import pytest

    use_stubs_if_needed()
    try:
        for module in ("sglang.srt.mem_cache.unified_radix_cache", *extra):
            importlib.import_module(module)
    except ImportError as err:
        pytest.skip(f"needs sglang ({err}); pip install --no-deps -r sglang_patch/requirements-cpu.txt",
                    allow_module_level=True)


def sglang_serves() -> bool:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    probe = "import uvicorn, fastapi, sglang.srt.entrypoints.http_server"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          timeout=300).returncode == 0


def post(url: str, doc: dict, timeout: float = 120) -> dict:
    request = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())


def generate(url: str, ids: list[int], max_new_tokens: int = 2) -> tuple[dict, float, float]:
    """One streamed request: (its final meta_info, seconds to the first chunk, seconds in all)."""
    doc = {"input_ids": ids, "stream": True,
           "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    request = urllib.request.Request(url + "/generate", json.dumps(doc).encode(),
                                     {"Content-Type": "application/json"})
    started = time.perf_counter()
    first, meta = None, {}
    with urllib.request.urlopen(request, timeout=300) as reply:
        for line in reply:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            if first is None:
                first = time.perf_counter() - started
            meta = json.loads(line[5:]).get("meta_info", meta)
    return meta, first if first is not None else float("nan"), time.perf_counter() - started


class Server:
    """One SGLang server on a free port. SGLang binds its port only after loading the model,
    so another process may take the port meanwhile: the server is then started again on a
    new port (twice at most)."""

    RESTARTS = 2

    def __init__(self, model: Path, policy: str, log: Path, pool_tokens: int,
                 extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None):
        self.log = log
        self._argv = [sys.executable, "-m", "sglang_patch.launch_server", "--cache-policy", policy,
                      "--model-path", str(model), "--device", "cpu", "--attention-backend", "torch_native",
                      "--max-total-tokens", str(pool_tokens), "--skip-server-warmup", "--log-level", "info",
                      *extra_args]
        self._env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": pythonpath(), **(env or {})}
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([*self._argv, "--port", str(self.port)], env=self._env,
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.time() + timeout
        restarts = self.RESTARTS
        while time.time() < deadline:
            if self.proc.poll() is not None:
                text = self.log.read_text()
                if "address already in use" in text and restarts:
                    restarts -= 1
                    self._kill_session()  # whatever of the failed start is left
                    self._start()
                    continue
                raise AssertionError(f"server exited:\n{_failure(text)}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=5)
                return
            except OSError:
                time.sleep(2)
        raise AssertionError(f"server not ready:\n{_failure(self.log.read_text())}")

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as reply:
            return prometheus_totals(reply.read().decode())

    def flush_cache(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.url + "/flush_cache", method="POST"), timeout=60).read()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds used so far by the server's processes (its session:
        the launcher, tokenizer, scheduler, detokenizer), all their threads included."""
        total = 0.0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            if int(fields[3]) == self.proc.pid:  # session id
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def freeze_gc(self) -> None:
        """SGLang's own /freeze_gc: what exists now (imports, the first requests' caches)
        leaves the collector's walks, as a launch does after its warm-up."""
        urllib.request.urlopen(urllib.request.Request(self.url + "/freeze_gc", method="POST"), timeout=60).read()

    def _kill_session(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing of it left
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self):
        self.wait_ready()
        return self

    def __exit__(self, *exc):
        self.stop()


def _failure(log: str) -> str:
    """The log's error lines first (a CI report may keep only the start of a long
    message), then its tail."""
    errors = [line for line in log.splitlines() if "ERROR" in line or "Error:" in line]
    return "\n".join(errors[-20:]) + "\n--- log tail ---\n" + log[-8000:]


def prometheus_totals(text: str) -> dict[str, float]:
    """Every ``sglang:<name>_total`` counter, summed over its labels."""
    out: dict[str, float] = {}
    for name, value in re.findall(r"^sglang:(\w+?)_total(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        out[name] = out.get(name, 0.0) + float(value)
    return out


def lcr_counters(metrics: dict[str, float]) -> dict[str, float]:
    return {name[len("lcr_"):]: value for name, value in metrics.items() if name.startswith("lcr_")}
