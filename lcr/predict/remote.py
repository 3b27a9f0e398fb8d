"""RemotePredictor: the Predictor interface over a shared ``lcr serve-predictor``.

Observations are buffered and sent in batches (``flush_every``, and before each
prediction) so the access path does not pay a round trip per key. Every call has a
deadline: if the service is down, slow, or answers nonsense, ``predict`` returns NaN
("unknown", so the cache falls back to LRU), a warning is logged once per outage, and
the client stays quiet for ``retry_after_s`` before trying again. Nothing raises.
"""
from __future__ import annotations

import http.client
import logging
import socket
import time
from typing import Sequence
from urllib.parse import urlsplit

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import Predictor
from lcr.predict.lightgbm_model import validate_keys
from lcr.predict.wire import CONTENT_TYPE, decode_predictions, encode_int64, encode_observations

log = logging.getLogger(__name__)


class ServiceUnavailable(Exception):
    pass


class RemotePredictor(Predictor):
    def __init__(self, url: str = "http://127.0.0.1:8765", deadline_s: float = 0.05,
                 token: str | None = None, flush_every: int = 4096, retry_after_s: float = 1.0):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise LcrInputError(f"predictor URL must look like http://host:port, got {url!r}")
        self.url = url
        self.name = f"remote({url})"
        self._host, self._port = parts.hostname, parts.port or 80
        self.deadline_s = deadline_s
        self.flush_every = flush_every
        self.retry_after_s = retry_after_s
        self._headers = {"Content-Type": CONTENT_TYPE}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._conn: http.client.HTTPConnection | None = None
        self._keys: list[int] = []
        self._times: list[int] = []
        self._down_until = 0.0
        self._warned = False
        self.metrics = {"fallbacks": 0, "dropped_observations": 0, "requests": 0}

    # -- Predictor -----------------------------------------------------------------------
    def observe(self, key: int, t: int) -> None:
        self._keys.append(key)
        self._times.append(t)
        if len(self._keys) >= self.flush_every:
            self.flush()

    def predict(self, keys: Sequence[int] | np.ndarray, now: int) -> np.ndarray:
        keys = validate_keys(keys)
        if not np.isfinite(now):
            raise LcrInputError(f"now must be a finite time, got {now}")
        self.flush()
        try:
            body = self._post(f"/predict?now={int(now)}", encode_int64(keys))
            return decode_predictions(body, len(keys)).copy()
        except (ServiceUnavailable, LcrInputError) as err:
            self._fall_back(err)
            return np.full(len(keys), np.nan)

    def flush(self) -> None:
        """Send buffered observations; on failure they are dropped (and counted)."""
        if not self._keys:
            return
        keys, times = self._keys, self._times
        self._keys, self._times = [], []
        try:
            self._post("/observe", encode_observations(keys, times))
        except ServiceUnavailable as err:
            self.metrics["dropped_observations"] += len(keys)
            self._fall_back(err)

    def train(self) -> bool:
        self.flush()
        try:
            self._post("/train", b"")
            return True
        except ServiceUnavailable as err:
            self._fall_back(err)
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- transport -----------------------------------------------------------------------
    def _post(self, path: str, body: bytes) -> bytes:
        if time.monotonic() < self._down_until:
            raise ServiceUnavailable("service marked down; waiting before retrying")
        self.metrics["requests"] += 1
        try:
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.deadline_s)
            self._conn.request("POST", path, body=body, headers=self._headers)
            response = self._conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException, socket.timeout) as err:
            self.close()
            self._down_until = time.monotonic() + self.retry_after_s
            raise ServiceUnavailable(f"{type(err).__name__}: {err}") from None
        if response.status != 200:
            raise ServiceUnavailable(f"HTTP {response.status}: {payload[:200].decode(errors='replace')}")
        if self._warned:
            log.warning("predictor service %s is answering again", self.url)
            self._warned = False
        return payload

    def _fall_back(self, err: Exception) -> None:
        self.metrics["fallbacks"] += 1
        if not self._warned:
            log.warning("predictor service %s unavailable (%s); predictions are unknown, "
                        "caches fall back to LRU", self.url, err)
            self._warned = True


__all__ = ["RemotePredictor", "ServiceUnavailable"]
