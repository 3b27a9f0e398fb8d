"""Real predictor services for the client tests: a uvicorn server in a thread that can be
restarted on its port, the small model they serve, and a clock for their observations."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

import uvicorn

from ports import free_port

from lcr.predict.lightgbm_model import LightGBMConfig
from lcr.predict.service import create_app, server_config

TOKEN = "client-faults-token"


class Server:
    """A real uvicorn server in a thread; ``restart`` serves a fresh app on the same port."""

    def __init__(self, make_app, port: int | None = None):
        self.make_app, self.port = make_app, port or free_port()
        self.thread = None

    def start(self):
        app = self.make_app()
        config = (server_config(app, "127.0.0.1", self.port, log_level="error") if hasattr(app, "state")
                  else uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off"))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60  # the first model process imports LightGBM
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def stop(self):
        if self.thread is not None:
            self.server.should_exit = True
            self.thread.join(15)
            self.thread = None

    def restart(self):
        self.stop()
        return self.start()

    __enter__ = start

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                return response.status == 200
        except OSError:  # refused, or 503 (HTTPError is an OSError)
            return False

    def metrics(self) -> dict:
        request = urllib.request.Request(self.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def wait_observed(self, count: int, timeout: float = 20.0, stale_too: bool = False) -> None:
        """Until the model has taken ``count`` observations in all; ``stale_too`` also counts
        those it dropped as older than their key's latest access (clients racing on one
        key: lcr.predict.clock)."""
        deadline = time.monotonic() + timeout
        while (observed := self.arrived(stale_too)) < count:
            assert time.monotonic() < deadline, f"the model saw {observed} of {count} observations"
            time.sleep(0.02)

    def arrived(self, stale_too: bool = False) -> int:
        metrics = self.metrics()
        return metrics["observed"] + (metrics.get("times_stale", 0) if stale_too else 0)

    def kill_model(self) -> None:
        os.kill(self.metrics()["model_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.metrics()["model_alive"]:
            assert time.monotonic() < deadline, "the model process did not die"
            time.sleep(0.02)


def small_model() -> LightGBMConfig:
    return LightGBMConfig(background=False, retrain_every=10**9, window=4000, min_samples=200, min_data_in_leaf=5)


def service_app():
    return create_app(small_model(), token=TOKEN)


_clock = [1_000]


def ticks(n: int) -> range:
    """Times later than any sent before: the shared service clamps earlier ones."""
    start = _clock[0]
    _clock[0] += n
    return range(start, start + n)
