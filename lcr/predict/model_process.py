"""The predictor service's model in a process of its own, away from the event loop.

Why a process and not worker threads: observing, fitting and predicting are CPU work,
much of it Python loops that hold the GIL. On threads beside the event loop they took
the GIL from it: with 64 clients and one 16 MiB observe in flight, ``/health`` waited
393 ms at p99. In its own process the model can run flat out while the event loop
(HTTP, admission, ``/health``) only moves bytes.

The front (``ModelProcess``, on the event loop) and the model process (``_serve``) talk
over two Unix socket pairs, one per lane, so a 16 MiB observation batch never queues in
front of a prediction:

- observe channel: ``OBSERVE`` (keys then times, as on the wire) and ``TRAIN`` requests,
  handled in order on one thread (so updates and fits are serialised); the model
  process reports ``PROGRESS`` while a batch is taken in and ``STATUS`` (its counters)
  every ``STATUS_EVERY_S``;
- predict channel: ``PREDICT`` (int64 ``now``, then keys) on a second thread.

Every frame is a 17-byte header (request id, kind, payload length) and the payload.
What is waiting in a channel is bounded by the front's admission (``service.py``), not here.
The model process exits when the front goes away (its sockets reach end of file).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import socket
import struct
import sys
import threading
import time
from typing import Callable

import numpy as np

from lcr.errors import LcrInputError
from lcr.predict.clock import StreamClock
from lcr.predict.wire import INT64, decode_keys, decode_observations, encode_float64

log = logging.getLogger(__name__)

HEADER = struct.Struct("<QBQ")  # request id, kind, payload length
OBSERVE, TRAIN, PREDICT = 1, 2, 3  # requests
DONE, FAILED, PROGRESS, STATUS = 10, 11, 12, 13  # answers and reports
SLICE = 4096  # observations taken in between two progress reports (and key-cap checks)
STATUS_EVERY_S = 0.1
# The model process's predict thread must get the GIL soon while the observe thread loops.
SWITCH_INTERVAL_S = 0.0005

# Picklable, called in the model process: a LightGBMPredictor or a ServedResidual.
ModelFactory = Callable[[], "LightGBMPredictor | ServedResidual"]  # noqa: F821


class ModelHost:
    """The model and the rules the service adds around it: the clock's bounds from the
    service's limits, the key cap, one fit at a time. The time rule itself is the model's
    (``LightGBMPredictor.observe_many``, ``lcr.predict.clock``), the same in process and
    behind the service.

    ``observe``/``train`` must run on one thread (the observe lane); ``predict`` may run
    concurrently with them: both models (``LightGBMPredictor``, ``ServedResidual``) guard
    their state with a lock.
    """

    def __init__(self, model, limits):
        self.model, self.limits = model, limits
        model.clock = StreamClock(limits.max_time_jump, limits.clock_restart_s)
        self.counters = {"keys_evicted": 0}

    def observe(self, keys: np.ndarray, times: np.ndarray, progress=lambda done: None) -> dict:
        limit = self.limits.max_keys
        keep = int(limit * (1 - self.limits.evict_fraction))
        step = min(max(limit - keep, 1), SLICE)  # a large batch is capped as it goes, not only at its end
        refused = self.model.clock.refused
        with self.model.clock.batch():  # one request is one batch to the clock's restart rule
            for begin in range(0, len(keys), step):
                self.model.observe_many(keys[begin:begin + step], times[begin:begin + step])
                self.counters["keys_evicted"] += self.model.forget_least_recent(limit, keep)
                progress(begin + step)
        refused = self.model.clock.refused - refused
        return {"observed": len(keys) - refused, "refused": refused}

    def train(self) -> dict:
        self.model.wait_for_fit()  # a background fit started by observe finishes first
        fitted = self.model.fit()
        return {"fitted": fitted, "model_version": self.model.model_version}

    def predict(self, keys: np.ndarray, now: int) -> bytes:
        return encode_float64(self.model.predict(keys, now))

    def status(self) -> dict:
        model, clock = self.model, self.model.clock
        return {**dict(model.metrics), **clock.counters, **self.counters, "times_rejected": clock.refused,
                "clock": clock.now, "max_time_jump": clock.max_jump, "model_version": model.model_version,
                "keys": model.keys_held, "model_pid": os.getpid()}


# -- the model process ---------------------------------------------------------------------

def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    buffer = bytearray(n)
    view, got = memoryview(buffer), 0
    while got < n:
        read = sock.recv_into(view[got:])
        if not read:
            raise EOFError
        got += read
    return buffer


class _Channel:
    """The model process's end of one channel: frames in, frames out (thread-safe sends)."""

    def __init__(self, sock: socket.socket):
        self.sock, self._lock = sock, threading.Lock()

    def receive(self) -> tuple[int, int, bytearray]:
        request, kind, length = HEADER.unpack(_recv_exactly(self.sock, HEADER.size))
        return request, kind, _recv_exactly(self.sock, length)

    def send(self, request: int, kind: int, payload: bytes = b"") -> None:
        with self._lock:
            self.sock.sendall(HEADER.pack(request, kind, len(payload)))
            if payload:
                self.sock.sendall(payload)


