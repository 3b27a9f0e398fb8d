"""A small keep-alive HTTP/1.1 client with a whole-call deadline, for RemotePredictor.

``http.client`` applies its timeout to each socket operation, so a server that drips a
byte just inside the timeout can hold a call indefinitely. Here every send and receive
gets only the time left until the call's deadline.

A kept-alive connection that the server has meanwhile closed (uvicorn closes idle ones
after a few seconds) fails before any byte of the answer; such a request was never
processed, so it is sent once more on a fresh connection instead of being reported as
an outage.

``ConnectionPool`` is thread-safe: each call checks a connection out, so concurrent
callers never share a socket.

A password in the URL is never shown: ``Endpoint.url`` and every message carry it as
``***`` (``lcr.redact``). The client sends no credentials from the URL.

Why not httpx (measured, not assumed): ``PYTHONPATH=. python
benchmarks/service_request_cpu.py --clients --requests 2000 --repeats 5`` sends one
``/predict`` of 256 keys at a time on a kept-alive connection to one service, alternating
the clients, 5 x 2,000 calls each; median (min-max) in µs, 2 shared cores, load average 4.0:

    transport, this client               p50   358 (353-370)    client CPU  69 (65-71)
    transport, httpx 0.28                p50   850 (743-881)    client CPU 481 (449-502)
    RemotePredictor.predict, this client p50   490 (479-529)    client CPU 180 (158-193)
    RemotePredictor.predict, httpx       p50  1029 (941-1065)   client CPU 652 (570-676)

(p99s 3-4 ms for both on the shared machine; a run at load average 6.2 gave the same
ratios.) httpx costs 3.6x the CPU of a cache's whole predict call (7x the transport's) and
2.1x its latency, more than the 2x that would pay for dropping this file, and that CPU is
taken from the cache's own process. Its timeouts also apply to each socket operation, not
to the call: against a server dripping one byte every 30 ms a 0.1 s deadline took 1.4 s
(this client: 0.1 s;
``tests/test_predictor_service.py::test_deadline_covers_the_whole_call_against_a_dripping_server``).
"""
from __future__ import annotations

import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

from lcr.errors import LcrInputError
from lcr.redact import redact_url, split_credentials

MAX_HEADER_BYTES = 64 << 10
MAX_ANSWER_BYTES = 256 << 20


class CallFailed(Exception):
    """The call did not complete: unreachable, too slow, or not HTTP."""


class ConnectFailed(CallFailed):
    """No connection could be made (nothing listening, host unreachable)."""


class ConnectTimeout(CallFailed):
    """The server did not accept in time (busy, not gone); nothing was sent."""


class StaleConnection(CallFailed):
    """A reused connection was closed by the server before answering (safe to resend)."""


class Endpoint:
    """``http://host:port`` or ``https://host:port`` (TLS verified with the system's CAs)."""

    def __init__(self, url: str):
        if not isinstance(url, str):
            raise LcrInputError(f"predictor URL must be a string, got {type(url).__name__}")
        shown = redact_url(url)
        parts = urlsplit(split_credentials(url)[1])  # a password may hold '/', '?' or '#' unencoded
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LcrInputError(f"predictor URL must look like http://host:port, got {shown!r}")
        try:
            port = parts.port
        except ValueError:
            raise LcrInputError(f"predictor URL has a bad port: {shown!r}") from None
        self.url = shown  # for messages; connecting needs only host and port
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.address = f"{self.host}:{self.port}"  # the server, however the URL spells it
        self.tls = ssl.create_default_context() if parts.scheme == "https" else None


