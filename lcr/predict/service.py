"""The shared predictor service: one CPU LightGBM model behind HTTP for many processes.

Endpoints (binary bodies: see ``lcr.predict.wire``):

- ``POST /observe``  keys+times -> ``{"observed": n, "clamped": c, "rejected": r}``
- ``POST /predict?now=T``  keys -> float64 next-access times (NaN = unknown)
- ``POST /train``  fit now on the current window -> ``{"fitted": bool, "model_version": v}``
- ``GET /health``  liveness and model version (no token needed)
- ``GET /metrics``  counters as JSON

Protection (every limit in ``ServiceLimits``):

- The event loop only moves bytes. Model work runs on two worker threads ("lanes"):
  observe and train share one lane, so updates and fits are serialised (one fit at a
  time), and predict has its own, so a huge observe never blocks predictions. Each
  lane admits at most ``max_queued`` requests and ``max_queued_bytes`` of bodies;
  beyond that the answer is 503 at once, before the body is read.
- Per-key state is capped (``max_keys``): past the cap the least recently seen keys are
  forgotten in one sweep (counted in ``keys_evicted``).
- Times: a time earlier than the newest one seen is clamped up to it (``times_clamped``),
  so every key's history and the training window stay in time order; a negative time
  or one more than ``max_time_jump`` past the newest is dropped (``times_rejected``).
- Slow clients: request headers must arrive within ``header_timeout_s`` and the body
  within ``body_timeout_s`` (408); idle keep-alive connections close after
  ``keep_alive_s``; beyond ``max_connections`` uvicorn answers 503.
- Bodies must be ``application/octet-stream`` (415) and at most ``max_body_bytes`` (413);
  malformed ones get 400 with ``{"detail": message}``; a missing or wrong bearer token
  (when one is set) gets 401.
"""
# No `from __future__ import annotations`: FastAPI reads the route annotations, which
# name classes imported lazily inside create_app.

