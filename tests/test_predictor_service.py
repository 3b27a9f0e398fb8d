"""The predictor service on a real uvicorn server, and the RemotePredictor's fallback."""
from __future__ import annotations

import asyncio
import functools
import logging
import dataclasses
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
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
from lcr.predict.service import create_app, server_config  # noqa: E402
from lcr.predict.wire import encode_int64, encode_observations  # noqa: E402
from ports import free_port  # noqa: E402

TOKEN = "test-token"
PROCESSES = multiprocessing.get_context("forkserver")  # the service's model processes start this way


class ServerThread:
    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60  # the first model process imports LightGBM
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
    model = LightGBMConfig(background=False, retrain_every=10**9, window=4000, min_samples=200, min_data_in_leaf=5)
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


def test_the_belady_classifier_served_ranks_by_its_probability():
    """``serve-predictor --objective belady --capacity 16``: the classifier lcr sim measures,
    its answers probabilities that rise with a key's period; a one-off key's is high."""
    from lcr.cli import build_parser
    from lcr.predict.cli import service_model_config

    args = build_parser().parse_args(["serve-predictor", "--objective", "belady", "--capacity", "16",
                                      "--retrain-every", "999999999", "--window", "4000"])
    config = service_model_config(args)
    assert (config.objective, config.rank, config.capacity, config.background) == ("belady", "probability", 16, True)
    model = dataclasses.replace(config, background=False, min_samples=200, min_data_in_leaf=5)
    periods = {key: 20 + 15 * key for key in range(6)}
    keys = [k for t in range(6000) for k in [key for key, p in periods.items() if t % p == 0] + [1000 + t]]
    with ServerThread(create_app(model, token=TOKEN)) as server:
        client = RemotePredictor(server.url, deadline_s=2.0, token=TOKEN, flush_every=512)
        for t, key in enumerate(keys):
            client.observe(key, t)
        assert client.train()
        answers = client.predict([*periods, keys[-1]], len(keys))
        assert client.metrics["fallbacks"] == 0 and client.metrics["sent_observations"] == len(keys)
        client.close()
    assert ((0 <= answers) & (answers <= 1)).all()
    # periods 20 | 35, 50 | 65, 80, 95 (in steps; a one-off key per step in between)
    assert answers[0] < 0.5 < answers[1:3].min() <= answers[1:3].max() < answers[3:6].min()
    assert answers[-1] > 0.5


def test_observations_over_a_smaller_body_limit_are_sent_in_smaller_bodies():
    """A service started with a body limit below the client's batch (64 KiB = 4,096
    observations here, against 65,536 per request) answers 413 and takes nothing; the
    client halves its batches for that replica and loses nothing, without falling back."""
    model = small_model(min_samples=200)
    with ServerThread(create_app(model, max_body_bytes=1 << 16)) as server:
        client = RemotePredictor(server.url, deadline_s=2.0, flush_every=10**6, flush_interval_s=60)
        for t in range(10_000):
            client.observe(t % 700, t)
        client.flush()
        assert client.metrics["sent_observations"] == 10_000 and client.metrics["dropped_observations"] == 0
        assert client.metrics["fallbacks"] == 0 and client.replicas[0].observations_per_request <= 4096
        wait_observed(server, 10_000)  # the model took every one
        client.close()


@pytest.mark.parametrize("flags, message", [
    (["--objective", "belady", "--weak"], "--weak is the regression"),
    (["--capacity", "0"], "--capacity must be at least 1"),
    (["--model", "residual", "--weak"], "--weak is a LightGBM option; --model residual takes none"),
    (["--model", "residual", "--objective", "belady"], "--objective is a LightGBM option"),
])
def test_served_model_flags_are_checked(flags, message, capsys):
    from lcr.cli import main

    assert main(["serve-predictor", *flags]) == 2
    assert message in capsys.readouterr().err


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
    server = ServerThread(create_app(LightGBMConfig(background=False))).__enter__()
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


