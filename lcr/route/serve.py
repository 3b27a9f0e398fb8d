"""`lcr serve-router`: an HTTP router in front of SGLang workers, deciding with lcr's routers.

The proxy forwards SGLang's native ``/generate`` and the OpenAI ``/v1/completions`` and
``/v1/chat/completions`` routes, streaming or not, to the worker chosen by the same
``lcr.route.routers`` object the simulator uses. A request's prompt becomes a chain of
prefix blocks (token ids when the client sends ``input_ids``, else characters, 4 per token),
hashed so that two prompts share a block exactly when they share the prefix through it.

A worker that refuses a connection, times out before answering or answers 5xx is taken out
of rotation and the request is retried on another; a background probe of ``/health`` puts
it back. A streamed reply that breaks after its first byte cannot be retried and ends with
an error event. The router object is only touched from the event loop, so it needs no lock.
"""
import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field

from lcr.errors import LcrInputError
from lcr.kv.requests import BlockRequest
from lcr.route.routers import Router, moves_off_home
from lcr.route.workload import RoutedRequest

ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
WORKER_HEADER = "X-Lcr-Worker"
CHARS_PER_TOKEN = 4


def prompt_units(body: dict) -> tuple[list, int]:
    """The prompt as hashable units (token ids, or characters) and units per token."""
    ids = body.get("input_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise LcrInputError("input_ids: expected one list of integers (batches are not routed)")
        return ids, 1
    text = body.get("text", body.get("prompt"))
    if text is None and isinstance(body.get("messages"), list):
        text = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    if not isinstance(text, str):
        raise LcrInputError("expected a string 'text' or 'prompt', 'messages', or 'input_ids'")
    return list(text), CHARS_PER_TOKEN


def prompt_blocks(body: dict, block_tokens: int = 64) -> BlockRequest:
    """A prompt's prefix-block chain: block i's id hashes block i-1's id and block i's units."""
    units, per_token = prompt_units(body)
    size = block_tokens * per_token
    paths, tokens, parent = [], [], b""
    for start in range(0, len(units), size):
        chunk = units[start:start + size]
        digest = hashlib.blake2b(parent + repr(chunk).encode(), digest_size=8).digest()
        paths.append(int.from_bytes(digest, "little") >> 1)
        tokens.append(max(1, -(-len(chunk) // per_token)))
        parent = digest
    return BlockRequest(tuple(paths), tuple(tokens))


def output_budget(body: dict) -> int:
    params = body.get("sampling_params") or {}
    for value in (params.get("max_new_tokens"), body.get("max_tokens"), body.get("max_completion_tokens")):
        if isinstance(value, int) and value >= 0:
            return value
    return 0


@dataclass
class WorkerStats:
    url: str
    routed: int = 0
    failed: int = 0
    alive: bool = True


@dataclass
class ProxyStats:
    requests: int = 0
    retries: int = 0
    lost: int = 0                      # no worker could serve it: answered 503
    route_seconds: float = 0.0         # time inside the routing decision
    workers: list[WorkerStats] = field(default_factory=list)


class RoutingProxy:
    """Forwards requests to workers chosen by ``router``. Use from one event loop."""

    def __init__(self, worker_urls: list[str], router: Router, *, block_tokens: int = 64,
                 timeout: float = 600.0, connect_timeout: float = 5.0, health_interval: float = 2.0,
                 record: bool = False):
        import httpx

        if len(worker_urls) != router.workers:
            raise LcrInputError(f"{len(worker_urls)} worker URLs for a router of {router.workers} workers")
        self.urls = [u.rstrip("/") for u in worker_urls]
        self.router = router
        self.block_tokens = block_tokens
        self.health_interval = health_interval
        self.outstanding = [0] * len(self.urls)
        self.stats = ProxyStats(workers=[WorkerStats(u) for u in self.urls])
        self._rid = 0
        # (request, outstanding counts, chosen worker) per decision, when asked: lets a test
        # replay the live decisions through a fresh router.
        self.decisions: list[tuple[RoutedRequest, list[int], int]] | None = [] if record else None
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=connect_timeout),
                                        limits=httpx.Limits(max_connections=1024))

    # -- worker health --------------------------------------------------------------------
    def _mark_dead(self, worker: int) -> None:
        self.stats.workers[worker].alive = False
        self.router.remove_worker(worker)

    async def probe_forever(self) -> None:
        """Bring back workers that answer /health again."""
        while True:
            await asyncio.sleep(self.health_interval)
            for w, stats in enumerate(self.stats.workers):
                if stats.alive:
                    continue
                try:
                    reply = await self.client.get(self.urls[w] + "/health", timeout=2.0)
                except Exception:  # noqa: BLE001 - any failure means still down
                    continue
                if reply.status_code == 200:
                    stats.alive = True
                    self.router.restore_worker(w)

    # -- forwarding -------------------------------------------------------------------------
    def _routed(self, body: dict) -> RoutedRequest:
        self._rid += 1
        return RoutedRequest(self._rid, time.monotonic(), prompt_blocks(body, self.block_tokens),
                             output_budget(body))

    def _choose(self, request: RoutedRequest) -> int | None:
        started = time.perf_counter()
        try:
            worker = self.router.route(request, time.monotonic(), self.outstanding)
            if self.decisions is not None:
                self.decisions.append((request, list(self.outstanding), worker))
            return worker
        except LcrInputError:
            return None  # no worker left
        finally:
            self.stats.route_seconds += time.perf_counter() - started

    def _finish(self, worker: int, request: RoutedRequest, ok: bool) -> None:
        self.outstanding[worker] -= 1
        now = time.monotonic()
        if ok:
            self.router.on_complete(worker, request, now, now - request.arrival)
        else:
            self.router.on_failed(worker, request, now)

    async def forward(self, path: str, raw: bytes):
        """(status, JSON bytes or an async byte iterator for a streamed reply, the index of
        the worker that answered or None)."""
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            request = self._routed(body)
        except (ValueError, LcrInputError) as err:
            return 400, json.dumps({"error": f"bad request: {err}"}).encode(), None
        self.stats.requests += 1
        stream = bool(body.get("stream"))
        for attempt in range(len(self.urls)):
            worker = self._choose(request)
            if worker is None:
                break
            if attempt:
                self.stats.retries += 1
            self.outstanding[worker] += 1
            self.stats.workers[worker].routed += 1
            url = self.urls[worker] + path
            try:
                if not stream:
                    reply = await self.client.post(url, content=raw,
                                                   headers={"Content-Type": "application/json"})
                    if reply.status_code >= 500:
                        raise ConnectionError(f"HTTP {reply.status_code}")
                    self._finish(worker, request, True)
                    return reply.status_code, reply.content, worker
                upstream = await self.client.send(
                    self.client.build_request("POST", url, content=raw,
                                              headers={"Content-Type": "application/json"}), stream=True)
                if upstream.status_code >= 500:
                    await upstream.aclose()
                    raise ConnectionError(f"HTTP {upstream.status_code}")
                return upstream.status_code, self._relay(worker, request, upstream), worker
            except Exception:  # noqa: BLE001 - connection refused, timeout, 5xx: try another
                self.stats.workers[worker].failed += 1
                self._finish(worker, request, False)
                self._mark_dead(worker)
        self.stats.lost += 1
        return 503, json.dumps({"error": "no worker could serve the request"}).encode(), None

    async def _relay(self, worker: int, request: RoutedRequest, upstream):
        ok = False
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
            ok = True
        except Exception:  # noqa: BLE001 - the worker broke mid-stream: tell the client
            self.stats.workers[worker].failed += 1
            self._mark_dead(worker)
            yield b'data: {"error": "worker failed mid-stream"}\n\n'
        finally:
            await upstream.aclose()
            self._finish(worker, request, ok)

    def metrics(self) -> dict:
        s = self.stats
        out = {"requests": s.requests, "retries": s.retries, "lost": s.lost,
               "route_us_per_request": 1e6 * s.route_seconds / max(s.requests, 1),
               "outstanding": list(self.outstanding),
               "workers": [w.__dict__ for w in s.workers]}
        decisions = getattr(self.router, "decisions", None)
        if decisions is not None:     # lbgr:record=1
            out["lbgr_moves"] = moves_off_home(decisions)
        return out


def create_app(proxy: RoutingProxy):
    # FastAPI reads the handler's annotations at run time: no postponed annotations here.
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    app = FastAPI(title="lcr router")

    @app.on_event("startup")
    async def start_probe():
        app.state.probe = asyncio.create_task(proxy.probe_forever())

    @app.on_event("shutdown")
    async def stop():
        app.state.probe.cancel()
        await proxy.client.aclose()

    async def handle(request: Request):
        status, payload, worker = await proxy.forward(request.url.path, await request.body())
        # Which worker answered (its index in --worker-urls): what a client needs to see
        # where its requests went.
        headers = None if worker is None else {WORKER_HEADER: str(worker)}
        if isinstance(payload, bytes):
            return Response(payload, status_code=status, media_type="application/json", headers=headers)
        return StreamingResponse(payload, status_code=status, media_type="text/event-stream", headers=headers)

    for route in ROUTES:
        app.add_api_route(route, handle, methods=["POST"])

    @app.get("/health")
    async def health():
        alive = sum(w.alive for w in proxy.stats.workers)
        return JSONResponse({"alive_workers": alive}, status_code=200 if alive else 503)

    @app.get("/lcr/metrics")
    async def metrics():
        return proxy.metrics()

    return app
