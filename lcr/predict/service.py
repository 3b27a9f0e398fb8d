"""The shared predictor service: one CPU LightGBM model behind HTTP for many processes.

Endpoints (binary bodies: see ``lcr.predict.wire``):

- ``POST /observe``  keys+times -> ``{"observed": n}`` once handed to the model
- ``POST /predict?now=T``  keys -> float64 next-access times (NaN = unknown)
- ``POST /train``  fit now on the current window -> ``{"fitted": bool, "model_version": v}``
- ``GET /health``  liveness and model version (no token needed)
- ``GET /metrics``  counters as JSON

Protection (every limit in ``ServiceLimits``):

- The event loop only moves bytes. The model and all its CPU work live in a separate
  process (``model_process.py``) with two lanes: observe and train share one, so updates
  and fits are serialised (one fit at a time); predict has its own, so a huge observe
  never blocks predictions. ``/health`` and ``/metrics`` are answered by the event loop
  from the model process's latest report, so they stay quick whatever the model does.
- Admission, decided from Content-Length before the body is read: the predict lane
  admits at most ``max_queued`` requests and ``max_queued_bytes`` of bodies, beyond that
  503 at once (a late prediction is worthless). The observe lane admits batches while
  fewer than ``max_queued_bytes`` of observations wait for the model; when full, up to
  ``max_queued`` requests wait their turn in arrival order (first come, first admitted)
  for at most ``admission_wait_s``, then get 503. Waiting in order, not racing for a
  free slot, gives every client its share of a saturated model, so a client that
  batches its observations keeps up instead of losing them.
- Per-key state is capped (``max_keys``): past the cap the least recently seen keys are
  forgotten in one sweep (counted in ``keys_evicted``).
- Times follow the model's one rule (``lcr.predict.clock``), with the bounds set here:
  negative times and times more than ``max_time_jump`` (65,536) past the service's
  clock are dropped and counted (``times_negative``, ``times_ahead``, their sum
  ``times_rejected``), so one client cannot drag the clock that every client's
  predictions hang on; times far behind it are taken at it (``times_behind``); an access
  older than its key's latest is dropped (``times_stale``); when nothing has moved the clock for
  ``clock_restart_s`` (a restarted client clock), it restarts from the stream
  (``clock_restarts``). ``/metrics`` shows the clock (``clock``).
- Slow clients: request headers must arrive within ``header_timeout_s`` and the body
  within ``body_timeout_s`` (408); idle keep-alive connections close after
  ``keep_alive_s``; beyond ``max_connections`` open connections a request gets 503.
- Strict input, refused where it enters, counted (``rejected_requests``, and per status in
  ``rejected_by_status``), never reaching the model: bodies must be
  ``application/octet-stream`` (415) and at most ``max_body_bytes`` (413); malformed
  bodies and Content-Length headers get 400; ``now`` must be an integer time in
  [0, 2^63) (422); a missing or wrong bearer token (when one is set) gets 401. Every
  error is ``{"detail": one line}`` as JSON, HTTP the server cannot parse included.
- Every 503 carries ``X-LCR-Reason``: ``busy`` (admission or connections full: retry
  later, ``Retry-After: 1``) or ``model-down`` (the model process died: only a restart
  of the service helps). If the model process dies, ``/health`` answers 503
  ``model-down`` too (a supervisor restarts the service) and model requests 503
  (clients fall back to LRU).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import hmac
import importlib.util
import json
import logging
import os
import re
import time
import types
from dataclasses import dataclass
from urllib.parse import parse_qs

from lcr.errors import LcrInputError
from lcr.predict.clock import DEFAULT_CLOCK_RESTART_S, DEFAULT_MAX_TIME_JUMP
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.model_process import (OBSERVE, PREDICT, TRAIN, ModelFailed, ModelGone, ModelHost,
                                       ModelProcess)
from lcr.predict.wire import CONTENT_TYPE, INT64, decode_keys, decode_observations

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 16 << 20  # 1M observations or 2M keys per request
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServiceLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_queued: int = 64                   # predict: requests waiting; observe: requests waiting for room
    max_queued_bytes: int = 4 * DEFAULT_MAX_BODY  # body bytes waiting per lane
    admission_wait_s: float = 1.0          # longest an observe waits for room before 503
    max_keys: int = 1_000_000              # per-key feature rows kept
    evict_fraction: float = 0.125          # share of max_keys forgotten per sweep
    max_time_jump: int = DEFAULT_MAX_TIME_JUMP   # the clock's step bound (lcr.predict.clock)
    clock_restart_s: float = DEFAULT_CLOCK_RESTART_S  # nothing moved the clock this long: it restarts
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_connections: int = 1024

    def __post_init__(self):
        for name in ("max_body_bytes", "max_queued", "max_queued_bytes", "max_keys", "max_time_jump",
                     "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LcrInputError(f"service limit {name} must be an integer >= 1, got {value!r}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s", "clock_restart_s"):
            if not getattr(self, name) > 0:
                raise LcrInputError(f"service limit {name} must be > 0, got {getattr(self, name)}")
        if not self.admission_wait_s >= 0:
            raise LcrInputError(f"service limit admission_wait_s must be >= 0, got {self.admission_wait_s}")
        if not 0 < self.evict_fraction < 1:
            raise LcrInputError(f"service limit evict_fraction must lie in (0, 1), got {self.evict_fraction}")


class Busy(Exception):
    """A lane is full: the request is refused (503) instead of waiting."""


class _Lane:
    """Requests and body bytes handed to the model and not answered yet; refuses beyond its bounds.
    Event loop thread only."""

    def __init__(self, max_queued: int, max_bytes: int):
        self._max_queued, self._max_bytes = max_queued, max_bytes
        self.queued = self.queued_bytes = 0

    def admit(self, nbytes: int) -> None:
        if self.queued >= self._max_queued or self.queued_bytes + nbytes > self._max_bytes:
            raise Busy()
        self.queued += 1
        self.queued_bytes += nbytes

    def release(self, nbytes: int) -> None:
        self.queued -= 1
        self.queued_bytes -= nbytes


class _Backlog:
    """Observation bytes handed to the model and not taken in yet. Admits while there is
    room; otherwise callers wait in arrival order (at most ``max_waiting`` of them, each
    at most ``wait_s``). Event loop thread only."""

    def __init__(self, max_bytes: int, max_waiting: int, wait_s: float):
        self.max_bytes, self.max_waiting, self.wait_s = max_bytes, max_waiting, wait_s
        self.queued = self.queued_bytes = 0
        self._waiters: collections.deque = collections.deque()  # (nbytes, future), oldest first

    @property
    def waiting(self) -> int:
        return sum(not future.done() for _, future in self._waiters)

    def _fits(self, nbytes: int) -> bool:
        return self.queued_bytes == 0 or self.queued_bytes + nbytes <= self.max_bytes

    async def admit(self, nbytes: int) -> None:
        if not self._waiters and self._fits(nbytes):
            self._take(nbytes)
            return
        if self.waiting >= self.max_waiting:
            raise Busy()
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((nbytes, future))
        try:
            await asyncio.wait_for(future, self.wait_s)  # _admit_waiters takes the bytes for us
        except asyncio.TimeoutError:
            raise Busy() from None
        finally:
            self._admit_waiters()  # a timed-out head must not hold up the ones behind it

    def release(self, nbytes: int, done: bool = False) -> None:
        self.queued_bytes -= nbytes
        self.queued -= done
        self._admit_waiters()

    def _take(self, nbytes: int) -> None:
        self.queued += 1
        self.queued_bytes += nbytes

    def _admit_waiters(self) -> None:
        while self._waiters:
            nbytes, future = self._waiters[0]
            if future.done():  # timed out or the client went away
                self._waiters.popleft()
            elif self._fits(nbytes):
                self._waiters.popleft()
                self._take(nbytes)
                future.set_result(None)
            else:
                return


def model_factory(model) -> "functools.partial":
    """What to build in the model process: a ``LightGBMConfig``, a picklable zero-argument
    callable returning a ``LightGBMPredictor``, or None for the default background model."""
    if model is None:
        model = LightGBMConfig(background=True)
    if isinstance(model, LightGBMConfig):
        return functools.partial(LightGBMPredictor, model)
    if isinstance(model, LightGBMPredictor) or not callable(model):
        raise LcrInputError("create_app takes a LightGBMConfig or a picklable factory of the model, not a model: "
                            "the model is built in the service's model process")
    return model


def require_service_deps():
    try:
        import uvicorn
    except ImportError:
        raise LcrInputError("the predictor service needs uvicorn: pip install 'lcr[service]'") from None
    # The model process imports LightGBM; found here, a missing one is one line up front
    # (found, not imported: the front never runs the model).
    if importlib.util.find_spec("lightgbm") is None:
        raise LcrInputError("the predictor service needs lightgbm: pip install 'lcr[service]'")
    return None, uvicorn


class HttpError(Exception):
    """An answer other than 200: ``{"detail": message}`` with ``status``."""

    def __init__(self, status: int, detail: str, headers: tuple = ()):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


class _ClientGone(Exception):
    """The client disconnected before its body arrived: nothing to answer."""


JSON = b"application/json"
BUSY = ((b"x-lcr-reason", b"busy"), (b"retry-after", b"1"))  # full now: retry later
MODEL_DOWN = ((b"x-lcr-reason", b"model-down"),)  # the model process died: only a restart helps


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _error_body(detail: str) -> bytes:
    return _json({"detail": " ".join(str(detail).split())})  # one line, whatever the message


async def _send(send, status: int, body: bytes, kind: bytes = JSON, headers: tuple = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class ServiceApp:
    """The service as a plain ASGI app (routes below). Plain ASGI, not a web framework:
    every request costs the event loop about a third of what a framework's routing,
    dependency and encoder layers did, and the event loop's time is what keeps
    ``/health`` quick under load. Event loop thread only."""

    def __init__(self, model, token: "str | None", limits: ServiceLimits):
        self.limits, self.token = limits, token
        self.model = ModelProcess(model_factory(model), limits)
        self.state = types.SimpleNamespace(model=self.model, limits=limits)
        self.predict_lane = _Lane(limits.max_queued, limits.max_queued_bytes)
        self.train_lane = _Lane(limits.max_queued, 1)
        self.backlog = _Backlog(limits.max_queued_bytes, limits.max_queued, limits.admission_wait_s)
        self.started = time.time()
        self.counters = {"observe_requests": 0, "predict_requests": 0, "rejected_requests": 0,
                         "busy_requests": 0, "model_down_requests": 0, "model_errors": 0}
        self.rejected_by_status: dict[str, int] = {}
        # path -> (method, handler, needs the token)
        self.routes = {"/observe": ("POST", self.observe, True), "/predict": ("POST", self.predict, True),
                       "/train": ("POST", self.train, True), "/health": ("GET", self.health, False),
                       "/metrics": ("GET", self.metrics, True)}

    # -- ASGI --------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            status, body, kind, headers = 200, *(await self._route(scope, receive)), ()
        except _ClientGone:
            return
        except HttpError as err:
            if err.status < 500:
                self.count_rejected(err.status)
            status, body, kind, headers = err.status, _error_body(err.detail), JSON, err.headers
        except Exception:
            log.exception("predictor service request failed")
            status, body, kind, headers = 500, b'{"detail": "internal error"}', JSON, ()
        await _send(send, status, body, kind, headers)

    def count_rejected(self, status: int) -> None:
        if status not in (404, 405):  # a wrong route is not bad input to the model
            self.counters["rejected_requests"] += 1
        self.rejected_by_status[str(status)] = self.rejected_by_status.get(str(status), 0) + 1

    async def over_capacity(self, send) -> None:
        """Answer a request beyond ``max_connections`` (called by the protocol)."""
        self.counters["busy_requests"] += 1
        await _send(send, 503, _error_body("too many open connections; retry later"), JSON, BUSY)

    async def _lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.model.start()
                except Exception as err:
                    await send({"type": "lifespan.startup.failed", "message": str(err)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.model.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, scope, receive):
        route = self.routes.get(scope["path"])
        if route is None:
            raise HttpError(404, "Not Found")
        method, handler, guarded = route
        if scope["method"] != method:
            raise HttpError(405, "Method Not Allowed", ((b"allow", method.encode()),))
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        if guarded and self.token is not None:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                raise HttpError(401, "missing or wrong bearer token")
        return await handler(scope, headers, receive)

    # -- request parts -----------------------------------------------------------------------
    def declared_length(self, headers: dict) -> int:
        """The body size to reserve: Content-Length, or the limit when none is given."""
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != CONTENT_TYPE:
            raise HttpError(415, f"Content-Type must be {CONTENT_TYPE}, got {kind or 'none'!r}")
        declared = headers.get("content-length")
        limit = self.limits.max_body_bytes
        if declared is None:
            return limit
        if not re.fullmatch(r"[0-9]{1,30}", declared):
            raise HttpError(400, f"Content-Length {declared[:30]!r} is not a number of bytes")
        if int(declared) > limit:
            raise HttpError(413, f"body of {declared} bytes is over the {limit}-byte limit")
        return int(declared)

    async def read_body(self, receive, decode) -> bytearray:
        """The body, checked by ``decode`` (bad input is 400)."""
        body, limit = bytearray(), self.limits.max_body_bytes

        async def collect():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _ClientGone()
                body.extend(message.get("body", b""))
                if len(body) > limit:  # also bounds bodies sent without a length
                    raise HttpError(413, f"body is over the {limit}-byte limit")
                if not message.get("more_body"):
                    return
        try:
            await asyncio.wait_for(collect(), self.limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise HttpError(408, f"body not received within {self.limits.body_timeout_s:g} s") from None
        try:
            decode(body)
        except LcrInputError as err:
            raise HttpError(400, str(err)) from None
        return body

    def busy(self, what: str) -> HttpError:
        self.counters["busy_requests"] += 1
        return HttpError(503, f"{what}; retry later", BUSY)

    def down(self, why: str) -> HttpError:
        self.counters["model_down_requests"] += 1
        return HttpError(503, f"model down: {why}; only a restart of the service helps", MODEL_DOWN)

    def check_model(self) -> None:
        if not self.model.alive:
            raise self.down(self.model.exited)

    async def answer_of(self, future) -> bytes:
        try:
            return await future
        except ModelGone as err:
            raise self.down(str(err)) from None
        except ModelFailed as err:
            self.counters["model_errors"] += 1
            raise HttpError(500, str(err)) from None

    def settled(self, future) -> None:
        """A batch nobody awaits has been processed: count a failure (and retrieve it)."""
        if not future.cancelled() and isinstance(future.exception(), ModelFailed):
            self.counters["model_errors"] += 1

    # -- routes ------------------------------------------------------------------------------
    async def observe(self, scope, headers, receive):
        # Answered once the batch is checked and handed to the model process; the
        # backlog's room comes back as the model reports its progress.
        nbytes = self.declared_length(headers)
        self.check_model()
        backlog = self.backlog
        try:
            await backlog.admit(nbytes)
        except Busy:
            raise self.busy("observe backlog is full") from None
        try:
            body = await self.read_body(receive, decode_observations)
            self.check_model()
        except BaseException:
            backlog.release(nbytes, done=True)
            raise
        backlog.release(nbytes - len(body))  # the reservation was Content-Length or the limit
        if not body:
            backlog.release(0, done=True)
            return _json({"observed": 0}), JSON
        taken = 0  # bytes of this batch the model has taken in (released from the backlog)

        def progress(done: int) -> None:
            nonlocal taken
            backlog.release(16 * done - taken)
            taken = 16 * done

        future = self.model.request(OBSERVE, body, on_progress=progress)
        future.add_done_callback(lambda done: (backlog.release(len(body) - taken, done=True), self.settled(done)))
        self.counters["observe_requests"] += 1
        return _json({"observed": len(body) // 16}), JSON

    async def predict(self, scope, headers, receive):
        now = parse_qs(scope["query_string"].decode("latin-1")).get("now", [""])[-1]
        if not re.fullmatch(r"[0-9]{1,19}", now) or int(now) >= 1 << 63:
            raise HttpError(422, f"query parameter now must be an integer time in [0, 2^63), got {now[:40]!r}")
        nbytes = self.declared_length(headers)
        self.check_model()
        lane = self.predict_lane
        try:
            lane.admit(nbytes)
        except Busy:
            raise self.busy("predict queue is full") from None
        try:
            body = await self.read_body(receive, decode_keys)
            self.check_model()
            future = self.model.request(PREDICT, INT64.type(int(now)).tobytes(), body)
        except BaseException:
            lane.release(nbytes)
            raise
        future.add_done_callback(lambda _: lane.release(nbytes))  # not before the model is done
        answer = await self.answer_of(future)
        self.counters["predict_requests"] += 1
        return bytes(answer), CONTENT_TYPE.encode()

    async def train(self, scope, headers, receive):
        self.check_model()
        try:
            self.train_lane.admit(0)  # runs after the observations handed over before it
        except Busy:
            raise self.busy("train queue is full") from None
        future = self.model.request(TRAIN)
        future.add_done_callback(lambda _: self.train_lane.release(0))
        answer = await self.answer_of(future)
        self.model.status["model_version"] = json.loads(answer)["model_version"]
        return bytes(answer), JSON

    async def health(self, scope, headers, receive):
        if not self.model.alive:
            raise HttpError(503, f"down: {self.model.exited}; only a restart of the service helps", MODEL_DOWN)
        status = self.model.status
        return _json({"status": "ok", "model_version": status["model_version"], "keys": status["keys"]}), JSON

    async def metrics(self, scope, headers, receive):
        backlog, lanes = self.backlog, {"predict": self.predict_lane, "train": self.train_lane}
        queues = {"observe_queued": backlog.queued, "observe_queued_bytes": backlog.queued_bytes,
                  "observe_waiting": backlog.waiting, **{f"{name}_queued": lane.queued for name, lane in lanes.items()}}
        return _json({**self.model.status, **self.counters, **queues, "rejected_by_status": self.rejected_by_status,
                      "max_keys": self.limits.max_keys,
                      "uptime_s": time.time() - self.started, "front_pid": os.getpid(),
                      "model_alive": self.model.alive}), JSON


def create_app(model=None, token: "str | None" = None, max_body_bytes: "int | None" = None,
               limits: "ServiceLimits | None" = None) -> ServiceApp:
    """The service's ASGI app. ``model``: see ``model_factory``. The model process starts
    with the app (lifespan startup) and stops with it."""
    require_service_deps()
    limits = limits or ServiceLimits()
    if max_body_bytes is not None:
        limits = ServiceLimits(**{**limits.__dict__, "max_body_bytes": int(max_body_bytes)})
    return ServiceApp(model, token, limits)


def _guarded_protocol(app: ServiceApp):
    """uvicorn's h11 protocol with a deadline for each request's headers, the service's
    own connection cap, and JSON for what uvicorn would answer in plain text.

    uvicorn closes idle keep-alive connections but waits forever for a request whose
    headers trickle in (or never come), so slow clients could hold every descriptor.
    Its own concurrency cap and its answer to unparsable HTTP are plain text without
    ``X-LCR-Reason``; the service's are ``{"detail": ...}`` like every other error.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    header_timeout_s, max_connections = app.limits.header_timeout_s, app.limits.max_connections

    class HeaderDeadlineH11(H11Protocol):
        _header_timer = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inner = self.app

            async def capped(scope, receive, send):
                # As uvicorn's limit_concurrency counts: open connections and running requests.
                if scope["type"] == "http" and (len(self.connections) > max_connections
                                                or len(self.tasks) > max_connections):
                    await app.over_capacity(send)
                    return
                await inner(scope, receive, send)
            self.app = capped

        def send_400_response(self, msg: str) -> None:
            app.count_rejected(400)
            body = _error_body(f"invalid HTTP request: {msg}")
            headers = [(b"content-type", JSON), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_header_deadline()

        def on_response_complete(self):
            super().on_response_complete()
            self._arm_header_deadline()

        def connection_lost(self, exc):
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

        def _arm_header_deadline(self):
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_deadline, self.cycle)

        def _header_deadline(self, cycle_when_armed):
            # A new request has started iff uvicorn made a new cycle since arming.
            if self.cycle is cycle_when_armed and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineH11


def server_config(app, host: str = "127.0.0.1", port: int = 8765, log_level: str = "warning", **uvicorn_options):
    """A ``uvicorn.Config`` carrying the service's connection limits (``app.state.limits``).

    ``uvicorn_options`` pass through, e.g. ``ssl_certfile``/``ssl_keyfile`` for TLS.
    """
    _, uvicorn = require_service_deps()
    limits: ServiceLimits = app.state.limits
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=_guarded_protocol(app),
                          timeout_keep_alive=limits.keep_alive_s, **uvicorn_options)


def bind_warning(host: str, token: "str | None", tls: bool) -> "str | None":
    """The warning to print when the service is reachable beyond this machine."""
    if host in LOOPBACK:
        return None
    missing = [what for what, present in (("a token", token), ("TLS", tls)) if not present]
    if not missing:
        return None
    return (f"binding {host} without {' and '.join(missing)}: anyone who can reach this port can "
            + ("feed and query the model" if not token else "read the token and the traffic")
            + " (see docs/predictor.md, 'Service')")


__all__ = ["Busy", "HttpError", "ModelHost", "ServiceApp", "ServiceLimits", "bind_warning", "create_app", "model_factory", "server_config"]