def test_the_forkserver_imports_only_the_served_model():
    """A killed service's forkserver tears down what it imported, on the serving host's
    cores (LightGBM's share held a 2-core SGLang host ~0.2 s): `lcr serve-predictor --model
    residual` must not preload LightGBM; the LightGBM model still does (its processes start
    without importing it again)."""
    from lcr.predict.model_process import preloaded_modules
    from lcr.predict.service import model_factory

    assert preloaded_modules(model_factory(LightGBMConfig())) == ["lightgbm", "lcr.predict.lightgbm_model"]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lcr", "serve-predictor", "--port", str(port), "--model",
                             "residual"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)
        forkservers = [cmdline for cmdline in _session_cmdlines(proc.pid) if "forkserver import main" in cmdline]
        assert forkservers and all("served_residual" in c and "lightgbm" not in c for c in forkservers), forkservers
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _session_cmdlines(session: int) -> list[str]:
    """The command lines of the processes in ``session`` (Linux /proc)."""
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{entry}/stat").read()
            if int(stat[stat.rindex(")") + 2:].split()[3]) == session:
                out.append(open(f"/proc/{entry}/cmdline").read().replace("\0", " "))
        except (OSError, ValueError):
            continue  # gone meanwhile
    return out


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


# -- protection of the service --------------------------------------------------------------

from lcr.predict.async_predictor import AsyncConfig, AsyncPredictor  # noqa: E402
from lcr.predict.remote import HashRing  # noqa: E402
from lcr.predict.service import ServiceLimits  # noqa: E402


def small_model(**overrides):
    settings = dict(background=False, retrain_every=10**9, window=4000, min_data_in_leaf=5)
    settings.update(overrides)
    return LightGBMConfig(**settings)


def get_json(url):
    import json
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def wait_observed(server, count, timeout=60.0):
    """Observations are answered once queued; wait until the model has taken them."""
    deadline = time.monotonic() + timeout
    while (metrics := get_json(server.url + "/metrics"))["observed"] < count:
        assert time.monotonic() < deadline, f"model saw {metrics['observed']} of {count}; {metrics}"
        time.sleep(0.02)


class LimitedServer(ServerThread):
    def __init__(self, model=None, **limits):
        self.app = create_app(model or small_model(), limits=ServiceLimits(**limits))
        super().__init__(self.app)


class LastTimeModel(LightGBMPredictor):
    """Predicts each key's latest accepted access time (NaN if not tracked): the service's
    time and key-cap rules, seen through /predict (the model lives in another process)."""

    def predict(self, keys, now):
        slots = self.features.slots(np.asarray(keys))
        out = np.full(len(slots), np.nan)
        out[slots >= 0] = self.features.last_times(slots[slots >= 0])
        return out


def latest_times(server, keys):
    status, body = post(server.url + "/predict?now=0", encode_int64(keys), token=None)
    assert status == 200
    return np.frombuffer(body, dtype="<f8")