import asyncio
import contextlib
import hmac
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.lightgbm_model import LightGBMConfig, LightGBMPredictor
from lcr.predict.wire import CONTENT_TYPE, decode_keys, decode_observations, encode_float64

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 16 << 20  # 1M observations or 2M keys per request
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class ServiceLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_queued: int = 64                   # requests waiting per lane
    max_queued_bytes: int = 4 * DEFAULT_MAX_BODY  # body bytes waiting per lane
    max_keys: int = 1_000_000              # per-key feature rows kept
    evict_fraction: float = 0.125          # share of max_keys forgotten per sweep
    max_time_jump: int = 1 << 50           # newest time + this is the latest time accepted
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_connections: int = 1024

    def __post_init__(self):
        for name in ("max_body_bytes", "max_queued", "max_queued_bytes", "max_keys", "max_time_jump",
                     "max_connections"):
            if getattr(self, name) < 1:
                raise LcrInputError(f"service limit {name} must be at least 1, got {getattr(self, name)}")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise LcrInputError(f"service limit {name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.evict_fraction < 1:
            raise LcrInputError(f"service limit evict_fraction must lie in (0, 1), got {self.evict_fraction}")


class Busy(Exception):
    """A lane's queue is full: the request is refused (503) instead of waiting."""


class _Lane:
    """One worker thread and its admission bound (requests and body bytes)."""

    def __init__(self, name: str, max_queued: int, max_bytes: int):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lcr-service-{name}")
        self._max_queued, self._max_bytes = max_queued, max_bytes
        self.queued = self.queued_bytes = 0  # touched on the event loop thread only

    def admit(self, nbytes: int) -> None:
        if self.queued >= self._max_queued or self.queued_bytes + nbytes > self._max_bytes:
            raise Busy()
        self.queued += 1
        self.queued_bytes += nbytes

    def release(self, nbytes: int) -> None:
        self.queued -= 1
        self.queued_bytes -= nbytes

    def start(self, fn, *args) -> "asyncio.Future":
        return asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def finished(self, future, nbytes: int) -> None:
        self.release(nbytes)
        if not future.cancelled() and future.exception() is not None:
            log.error("predictor service work failed: %r", future.exception())

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class ModelHost:
    """The model and the rules around it (time order, key cap, one fit at a time).

    ``observe``/``train`` must run on one thread (the observe lane); ``predict`` may run
    concurrently with them: ``LightGBMPredictor`` guards its state with a lock.
    """

    def __init__(self, model: LightGBMPredictor, limits: ServiceLimits):
        self.model, self.limits = model, limits
        self.newest: int | None = None  # newest accepted time
        self.counters = {"times_clamped": 0, "times_rejected": 0, "keys_evicted": 0}

    def observe(self, keys: np.ndarray, times: np.ndarray) -> dict:
        keys, times, clamped, rejected = self._order_times(keys, times)
        limit = self.limits.max_keys
        keep = int(limit * (1 - self.limits.evict_fraction))
        step = max(limit - keep, 1)  # a large batch is capped as it goes, not only at its end
        for begin in range(0, len(keys), step):
            self.model.observe_many(keys[begin:begin + step], times[begin:begin + step])
            self.counters["keys_evicted"] += self.model.forget_least_recent(limit, keep)
        return {"observed": len(keys), "clamped": clamped, "rejected": rejected}

    def _order_times(self, keys, times):
        """Drop negative and far-future times; clamp the others to a running maximum."""
        ok = times >= 0
        newest = self.newest
        if newest is None:  # the first batch: the jump is measured from its earliest time
            newest = int(times[ok].min()) if ok.any() else 0
        ok &= times - newest <= self.limits.max_time_jump
        keys, times = keys[ok], times[ok]
        rejected = int(len(ok) - len(keys))
        start = self.newest if self.newest is not None else newest
        ordered = np.maximum.accumulate(np.concatenate([[start], times]))[1:] if len(times) else times
        clamped = int(np.count_nonzero(ordered != times))
        if len(ordered):
            self.newest = int(ordered[-1])
        self.counters["times_clamped"] += clamped
        self.counters["times_rejected"] += rejected
        return keys, ordered, clamped, rejected

    def train(self) -> dict:
        self.model.wait_for_fit()  # a background fit started by observe finishes first
        fitted = self.model.fit()
        return {"fitted": fitted, "model_version": self.model.model_version}

    def predict(self, keys: np.ndarray, now: int) -> bytes:
        return encode_float64(self.model.predict(keys, now))


def require_service_deps():
    try:
        import fastapi
        import uvicorn
    except ImportError:
        raise LcrInputError("the predictor service needs FastAPI and uvicorn: pip install 'lcr[service]'") from None
    return fastapi, uvicorn


def create_app(predictor: "LightGBMPredictor | None" = None, token: "str | None" = None,
               max_body_bytes: "int | None" = None, limits: "ServiceLimits | None" = None):
    fastapi, _ = require_service_deps()
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import Response

    limits = limits or ServiceLimits()
    if max_body_bytes is not None:
        limits = ServiceLimits(**{**limits.__dict__, "max_body_bytes": int(max_body_bytes)})
    model = predictor or LightGBMPredictor(LightGBMConfig(background=True))
    host = ModelHost(model, limits)
    lanes = {"observe": _Lane("observe", limits.max_queued, limits.max_queued_bytes),
             "predict": _Lane("predict", limits.max_queued, limits.max_queued_bytes)}
    started = time.time()
    counters = {"observe_requests": 0, "predict_requests": 0, "rejected_requests": 0, "busy_requests": 0}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        for lane in lanes.values():
            lane.shutdown()

    app = FastAPI(title="lcr predictor", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.predictor = model
    app.state.limits = limits

    def reject(status: int, message: str):
        counters["rejected_requests"] += 1
        raise HTTPException(status_code=status, detail=message)

    def check_token(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            reject(401, "missing or wrong bearer token")

    def declared_length(request: Request) -> int:
        """The body size to reserve: Content-Length, or the limit when none is given."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != CONTENT_TYPE:
            reject(415, f"Content-Type must be {CONTENT_TYPE}, got {kind or 'none'!r}")
        declared = request.headers.get("content-length")
        if declared is None:
            return limits.max_body_bytes
        if not declared.isdigit():
            reject(400, "Content-Length is not a number")
        if int(declared) > limits.max_body_bytes:
            reject(413, f"body of {declared} bytes is over the {limits.max_body_bytes}-byte limit")
        return int(declared)

    async def read_body(request: Request) -> bytes:
        body = bytearray()

        async def collect():
            async for chunk in request.stream():  # also bounds bodies sent without a length
                body.extend(chunk)
                if len(body) > limits.max_body_bytes:
                    reject(413, f"body is over the {limits.max_body_bytes}-byte limit")
        try:
            await asyncio.wait_for(collect(), limits.body_timeout_s)
        except asyncio.TimeoutError:
            reject(408, f"body not received within {limits.body_timeout_s:g} s")
        return bytes(body)

    def admit(lane_name: str, nbytes: int) -> _Lane:
        lane = lanes[lane_name]
        try:
            lane.admit(nbytes)
        except Busy:
            counters["busy_requests"] += 1
            raise HTTPException(status_code=503, detail=f"{lane_name} queue is full; retry later",
                                headers={"Retry-After": "1"}) from None
        return lane

    async def on_lane(lane_name: str, request: Request, decode, work, wait: bool = True):
        """Admit (or 503), read the body, ``decode`` it here (cheap views; bad input is
        400), then run ``work(decoded)`` on the lane's thread. With ``wait=False`` the
        answer is ``decoded`` as soon as the work is queued."""
        nbytes = declared_length(request)
        lane = admit(lane_name, nbytes)
        try:
            decoded = decode(await read_body(request))
            future = lane.start(work, decoded)
        except BaseException as err:
            lane.release(nbytes)
            if isinstance(err, LcrInputError):
                reject(400, str(err))
            raise
        future.add_done_callback(lambda done: lane.finished(done, nbytes))
        return await future if wait else decoded

    guarded = [Depends(check_token)]

    @app.post("/observe", dependencies=guarded)
    async def observe(request: Request):
        # Answered once the body is read, checked and queued: the model catches up on
        # the observe lane, so a client's deadline never waits for a large batch.
        keys, _ = await on_lane("observe", request, decode_observations,
                                lambda observations: host.observe(*observations), wait=False)
        counters["observe_requests"] += 1
        return {"observed": len(keys)}

    @app.post("/predict", dependencies=guarded)
    async def predict(request: Request, now: int):
        answer = await on_lane("predict", request, decode_keys, lambda keys: host.predict(keys, now))
        counters["predict_requests"] += 1
        return Response(answer, media_type=CONTENT_TYPE)

    @app.post("/train", dependencies=guarded)
    async def train():
        lane = admit("observe", 0)  # after the queued observations; one fit at a time
        future = lane.start(host.train)
        future.add_done_callback(lambda done: lane.finished(done, 0))
        return await future

    @app.get("/health")
    async def health():
        return {"status": "ok", "model_version": model.model_version, "keys": len(model.features)}

    @app.get("/metrics", dependencies=guarded)
    async def metrics():
        queues = {f"{name}_queued": lane.queued for name, lane in lanes.items()}
        return {**model.metrics, **counters, **host.counters, **queues,
                "model_version": model.model_version, "keys": len(model.features),
                "max_keys": limits.max_keys, "uptime_s": time.time() - started}

    return app


def _guarded_protocol(header_timeout_s: float):
    """uvicorn's h11 protocol with a deadline for each request's headers.

    uvicorn closes idle keep-alive connections but waits forever for a request whose
    headers trickle in (or never come), so slow clients could hold every descriptor.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineH11(H11Protocol):
        _header_timer = None

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
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          http=_guarded_protocol(limits.header_timeout_s),
                          timeout_keep_alive=limits.keep_alive_s,
                          limit_concurrency=limits.max_connections, **uvicorn_options)


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


__all__ = ["Busy", "ModelHost", "ServiceLimits", "bind_warning", "create_app", "server_config"]
