"""A stateful test of RemotePredictor + the real service + its model process (issue 39).

Hypothesis drives one client against one real ``lcr serve-predictor`` app through good
and bad observations, predictions, training, killing the model process and restarting the
whole service on the same port. Whatever the order:

- no client call raises, except the documented one-line ValueError for a bad argument
  to ``predict`` (``observe`` drops and counts a bad value instead);
- the flusher thread is alive and the client's counters never decrease;
- once the service runs again, good observations and a train give predictions that are
  not all NaN, within a bounded wait.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

pytest.importorskip("lightgbm")
pytest.importorskip("uvicorn")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, rule,  # noqa: E402
                                 run_state_machine_as_test)

from lcr.predict.remote import RemotePredictor  # noqa: E402
from remote_service import TOKEN, Server, service_app, ticks  # noqa: E402

PERIODS = {key: 20 + 15 * key for key in range(6)}  # planted periodic keys the model can learn
LEARN_WITHIN_S = 20.0

bad_values = st.one_of(
    st.floats().filter(lambda v: not (math.isfinite(v) and v.is_integer() and abs(v) < 2.0**63)),
    st.sampled_from([2**63, -2**63 - 1, 10**30, None, "7", True, b"1", 1.5]))
bad_keys = st.sampled_from([[2**63], [float("nan")], [None], [[1, 2]], np.array([1e30]), np.array(["a"]), 3])


def observe_periodic(client, n: int) -> int:
    """``n`` ticks of the planted keys' accesses; returns how many observations."""
    count = 0
    for t in ticks(n):
        for key, period in PERIODS.items():
            if t % period == 0:
                client.observe(key, t)
                count += 1
    return count


class ClientAndService(RuleBasedStateMachine):
    server: Server  # set by the test: one service, restarted by the rules, across examples

    @initialize()
    def start(self):
        if not self.server.healthy():  # a previous example may have left its model dead
            self.server.restart()
        self.model_alive = True
        self.client = RemotePredictor(self.server.url, token=TOKEN, deadline_s=2.0, retry_after_s=0.2,
                                      flush_every=256, flush_interval_s=0.05)
        self.seen = dict(self.client.metrics)

    @rule(n=st.integers(1, 400))
    def observe_good_batch(self, n):
        observe_periodic(self.client, n)

    @rule(value=bad_values, where=st.sampled_from(["key", "t"]))
    def observe_bad_value(self, value, where):
        invalid = self.client.metrics["observations_invalid"]
        t = ticks(1)[0]
        self.client.observe(*((value, t) if where == "key" else (1, value)))
        assert self.client.metrics["observations_invalid"] == invalid + 1

    @rule(keys=st.lists(st.integers(0, 10), max_size=8))
    def predict(self, keys):
        values = self.client.predict(keys, ticks(1)[0])
        assert values.shape == (len(keys),) and values.dtype == np.float64

    @rule(keys=bad_keys)
    def predict_bad_keys(self, keys):
        requests = self.client.metrics["requests"]
        with pytest.raises(ValueError) as err:
            self.client.predict(keys, ticks(1)[0])
        assert "\n" not in str(err.value) and self.client.metrics["requests"] == requests

    @rule()
    def train(self):
        assert self.client.train() in (True, False)

    @rule()
    def flush(self):
        assert self.client.flush() is None

    @rule()
    def kill_model_process(self):
        if self.model_alive:
            self.server.kill_model()
            self.model_alive = False

    @rule()
    def restart_service(self):
        self.server.restart()
        self.model_alive = True

    @rule()
    def learn_and_predict(self):
        """With the service up: good observations and a train give real predictions soon."""
        if not self.model_alive:
            self.restart_service()
        deadline = time.monotonic() + LEARN_WITHIN_S
        while True:
            observe_periodic(self.client, 3000)
            self.client.flush()
            self.client.train()
            if not np.isnan(self.client.predict(list(PERIODS), ticks(1)[0])).all():
                return
            assert time.monotonic() < deadline, f"still all NaN after {LEARN_WITHIN_S:g} s: {self.client.metrics}"
            time.sleep(0.1)  # the client's back-off after the outage

    @invariant()
    def flusher_alive_and_counters_grow(self):
        assert self.client._flusher.is_alive()
        now = dict(self.client.metrics)
        assert all(now[name] >= before for name, before in self.seen.items()), (self.seen, now)
        self.seen = now

    def teardown(self):
        if hasattr(self, "client"):
            self.client.close()  # clean, whatever happened
            assert self.client.metrics["flush_errors"] == 0


def test_client_service_and_model_process_under_kills_and_restarts():
    with Server(service_app) as server:
        ClientAndService.server = server
        run_state_machine_as_test(ClientAndService, settings=settings(
            max_examples=10, stateful_step_count=15, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
