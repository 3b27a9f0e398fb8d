"""RemotePredictor and AsyncPredictor against bad values and a failing service (issue 39).

Everything runs against real uvicorn servers: the real predictor service (its model in
its own process) and, for the 503 contract, a tiny ASGI app that answers as a service
whose model process died (``X-LCR-Reason: model-down``) or whose queue stays full
(``X-LCR-Reason: busy``).
"""
from __future__ import annotations

import logging
import math
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("lightgbm")
uvicorn = pytest.importorskip("uvicorn")

from lcr.predict.async_predictor import AsyncPredictor  # noqa: E402
from lcr.predict.remote import RemotePredictor  # noqa: E402
from remote_service import TOKEN, Server, free_port, service_app, ticks  # noqa: E402

SECRET = "s3cr3t-pw"


@pytest.fixture(scope="module")
def service():
    with Server(service_app) as server:
        yield server


def client_of(server, **options) -> RemotePredictor:
    settings = dict(deadline_s=2.0, token=TOKEN, flush_every=256)
    settings.update(options)
    return RemotePredictor(server.url, **settings)


def observe_good(client, n: int, key_space: int = 500) -> None:
    for t in ticks(n):
        client.observe(t % key_space, t)


# -- item 1: one bad observation must not stop the later ones ---------------------------------

BAD_VALUES = [float("nan"), float("inf"), -float("inf"), 1e30, 2**63, -2**63 - 1, None, "7", 2.5, True]
BAD_TIMES = [-1, -1.0]  # bad times only: a negative key is a key


@pytest.mark.parametrize("where, bad", [(where, bad) for where in ("key", "t") for bad in BAD_VALUES]
                         + [("t", bad) for bad in BAD_TIMES], ids=repr)
def test_a_bad_observation_is_refused_and_counted_and_later_ones_arrive(service, bad, where):
    client = client_of(service)
    before = service.metrics()["observed"]
    t = ticks(1)[0]
    client.observe(*((bad, t) if where == "key" else (1, bad)))  # never raises: the hot path
    observe_good(client, 1000)
    client.flush()
    assert client._flusher.is_alive()
    assert client.metrics["observations_invalid"] == 1
    assert client.metrics["sent_observations"] == 1000 and client.metrics["dropped_observations"] == 0
    service.wait_observed(before + 1000)
    client.close()  # clean


def test_bad_observations_warn_once_and_300k_good_ones_still_arrive(service, caplog):
    client = client_of(service, flush_every=4096)
    before = service.metrics()["observed"]
    with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
        client.observe(1, float("nan"))
        client.observe(2**63, 5)
        client.observe(None, 5)
        keys = np.arange(300_000) % 5000
        for key, t in zip(keys.tolist(), ticks(300_000)):
            client.observe(key, t)
        client.close()
    assert not client._flusher.is_alive()  # stopped by close, which returned cleanly
    assert client.metrics["observations_invalid"] == 3
    assert client.metrics["sent_observations"] == 300_000
    service.wait_observed(before + 300_000)
    warnings = [r for r in caplog.records if "invalid observation" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()


def test_the_flusher_survives_an_unexpected_error(service, caplog, monkeypatch):
    """Whatever goes wrong inside a flush is caught, counted and logged once; the thread
    keeps flushing."""
    client = client_of(service, flush_interval_s=0.02)
    real, failures = client._send_buffered, [2]

    def failing_twice():
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("boom")
        real()

    monkeypatch.setattr(client, "_send_buffered", failing_twice)
    with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
        deadline = time.monotonic() + 5
        while failures[0]:
            client.observe(1, ticks(1)[0])
            assert time.monotonic() < deadline
            time.sleep(0.01)
        before = service.metrics()["observed"]
        observe_good(client, 100)
        client.close()
    assert client.metrics["flush_errors"] == 2
    assert sum("boom" in r.getMessage() for r in caplog.records) == 1
    service.wait_observed(before + 100)


# -- item 5: the token ---------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["", "   ", "\t\n"])
def test_an_empty_token_is_a_configuration_error(service, token):
    with pytest.raises(ValueError, match="token is empty"):
        RemotePredictor(service.url, token=token)


def test_a_token_with_a_line_break_is_refused(service):
    with pytest.raises(ValueError, match="printable ASCII"):
        RemotePredictor(service.url, token="abc\r\nX-Other: 1")


def answers_with_token(client, service) -> bool:
    """True if the service took the client's requests (no 401 fallback)."""
    before = service.metrics()["observed"]
    observe_good(client, 10)
    client.flush()
    client.predict([1, 2], ticks(1)[0])
    ok = client.metrics["fallbacks"] == 0 and client.metrics["sent_observations"] == 10
    if ok:
        service.wait_observed(before + 10)
    client.close()
    return ok


def test_the_token_comes_from_the_environment(service, monkeypatch):
    monkeypatch.setenv("LCR_PREDICTOR_TOKEN", TOKEN)
    assert answers_with_token(RemotePredictor(service.url, deadline_s=2.0), service)
    monkeypatch.setenv("LCR_PREDICTOR_TOKEN", "")
    with pytest.raises(ValueError, match=r"\$LCR_PREDICTOR_TOKEN: token is empty"):
        RemotePredictor(service.url)


def test_the_token_comes_from_a_file(service, tmp_path, monkeypatch):
    monkeypatch.delenv("LCR_PREDICTOR_TOKEN", raising=False)
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    assert answers_with_token(RemotePredictor(service.url, deadline_s=2.0, token_file=str(path)), service)
    path.write_text("\n")
    with pytest.raises(ValueError, match=f"{path}.*token is empty"):
        RemotePredictor(service.url, token_file=path)
    missing = tmp_path / "missing"
    with pytest.raises(ValueError, match=f"token file {missing}: cannot read it") as err:
        RemotePredictor(service.url, token_file=missing)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="not both"):
        RemotePredictor(service.url, token=TOKEN, token_file=path)


