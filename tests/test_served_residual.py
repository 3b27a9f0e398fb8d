"""The residual-life predictor behind the predictor service (``lcr serve-predictor
--model residual``): what a client gets through a real service is what the predictor
answers in process, and the service's rules (stale times, key cap, restarted clock)
keep its counts exact."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from remote_service import TOKEN, Server  # noqa: E402

from lcr.predict.remote import RemotePredictor  # noqa: E402
from lcr.predict.residual import ResidualLifePredictor  # noqa: E402
from lcr.predict.served_residual import ServedResidual  # noqa: E402
from lcr.predict.service import create_app  # noqa: E402


def conversation_stream(n_keys: int = 300, seed: int = 0) -> list[tuple[int, int]]:
    """(key, time): keys that come back after lognormal gaps until 2,500."""
    rng = random.Random(seed)
    events = []
    for key in range(n_keys):
        t = rng.randrange(200)
        while t < 2500:
            events.append((t, key))
            t += int(math.exp(rng.gauss(4.5, 0.6)))
    return [(key, t) for t, key in sorted(events)]


def test_a_client_of_the_service_gets_the_in_process_answers():
    stream = conversation_stream()
    local = ResidualLifePredictor()
    for key, t in stream:
        local.observe(key, t)
    now = stream[-1][1] + 1
    keys = list(range(310))  # ten never seen: NaN
    with Server(lambda: create_app(ServedResidual, token=TOKEN)) as server:
        client = RemotePredictor(server.url, deadline_s=5.0, token=TOKEN, flush_every=256)
        for key, t in stream:
            client.observe(key, t)
        client.flush()
        server.wait_observed(len(stream))  # a prediction never waits for observations in flight
        served = client.predict(keys, now)
        assert client.metrics["fallbacks"] == 0
        metrics = server.metrics()
        client.close()
    expected = np.array(local.predict(keys, now))
    assert np.isfinite(expected).sum() > 100
    np.testing.assert_array_equal(served, expected)
    assert metrics["observed"] == len(stream) and metrics["keys"] == 300 and metrics["model_version"] == 0


def test_stale_times_are_dropped_and_the_key_cap_closes_open_counts():
    model = ServedResidual()
    taken = model.observe_many(np.array([1, 2, 3, 1]), np.array([100, 200, 300, 50]))
    assert taken == {"observed": 4, "refused": 0} and model.metrics["times_stale"] == 1
    assert model.model.nodes[1] == (100, 0)  # key 1's access at 50 came after its access at 100
    model.observe_many(np.array([4, 2]), np.array([400, 500]))
    assert model.forget_least_recent(3, 2) == 2  # keys 1 and 3 were seen least recently
    assert list(model.model.nodes) == [4, 2]
    assert model.model._open.sum() == 2  # their open counts left with them
    assert model.fit() and model.model_version == 1


def test_a_restarted_clock_forgets_the_per_key_state():
    model = ServedResidual()
    model.clock.restart_after_s = 0.0
    model.observe_many(np.arange(10), np.arange(10_000, 10_010))
    model.observe_many(np.array([3]), np.array([10_011]))  # moves the clock
    for _ in range(3):  # a client restarted from 0: nothing moves the clock any more
        model.observe_many(np.array([5, 6]), np.array([1, 2]))
    assert model.metrics["clock_state_forgotten"] == 10 and model.clock.counters["clock_restarts"] == 1
    assert set(model.model.nodes) <= {5, 6}  # the old clock's keys are gone
    assert model.model._open.sum() == len(model.model.nodes)
