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

Server and client are aiohttp's: the proxy adds about 1 ms to a streamed first token at
the median, where FastAPI with httpx added 5 to 6 (``benchmarks/router_overhead.py``).
"""
import asyncio
import contextlib
import hashlib
import json
import time
from array import array
from dataclasses import dataclass, field

from lcr.errors import LcrInputError
from lcr.kv.requests import BlockRequest
from lcr.route.routers import Router, moves_off_home
from lcr.route.workload import RoutedRequest

ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions")
WORKER_HEADER = "X-Lcr-Worker"
CHARS_PER_TOKEN = 4
JSON_HEADERS = {"Content-Type": "application/json"}


def prompt_units(body: dict) -> tuple[list[int] | str, int]:
    """The prompt as sliceable units (a list of token ids, or the text) and units per token."""
    ids = body.get("input_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise LcrInputError("input_ids: expected one list of integers (batches are not routed)")
        return ids, 1
    text = body.get("text", body.get("prompt"))
    if text is None and isinstance(body.get("messages"), list):
        text = "\n".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    if not isinstance(text, str):
        raise LcrInputError("expected a string 'text' or 'prompt', 'messages', or 'input_ids'")
    return text, CHARS_PER_TOKEN


def _unit_bytes(chunk: list[int] | str) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8", "surrogatepass")     # JSON may carry lone surrogates
    try:
        return array("q", chunk).tobytes()
    except OverflowError:
        raise LcrInputError("input_ids: a token id does not fit in 64 bits") from None


def prompt_blocks(body: dict, block_tokens: int = 64) -> BlockRequest:
    """A prompt's prefix-block chain: block i's id hashes block i-1's id and block i's units.
    Token-id and text prompts start from different seeds, so they never share a block."""
    units, per_token = prompt_units(body)
    size = block_tokens * per_token
    paths, tokens = [], []
    parent = b"t" if isinstance(units, str) else b"i"
    for start in range(0, len(units), size):
        chunk = units[start:start + size]
        digest = hashlib.blake2b(parent + _unit_bytes(chunk), digest_size=8).digest()
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
    """Forwards requests to workers chosen by ``router``. Use from one event loop; ``close()``
    when done."""

    def __init__(self, worker_urls: list[str], router: Router, *, block_tokens: int = 64,
                 timeout: float = 600.0, connect_timeout: float = 5.0, health_interval: float = 2.0,
                 record: bool = False):
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
        # A worker may take long before its first byte (a queue), not to accept a connection.
        self._timeouts = (connect_timeout, timeout)
        self._client = None

    @property
    def client(self):
        """The aiohttp session, made on first use (it must be made inside the event loop)."""
        if self._client is None:
            import aiohttp

            connect, read = self._timeouts
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1024),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read),
                auto_decompress=False)       # bytes pass through as the worker sent them
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- worker health --------------------------------------------------------------------
    def mark_dead(self, worker: int) -> None:
        self.stats.workers[worker].alive = False
        self.router.remove_worker(worker)

    async def probe_forever(self) -> None:
        """Bring back workers that answer /health again."""
        import aiohttp

        while True:
            await asyncio.sleep(self.health_interval)
            for w, stats in enumerate(self.stats.workers):
                if stats.alive:
                    continue
                try:
                    async with self.client.get(self.urls[w] + "/health",
                                               timeout=aiohttp.ClientTimeout(total=2.0)) as reply:
                        healthy = reply.status == 200
                except Exception:  # noqa: BLE001 - any failure means still down
                    continue
                if healthy:
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

    def finish(self, worker: int, request: RoutedRequest, ok: bool) -> None:
        """A request left ``worker``: free its slot, tell the router how it went."""
        self.outstanding[worker] -= 1
        now = time.monotonic()
        if ok:
            self.router.on_complete(worker, request, now, now - request.arrival)
        else:
            self.router.on_failed(worker, request, now)

    async def forward(self, path: str, raw: bytes):
        """(status, JSON bytes or an async byte iterator for a streamed reply, the index of
        the worker that answered or None). Close a returned iterator if it is not run to the
        end: that releases the worker's connection and counts the request finished."""
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
            try:
                upstream = await self.client.post(self.urls[worker] + path, data=raw, headers=JSON_HEADERS)
                if upstream.status >= 500:
                    upstream.release()
                    raise ConnectionError(f"HTTP {upstream.status}")
                if not stream:
                    async with upstream:
                        content = await upstream.read()
                    self.finish(worker, request, True)
                    return upstream.status, content, worker
                return upstream.status, StreamedReply(self, worker, request, upstream), worker
            except Exception:  # noqa: BLE001 - connection refused, timeout, 5xx: try another
                self.stats.workers[worker].failed += 1
                self.finish(worker, request, False)
                self.mark_dead(worker)
        self.stats.lost += 1
        return 503, json.dumps({"error": "no worker could serve the request"}).encode(), None

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


