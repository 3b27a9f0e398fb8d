"""The shared predictor service: one CPU model behind HTTP for many processes (the
online LightGBM model, or with ``lcr serve-predictor --model residual`` the radix caches'
residual-life predictor, ``lcr.predict.served_residual``).

A FastAPI app: ``/docs`` shows the routes, ``/openapi.json`` is their schema. Endpoints
(binary bodies: see ``lcr.predict.wire``):

- ``POST /observe``  keys+times -> ``{"observed": n}`` once handed to the model
- ``POST /predict?now=T``  keys -> float64 next-access times (NaN = unknown)
- ``POST /train``  fit now on the current window -> ``{"fitted": bool, "model_version": v}``
- ``GET /health``  liveness and model version (no token needed)
- ``GET /metrics``  counters as JSON

Cheap per request, because ``/health``'s tail under load follows the front's CPU: the
handlers take the raw ``Request`` (a binary body is never parsed by pydantic, only
``now`` is validated by FastAPI) and answer pre-encoded bytes (no response model is
applied at run time; the models below only document the answers); the token is one
dependency; the only middleware added, the model process's lifespan, is pure ASGI.
uvicorn runs it with its httptools protocol (a C parser) and ``lcr serve-predictor`` tunes
the process's garbage collector (``tune_gc``): under load both matter more than the
framework. (``benchmarks/service_request_cpu.py`` measures the front's CPU per request.)

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
import gc
import hmac
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from lcr.errors import LcrInputError
from lcr.predict.clock import DEFAULT_CLOCK_RESTART_S, DEFAULT_MAX_TIME_JUMP
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.model_process import (OBSERVE, PREDICT, TRAIN, ModelFailed, ModelGone, ModelHost,
                                       ModelProcess)
from lcr.predict.wire import CONTENT_TYPE, INT64, decode_keys, decode_observations

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 16 << 20  # 1M observations or 2M keys per request
LOOPBACK = ("127.0.0.1", "localhost", "::1")
FRONT_GC_THRESHOLD = 10_000  # allocations between young collections (tune_gc)


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
    callable returning the model (a ``LightGBMPredictor``, or ``ServedResidual``: the class
    itself will do), or None for the default background model."""
    if model is None:
        model = LightGBMConfig(background=True)
    if isinstance(model, LightGBMConfig):
        return functools.partial(LightGBMPredictor, model)
    if isinstance(model, LightGBMPredictor) or not callable(model):
        raise LcrInputError("create_app takes a LightGBMConfig or a picklable factory of the model, not a model: "
                            "the model is built in the service's model process")
    return model


BUSY = {"X-LCR-Reason": "busy", "Retry-After": "1"}  # full now: retry later
MODEL_DOWN = {"X-LCR-Reason": "model-down"}  # the model process died: only a restart helps


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _answer(value) -> Response:
    """JSON encoded here, not through FastAPI's encoder: the cheap path (see the module's docstring)."""
    return Response(_json(value), media_type="application/json")


def _refusal_body(detail: str) -> bytes:
    return _json({"detail": " ".join(str(detail).split())})  # one line, whatever the message


def _refusal(status: int, detail: str, headers: "dict | None" = None) -> Response:
    return Response(_refusal_body(detail), status, headers, media_type="application/json")


def _validation_detail(errors) -> str:
    """FastAPI's validation errors as one line: ``query parameter now: Input should be ..., got '-1'``."""
    def one(error) -> str:
        got = "" if error["type"] == "missing" else f", got {str(error.get('input'))[:40]!r}"
        return f"{error['loc'][0]} parameter {error['loc'][-1]}: {error['msg']}{got}"
    return "; ".join(map(one, errors))