# -- item 6: a dead model process, and a service busy for good -----------------------------------

class FakeService:
    """An ASGI app that answers as ``lcr serve-predictor`` does, in one of three modes:
    ``ok`` (predicts 0.0 for every key, takes observations), ``model-down`` and ``busy``
    (503 with that ``X-LCR-Reason``)."""

    def __init__(self):
        self.mode = "ok"
        self.observed = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.mode != "ok":
            status, headers, payload = 503, [(b"x-lcr-reason", self.mode.encode())], b'{"detail": "nope"}'
        elif scope["path"] == "/predict":
            status, headers, payload = 200, [], np.zeros(len(body) // 8).tobytes()
        else:
            self.observed += len(body) // 16
            status, headers, payload = 200, [], b'{"ok": true}'
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(payload)).encode()), *headers]})
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def fake():
    app = FakeService()
    with Server(lambda: app) as server:
        server.app = app
        yield server


def messages(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_model_down_is_an_outage_warned_once_with_recovery(fake, caplog):
    client = RemotePredictor(fake.url, deadline_s=1.0, retry_after_s=0.3)
    assert (client.predict([1, 2], 0) == 0).all()
    fake.app.mode = "model-down"
    with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
        for t in range(5):
            assert np.isnan(client.predict([1, 2, 3], t)).all()
        assert client.metrics["fallbacks"] == 5 and client.metrics["busy"] == 0
        assert len(messages(caplog, "unavailable")) == 1 and "model" in messages(caplog, "unavailable")[0]
        client.observe(1, 1)
        client.flush()  # within retry_after_s: the replica is out, the observation dropped and counted
        assert client.metrics["dropped_observations"] == 1
        fake.app.mode = "ok"
        time.sleep(0.35)  # the usual back-off, then it is asked again
        assert (client.predict([1, 2], 9) == 0).all()
        assert (client.predict([1, 2], 10) == 0).all()
    assert len(messages(caplog, "answering again")) == 1
    assert len(messages(caplog, "unavailable")) == 1
    client.close()


def test_a_service_busy_for_longer_than_busy_outage_s_is_an_outage(fake, caplog):
    client = RemotePredictor(fake.url, deadline_s=1.0, retry_after_s=0.1, busy_outage_s=0.5)
    fake.app.mode = "busy"
    with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
        assert np.isnan(client.predict([1], 0)).all()
        assert client.metrics["busy"] == 1 and client.metrics["fallbacks"] == 0
        assert not messages(caplog, "unavailable")  # a short busy spell is no outage
        deadline = time.monotonic() + 5
        while client.metrics["fallbacks"] == 0:
            assert time.monotonic() < deadline
            client.predict([1], 1)
            time.sleep(0.05)
        assert len(messages(caplog, "unavailable")) == 1 and "busy" in messages(caplog, "unavailable")[0]
        fake.app.mode = "ok"
        time.sleep(0.15)
        assert (client.predict([1], 2) == 0).all()
    assert len(messages(caplog, "answering again")) == 1
    client.close()


def test_the_default_busy_outage_is_5_seconds(fake):
    assert RemotePredictor(fake.url).busy_outage_s == 5.0


def model_down_reason(server) -> "str | None":
    """The ``X-LCR-Reason`` of the service's 503 for a predict (its model process is dead)."""
    request = urllib.request.Request(server.url + "/predict?now=0", data=b"\0" * 8, method="POST",
                                     headers={"Content-Type": "application/octet-stream",
                                              "Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=5)
    assert err.value.code == 503
    return err.value.headers.get("X-LCR-Reason")


def test_the_real_service_with_a_dead_model_is_an_outage_then_recovers(caplog):
    with Server(service_app) as server:
        client = client_of(server, retry_after_s=0.3)
        assert np.isnan(client.predict([1], 0)).all() and client.metrics["fallbacks"] == 0
        server.kill_model()
        if model_down_reason(server) is None:
            pytest.skip("LEAD: the service's 503 has no X-LCR-Reason yet (the service side of item 6); "
                        "this test runs by itself once it says model-down")
        with caplog.at_level(logging.WARNING, logger="lcr.predict.remote"):
            assert np.isnan(client.predict([1], 1)).all()
            assert client.metrics["fallbacks"] == 1 and client.metrics["busy"] == 0
            assert len(messages(caplog, "unavailable")) == 1
            server.restart()  # a supervisor restarts the service on the same port
            time.sleep(0.35)
            client.predict([1], 2)
            assert client.metrics["fallbacks"] == 1
        assert len(messages(caplog, "answering again")) == 1
        client.close()


# -- item 11: a password in the URL is never shown -------------------------------------------------

def test_a_password_in_the_url_never_appears(fake, caplog):
    url = f"http://user:{SECRET}@127.0.0.1:{fake.port}"
    with caplog.at_level(logging.DEBUG):
        client = RemotePredictor([url, f"http://user:{SECRET}@127.0.0.1:{free_port()}"], deadline_s=0.5)
        shown = [client.describe(), repr(client), client.name, client.url, str(client.metrics)]
        fake.app.mode = "model-down"
        client.predict(list(range(100)), 0)  # both replicas fail: one down, one refusing
        client.observe(1, 1)
        client.close()
    shown += [r.getMessage() for r in caplog.records]
    assert any("unavailable" in text for text in shown)
    assert any("user:***@127.0.0.1" in text for text in shown)
    for text in shown:
        assert SECRET not in text
    with pytest.raises(ValueError) as err:
        RemotePredictor(f"http://user:{SECRET}@127.0.0.1:99999")  # bad port
    assert SECRET not in str(err.value) and "***" in str(err.value)
    with pytest.raises(ValueError) as err:
        RemotePredictor(f"ftp://user:{SECRET}@host")
    assert SECRET not in str(err.value)


# -- item 13: bad arguments to predict and submit ----------------------------------------------------

@pytest.mark.parametrize("now, message", [
    (1e30, "now is outside the int64 range"), (float("inf"), "now must be a finite integer"),
    (2**63, "now is outside the int64 range"), (None, "now must be an integer"), ("5", "now must be an integer"),
    (2.5, "now must be a whole number"), (-1, "now must be a time >= 0"),
])
def test_predict_refuses_a_bad_now_on_the_client(service, now, message):
    client = client_of(service)
    with pytest.raises(ValueError, match=message) as err:
        client.predict([1, 2], now)
    assert "\n" not in str(err.value)
    assert client.metrics["fallbacks"] == 0 and client.metrics["requests"] == 0  # not an outage
    assert len(client.predict([1, 2], ticks(1)[0])) == 2 and client.metrics["fallbacks"] == 0  # still works
    client.close()


@pytest.mark.parametrize("keys, message", [
    ([2**63], r"keys\[0\] is outside the int64 range"), (np.array([2**63], dtype=np.uint64), "outside the int64"),
    ([1, None], r"keys\[1\] must be an integer"), (np.array([1e30]), "outside the int64"),
    (np.array([np.inf]), "inf"), ([[1, 2]], "must be an integer"), (np.zeros((2, 2)), "1-D"),
    (np.array(["a"]), "dtype"),
])
def test_predict_refuses_bad_keys_on_the_client(service, keys, message):
    client = client_of(service)
    with pytest.raises(ValueError, match=message):
        client.predict(keys, 0)
    assert client.metrics["fallbacks"] == 0 and client.metrics["requests"] == 0
    client.close()


class ZeroPredictor:
    name = "zero"

    def predict(self, keys, now):
        return np.zeros(len(keys))


def test_submit_after_close_raises():
    predictor = AsyncPredictor(ZeroPredictor())
    got = []
    predictor.submit([1, 2], 0, lambda k, v: got.append(list(k)))
    assert predictor.drain(5) and got == [[1, 2]]
    predictor.close()
    with pytest.raises(RuntimeError, match="AsyncPredictor is closed"):
        predictor.submit([3], 1, lambda k, v: got.append(list(k)))
    assert predictor.metrics["submitted"] == 2


@pytest.mark.parametrize("keys, now", [([1], float("nan")), ([1], 1e30), ([2**63], 0), ([None], 0), ([1.5], 0)])
def test_submit_refuses_bad_keys_and_times_on_the_caller(keys, now):
    predictor = AsyncPredictor(ZeroPredictor())
    with pytest.raises(ValueError):
        predictor.submit(keys, now, lambda k, v: None)
    assert predictor.metrics["submitted"] == 0 and predictor.metrics["errors"] == 0
    predictor.close()


def test_clients_agree_on_key_placement_however_the_url_is_spelled():
    """Keys are placed by server address: URLs that differ in credentials or a trailing
    slash must not split a key's history over two replicas."""
    ports = free_port(), free_port()
    one = RemotePredictor([f"http://user:{SECRET}@127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"])
    two = RemotePredictor([f"http://127.0.0.1:{ports[0]}/", f"http://other:pw@127.0.0.1:{ports[1]}"])
    keys, live = np.arange(10_000), np.array([True, True])
    assert (one.ring.owners_of(keys, live) == two.ring.owners_of(keys, live)).all()
    one.close()
    two.close()


# -- fuzz: every public entry of the client, values from everywhere ---------------------------------
#
# Each entry's documented outcome, checked against the rule written out independently here
# (``is_int64``, ``is_time``, ``keys_ok``): observe drops and counts what is not an int64 value and never
# raises; predict and submit raise a one-line ValueError for it; everything else is taken.
# After each example a good call must still work (the flusher alive, the worker answering),
# and at the end every good observation must have reached the real service.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
EDGES = [2.0**63, -2.0**63, 2.0**63 - 1024, -2.0**63 - 2048, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 0.0, -0.0]
any_dtype = hnp.scalar_dtypes() | hnp.unicode_string_dtypes() | hnp.byte_string_dtypes()
numpy_scalars = hnp.scalar_dtypes().flatmap(hnp.from_dtype)
scalars = st.one_of(
    st.integers(-2**63, 2**63 - 1), st.integers(-2**80, 2**80), st.floats(), st.sampled_from(EDGES),
    st.integers(-2**53, 2**53).map(float), st.none(), st.booleans(), st.text(max_size=3), st.binary(max_size=3),
    st.complex_numbers(max_magnitude=1e3), numpy_scalars, st.lists(st.integers(0, 9), max_size=2),
    hnp.arrays(any_dtype, hnp.array_shapes(min_dims=0, max_dims=1, max_side=2)))
times = st.one_of(st.integers(-2**63, 2**63 - 1), scalars)  # half of them good
key_arrays = st.one_of(
    hnp.arrays(any_dtype, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=6)),
    hnp.arrays(st.sampled_from([np.int64, np.uint64, np.int8, np.float64, np.float32]), st.integers(0, 20)),
    hnp.arrays(np.float64, st.integers(0, 20), elements=st.integers(-2**53, 2**53).map(float)),
    st.lists(scalars, max_size=6), st.lists(st.integers(-2**63, 2**63 - 1), max_size=20).map(tuple),
    scalars)


def is_int64(value) -> bool:
    """The documented rule for one key or time."""
    if isinstance(value, (np.generic, np.ndarray)):
        if np.ndim(value) != 0 or value.dtype.kind not in "iuf":
            return False
        value = value.item()
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -2**63 <= value < 2**63
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer() and -2.0**63 <= value < 2.0**63
    return False


def is_time(value) -> bool:
    """The documented rule for a time: an int64 value, not negative."""
    return is_int64(value) and (value.item() if isinstance(value, (np.generic, np.ndarray)) else value) >= 0


def keys_ok(keys) -> bool:
    """The documented rule for a batch of keys: a list or tuple element by element, else a
    1-D array of an integer or float dtype whose every value passes ``is_int64``."""
    if isinstance(keys, (list, tuple)):
        return all(is_int64(key) for key in keys)
    array = np.asarray(keys)
    return array.ndim == 1 and array.dtype.kind in "iuf" and all(is_int64(v) for v in array.tolist())


def one_line_value_error(call) -> None:
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) and "\n" not in str(err.value)


def test_fuzz_observe_drops_and_counts_bad_values_and_keeps_sending(service):
    client = client_of(service, flush_every=64)
    before = service.metrics()["observed"]
    taken, goods = [0], [0]

    @settings(FUZZ, max_examples=500)
    @given(key=scalars, t=scalars)
    def one(key, t):
        invalid = client.metrics["observations_invalid"]
        client.observe(key, t)  # never raises
        ok = is_int64(key) and is_time(t)
        assert client.metrics["observations_invalid"] == invalid + (not ok)
        good = ticks(1)[0]
        client.observe(good % 97, good)  # a later good observation
        taken[0] += ok + 1
        goods[0] += 1
        assert client._flusher.is_alive()

    one()
    client.close()
    assert client.metrics["sent_observations"] == taken[0] and client.metrics["dropped_observations"] == 0
    assert client.metrics["fallbacks"] == 0 and client.metrics["flush_errors"] == 0
    # The good ones at least (the service itself refuses negative or far-future fuzzed times).
    service.wait_observed(before + goods[0])


def test_fuzz_predict_answers_or_refuses_in_one_line(service):
    client = client_of(service, deadline_s=10.0)

    @settings(FUZZ, max_examples=400)
    @given(keys=key_arrays, now=times)
    def one(keys, now):
        requests = client.metrics["requests"]
        if keys_ok(keys) and is_time(now):
            values = client.predict(keys, now)
            assert values.dtype == np.float64 and values.shape == (len(keys),)
        else:
            one_line_value_error(lambda: client.predict(keys, now))
            assert client.metrics["requests"] == requests  # nothing sent
        assert client.predict([1, 2], 5).shape == (2,)  # a later good call

    one()
    assert client.metrics["fallbacks"] == 0  # a bad argument is never an outage
    client.close()


def test_fuzz_submit_predicts_every_good_key_or_refuses(service):
    remote = client_of(service, deadline_s=10.0)
    predictor = AsyncPredictor(remote)

    @settings(FUZZ, max_examples=250)
    @given(keys=key_arrays, now=times)
    def one(keys, now):
        got_keys, got_values = [], []

        def sink(k, v):
            got_keys.extend(k)
            got_values.extend(v)

        submitted = predictor.metrics["submitted"]
        if keys_ok(keys) and is_time(now):
            predictor.submit(keys, now, sink)
            assert predictor.drain(10)
            expected = {int(k) for k in (keys.tolist() if isinstance(keys, np.ndarray) else keys)}
            assert set(got_keys) == expected and len(got_values) == len(got_keys)
        else:
            one_line_value_error(lambda: predictor.submit(keys, now, sink))
            assert predictor.metrics["submitted"] == submitted
        got_keys.clear()
        predictor.submit([1, 2], 5, sink)  # a later good call
        assert predictor.drain(10) and sorted(got_keys) == [1, 2]

    one()
    assert predictor.metrics["errors"] == 0
    predictor.close()
    with pytest.raises(RuntimeError, match="closed"):
        predictor.submit([1], 1, lambda k, v: None)
    remote.close()


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("observe"), scalars, scalars), st.tuples(st.just("predict"), key_arrays, scalars),
    st.just(("flush",)), st.just(("train",))), min_size=1, max_size=12)