class StreamedReply:
    """A worker's streamed reply, relayed chunk by chunk. ``aclose()`` (run to the end or
    not, started or not) releases the connection and counts the request finished, once:
    a client that leaves early still frees its worker's slot in the router's counts."""

    ERROR_EVENT = b'data: {"error": "worker failed mid-stream"}\n\n'

    def __init__(self, proxy: RoutingProxy, worker: int, request: RoutedRequest, upstream):
        self.proxy, self.worker, self.request, self.upstream = proxy, worker, request, upstream
        self._ok = False
        self._done = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            chunk = await self.upstream.content.readany()
        except Exception:  # noqa: BLE001 - the worker broke mid-stream: tell the client
            self.proxy.stats.workers[self.worker].failed += 1
            self.proxy.mark_dead(self.worker)
            await self.aclose()
            return self.ERROR_EVENT
        if chunk:
            return chunk
        self._ok = True
        await self.aclose()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        self.upstream.release()
        self.proxy.finish(self.worker, self.request, self._ok)


def create_app(proxy: RoutingProxy):
    """The aiohttp application serving ``proxy``: the forwarded routes, /health, /lcr/metrics."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        status, payload, worker = await proxy.forward(request.path, await request.read())
        # Which worker answered (its index in --worker-urls): what a client needs to see
        # where its requests went.
        headers = {} if worker is None else {WORKER_HEADER: str(worker)}
        if isinstance(payload, bytes):
            return web.Response(body=payload, status=status, content_type="application/json",
                                headers=headers)
        reply = web.StreamResponse(status=status, headers={**headers, "Content-Type": "text/event-stream"})
        async with contextlib.aclosing(payload):     # a client that leaves still frees the worker
            await reply.prepare(request)
            async for chunk in payload:
                await reply.write(chunk)
        await reply.write_eof()
        return reply

    async def health(_request):
        alive = sum(w.alive for w in proxy.stats.workers)
        return web.json_response({"alive_workers": alive}, status=200 if alive else 503)

    async def metrics(_request):
        return web.json_response(proxy.metrics())

    async def probe(app):
        task = asyncio.create_task(proxy.probe_forever())
        yield
        task.cancel()
        await proxy.close()

    app = web.Application(client_max_size=64 * 1024 * 1024)     # long prompts as text
    app.router.add_routes([web.post(route, handle) for route in ROUTES])
    app.router.add_get("/health", health)
    app.router.add_get("/lcr/metrics", metrics)
    app.cleanup_ctx.append(probe)
    return app


def listen(host: str, port: int):
    """The bound listening socket; a taken port or an unknown host is a one-line error."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as err:
        raise LcrInputError(f"--host/--port: cannot listen on {host}:{port}: {err.strerror or err}") from None


def run(proxy: RoutingProxy, sock) -> None:
    """Serve on ``sock`` until interrupted, on uvloop when it is installed."""
    from aiohttp import web

    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    web.run_app(create_app(proxy), sock=sock, print=None, access_log=None, loop=loop)