def _handle(channel: _Channel, host: ModelHost) -> None:
    """Answer one channel's requests in order until the front goes away."""
    while True:
        request, kind, payload = channel.receive()
        try:
            if kind == OBSERVE:
                keys, times = decode_observations(payload)
                progress = lambda done: channel.send(request, PROGRESS, struct.pack("<Q", min(done, len(keys))))  # noqa: E731
                answer = json.dumps(host.observe(keys, times, progress)).encode()
            elif kind == TRAIN:
                answer = json.dumps(host.train()).encode()
            elif kind == PREDICT:
                now = int(np.frombuffer(payload, dtype=INT64, count=1)[0])
                answer = host.predict(decode_keys(memoryview(payload)[8:]), now)
            else:
                raise LcrInputError(f"unknown request kind {kind}")
        except OSError:  # the front went away mid-request
            raise
        except Exception as err:  # the service stays up; the front answers 500
            log.exception("predictor model failed")
            channel.send(request, FAILED, f"{type(err).__name__}: {err}".encode())
        else:
            channel.send(request, DONE, answer)


def _report(channel: _Channel, host: ModelHost) -> None:
    while True:
        channel.send(0, STATUS, json.dumps(host.status()).encode())
        time.sleep(STATUS_EVERY_S)


def _serve(observe_end, predict_end, factory: ModelFactory, limits) -> None:
    """The model process's main: build the model, answer both channels, exit with the front."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the front decides when to stop (Ctrl-C reaches both)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    observe, predict = (_Channel(_socket_of(end)) for end in (observe_end, predict_end))
    try:
        host = ModelHost(factory(), limits)
    except Exception as err:
        observe.send(0, FAILED, f"building the model failed: {type(err).__name__}: {err}".encode())
        os._exit(1)
    workers = [threading.Thread(target=_until_closed, args=(fn, channel, host), daemon=True,
                                name=f"lcr-model-{name}")
               for fn, channel, name in ((_handle, observe, "observe"), (_handle, predict, "predict"),
                                         (_report, observe, "status"))]
    for worker in workers:
        worker.start()
    while all(worker.is_alive() for worker in workers):
        workers[0].join(0.5)
    os._exit(0)  # the front is gone: don't wait for a batch nobody will ask about


def _socket_of(connection) -> socket.socket:
    """The Unix socket under a ``multiprocessing`` duplex Pipe end (which is then closed)."""
    sock = socket.socket(fileno=os.dup(connection.fileno()))
    connection.close()
    return sock


def _until_closed(fn, channel: _Channel, host: ModelHost) -> None:
    try:
        fn(channel, host)
    except (EOFError, OSError):
        pass


# -- the front's side ----------------------------------------------------------------------

class ModelGone(Exception):
    """The model process has exited; nothing more will be answered."""


class ModelFailed(Exception):
    """The model process raised while handling a request (its message is the text)."""


def _context(factory: ModelFactory):
    # forkserver: a fresh process (no inherited threads or locks, unlike fork) that forks
    # each model process with the model code already imported (unlike spawn's seconds).
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preloaded_modules(factory))
    return ctx


def preloaded_modules(factory: ModelFactory) -> list[str]:
    """What the forkserver imports for ``factory``'s model: its module (and LightGBM for the
    LightGBM model), nothing more. A killed service's forkserver tears down everything it
    imported, on the serving host's cores: LightGBM's share is ~0.2 s of a core, which the
    residual model, the radix caches' service, does not need."""
    module = getattr(getattr(factory, "func", factory), "__module__", None)
    if module is None:
        return []
    return ["lightgbm", module] if module == "lcr.predict.lightgbm_model" else [module]