def test_fuzz_mixed_calls_never_break_the_client(service):
    client = client_of(service, deadline_s=10.0)
    before = service.metrics()["observed"]
    good = [0]

    @settings(FUZZ, max_examples=25)
    @given(OPERATIONS)
    def one(operations):
        for operation in operations:
            name, *args = operation
            if name == "observe":
                client.observe(*args)
            elif name == "predict" and not (keys_ok(args[0]) and is_time(args[1])):
                one_line_value_error(lambda: client.predict(*args))
            elif name == "predict":
                assert len(client.predict(*args)) == len(args[0])
            elif name == "flush":
                assert client.flush() is None
            else:
                assert client.train() in (True, False)
        t = ticks(1)[0]
        client.observe(1, t)
        good[0] += 1
        assert client._flusher.is_alive()

    one()
    client.close()
    assert client.metrics["fallbacks"] == 0 and client.metrics["flush_errors"] == 0
    # Each example's last observation reaches the model: counted, or dropped as stale where a
    # fuzzed observation of the same key (True is key 1) went ahead in time (lcr.predict.clock).
    service.wait_observed(before + good[0], stale_too=True)


@pytest.mark.parametrize("secret", ["s3cr/et", "s3cr#et", "s3cr?et", "s3cr@et", "s3cr%2Fet"])
def test_a_password_holding_url_delimiters_is_redacted_too(secret, caplog):
    """A password typed into a URL unencoded may hold '/', '?', '#' or '@': everything up
    to the last '@' is credentials, never shown, and the client still finds the host."""
    from lcr.redact import redact_url, url_secrets

    port = free_port()
    url = f"http://user:{secret}@127.0.0.1:{port}/"
    assert redact_url(url) == f"http://user:***@127.0.0.1:{port}/"
    assert secret in url_secrets(url)
    assert "s3cr" not in redact_url(f"redis://:{secret}@host:6379/0?db=1")
    with caplog.at_level(logging.DEBUG):
        client = RemotePredictor(url, deadline_s=0.5)
        assert client.replicas[0].endpoint.address == f"127.0.0.1:{port}"
        assert np.isnan(client.predict([1], 0)).all() and client.metrics["fallbacks"] == 1  # nothing listens
        shown = [client.describe(), repr(client), *(r.getMessage() for r in caplog.records)]
        client.close()
    assert any("unavailable" in text for text in shown)
    assert not any("s3cr" in text for text in shown)


