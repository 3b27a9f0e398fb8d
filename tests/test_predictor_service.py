"""The predictor service on a real uvicorn server, and the RemotePredictor's fallback."""
from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("lightgbm")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from lcr.errors import LcrInputError  # noqa: E402
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor  # noqa: E402
from lcr.predict.remote import RemotePredictor  # noqa: E402
from lcr.predict.service import create_app  # noqa: E402
from lcr.predict.wire import encode_int64, encode_observations  # noqa: E402

TOKEN = "test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def service():
    model = LightGBMPredictor(LightGBMConfig(background=False, retrain_every=10**9, window=4000, min_samples=200,
                                             min_data_in_leaf=5))
    with ServerThread(create_app(model, token=TOKEN, max_body_bytes=1 << 16)) as server:
        yield server


def post(url, body, token=TOKEN):
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/octet-stream",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_observe_train_predict_round_trip(service):
    client = RemotePredictor(service.url, deadline_s=2.0, token=TOKEN, flush_every=512)
    periods = {key: 20 + 15 * key for key in range(6)}
    events = [(t, key) for t in range(6000) for key, period in periods.items() if t % period == 0]
    assert np.isnan(client.predict(list(periods), 0)).all()  # nothing learned yet
    for t, key in events:
        client.observe(key, t)
    assert client.train()
    keys = list(periods)
    predicted = client.predict(keys, events[-1][0])
    last = np.array([max(t for t, k in events if k == key) for key in keys])
    np.testing.assert_allclose(predicted - last, list(periods.values()), rtol=0.10)
    status, body = post(service.url + "/metrics", None, token=TOKEN)  # GET-only route
    assert status == 405
    health = urllib.request.urlopen(service.url + "/health", timeout=5).read()
    assert b'"model_version":1' in health
    assert client.metrics["fallbacks"] == 0
    client.close()


@pytest.mark.parametrize("path, body, status, message", [
    ("/predict?now=0", b"\x01\x02\x03", 400, b"not a whole number of int64 keys"),
    ("/observe", encode_int64([1, 2, 3]), 400, b"16 bytes per observation"),
    ("/predict?now=abc", encode_int64([1]), 422, b"now"),
    ("/predict?now=0", b"\x00" * (1 << 17), 413, b"limit"),
])
def test_malformed_payloads_get_4xx_with_a_message(service, path, body, status, message):
    got, text = post(service.url + path, body)
    assert got == status and message in text


def test_token_is_required(service):
    got, text = post(service.url + "/observe", encode_observations([1], [0]), token="wrong")
    assert got == 401 and b"bearer token" in text
    got, _ = post(service.url + "/observe", encode_observations([1], [0]))
    assert got == 200


def test_client_rejects_bad_shapes_and_nan_before_sending(service):
    client = RemotePredictor(service.url, deadline_s=2.0, token=TOKEN)
    with pytest.raises(LcrInputError, match="1-D"):
        client.predict(np.zeros((3, 2), dtype=np.int64), 0)
    with pytest.raises(LcrInputError, match="NaN"):
        client.predict([1.0, float("nan")], 0)
    with pytest.raises(LcrInputError, match="finite"):
        client.predict([1], float("nan"))
    with pytest.raises(LcrInputError, match="one length"):
        encode_observations([1, 2], [0])


def test_killed_service_falls_back_within_the_deadline(caplog):
    model = LightGBMPredictor(LightGBMConfig(background=False))
    server = ServerThread(create_app(model)).__enter__()
    client = RemotePredictor(server.url, deadline_s=0.2, retry_after_s=0.0)
    assert np.isnan(client.predict([1, 2], 0)).all() and client.metrics["fallbacks"] == 0
    server.stop()
    with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
        for _ in range(3):
            start = time.perf_counter()
            values = client.predict([1, 2, 3], 5)
            assert time.perf_counter() - start < 0.5
            assert np.isnan(values).all()
    assert client.metrics["fallbacks"] == 3
    assert sum("unavailable" in r.message for r in caplog.records) == 1  # warned once


def test_silent_service_times_out_at_the_deadline():
    # A listener that accepts connections and never answers: slower than any deadline.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        client = RemotePredictor(f"http://127.0.0.1:{port}", deadline_s=0.2)
        start = time.perf_counter()
        values = client.predict([7, 8], 0)
        elapsed = time.perf_counter() - start
        # Marked down: the next call answers at once instead of waiting again.
        start2 = time.perf_counter()
        client.predict([7], 1)
        assert time.perf_counter() - start2 < 0.05
    assert np.isnan(values).all() and 0.15 < elapsed < 0.6


def test_cli_reports_missing_service_dependencies(monkeypatch):
    import builtins

    from lcr.cli import main

    real_import = builtins.__import__

    def no_fastapi(name, *args, **kwargs):
        if name in ("fastapi", "uvicorn"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fastapi)
    assert main(["serve-predictor", "--port", "1"]) == 2