class _Connection:
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.sock: socket.socket | None = None
        self.last_used = 0.0

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def request(self, head: bytes, body: bytes, deadline: float) -> tuple[int, bytes, dict, bool]:
        """Send one request, return ``(status, payload, headers, keep_alive)``."""
        reused = self.sock is not None
        if not reused:
            self._connect(deadline)
        got_any = False
        try:
            self._send(head + body if len(body) < 65536 else head, deadline)
            if len(body) >= 65536:
                self._send(body, deadline)
            buffer = bytearray()
            while b"\r\n\r\n" not in buffer:
                if len(buffer) > MAX_HEADER_BYTES:
                    raise CallFailed("answer headers too long")
                got_any |= self._recv_into(buffer, deadline)
            header_end = buffer.index(b"\r\n\r\n")
            status, headers = _parse_head(bytes(buffer[:header_end]))
            length, keep_alive = headers["content-length"], headers["keep-alive"]
            payload = buffer[header_end + 4:]
            while len(payload) < length:
                self._recv_into(payload, deadline)
            self.last_used = time.monotonic()
            return status, bytes(payload[:length]), headers, keep_alive
        except (ConnectionError, EOFError) as err:
            self.close()
            if reused and not got_any:
                raise StaleConnection(str(err) or type(err).__name__) from None
            raise CallFailed(f"{type(err).__name__}: {err}") from None
        except CallFailed:
            self.close()
            raise
        except OSError as err:
            self.close()
            raise CallFailed(f"{type(err).__name__}: {err}") from None

    def _connect(self, deadline: float) -> None:
        ep = self.endpoint
        try:
            sock = socket.create_connection((ep.host, ep.port), timeout=_left(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ep.tls is not None:
                sock.settimeout(_left(deadline))
                sock = ep.tls.wrap_socket(sock, server_hostname=ep.host)
        except TimeoutError as err:  # slow to accept: busy, not gone
            raise ConnectTimeout(f"connecting to {ep.url}: {err}") from None
        except OSError as err:
            raise ConnectFailed(f"cannot connect to {ep.url}: {err}") from None
        self.sock = sock

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self.sock.settimeout(_left(deadline))
            sent = self.sock.send(view)
            view = view[sent:]

    def _recv_into(self, buffer: bytearray, deadline: float) -> bool:
        self.sock.settimeout(_left(deadline))
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("connection closed by the server")
        if len(buffer) + len(chunk) > MAX_ANSWER_BYTES:
            raise CallFailed("answer too large")
        buffer += chunk
        return True


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    return left


def _parse_head(head: bytes) -> tuple[int, dict]:
    """``(status, headers)``: header names lower-cased, values stripped text (the last of
    a repeated name wins), ``content-length`` an int and ``keep-alive`` a bool."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise CallFailed(f"not an HTTP answer: {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    length = headers.get("content-length", "")
    if not length.isdigit():
        raise CallFailed("answer without Content-Length")
    if headers.get("transfer-encoding", "identity").lower() != "identity":
        raise CallFailed("chunked answers are not supported")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if connection else parts[0] == b"HTTP/1.1"
    return int(parts[1]), {**headers, "content-length": int(length), "keep-alive": keep_alive}


class ConnectionPool:
    """Idle keep-alive connections to one endpoint; thread-safe."""

    def __init__(self, endpoint: Endpoint, size: int = 8, idle_s: float = 4.0):
        self.endpoint, self.size, self.idle_s = endpoint, size, idle_s
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self.reconnects = 0  # stale keep-alive connections replaced

    def call(self, method: str, path: str, headers: dict, body: bytes, deadline: float) -> tuple[int, bytes]:
        """``(status, payload)`` of one request (see ``request``)."""
        return self.request(method, path, headers, body, deadline)[:2]

    def request(self, method: str, path: str, headers: dict, body: bytes,
                deadline: float) -> tuple[int, bytes, dict]:
        """``(status, payload, answer headers)`` of one request; raises ``CallFailed`` (or
        a subclass) when it did not complete by ``deadline``."""
        head = _request_head(method, path, self.endpoint, headers, len(body))
        conn = self._checkout()
        try:
            try:
                status, payload, answer, keep_alive = conn.request(head, body, deadline)
            except StaleConnection:
                with self._lock:
                    self.reconnects += 1
                status, payload, answer, keep_alive = conn.request(head, body, deadline)
        except BaseException:
            conn.close()
            raise
        if keep_alive:
            self._checkin(conn)
        else:
            conn.close()
        return status, payload, answer

    def _checkout(self) -> _Connection:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if now - conn.last_used < self.idle_s:
                    return conn
                conn.close()  # idle long enough that the server may have dropped it
        return _Connection(self.endpoint)

    def _checkin(self, conn: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _request_head(method: str, path: str, endpoint: Endpoint, headers: dict, length: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {endpoint.host}:{endpoint.port}",
             f"Content-Length: {length}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


__all__ = ["CallFailed", "ConnectFailed", "ConnectTimeout", "ConnectionPool", "Endpoint", "StaleConnection"]