class _FrontChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, owner: "ModelProcess"):
        self.reader, self.writer, self.owner = reader, writer, owner
        self.waiting: dict[int, asyncio.Future] = {}
        self.on_progress: dict[int, Callable[[int], None]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                request, kind, length = HEADER.unpack(await self.reader.readexactly(HEADER.size))
                payload = await self.reader.readexactly(length) if length else b""
                if kind == STATUS:
                    self.owner.status.update(json.loads(payload))
                    self.owner.ready.set()
                elif kind == PROGRESS:
                    callback = self.on_progress.get(request)
                    if callback is not None:
                        callback(struct.unpack("<Q", payload)[0])
                else:
                    self.on_progress.pop(request, None)
                    future = self.waiting.pop(request, None)
                    if request == 0 and kind == FAILED:
                        self.owner.exited = payload.decode(errors="replace")
                        self.owner.ready.set()
                    elif future is not None and not future.done():
                        if kind == DONE:
                            future.set_result(payload)
                        else:
                            future.set_exception(ModelFailed(payload.decode(errors="replace")))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.owner.lost()

    def fail_all(self, err: Exception) -> None:
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(err)
        self.waiting.clear()
        self.on_progress.clear()


class ModelProcess:
    """The front's handle on the model process. Use from the event loop thread only."""

    def __init__(self, factory: ModelFactory, limits):
        self.factory, self.limits = factory, limits
        self.status: dict = {"model_version": 0, "keys": 0, "observed": 0}
        self.exited: str | None = None  # why the model process is gone
        self.process = None
        self._channels: dict[int, _FrontChannel] = {}
        self._next_id = 0

    async def start(self, timeout_s: float = 120.0) -> None:
        self.ready = asyncio.Event()
        ctx = _context(self.factory)
        pairs = [ctx.Pipe(duplex=True) for _ in range(2)]  # socket pairs on Unix
        self.process = ctx.Process(target=_serve, args=(pairs[0][1], pairs[1][1], self.factory, self.limits),
                                   name="lcr-predictor-model", daemon=True)
        self.process.start()
        for lane, (front_end, child_end) in zip((OBSERVE, PREDICT), pairs):
            child_end.close()
            sock = _socket_of(front_end)
            handle = sock.dup()  # to shut the socket down synchronously (event loops hide theirs)
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
            self._channels[lane] = _FrontChannel(reader, writer, self)
            self._channels[lane].handle = handle
        try:
            await asyncio.wait_for(self.ready.wait(), timeout_s)
        except asyncio.TimeoutError:
            self.exited = f"the model process did not start within {timeout_s:g} s"
        if self.exited:
            await self.stop()
            raise RuntimeError(self.exited)

    @property
    def alive(self) -> bool:
        return self.exited is None

    def lost(self) -> None:
        if self.exited is None:
            code = self.process.exitcode if self.process is not None else None
            self.exited = f"the model process exited (code {code})"
            log.error("predictor service: %s; model requests now answer 503", self.exited)
        self.ready.set()
        for channel in self._channels.values():
            channel.fail_all(ModelGone(self.exited))

    def request(self, kind: int, *parts, on_progress: Callable[[int], None] | None = None) -> asyncio.Future:
        """Send one request (its payload in ``parts``); the future gets the answer's
        payload, or fails with ModelGone / ModelFailed."""
        if self.exited:
            raise ModelGone(self.exited)
        channel = self._channels[PREDICT if kind == PREDICT else OBSERVE]
        self._next_id += 1
        request = self._next_id
        future = asyncio.get_running_loop().create_future()
        channel.waiting[request] = future
        if on_progress is not None:
            channel.on_progress[request] = on_progress
        channel.writer.write(HEADER.pack(request, kind, sum(len(part) for part in parts)))
        for part in parts:  # bounded by the front's admission, not by drain()
            channel.writer.write(part)
        return future

    async def stop(self) -> None:
        self.exited = self.exited or "stopped"
        for channel in self._channels.values():
            with contextlib.suppress(OSError):  # end of file for the model process now
                channel.handle.shutdown(socket.SHUT_RDWR)
            channel.handle.close()
            channel.writer.close()
            channel.task.cancel()
        if self.process is not None:
            process = self.process
            await asyncio.get_running_loop().run_in_executor(None, process.join, 5)
            if process.is_alive():
                process.kill()
                await asyncio.get_running_loop().run_in_executor(None, process.join, 5)


__all__ = ["ModelFailed", "ModelGone", "ModelHost", "ModelProcess"]