def test_key_cap_forgets_the_least_recently_seen_keys():
    with LimitedServer(functools.partial(LastTimeModel, small_model()), max_keys=100, evict_fraction=0.5) as server:
        keys = np.arange(1000, 1130)
        assert post(server.url + "/observe", encode_observations(keys, np.arange(130)), token=None)[0] == 200
        wait_observed(server, 130)
        # 130 > 100 keys: one sweep keeps the 50 newest.
        assert np.flatnonzero(~np.isnan(latest_times(server, keys))).tolist() == list(range(80, 130))
        deadline = time.monotonic() + 5
        while (metrics := get_json(server.url + "/metrics"))["keys_evicted"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert metrics["keys_evicted"] == 80 and metrics["keys"] == 50


def test_a_key_never_goes_back_in_time_and_bad_times_are_dropped():
    with LimitedServer(functools.partial(LastTimeModel, small_model()), max_time_jump=1000) as server:
        body = encode_observations([1, 2, 1, 3, 4], [500, 600, 100, -7, 600 + 1001])
        assert post(server.url + "/observe", body, token=None)[0] == 200
        wait_observed(server, 2)  # keys 1 and 2 at 500 and 600; the rest dropped
        deadline = time.monotonic() + 5
        while (metrics := get_json(server.url + "/metrics"))["times_stale"] < 1:  # key 1's late access
            assert time.monotonic() < deadline, metrics
            time.sleep(0.02)
        assert metrics["times_stale"] == 1 and metrics["times_rejected"] == 2
        # Key 1's second access (sent as t=100, within max_time_jump of the clock) is older than
        # key 1's latest, 500: dropped, as a key's time never goes back, and no time is dragged
        # to the newest (lcr.predict.clock); keys 3 (t < 0) and 4 (too far ahead) were never
        # taken in.
        np.testing.assert_array_equal(latest_times(server, [1, 2, 3, 4]), [500, 600, np.nan, np.nan])


def test_wrong_content_type_is_refused():
    with LimitedServer() as server:
        request = urllib.request.Request(server.url + "/observe", data=b'{"keys": [1]}', method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert err.value.code == 415
        assert get_json(server.url + "/metrics")["observe_requests"] == 0


class BlockingModel(LightGBMPredictor):
    """predict waits for a gate (set by the test, in another process): a lane stays busy
    as long as a test wants."""

    def __init__(self, gate):
        super().__init__(LightGBMConfig(background=False))
        self.gate = gate

    def predict(self, keys, now):
        self.gate.wait(10)
        return super().predict(keys, now)


def test_full_lane_answers_503_and_health_stays_up():
    gate = PROCESSES.Event()
    with LimitedServer(functools.partial(BlockingModel, gate), max_queued=2) as server:
        results = []
        threads = [threading.Thread(target=lambda: results.append(post(server.url + "/predict?now=0",
                                                                          encode_int64([1]), token=None)))
                   for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while get_json(server.url + "/metrics")["predict_queued"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status, text = post(server.url + "/predict?now=0", encode_int64([1]), token=None)
        assert status == 503 and b"queue is full" in text
        assert get_json(server.url + "/health")["status"] == "ok"  # the event loop is free
        assert post(server.url + "/observe", encode_observations([5], [5]), token=None)[0] == 200
        gate.set()
        for thread in threads:
            thread.join(10)
        assert [status for status, _ in results] == [200, 200]


def test_health_answers_while_a_large_observe_is_processed():
    with LimitedServer() as server:
        n = 150_000
        body = encode_observations(np.arange(n), np.arange(n))
        assert post(server.url + "/observe", body, token=None)[0] == 200  # queued, not done
        health = get_json(server.url + "/health")
        assert health["status"] == "ok" and get_json(server.url + "/metrics")["observed"] < n
        wait_observed(server, n, timeout=60)


class GilHoggingModel(LightGBMPredictor):
    """``observe_many`` holds the GIL for ``seconds`` in one C call, as a long numpy or
    Python-loop step of the model can; ``started``/``finished`` tell the test when."""

    def __init__(self, config, started, finished, seconds=3.0):
        super().__init__(config)
        self.started, self.finished, self.seconds = started, finished, seconds

    def observe_many(self, keys, times):
        begin = time.perf_counter()
        sum(range(1_000_000))
        calls = int(1_000_000 * self.seconds / max(time.perf_counter() - begin, 1e-4))
        self.started.set()
        sum(range(calls))  # one C call: no thread of this process runs Python meanwhile
        self.finished.set()


def test_model_work_never_holds_up_the_event_loop():
    started, finished = PROCESSES.Event(), PROCESSES.Event()
    model = functools.partial(GilHoggingModel, small_model(), started, finished)
    with LimitedServer(model) as server:
        metrics = get_json(server.url + "/metrics")
        assert metrics["model_pid"] != metrics["front_pid"] == os.getpid()  # the model has its own process
        assert post(server.url + "/observe", encode_observations([1], [1]), token=None)[0] == 200
        assert started.wait(30)
        begin = time.monotonic()
        assert get_json(server.url + "/health")["status"] == "ok"
        assert get_json(server.url + "/metrics")["observe_queued"] == 1
        elapsed = time.monotonic() - begin
        assert not finished.is_set(), "the health check waited for the model"
        assert elapsed < 1.0, elapsed


def test_a_dead_model_process_turns_health_and_model_requests_to_503():
    with LimitedServer() as server:
        os.kill(get_json(server.url + "/metrics")["model_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:
            try:
                get_json(server.url + "/health")
            except urllib.error.HTTPError as err:
                assert err.code == 503 and b"model process exited" in err.read()
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert post(server.url + "/predict?now=0", encode_int64([1]), token=None)[0] == 503
        assert post(server.url + "/observe", encode_observations([1], [1]), token=None)[0] == 503
        client = RemotePredictor(server.url, deadline_s=1.0)
        # X-LCR-Reason: model-down: an outage for the client, not a busy spell
        assert np.isnan(client.predict([1], 0)).all() and client.metrics["fallbacks"] == 1
        assert client.metrics["busy"] == 0
        client.close()


def test_observe_admission_waits_in_arrival_order_then_refuses():
    from lcr.predict.service import Busy, _Backlog

    async def scenario():
        backlog = _Backlog(max_bytes=100, max_waiting=2, wait_s=0.3)
        await backlog.admit(80)  # room: admitted at once
        order = []

        async def waiter(name, nbytes):
            try:
                await backlog.admit(nbytes)
                order.append(name)
            except Busy:
                order.append(f"{name} refused")

        first = asyncio.create_task(waiter("big", 60))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(waiter("small", 10))  # would fit now, but "big" came first
        await asyncio.sleep(0.01)
        with pytest.raises(Busy):  # two already wait
            await backlog.admit(1)
        assert order == [] and backlog.waiting == 2
        backlog.release(80, done=True)  # the model took the first batch in
        await asyncio.gather(first, second)
        assert order == ["big", "small"] and backlog.queued_bytes == 70
        await waiter("late", 50)  # no room within wait_s: refused
        assert order[-1] == "late refused" and backlog.waiting == 0
        backlog.release(70, done=True)
        await waiter("after", 100)  # a refused waiter left nothing behind
        assert order[-1] == "after"

    asyncio.run(scenario())


def test_slow_headers_and_bodies_are_cut_off():
    with LimitedServer(header_timeout_s=0.3, body_timeout_s=0.3) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
            slow.sendall(b"POST /observe HTTP/1.1\r\nHost: x\r\n")  # headers never finish
            start = time.monotonic()
            assert slow.recv(100) == b""  # closed by the server
            assert time.monotonic() - start < 3
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
            slow.sendall(b"POST /observe HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                         b"Content-Length: 160\r\n\r\n" + b"\0" * 16)
            assert slow.recv(200).startswith(b"HTTP/1.1 408")


# -- the client ------------------------------------------------------------------------------


def test_client_is_thread_safe_and_loses_no_observation():
    with LimitedServer() as server:
        client = RemotePredictor(server.url, deadline_s=2.0, flush_every=64)
        per_thread, threads = 3000, 6

        def worker(offset):
            for i in range(per_thread):
                client.observe(offset * 10**6 + i % 97, i)
                if i % 250 == 0:
                    client.predict(np.arange(offset * 10**6, offset * 10**6 + 50), i)

        pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join(60)
        client.flush()
        wait_observed(server, per_thread * threads)
        assert client.metrics["fallbacks"] == 0 and client.metrics["dropped_observations"] == 0
        assert client.metrics["sent_observations"] == per_thread * threads
        client.close()


def test_deadline_covers_the_whole_call_against_a_dripping_server():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        stop = threading.Event()

        def drip():
            conn, _ = listener.accept()
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n" + b"\0" * 8:
                if stop.wait(0.03):
                    break
                conn.sendall(bytes([byte]))
            conn.close()

        thread = threading.Thread(target=drip, daemon=True)
        thread.start()
        client = RemotePredictor(f"http://127.0.0.1:{listener.getsockname()[1]}", deadline_s=0.1)
        start = time.perf_counter()
        values = client.predict([7], 0)
        elapsed = time.perf_counter() - start
        stop.set()
        thread.join(5)
    assert np.isnan(values).all() and elapsed < 0.3, elapsed  # one byte per 30 ms: 1.4 s in all


def test_stale_keep_alive_reconnects_without_an_outage():
    with LimitedServer(keep_alive_s=0.2) as server:
        client = RemotePredictor(server.url, deadline_s=2.0)
        client.predict([1], 0)
        time.sleep(0.5)  # the server has closed the idle connection by now
        client.predict([1], 1)
        assert client.metrics["fallbacks"] == 0 and client.reconnects == 1
        client.close()


def test_remote_inside_async_predictor_keeps_every_observation():
    with LimitedServer() as server:
        remote = RemotePredictor(server.url, deadline_s=2.0, flush_every=256)
        predictor = AsyncPredictor(remote, AsyncConfig(max_pending=512))
        rng = np.random.default_rng(0)
        keys = rng.zipf(1.2, 20_000) % 5000
        got = []
        for t, key in enumerate(keys.tolist()):
            predictor.observe(key, t)
            predictor.submit([key], t, lambda k, v: got.append(len(k)))
        assert predictor.drain(10)
        remote.flush()
        wait_observed(server, len(keys))
        # A prediction may miss its deadline on a loaded machine (NaN, counted); no observation is lost.
        assert remote.metrics["dropped_observations"] == 0 and remote.metrics["sent_observations"] == len(keys)
        assert predictor.metrics["errors"] == 0 and sum(got) > 0
        predictor.close()
        remote.close()


class ObserveGatedModel(LightGBMPredictor):
    """Takes observations in only once a gate (set by the test) opens."""

    def __init__(self, gate):
        super().__init__(LightGBMConfig(background=False))
        self.gate = gate

    def observe_many(self, keys, times):
        self.gate.wait(30)
        super().observe_many(keys, times)


def test_a_prediction_never_waits_for_observations():
    gate = PROCESSES.Event()
    with LimitedServer(functools.partial(ObserveGatedModel, gate), max_queued_bytes=160, admission_wait_s=10) as server:
        assert post(server.url + "/observe", encode_observations(np.arange(10), np.arange(10)), token=None)[0] == 200
        client = RemotePredictor(server.url, deadline_s=1.0, flush_interval_s=0.05)
        for t in range(20):
            client.observe(t, 10 + t)
        deadline = time.monotonic() + 10
        while get_json(server.url + "/metrics")["observe_waiting"] < 1:  # the flusher waits for room
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for t in range(5):  # more observations waiting in the client
            client.observe(100 + t, 30 + t)
        start = time.monotonic()
        assert np.isnan(client.predict([1], 40)).all()  # no model yet, but an answer
        assert time.monotonic() - start < 1.0 and client.metrics["fallbacks"] == 0
        gate.set()
        client.flush()
        wait_observed(server, 35)
        assert client.metrics["dropped_observations"] == 0
        client.close()


def test_hash_ring_moves_only_the_dead_replicas_keys():
    ring = HashRing(["a", "b", "c"])
    keys = np.arange(30_000)
    everyone = ring.owners_of(keys, np.array([True, True, True]))
    shares = np.bincount(everyone, minlength=3) / len(keys)
    assert shares.min() > 0.2  # 64 virtual nodes each: no replica starves
    without_b = ring.owners_of(keys, np.array([True, False, True]))
    moved = everyone != without_b
    assert np.array_equal(moved, everyone == 1) and (without_b != 1).all()


def test_replica_killed_mid_run_fails_no_cache_operation():
    import torch

    import lcr
    from lcr.embedding.stores import HostStore

    servers = [LimitedServer().__enter__() for _ in range(3)]
    client = RemotePredictor([s.url for s in servers], deadline_s=1.0, retry_after_s=600.0)  # the dead replica stays out until the asserts, however slow the machine
    table = torch.randn(3000, 8)
    store, cache = HostStore(table, pin=False), lcr.SlabHashCache(4, 8, policy="laru")
    rng = np.random.default_rng(1)
    try:
        for batch in range(30):
            if batch == 10:
                servers[1].stop()
            indices = torch.as_tensor(rng.integers(0, 3000, size=200))
            for key in indices.tolist():
                client.observe(key, batch)
            got = lcr.sls(cache, store, indices, lengths=torch.full((10,), 20), predictor=client, now=batch)
            expected = torch.nn.functional.embedding_bag(indices, table, torch.arange(0, 200, 20), mode="sum")
            torch.testing.assert_close(got, expected)
        assert client.metrics["fallbacks"] >= 1  # the dead replica was noticed ...
        live = client.ring.owners_of(np.arange(3000), client._live())
        assert (live != 1).all()  # ... and its keys moved to the live ones
    finally:
        client.close()
        for server in servers:
            server.stop()


def test_async_config_and_bounds():
    with pytest.raises(LcrInputError, match="max_batch"):
        AsyncConfig(max_batch=0)
    gate = threading.Event()

    class Gated(LightGBMPredictor):
        def predict(self, keys, now):
            gate.wait(10)
            return np.full(len(keys), np.nan)

    predictor = AsyncPredictor(Gated(LightGBMConfig()), AsyncConfig(max_pending=1000, max_batch=100))
    predictor.submit(list(range(1_000_000)), 0, lambda k, v: None)  # idle: one bound's worth admitted
    assert predictor._pending_count == 1000
    deadline = time.monotonic() + 5
    while not predictor._busy:  # the worker took 100 keys and waits at the gate
        assert time.monotonic() < deadline
        time.sleep(0.005)
    predictor.submit(list(range(2_000_000, 2_010_000)), 1, lambda k, v: None)  # busy: 100 more fit
    assert predictor._pending_count == 1000
    assert predictor.metrics["dropped"] == (1_000_000 - 1000) + (10_000 - 100)
    closer = threading.Thread(target=predictor.close)
    closer.start()
    deadline = time.monotonic() + 5
    while not predictor._closed:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    gate.set()
    closer.join(10)
    assert predictor.metrics["dropped_on_close"] == 1000
