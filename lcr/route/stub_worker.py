"""A stand-in for an SGLang worker, to measure and test `lcr serve-router` without a model.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies): ``GET /health`` answers
200; ``POST`` to any route waits ``first_token_s``, then answers JSON or, when the body asks
``"stream": true``, ``chunks`` SSE events ``chunk_gap_s`` apart and ``data: [DONE]``. With
``break_after`` set, a stream closes the connection after that many events, as a worker
that dies mid-reply does. Standard library only; one instance per event loop.
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
        self._server = await asyncio.start_server(self._serve, host, port)
        bound = self._server.sockets[0].getsockname()
        return f"http://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, path = head[0].split(" ")[:2]
                length = next((int(line.split(":", 1)[1]) for line in head[1:]
                               if line.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                if method == "GET" and path == "/health":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    continue
                await asyncio.sleep(self.first_token_s)
                if not json.loads(body or b"{}").get("stream"):
                    reply = json.dumps({"text": "x" * self.chunks, "meta_info": {}}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(reply), reply))
                    continue
                if not await self._stream(writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> bool:
        """Write one streamed reply; False when it broke off (the connection must close)."""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        for i in range(self.chunks):
            if self.break_after is not None and i == self.break_after:
                return False
            event = b"data: " + json.dumps({"text": "x" * (i + 1)}).encode() + b"\n\n"
            # headers go out with the first event, as a server that flushes per token does
            writer.write((head if i == 0 else b"") + b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(self.chunk_gap_s)
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        return True
