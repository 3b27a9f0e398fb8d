"""Predictors as a serving cache uses them: a time guard, and the shared-service client.

``GuardedPredictor`` keeps a slow or hung predictor from stalling eviction. It bounds
the predictor time of one eviction pass (``begin_pass`` starts a pass), and after a
call that fails or takes longer than ``timeout_s`` it refuses calls for ``backoff_s``:
a refused call raises ``PredictorUnavailable``, which the policy counts as a fallback
and answers with LRU. So a dead service costs at most one timeout, not one per victim.

``NoisyPredictor`` negates a share of another predictor's answers (``--predictor-noise``,
the live robustness benchmark), by ``lcr sim-kv --noise``'s rule.

``ServiceNodePredictor`` speaks ``lcr serve-predictor``'s binary protocol through
``lcr.predict.remote.RemotePredictor``: accesses are sent as observations (buffered,
flushed before each prediction) and a prediction the client could not get raises
instead of returning NaN, so it is counted as a fallback rather than as a decision.

None is thread-safe; each SGLang scheduler process owns its own.
"""
from __future__ import annotations

import base64
import time
import urllib.request
from typing import Sequence
from urllib.parse import unquote, urlsplit

from lcr.errors import LcrInputError
from lcr.kv.predictors import NegationNoise
from lcr.predict.backoff import Backoff
from lcr.redact import redact_url, split_credentials


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


class NoisyPredictor:
    """``inner``'s predictions, each negated with probability ``noise`` (``NegationNoise``,
    seed 0: a rerun negates the same (key, time) pairs). Everything else is ``inner``'s."""

    def __init__(self, inner, noise: float, seed: int = 0):
        self.inner = inner
        self.noise = NegationNoise(noise, seed)
        self.name = getattr(inner, "name", type(inner).__name__)

    def __getattr__(self, name):  # observe, observe_node, on_split, serving
        return getattr(self.inner, name)

    def predict(self, keys: Sequence[int], now: int):
        return self.noise.apply(keys, self.inner.predict(keys, now), now)


def check_service_url(url: str) -> str:
    """``http://[credentials@]host:port`` of a predictor service URL; errors show it redacted.
    Credentials run to the last ``@`` (a password may hold ``/``, ``?`` or ``#``)."""
    credentials, bare = split_credentials(url)
    parts = urlsplit(bare)
    if parts.scheme != "http" or not parts.hostname:
        raise LcrInputError(f"predictor_url must look like http://host:port, got {redact_url(url)!r}")
    try:
        parts.port
    except ValueError:
        raise LcrInputError(f"predictor_url {redact_url(url)!r} has a bad port") from None
    return f"http://{'' if credentials is None else credentials + '@'}{parts.netloc}"


class ServiceNodePredictor:
    """Tree nodes predicted by a shared ``lcr serve-predictor`` (keys: node keys).
    ``round_trip``: a call costs a network round trip (~1 ms) whatever its size, so the
    radix LARU asks once an eviction round, for every cached node."""

    round_trip = True

    def __init__(self, url: str, timeout_s: float = 0.05, retry_after_s: float = 5.0,
                 check: bool = True):
        from lcr.predict.remote import RemotePredictor

        self.url = check_service_url(url)  # may hold credentials: only ever shown redacted
        self.name = f"service({redact_url(self.url)})"
        if check:
            self._check_reachable(timeout_s)
        # The token comes from $LCR_PREDICTOR_TOKEN (lcr.predict.token), never a command line.
        self.client = RemotePredictor(self.url, deadline_s=timeout_s, retry_after_s=retry_after_s)

    def _check_reachable(self, timeout_s: float) -> None:
        credentials, bare = split_credentials(self.url)
        request = urllib.request.Request(bare + "/health")
        if credentials is not None:  # urllib refuses a URL with credentials in it
            basic = base64.b64encode(unquote(credentials).encode()).decode()
            request.add_header("Authorization", f"Basic {basic}")
        try:
            with urllib.request.urlopen(request, timeout=max(timeout_s, 1.0)) as reply:
                reply.read()
        except Exception as err:  # noqa: BLE001 - any failure means "not there"
            raise LcrInputError(f"predictor service {redact_url(self.url)} is unreachable "
                                f"({_scrubbed(err, self.url)})") from None

    def observe(self, key: int, t: int) -> None:
        self.client.observe(key, t)  # a bad value is dropped and counted by the client

    def predict(self, keys: Sequence[int], now: int):
        failures = self.client.metrics["fallbacks"]
        values = self.client.predict(list(keys), now)
        if self.client.metrics["fallbacks"] != failures:
            raise PredictorUnavailable(f"{self.name} did not answer")
        return values


def _scrubbed(err: Exception, url: str) -> str:
    """``err``'s text without any secret of ``url`` in it."""
    from lcr.redact import url_secrets

    text = str(err)
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