def test_eight_threads_with_one_percent_invalid_lose_nothing_uncounted(service):
    """8 threads share one client; 1% of their observations are invalid (NaN, None, 2^63).
    Each invalid one is counted once, every valid one reaches the service (where a few
    arrive after a later access of their key from another thread: the model drops those
    as stale, and counts them)."""
    import itertools
    import threading

    client = client_of(service, flush_every=4096, max_buffered=10**6)
    before = service.arrived(stale_too=True)
    per_thread, clock, lock = 20_000, iter(ticks(8 * 20_000)), threading.Lock()
    bad_values = [float("nan"), None, 2**63]
    invalid = [0] * 8

    def worker(w):
        rng = np.random.default_rng(w)
        bad = rng.random(per_thread) < 0.01
        invalid[w] = int(bad.sum())
        for i, cycle in zip(range(per_thread), itertools.cycle(bad_values)):
            with lock:
                t = next(clock)
            client.observe(int(rng.integers(0, 5000)), cycle if bad[i] else t)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    client.close()
    valid = 8 * per_thread - sum(invalid)
    assert sum(invalid) > 0 and client.metrics["observations_invalid"] == sum(invalid)
    assert client.metrics["sent_observations"] == valid and client.metrics["dropped_observations"] == 0
    service.wait_observed(before + valid, stale_too=True)


def test_observations_after_close_are_dropped_and_counted(service):
    client = client_of(service)
    client.observe(1, ticks(1)[0])
    client.close()
    assert client.metrics["sent_observations"] == 1
    client.observe(2, ticks(1)[0])  # nothing would ever send it: counted, not kept
    assert client.metrics["dropped_observations"] == 1 and not client._keys


def test_what_close_cannot_send_is_counted(fake):
    client = RemotePredictor(fake.url, deadline_s=1.0, flush_interval_s=60)
    fake.app.mode = "busy"  # a busy replica's batch goes back to the buffer ...
    for t in range(5):
        client.observe(t, t)
    client.close()  # ... and close, the last flush, leaves it there: dropped, counted
    assert client.metrics["dropped_observations"] == 5 and client.metrics["sent_observations"] == 0


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_narrow_float_keys_are_checked_without_numpy_warnings(dtype):
    import warnings

    from lcr.predict.base import int64_keys

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 2^63 cast to float16 overflowed, with a RuntimeWarning
        assert int64_keys(np.array([1, 2048], dtype=dtype)).tolist() == [1, 2048]