class BearerToken(HTTPBearer):
    """The token check: a FastAPI security dependency, so the schema documents it (HTTP
    bearer), checked in one call per request (not HTTPBearer's parse, then a second
    dependency to compare)."""

    def __init__(self, token: str):
        super().__init__(description="the service's token (lcr serve-predictor --token-file)")
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, request: Request) -> None:
        given = request.headers.get("authorization", "").encode()  # bytes: any header text compares
        if not hmac.compare_digest(given, self._expected):
            raise HTTPException(401, "missing or wrong bearer token")


class PredictorService:
    """The service's state (the model process, the lanes, the counters) and the handlers
    of its routes; ``create_app`` declares the routes. Event loop thread only."""

    def __init__(self, model, token: "str | None", limits: ServiceLimits):
        self.limits, self.token = limits, token
        self.model = ModelProcess(model_factory(model), limits)
        self.predict_lane = _Lane(limits.max_queued, limits.max_queued_bytes)
        self.train_lane = _Lane(limits.max_queued, 1)
        self.backlog = _Backlog(limits.max_queued_bytes, limits.max_queued, limits.admission_wait_s)
        self.started = time.time()
        self.counters = {"observe_requests": 0, "predict_requests": 0, "rejected_requests": 0,
                         "busy_requests": 0, "model_down_requests": 0, "model_errors": 0}
        self.rejected_by_status: dict[str, int] = {}

    def count_rejected(self, status: int) -> None:
        if status not in (404, 405):  # a wrong route is not bad input to the model
            self.counters["rejected_requests"] += 1
        self.rejected_by_status[str(status)] = self.rejected_by_status.get(str(status), 0) + 1

    async def over_capacity(self, send) -> None:
        """Answer a request beyond ``max_connections`` (called by the protocol, raw ASGI)."""
        self.counters["busy_requests"] += 1
        refusal = _refusal(503, "too many open connections; retry later", BUSY)
        await refusal({"type": "http"}, None, send)

    # -- errors: every one is {"detail": one line}, counted --------------------------------------
    async def refused(self, request: Request, err: HTTPException) -> Response:
        if err.status_code < 500:
            self.count_rejected(err.status_code)
        return _refusal(err.status_code, err.detail, err.headers)

    async def invalid(self, request: Request, err: RequestValidationError) -> Response:
        self.count_rejected(422)
        return _refusal(422, _validation_detail(err.errors()))

    # -- request parts -----------------------------------------------------------------------
    def declared_length(self, headers) -> int:
        """The body size to reserve: Content-Length, or the limit when none is given."""
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != CONTENT_TYPE:
            raise HTTPException(415, f"Content-Type must be {CONTENT_TYPE}, got {kind or 'none'!r}")
        declared = headers.get("content-length")
        limit = self.limits.max_body_bytes
        if declared is None:
            return limit
        if not re.fullmatch(r"[0-9]{1,30}", declared):
            raise HTTPException(400, f"Content-Length {declared[:30]!r} is not a number of bytes")
        if int(declared) > limit:
            raise HTTPException(413, f"body of {declared} bytes is over the {limit}-byte limit")
        return int(declared)

    async def read_body(self, request: Request, decode) -> bytearray:
        """The body, read within ``body_timeout_s`` and checked by ``decode`` (bad input is 400)."""
        body, limit = bytearray(), self.limits.max_body_bytes

        async def collect():
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limit:  # also bounds bodies sent without a length
                    raise HTTPException(413, f"body is over the {limit}-byte limit")
        try:
            await asyncio.wait_for(collect(), self.limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(408, f"body not received within {self.limits.body_timeout_s:g} s") from None
        try:
            decode(body)
        except LcrInputError as err:
            raise HTTPException(400, str(err)) from None
        return body

    def busy(self, what: str) -> HTTPException:
        self.counters["busy_requests"] += 1
        return HTTPException(503, f"{what}; retry later", BUSY)

    def down(self, why: str) -> HTTPException:
        self.counters["model_down_requests"] += 1
        return HTTPException(503, f"model down: {why}; only a restart of the service helps", MODEL_DOWN)

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
            raise HTTPException(500, str(err)) from None

    def settled(self, future) -> None:
        """A batch nobody awaits has been processed: count a failure (and retrieve it)."""
        if not future.cancelled() and isinstance(future.exception(), ModelFailed):
            self.counters["model_errors"] += 1

    # -- routes ------------------------------------------------------------------------------
    async def observe(self, request: Request) -> Response:
        # Answered once the batch is checked and handed to the model process; the
        # backlog's room comes back as the model reports its progress.
        nbytes = self.declared_length(request.headers)
        self.check_model()
        backlog = self.backlog
        try:
            await backlog.admit(nbytes)
        except Busy:
            raise self.busy("observe backlog is full") from None
        try:
            body = await self.read_body(request, decode_observations)
            self.check_model()
        except BaseException:
            backlog.release(nbytes, done=True)
            raise
        backlog.release(nbytes - len(body))  # the reservation was Content-Length or the limit
        if not body:
            backlog.release(0, done=True)
            return _answer({"observed": 0})
        taken = 0  # bytes of this batch the model has taken in (released from the backlog)

        def progress(done: int) -> None:
            nonlocal taken
            backlog.release(16 * done - taken)
            taken = 16 * done

        future = self.model.request(OBSERVE, body, on_progress=progress)
        future.add_done_callback(lambda done: (backlog.release(len(body) - taken, done=True), self.settled(done)))
        self.counters["observe_requests"] += 1
        return _answer({"observed": len(body) // 16})

    async def predict(self, request: Request,
                      now: int = Query(ge=0, lt=1 << 63, description="the time predictions are for")) -> Response:
        nbytes = self.declared_length(request.headers)
        self.check_model()
        lane = self.predict_lane
        try:
            lane.admit(nbytes)
        except Busy:
            raise self.busy("predict queue is full") from None
        try:
            body = await self.read_body(request, decode_keys)
            self.check_model()
            future = self.model.request(PREDICT, INT64.type(now).tobytes(), body)
        except BaseException:
            lane.release(nbytes)
            raise
        future.add_done_callback(lambda _: lane.release(nbytes))  # not before the model is done
        answer = await self.answer_of(future)
        self.counters["predict_requests"] += 1
        return Response(answer, media_type=CONTENT_TYPE)

    async def train(self) -> Response:
        self.check_model()
        try:
            self.train_lane.admit(0)  # runs after the observations handed over before it
        except Busy:
            raise self.busy("train queue is full") from None
        future = self.model.request(TRAIN)
        future.add_done_callback(lambda _: self.train_lane.release(0))
        answer = await self.answer_of(future)
        self.model.status["model_version"] = json.loads(answer)["model_version"]
        return Response(answer, media_type="application/json")

    async def health(self) -> Response:
        if not self.model.alive:
            raise HTTPException(503, f"down: {self.model.exited}; only a restart of the service helps", MODEL_DOWN)
        status = self.model.status
        return _answer({"status": "ok", "model_version": status["model_version"], "keys": status["keys"]})

    async def metrics(self) -> Response:
        backlog, lanes = self.backlog, {"predict": self.predict_lane, "train": self.train_lane}
        queues = {"observe_queued": backlog.queued, "observe_queued_bytes": backlog.queued_bytes,
                  "observe_waiting": backlog.waiting, **{f"{name}_queued": lane.queued for name, lane in lanes.items()}}
        return _answer({**self.model.status, **self.counters, **queues, "rejected_by_status": self.rejected_by_status,
                        "max_keys": self.limits.max_keys,
                        "uptime_s": time.time() - self.started, "front_pid": os.getpid(),
                        "model_alive": self.model.alive})


class _ModelLifespan:
    """Pure ASGI middleware: starts the model process at lifespan startup, stops it at
    shutdown; HTTP passes straight through. Not FastAPI's lifespan hook: Starlette reports
    a failed startup as a traceback, and here the reason is one line."""

    def __init__(self, app, model: ModelProcess):
        self.app, self.model = app, model

    async def __call__(self, scope, receive, send):
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
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


# -- what /docs and /openapi.json say -----------------------------------------------------------

class Refusal(BaseModel):
    detail: str


class Observed(BaseModel):
    observed: int


class Trained(BaseModel):
    fitted: bool
    model_version: int


class Health(BaseModel):
    status: str
    model_version: int
    keys: int


BINARY = {"schema": {"type": "string", "format": "binary"}}
WHY = {400: "malformed body or Content-Length", 401: "missing or wrong bearer token",
       408: "body not received within the body timeout", 413: "body over the size limit",
       415: f"Content-Type is not {CONTENT_TYPE}", 422: "now is not an integer time in [0, 2^63)",
       500: "the model failed on this request"}
UNAVAILABLE = {"description": "refused now; X-LCR-Reason says why", "headers": {
    "X-LCR-Reason": {"description": "busy: a queue or the connections are full, retry later; model-down: the model "
                                    "process died, only a restart of the service helps",
                     "schema": {"type": "string", "enum": ["busy", "model-down"]}},
    "Retry-After": {"description": "with busy: seconds to wait", "schema": {"type": "integer"}}}}


def _refusals(*statuses: int) -> dict:
    documented = {status: {"model": Refusal, "description": WHY[status]} for status in statuses}
    return {**documented, 503: {"model": Refusal, **UNAVAILABLE}}


def _binary_body(description: str) -> dict:
    return {"requestBody": {"required": True, "description": description, "content": {CONTENT_TYPE: BINARY}}}


def _declare_routes(api: FastAPI, service: PredictorService) -> None:
    """The routes and what the schema says of them; the busiest first (routes match in order)."""
    guarded = [Security(BearerToken(service.token))] if service.token is not None else []
    post = functools.partial(api.add_api_route, methods=["POST"], dependencies=guarded)
    # response_class=Response (no media type of its own): 200 is documented as octets, refusals as JSON.
    post("/predict", service.predict, summary="Predicted next-access times of keys", response_class=Response,
         responses={200: {"description": "n float64 predicted next-access times, NaN = unknown (little-endian)",
                          "content": {CONTENT_TYPE: BINARY}}, **_refusals(400, 401, 408, 413, 415, 422)},
         openapi_extra=_binary_body("n int64 keys (8·n bytes, little-endian)"))
    post("/observe", service.observe, summary="Hand observations to the model", response_model=Observed,
         description="Answered once the batch is checked and handed to the model; it waits its turn while "
                     "the observe backlog is full.",
         responses=_refusals(400, 401, 408, 413, 415),
         openapi_extra=_binary_body("n int64 keys, then n int64 times (16·n bytes, little-endian)"))
    api.add_api_route("/health", service.health, methods=["GET"], summary="Liveness and model version (no token)",
                      response_model=Health, responses={503: {"model": Refusal, **UNAVAILABLE}})
    post("/train", service.train, summary="Fit now, after the observations handed over before",
         response_model=Trained, responses=_refusals(401, 500))
    api.add_api_route("/metrics", service.metrics, methods=["GET"], dependencies=guarded, summary="Counters",
                      response_model=dict[str, Any], responses=_refusals(401))


async def _client_gone(request: Request, err: ClientDisconnect) -> Response:
    return Response(status_code=400)  # never sent: nobody is listening


async def _internal_error(request: Request, err: Exception) -> Response:
    return _refusal(500, "internal error")  # the server logs the traceback


def create_app(model=None, token: "str | None" = None, max_body_bytes: "int | None" = None,
               limits: "ServiceLimits | None" = None) -> FastAPI:
    """The service's FastAPI app (its ``PredictorService`` in ``app.state.service``).
    ``model``: see ``model_factory``. The model process starts with the app (lifespan
    startup) and stops with it."""
    limits = limits or ServiceLimits()
    if max_body_bytes is not None:
        limits = ServiceLimits(**{**limits.__dict__, "max_body_bytes": int(max_body_bytes)})
    service = PredictorService(model, token, limits)
    # /docs and /openapi.json only (no ReDoc, no OAuth2 redirect): fewer routes to match before the service's.
    api = FastAPI(title="lcr predictor service", version="1", redirect_slashes=False,
                  redoc_url=None, swagger_ui_oauth2_redirect_url=None,
                  description="A shared online LightGBM model of next-access times (docs/predictor.md, 'Service').")
    api.state.service = service
    _declare_routes(api, service)
    api.add_exception_handler(HTTPException, service.refused)
    api.add_exception_handler(RequestValidationError, service.invalid)
    api.add_exception_handler(ClientDisconnect, _client_gone)
    api.add_exception_handler(Exception, _internal_error)
    api.add_middleware(_ModelLifespan, model=service.model)
    return api


def _guarded_protocol(service: PredictorService):
    """uvicorn's httptools protocol (its C parser: about 85 µs less of the front's CPU per
    request than its pure-Python h11 one) with a deadline for each request's headers, the
    service's own connection cap, and JSON for what uvicorn would answer in plain text.

    uvicorn closes idle keep-alive connections but waits forever for a request whose
    headers trickle in (or never come), so slow clients could hold every descriptor.
    Its own concurrency cap and its answer to unparsable HTTP are plain text without
    ``X-LCR-Reason``; the service's are ``{"detail": ...}`` like every other error.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    header_timeout_s, max_connections = service.limits.header_timeout_s, service.limits.max_connections
    invalid = _refusal_body("invalid HTTP request (request line, a header or Content-Length)")
    invalid_response = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(invalid), invalid))

    class GuardedHttpTools(HttpToolsProtocol):
        _header_timer = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inner = self.app

            async def capped(scope, receive, send):
                # As uvicorn's limit_concurrency counts: open connections and running requests.
                if scope["type"] == "http" and (len(self.connections) > max_connections
                                                or len(self.tasks) > max_connections):
                    await service.over_capacity(send)
                    return
                await inner(scope, receive, send)
            self.app = capped

        def send_400_response(self, msg: str) -> None:
            service.count_rejected(400)
            self.transport.write(invalid_response)
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
            # A new request has started iff uvicorn made a new cycle (its headers are complete) since arming.
            if self.cycle is cycle_when_armed and not self.transport.is_closing():
                self.transport.close()

    return GuardedHttpTools


def server_config(app, host: str = "127.0.0.1", port: int = 8765, log_level: str = "warning", **uvicorn_options):
    """A ``uvicorn.Config`` for the app of ``create_app``, carrying the service's connection
    limits (``app.state.service``).

    ``uvicorn_options`` pass through, e.g. ``ssl_certfile``/``ssl_keyfile`` for TLS.
    """
    import uvicorn

    service: PredictorService = app.state.service
    limits = service.limits
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=_guarded_protocol(service),
                          timeout_keep_alive=limits.keep_alive_s, **uvicorn_options)


def tune_gc() -> None:
    """Tune the garbage collector of the service's process (``lcr serve-predictor`` calls
    this; call it in a process that runs the service yourself).

    With CPython's default first threshold (700 allocations) the collector runs every few
    requests, so the objects of the requests in flight survive into the oldest generation
    and full collections follow about once a second, each pausing the event loop for
    tens of milliseconds: with 64 clients and a 16 MiB observe in flight, 25 of them in
    30 s were most of ``/health``'s p99 (215 ms at load average 7). At 10,000 the objects
    of requests die young: no full collection in the same run and ``/health`` p99 11 ms.
    """
    gc.set_threshold(FRONT_GC_THRESHOLD, *gc.get_threshold()[1:])


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


__all__ = ["Busy", "ModelHost", "PredictorService", "ServiceLimits", "bind_warning", "create_app", "model_factory",
           "server_config", "tune_gc"]
