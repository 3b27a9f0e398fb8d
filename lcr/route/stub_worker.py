"""A stand-in for an SGLang worker, to measure and test `lcr serve-router` without a model.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies): ``GET /health`` answers
200; ``POST`` to any route waits ``first_token_s``, then answers JSON or, when the body asks
``"stream": true`` (headers at once, as SGLang's server sends them), ``chunks`` SSE events
``chunk_gap_s`` apart and ``data: [DONE]``. With
``break_after`` set, a stream closes the connection after that many events, as a worker
that dies mid-reply does. A request it cannot read (not HTTP/1.x: sglang-router also probes
its workers for gRPC, with HTTP/2's preface; a bad length; a body that is not a JSON
object) gets a 400 and the connection closed.
Standard library only; one instance per event loop.
"""
import asyncio
import json
from dataclasses import dataclass


@dataclass
class StubWorker:
    first_token_s: float = 0.02
    chunks: int = 4
    chunk_gap_s: float = 0.005
    break_after: int | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen; return the base URL."""
        self._handlers: set[asyncio.Task] = set()
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return f"http://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        """Stop listening and end the connections still open (keep-alive ones wait for a
        next request that will not come)."""
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                request_line = head[0].split(" ")
                try:
                    if len(request_line) != 3 or not request_line[2].startswith("HTTP/1."):
                        raise ValueError("not an HTTP/1.x request")
                    method, path = request_line[:2]
                    length = next((int(line.split(":", 1)[1]) for line in head[1:]
                                   if line.lower().startswith("content-length:")), 0)
                    body = await reader.readexactly(length) if length > 0 else b""
                    stream = method == "POST" and bool(json.loads(body or b"{}").get("stream"))
                except (ValueError, AttributeError):    # bad line, length or JSON body
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                if method == "GET" and path == "/health":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                if stream:
                    if not await self._stream(writer):
                        return
                    continue
                await asyncio.sleep(self.first_token_s)
                reply = json.dumps({"text": "x" * self.chunks, "meta_info": {}}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, asyncio.CancelledError):
            pass       # the client left, or stop(): the connection ends either way
        finally:
            self._handlers.discard(asyncio.current_task())
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> bool:
        """Write one streamed reply; False when it broke off (the connection must close).
        The headers go out at once and the first event ``first_token_s`` later, as SGLang's
        server (uvicorn) sends them; ``break_after=0`` closes before any byte."""
        if self.break_after == 0:
            await asyncio.sleep(self.first_token_s)
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(self.first_token_s)
        for i in range(self.chunks):
            if self.break_after is not None and i == self.break_after:
                return False
            event = b"data: " + json.dumps({"text": "x" * (i + 1)}).encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(self.chunk_gap_s)
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        return True
