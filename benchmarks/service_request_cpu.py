"""CPU the predictor service's front spends per request, and what a client spends per call.

    PYTHONPATH=. python benchmarks/service_request_cpu.py [--requests 3000] [--repeats 5]
        [--service-root DIR ...] [--token] [--clients]

Server side: starts ``lcr serve-predictor`` (from each ``--service-root``, alternating,
default this tree) and sends ``--requests`` requests of each kind from one client on one
kept-alive connection (``http.client``, one at a time): ``GET /health`` and ``POST
/predict`` of 256 keys. The CPU time (user + system, /proc) the front process used over
the loop, divided by the requests, is its cost per request; the model process's is not
counted (it runs in its own process). ``--token``: the service requires a bearer token
and the client sends it. One client at a time on a kept-alive connection
keeps the client's own cost out of the service's process and the connection set-up out
of the figure.

``--clients``: the client side, the hot path of a cache's ``RemotePredictor.predict``:
one ``/predict`` of 256 keys on a kept-alive connection, through the hand-written
``lcr.predict.http_client`` and through ``httpx`` (``HttpxPool``: httpx behind the same
transport contract), alone and inside ``RemotePredictor.predict``, alternating in one run
against one service; per variant its latency p50/p99 and its own CPU per call
(``time.thread_time`` of the calling thread, which does all the client's work).

Repeats alternate the variants so a change in the machine's load hits them alike; the
median and the spread (min-max) over the repeats are printed with the load average.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lcr.predict.wire import CONTENT_TYPE, encode_int64, encode_observations  # noqa: E402

KEYS = 256
OCTET = {"Content-Type": CONTENT_TYPE}
TOKEN = "service-request-cpu-token"
AUTH: dict = {}  # the Authorization header when --token


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_service(root: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("LCR_PREDICTOR_TOKEN", None)
    if AUTH:
        env["LCR_PREDICTOR_TOKEN"] = TOKEN
    proc = subprocess.Popen([sys.executable, "-m", "lcr", "serve-predictor", "--port", str(port)], env=env,
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # the model process imports LightGBM first
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the service in {root} did not start")
        time.sleep(0.1)


def front_cpu_per_request(pid: int, port: int, method: str, path: str, body: bytes | None, n: int) -> float:
    """Seconds of the front's CPU per request over ``n`` requests on one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {**(OCTET if body is not None else {}), **AUTH}
    for _ in range(50):  # warm: the connection, the route, the model's first answer
        conn.request(method, path, body, headers)
        conn.getresponse().read()
    before = cpu_seconds(pid)
    for _ in range(n):
        conn.request(method, path, body, headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
    used = cpu_seconds(pid) - before
    conn.close()
    return used / n


def spread(values: list[float], scale: float = 1e6) -> str:
    v = np.array(values) * scale
    return f"{np.median(v):7.1f} ({v.min():.1f}-{v.max():.1f})"


def server_side(roots: list[Path], n: int, repeats: int) -> dict:
    keys = encode_int64(np.arange(KEYS))
    services = {}
    try:
        for root in roots:
            port = free_port()
            services[root] = (start_service(root, port), port)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/observe", encode_observations(np.arange(KEYS), np.arange(KEYS)), {**OCTET, **AUTH})
            conn.getresponse().read()
        results = {str(root): {"health": [], "predict": []} for root in roots}
        for _ in range(repeats):
            for root, (proc, port) in services.items():
                for name, method, path, body in (("health", "GET", "/health", None),
                                                 ("predict", "POST", f"/predict?now={KEYS}", keys)):
                    results[str(root)][name].append(front_cpu_per_request(proc.pid, port, method, path, body, n))
        print(f"front CPU per request, µs: median (min-max) of {repeats} x {n} requests; "
              f"token {'yes' if AUTH else 'no'}; load average {os.getloadavg()[0]:.1f}")
        for root, got in results.items():
            print(f"  {root}: /health {spread(got['health'])}  /predict 256 keys {spread(got['predict'])}")
        return results
    finally:
        for proc, _ in services.values():
            proc.terminate()
            proc.wait(30)


class HttpxPool:
    """httpx behind ``RemotePredictor``'s transport contract (``lcr.predict.http_client.
    ConnectionPool.request``): what switching the client to httpx would run per call."""

    def __init__(self, url: str):
        import httpx

        self.httpx = httpx
        self.client = httpx.Client(base_url=url, limits=httpx.Limits(max_keepalive_connections=8))
        self.reconnects = 0

    def request(self, method, path, headers, body, deadline):
        from lcr.predict.http_client import CallFailed, ConnectFailed, ConnectTimeout

        httpx = self.httpx
        try:  # httpx's timeouts are per operation; the call's time left is the closest it offers
            reply = self.client.request(method, path, headers=headers, content=body,
                                        timeout=max(deadline - time.monotonic(), 1e-3))
        except httpx.ConnectTimeout as err:
            raise ConnectTimeout(str(err)) from None
        except httpx.ConnectError as err:
            raise ConnectFailed(str(err)) from None
        except httpx.HTTPError as err:
            raise CallFailed(str(err)) from None
        return reply.status_code, reply.content, reply.headers

    def close(self):
        self.client.close()


def client_variants(url: str) -> dict:
    """name -> one /predict of 256 keys on a kept-alive connection: the transport alone
    (one request, as the client sends it) and a cache's whole call, ``RemotePredictor.predict``."""
    import httpx

    from lcr.predict.http_client import ConnectionPool, Endpoint
    from lcr.predict.remote import RemotePredictor

    keys = np.arange(KEYS)
    body, path = encode_int64(keys), f"/predict?now={KEYS}"
    pool = ConnectionPool(Endpoint(url), size=1)
    client = httpx.Client(base_url=url, timeout=5, limits=httpx.Limits(max_connections=1))
    remote, remote_httpx = RemotePredictor(url, deadline_s=5), RemotePredictor(url, deadline_s=5)
    remote_httpx.replicas[0].pool = HttpxPool(url)
    return {"transport, hand-written": lambda: pool.call("POST", path, OCTET, body, time.monotonic() + 5)[1],
            "transport, httpx": lambda: client.post(path, content=body, headers=OCTET).content,
            "RemotePredictor.predict, hand-written": lambda: remote.predict(keys, KEYS).tobytes(),
            "RemotePredictor.predict, httpx": lambda: remote_httpx.predict(keys, KEYS).tobytes()}


def client_side(root: Path, n: int, repeats: int) -> dict:
    port = free_port()
    proc = start_service(root, port)
    try:
        variants = client_variants(f"http://127.0.0.1:{port}")
        results = {name: {"p50": [], "p99": [], "cpu": []} for name in variants}
        for call in variants.values():
            for _ in range(50):
                assert len(call()) == 8 * KEYS
        for _ in range(repeats):
            for name, call in variants.items():
                latencies = np.empty(n)
                cpu = time.thread_time()
                for i in range(n):
                    begin = time.perf_counter()
                    call()
                    latencies[i] = time.perf_counter() - begin
                cpu = time.thread_time() - cpu
                results[name]["p50"].append(float(np.percentile(latencies, 50)))
                results[name]["p99"].append(float(np.percentile(latencies, 99)))
                results[name]["cpu"].append(cpu / n)
        print(f"client, one /predict of 256 keys, µs: median (min-max) of {repeats} x {n} calls; "
              f"load average {os.getloadavg()[0]:.1f}")
        for name, got in results.items():
            print(f"  {name:38s} p50 {spread(got['p50'])}  p99 {spread(got['p99'])}  client CPU {spread(got['cpu'])}")
        return results
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--service-root", type=Path, action="append", help="a source tree to serve from (repeatable)")
    parser.add_argument("--token", action="store_true", help="the service requires a bearer token")
    parser.add_argument("--clients", action="store_true", help="measure the clients instead of the service")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    roots = [root.resolve() for root in args.service_root or [ROOT]]
    if args.token:
        AUTH["Authorization"] = f"Bearer {TOKEN}"
    if args.clients:
        results = client_side(roots[0], args.requests, args.repeats)
    else:
        results = server_side(roots, args.requests, args.repeats)
    if args.json:
        args.json.write_text(json.dumps({"args": sys.argv[1:], "load_average": os.getloadavg(),
                                         "results": results}, indent=1))


if __name__ == "__main__":
    main()
