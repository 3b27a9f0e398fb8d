"""Predictors as a serving cache uses them: a time guard, and the shared-service client.

``GuardedPredictor`` keeps a slow or hung predictor from stalling eviction. It bounds
the predictor time of one eviction pass (``begin_pass`` starts a pass), and after a
call that fails or takes longer than ``timeout_s`` it refuses calls for ``backoff_s``:
a refused call raises ``PredictorUnavailable``, which the policy counts as a fallback
and answers with LRU. So a dead service costs at most one timeout, not one per victim.

``ServiceNodePredictor`` speaks ``lcr serve-predictor``'s binary protocol through
``lcr.predict.remote.RemotePredictor``: accesses are sent as observations (buffered,
flushed before each prediction) and a prediction the client could not get raises
instead of returning NaN, so it is counted as a fallback rather than as a decision.

Neither is thread-safe; each SGLang scheduler process owns its own.
"""
from __future__ import annotations

import os
import time
import urllib.request
from typing import Sequence
from urllib.parse import urlsplit

from lcr.errors import LcrInputError
from lcr.integrations.backoff import Backoff

TOKEN_ENV = "LCR_PREDICTOR_TOKEN"  # read from the environment: never on a command line


class PredictorUnavailable(RuntimeError):
    """The guard or the service refused a prediction; the policy evicts by LRU."""


class GuardedPredictor:
    def __init__(self, inner, *, timeout_s: float, backoff_s: float, pass_budget_s: float,
                 clock=time.monotonic):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.pass_budget_s = pass_budget_s
        self._clock = clock
        self._pass_spent = 0.0
        self._backoff = Backoff(f"predictor {self.name}", timeout_s=timeout_s, backoff_s=backoff_s,
                                fallback="evicting by LRU")
        self.refused = 0

    @property
    def backoffs(self) -> int:
        return self._backoff.backoffs

    def __getattr__(self, name):  # observe, observe_node, on_split: whatever the inner one has
        return getattr(self.inner, name)

    def begin_pass(self) -> None:
        self._pass_spent = 0.0

    def predict(self, keys: Sequence[int], now: int):
        started = self._clock()
        if self._backoff.shut(started):
            self.refused += 1
            raise PredictorUnavailable(f"{self.name} is backed off")
        if self._pass_spent >= self.pass_budget_s:
            self.refused += 1
            raise PredictorUnavailable(f"{self.name} spent this eviction pass's budget")
        try:
            values = self.inner.predict(keys, now)
        except Exception as err:
            ended = self._clock()
            self._pass_spent += ended - started
            self._backoff.failed(ended, ended - started, type(err).__name__)
            raise
        ended = self._clock()  # one clock read serves the budget and the timeout
        self._pass_spent += ended - started
        self._backoff.answered(ended, ended - started)
        return values


def check_service_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise LcrInputError(f"predictor_url must look like http://host:port, got {url!r}")
    try:
        parts.port
    except ValueError:
        raise LcrInputError(f"predictor_url {url!r} has a bad port") from None
    return f"http://{parts.netloc}"


class ServiceNodePredictor:
    """Tree nodes predicted by a shared ``lcr serve-predictor`` (keys: node keys)."""

    def __init__(self, url: str, timeout_s: float = 0.05, retry_after_s: float = 5.0,
                 check: bool = True):
        from lcr.predict.remote import RemotePredictor

        self.url = check_service_url(url)
        self.name = f"service({self.url})"
        if check:
            self._check_reachable(timeout_s)
        self.client = RemotePredictor(self.url, deadline_s=timeout_s, token=os.environ.get(TOKEN_ENV),
                                      retry_after_s=retry_after_s)

    def _check_reachable(self, timeout_s: float) -> None:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=max(timeout_s, 1.0)) as reply:
                reply.read()
        except Exception as err:  # noqa: BLE001 - any failure means "not there"
            raise LcrInputError(f"predictor service {self.url} is unreachable ({err})") from None

    def observe(self, key: int, t: int) -> None:
        self.client.observe(int(key), int(t))

    def predict(self, keys: Sequence[int], now: int):
        failures = self.client.metrics["fallbacks"]
        values = self.client.predict(list(keys), now)
        if self.client.metrics["fallbacks"] != failures:
            raise PredictorUnavailable(f"{self.name} did not answer")
        return values
