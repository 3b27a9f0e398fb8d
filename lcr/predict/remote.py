"""RemotePredictor: the Predictor interface over one or more ``lcr serve-predictor`` replicas.

- Observations are buffered and sent in order, in batches of at most 65,536, by one
  background thread (at least every ``flush_interval_s``, at once when ``flush_every``
  are waiting or a prediction is asked), so neither the access path nor a prediction
  waits for them. At most ``max_buffered`` wait; beyond that the oldest are dropped and
  counted (``dropped_observations``), as are batches no replica could take. A busy
  replica (503: its backlog stayed full for the service's admission wait) keeps its
  batch in the buffer for the next flush. Batching is what keeps a client's share of a
  saturated service: the service admits waiting requests in arrival order, so one
  request of many observations counts as much as one of a few.
- Several replica URLs: each key belongs to one replica by consistent hashing (64
  virtual nodes per replica), so a key's history and its predictions stay on one model.
  While a replica cannot be reached (connection refused, reset, unreachable) it is
  "down" for ``retry_after_s``: its keys move to the next live replica on the ring, and
  move back when it answers again.
- ``predict`` has a deadline for the whole call (``deadline_s``): keys whose replica is
  down, slower than the deadline, or answers nonsense predict NaN ("unknown", so the
  cache falls back to LRU) and a warning is logged once per outage. A replica that was
  too slow is not asked for predictions for ``retry_after_s`` (so a hung service costs
  one deadline, not one per call) but still gets observations, with the longer
  ``observe_deadline_s``. A busy replica (503) only costs that call: its predictions are
  NaN.
- The service's 503 says why in ``X-LCR-Reason`` (``busy``: its queue is full, a later
  try may succeed; ``model-down``: its model process died, only a restart helps). A
  ``model-down`` replica is an outage like an unreachable one: warned once, counted in
  ``fallbacks``, out for ``retry_after_s``, its buffered observations dropped and
  counted. A replica that has answered only ``busy`` (or 503 without a reason) for more
  than ``busy_outage_s`` (5 s) is an outage too, so a wedged service is seen: warned
  once, counted in ``fallbacks``, no predictions asked for ``retry_after_s``, its
  observations kept buffered. Each outage logs one warning, and one message when the
  replica answers again.
- Bad values never reach the wire. ``observe`` is on the cache's access path, so it
  never raises: an observation whose key is not an int64 value or whose time is not a
  time (``lcr.predict.base.int64_value``, ``time_value``: NaN, inf, 1e30, >= 2^63, a
  negative time, None, text ...) is dropped and counted (``observations_invalid``), with
  a warning at most once a minute.
  ``predict`` raises ``LcrInputError`` (a ValueError, one line) for bad keys or ``now``:
  that is a bug at the call site, not an outage. Nothing else raises: the flusher thread
  catches whatever goes wrong in a flush, counts it (``flush_errors``), logs the first
  one and keeps going.
- Secrets: the token comes from ``token``, ``token_file`` or ``$LCR_PREDICTOR_TOKEN``
  (``lcr.predict.token``; an empty one is an error); a password in a URL is shown as
  ``***`` in ``name``, ``url``, ``describe()``, ``repr`` and every message.

Metrics (``metrics``, counters that only grow): ``requests``, ``sent_observations``,
``dropped_observations``, ``observations_invalid``, ``fallbacks`` (a replica's keys
predicted NaN because of an outage), ``busy`` (a short busy spell), ``flush_errors``.

Thread-safe: the buffer is guarded by a lock, batches go out one at a time (in order)
and each request uses its own pooled connection, so caches may share one client across
threads (e.g. inside AsyncPredictor).
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.base import INT64_MAX, INT64_MIN, Predictor, int64_keys, int64_value, time_value
from lcr.predict.http_client import CallFailed, ConnectFailed, ConnectionPool, ConnectTimeout, Endpoint
from lcr.predict.token import resolve_token
from lcr.predict.wire import CONTENT_TYPE, decode_predictions, encode_int64, encode_observations

log = logging.getLogger(__name__)

VIRTUAL_NODES = 64
MAX_OBSERVATIONS_PER_REQUEST = 1 << 16  # 1 MiB bodies, far below the service's limit
BUSY_OUTAGE_S = 5.0  # answering only "busy" for longer than this is an outage
INVALID_WARN_EVERY_S = 60.0  # at most one warning about invalid observations per minute
REASON_HEADER = "x-lcr-reason"  # on the service's 503: "busy" or "model-down"


class ServiceUnavailable(Exception):
    """A replica could not answer (down, too slow, or wrong answer)."""


class ServiceDown(ServiceUnavailable):
    """A replica could not be reached at all."""


class ModelDown(ServiceDown):
    """A replica answered 503 ``model-down``: its model process has died."""


class NotAccepted(ServiceUnavailable):
    """A replica did not accept the connection in time: too slow, and nothing was sent."""


class BusyTooLong(NotAccepted):
    """A replica has answered only "busy" for longer than ``busy_outage_s``: an outage."""


class TooLarge(ServiceUnavailable):
    """A replica refused a body over its size limit (HTTP 413) and took none of it."""


class ServiceBusy(Exception):
    """A replica answered 503: alive, but its queue is full."""


def key_hashes(keys: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each key (splitmix64's finaliser), as uint64."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class HashRing:
    """Consistent hashing of keys onto replica indices."""

    def __init__(self, names: Sequence[str], virtual_nodes: int = VIRTUAL_NODES):
        points, owners = [], []
        for index, name in enumerate(names):
            for v in range(virtual_nodes):
                digest = hashlib.blake2b(f"{name}#{v}".encode(), digest_size=8).digest()
                points.append(int.from_bytes(digest, "little"))
                owners.append(index)
        order = np.argsort(np.array(points, dtype=np.uint64), kind="stable")
        self.points = np.array(points, dtype=np.uint64)[order]
        self.owners = np.array(owners, dtype=np.int64)[order]

    def owners_of(self, keys: np.ndarray, live: np.ndarray) -> np.ndarray:
        """Replica index of each key, walking clockwise past replicas not ``live``
        (a bool per replica); -1 when none is live."""
        if not live.any():
            return np.full(len(keys), -1, dtype=np.int64)
        alive = live[self.owners]
        points, owners = self.points[alive], self.owners[alive]
        pos = np.searchsorted(points, key_hashes(keys), side="left") % len(points)
        return owners[pos]


class _Replica:
    def __init__(self, url: str, pool_size: int):
        self.endpoint = Endpoint(url)
        self.url = self.endpoint.url  # redacted: what messages show
        self.pool = ConnectionPool(self.endpoint, size=pool_size)
        self.down_until = 0.0  # unreachable: its keys go to the next live replica
        self.slow_until = 0.0  # missed a deadline: no predictions asked until then
        self.busy_since: float | None = None  # first "busy" answer of the current spell
        self.warned = False
        # Halved at each 413: a replica started with a smaller body limit gets smaller batches.
        self.observations_per_request = MAX_OBSERVATIONS_PER_REQUEST


class RemotePredictor(Predictor):
    """See the module's docstring. ``token``: the service's bearer token; None reads
    ``token_file`` or ``$LCR_PREDICTOR_TOKEN`` (``lcr.predict.token.resolve_token``)."""

    def __init__(self, url: str | Sequence[str] = "http://127.0.0.1:8765", deadline_s: float = 0.05,
                 token: str | None = None, flush_every: int = 4096, retry_after_s: float = 1.0,
                 max_buffered: int | None = None, pool_size: int = 8, flush_interval_s: float = 0.1,
                 observe_deadline_s: float = 2.0, token_file: str | None = None,
                 busy_outage_s: float = BUSY_OUTAGE_S):
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise LcrInputError("RemotePredictor needs at least one replica URL")
        for name, value in (("deadline_s", deadline_s), ("flush_interval_s", flush_interval_s),
                            ("observe_deadline_s", observe_deadline_s), ("busy_outage_s", busy_outage_s)):
            if not value > 0:
                raise LcrInputError(f"{name} must be > 0, got {value}")
        if flush_every < 1:
            raise LcrInputError(f"flush_every must be at least 1, got {flush_every}")
        token = resolve_token(token, token_file)
        self.replicas = [_Replica(u, pool_size) for u in urls]
        # Placed by address, not URL text: clients whose URLs differ only in credentials or a
        # trailing slash must agree on which replica holds a key.
        self.ring = HashRing([r.endpoint.address for r in self.replicas])
        self.url = ",".join(r.url for r in self.replicas)  # redacted
        self.name = f"remote({self.url})"
        self.deadline_s, self.flush_every, self.retry_after_s = deadline_s, flush_every, retry_after_s
        self.observe_deadline_s, self.busy_outage_s = observe_deadline_s, busy_outage_s
        # Room for bursts the background flusher has not caught up with yet.
        self.max_buffered = max_buffered if max_buffered is not None else max(16 * flush_every, 1 << 18)
        if self.max_buffered < flush_every:
            raise LcrInputError(f"max_buffered ({self.max_buffered}) must be at least flush_every ({flush_every})")
        self._headers = {"Content-Type": CONTENT_TYPE}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._lock = threading.Lock()  # guards the buffer, metrics and replica state
        self._sending = threading.Lock()  # one batch in flight at a time: observations stay in order
        self._keys: list[int] = []
        self._times: list[int] = []
        self.metrics = {"fallbacks": 0, "busy": 0, "dropped_observations": 0, "sent_observations": 0,
                        "requests": 0, "observations_invalid": 0, "flush_errors": 0}
        self._invalid_warned_at = -INVALID_WARN_EVERY_S  # monotonic time of the last such warning
        self._invalid_since_warning = 0
        self._wake = threading.Event()
        self._closed = False
        self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval_s,),
                                         name="lcr-remote-flush", daemon=True)
        self._flusher.start()

    @property
    def reconnects(self) -> int:
        return sum(r.pool.reconnects for r in self.replicas)

    def describe(self) -> str:
        """One line for logs: the replicas (passwords redacted) and the deadlines."""
        return (f"remote predictor at {self.url} (deadline {self.deadline_s * 1000:g} ms, "
                f"retry after {self.retry_after_s:g} s, token {'set' if 'Authorization' in self._headers else 'none'})")

    def __repr__(self) -> str:
        return f"RemotePredictor({self.url!r})"

    # -- Predictor -----------------------------------------------------------------------
    def observe(self, key: int, t: int) -> None:
        """Buffer one access; returns at once. A key that is not an int64 value, or a time
        that is not one >= 0, is dropped and counted (``observations_invalid``, a warning at most once a minute):
        the access path never raises for it."""
        if not (type(key) is int and type(t) is int  # the hot path: plain ints in range
                and INT64_MIN <= key <= INT64_MAX and 0 <= t <= INT64_MAX):
            try:
                key, t = int64_value(key, "key"), time_value(t, "t")
            except LcrInputError as err:
                self._refuse_observation(err)
                return
        with self._lock:
            if self._closed:  # no flusher left to send it
                self.metrics["dropped_observations"] += 1
                return
            self._keys.append(key)
            self._times.append(t)
            overflow = len(self._keys) - self.max_buffered
            if overflow > 0:  # only while sends keep failing: keep the newest
                del self._keys[:overflow], self._times[:overflow]
                self.metrics["dropped_observations"] += overflow
            due = len(self._keys) >= self.flush_every
        if due:
            self._wake.set()

    def _refuse_observation(self, err: LcrInputError) -> None:
        now = time.monotonic()
        with self._lock:
            self.metrics["observations_invalid"] += 1
            self._invalid_since_warning += 1
            if now - self._invalid_warned_at < INVALID_WARN_EVERY_S:
                return
            count, self._invalid_since_warning, self._invalid_warned_at = self._invalid_since_warning, 0, now
        log.warning("%s: dropped %d invalid observation(s) (%s); counted in observations_invalid, "
                    "warned at most once a minute", self.name, count, err)

    def predict(self, keys: Sequence[int] | np.ndarray, now: int) -> np.ndarray:
        """Predicted next-access times, NaN where a replica did not answer (the cache falls
        back to LRU; counted in ``fallbacks``). Keys that are not int64 values, or a ``now``
        that is not a time (an int64 value >= 0), raise ``LcrInputError`` (a ValueError):
        a bug at the call site, not an outage."""
        keys, now = int64_keys(keys), time_value(now, "now")
        self._wake.set()  # observations made so far go out now, without delaying this call
        deadline = time.monotonic() + self.deadline_s
        out = np.full(len(keys), np.nan)
        owners = self.ring.owners_of(keys, self._live())
        now_s = time.monotonic()
        for index in np.unique(owners[owners >= 0]).tolist():
            mine = np.flatnonzero(owners == index)
            if now_s < self.replicas[index].slow_until:
                self._count("fallbacks")
                continue
            try:
                body = self._post(index, f"/predict?now={now}", encode_int64(keys[mine]), deadline)
                out[mine] = decode_predictions(body, len(mine))
            except (ServiceUnavailable, ServiceBusy, LcrInputError) as err:
                if isinstance(err, ServiceUnavailable) and not isinstance(err, ServiceDown):
                    self.replicas[index].slow_until = time.monotonic() + self.retry_after_s
                self._fall_back(index, err)
        if (owners < 0).any():
            self._count("fallbacks")
        return out

    def flush(self) -> None:
        """Send buffered observations now; what no replica takes is dropped (and counted),
        what a busy replica refuses stays buffered. Never raises: an unexpected error is
        counted (``flush_errors``) and the first one logged."""
        with self._sending:
            try:
                self._send_buffered()
            except Exception as err:  # noqa: BLE001 - the flusher thread must outlive any bug
                self._count("flush_errors")
                if self.metrics["flush_errors"] == 1:
                    log.error("%s: sending observations failed (later failures are counted in "
                              "flush_errors only): %s: %s", self.name, type(err).__name__, err)

    def _send_buffered(self) -> None:
        with self._lock:
            if not self._keys:
                return
            keys = np.array(self._keys, dtype=np.int64)
            times = np.array(self._times, dtype=np.int64)
            self._keys, self._times = [], []
        owners = self.ring.owners_of(keys, self._live())
        dropped = int(np.count_nonzero(owners < 0))
        for index in np.unique(owners[owners >= 0]).tolist():
            mine = np.flatnonzero(owners == index)
            replica, begin = self.replicas[index], 0
            while begin < len(mine):
                part = mine[begin:begin + replica.observations_per_request]
                try:
                    self._post(index, "/observe", encode_observations(keys[part], times[part]),
                               time.monotonic() + self.observe_deadline_s)
                    self._count("sent_observations", len(part))
                    begin += len(part)
                except TooLarge as err:
                    if len(part) > 1:  # nothing was taken: the same observations in smaller bodies
                        replica.observations_per_request = len(part) // 2
                        continue
                    dropped += len(mine) - begin
                    self._fall_back(index, err)
                    break
                except (ServiceBusy, NotAccepted) as err:  # full, or nothing sent: keep them for the next flush
                    self._requeue(keys[mine[begin:]], times[mine[begin:]])
                    self._fall_back(index, err)
                    break
                except ServiceUnavailable as err:
                    dropped += len(mine) - begin
                    self._fall_back(index, err)
                    break
        self._count("dropped_observations", dropped)

    def _requeue(self, keys: np.ndarray, times: np.ndarray) -> None:
        """Put observations back in front of the buffer, within ``max_buffered``."""
        with self._lock:
            self._keys = keys.tolist() + self._keys
            self._times = times.tolist() + self._times
            overflow = len(self._keys) - self.max_buffered
            if overflow > 0:
                del self._keys[:overflow], self._times[:overflow]
                self.metrics["dropped_observations"] += overflow

    def train(self) -> bool:
        """Fit every live replica now; True if all of them answered."""
        self.flush()
        ok = True
        for index in np.flatnonzero(self._live()).tolist():
            try:
                self._post(index, "/train", b"", time.monotonic() + max(self.deadline_s, 60.0))
            except (ServiceUnavailable, ServiceBusy) as err:
                self._fall_back(index, err)
                ok = False
        return ok and bool(self._live().any())

    def close(self) -> None:
        """Send what is buffered (what no replica takes is dropped and counted), stop the
        flusher, close the connections. Later observations are dropped and counted;
        ``predict`` still works (on new connections)."""
        with self._lock:
            self._closed = True
        self._wake.set()
        self._flusher.join(self.observe_deadline_s + 1)
        self.flush()
        with self._lock:  # what a busy replica handed back has no later flush to go out with
            self.metrics["dropped_observations"] += len(self._keys)
            self._keys, self._times = [], []
        for replica in self.replicas:
            replica.pool.close()

    # -- transport -----------------------------------------------------------------------
    def _flush_loop(self, interval: float) -> None:
        while not self._closed:
            self._wake.wait(interval)
            self._wake.clear()
            self.flush()

    def _count(self, name: str, amount: int = 1) -> None:
        if amount:
            with self._lock:
                self.metrics[name] += amount

    def _live(self) -> np.ndarray:
        now = time.monotonic()
        return np.array([now >= r.down_until for r in self.replicas])

    def _post(self, index: int, path: str, body: bytes, deadline: float) -> bytes:
        replica = self.replicas[index]
        self._count("requests")
        try:
            status, payload, headers = replica.pool.request("POST", path, self._headers, body, deadline)
        except ConnectFailed as err:
            replica.down_until = time.monotonic() + self.retry_after_s
            raise ServiceDown(str(err)) from None
        except ConnectTimeout as err:
            raise NotAccepted(str(err)) from None
        except CallFailed as err:
            raise ServiceUnavailable(str(err)) from None
        if status == 503:
            self._refused(replica, headers.get(REASON_HEADER, "busy"), payload)
        replica.busy_since = None
        if status == 413:
            raise TooLarge(f"HTTP 413: {payload[:200].decode(errors='replace')}")
        if status != 200:
            raise ServiceUnavailable(f"HTTP {status}: {payload[:200].decode(errors='replace')}")
        replica.slow_until = 0.0
        if replica.warned:
            replica.warned = False
            log.warning("predictor service %s is answering again", replica.url)
        return payload

    def _refused(self, replica: _Replica, reason: str, payload: bytes) -> None:
        """Raise what a 503 means: the model is down, a busy spell, or one gone on too long."""
        text = f"HTTP 503 {reason}: {payload[:200].decode(errors='replace')}"
        now = time.monotonic()
        if reason == "model-down":
            replica.busy_since = None
            replica.down_until = now + self.retry_after_s
            raise ModelDown(f"its model process is down ({text})")
        if replica.busy_since is None:
            replica.busy_since = now
        elif now - replica.busy_since > self.busy_outage_s:
            raise BusyTooLong(f"busy for {now - replica.busy_since:.1f} s ({text})")
        raise ServiceBusy(text)

    def _fall_back(self, index: int, err: Exception) -> None:
        replica = self.replicas[index]
        if isinstance(err, ServiceBusy):
            self._count("busy")
            return
        self._count("fallbacks")
        with self._lock:
            warn, replica.warned = not replica.warned, True
        if warn:
            log.warning("predictor service %s unavailable (%s); its keys predict unknown, "
                        "caches fall back to LRU", replica.url, err)


__all__ = ["BusyTooLong", "HashRing", "ModelDown", "RemotePredictor", "ServiceBusy", "ServiceDown",
           "ServiceUnavailable"]
