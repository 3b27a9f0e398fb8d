"""lcr serve-router against the real sglang-router, on real SGLang CPU workers.

    python benchmarks/routing_live.py [--workers 2] [--repeats 3] [--model tiny|small]
        [--calibrate] [--no-pin-workers] [--sglang-router-019 DIR]
        [--out benchmarks/results/routing_live.json]

The results file holds one entry per setting (``setting``: workers, clients, model,
workload, pool, output length, connections); a re-run of a setting replaces its entry and
keeps the others.

Starts W SGLang workers (a random Llama of the CPU end-to-end test, tests/sglang_e2e_model.py's
SIZES, small KV pools, stock LRU; worker i pinned to core i), then for every repeat and every router, interleaved:
flushes the workers' caches, starts the router, replays a generated shared-prefix workload
as text prompts with a fixed number of clients in flight, and stops the router. Routers:
lcr's lbgr, cache_aware and round_robin (`lcr serve-router`), sglang-router's cache_aware
and round_robin (`python -m sglang_router.launch_router`, the installed 0.3.2), and, named
`sglang019:cache_aware`, sglang-router 0.1.9 (its defaults are the paper's baseline's) from a
directory given by --sglang-router-019 (`pip install --no-deps --target DIR
sglang-router==0.1.9`; a cp311 wheel). Reports the cluster's cached-token ratio (from
SGLang's own meta_info), TTFT p50/p99 (first streamed chunk), latency p50, req/s and, for
lcr, routing time per request and, for lbgr, how many requests left the worker holding
their prefix and which score term moved them. On a shared CPU machine the times are noisy:
read the spread across repeats before the means.

Each request opens its own connection to the router unless `--keep-alive`, where every
client keeps one connection open for all its requests, as SDK and benchmark clients
(OpenAI's, SGLang's bench_serving) do.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.client import HTTPConnection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from ports import free_port  # noqa: E402  (tests/)
from results_file import update_entry  # noqa: E402  (benchmarks/, this script's folder)

ROUTERS = ("lcr:lbgr", "lcr:cache_aware", "lcr:round_robin", "sglang:cache_aware", "sglang:round_robin")


def setting(args) -> str:
    """The key of a run's entry in the results file: everything that shapes the workload
    and the machine, not the routers compared or the number of repeats."""
    return (f"{args.workers}w-{args.clients}c-{args.model}-{args.groups}x{args.prompts}-"
            f"{args.prefix_words}+{args.suffix_words}w-pool{args.pool_tokens}-out{args.max_new_tokens}"
            + ("-keepalive" if args.keep_alive else "") + ("" if args.pin_workers else "-unpinned"))


def env(first: str | None = None) -> dict:
    paths = [first, str(REPO / "tests" / "sglang_stubs"), str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited:\n{log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=3)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{url} not ready:\n{log.read_text()[-2000:]}")


def start(cmd: list[str], log: Path, path_first: str | None = None, core: int | None = None) -> subprocess.Popen:
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(cmd, env=env(path_first), stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=pin)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def workload(groups: int, prompts: int, prefix_words: int, suffix_words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        prefix = [f"w{rng.randrange(3, 1000)}" for _ in range(prefix_words)]
        for _ in range(prompts):
            out.append(" ".join(prefix + [f"w{rng.randrange(3, 1000)}" for _ in range(suffix_words)]))
    rng.shuffle(out)
    return out


def ready_for_requests(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """sglang-router answers /health before it has registered its workers: wait until a
    one-token request goes through (then a moment more for the other workers)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            one_request(url, "w1", 1)
            time.sleep(2)
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(1)
    raise RuntimeError(f"{url} never served a request:\n{log.read_text()[-2000:]}")


def one_request(url: str, text: str, max_new_tokens: int, ignore_eos: bool = False,
                connection: HTTPConnection | None = None) -> dict:
    """One streamed /generate, on a connection of its own or on ``connection`` (kept open)."""
    sampling = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": ignore_eos}
    body = json.dumps({"text": text, "stream": True, "sampling_params": sampling}).encode()
    headers = {"Content-Type": "application/json"}
    started = time.perf_counter()
    first, meta = None, {}
    if connection is not None:
        connection.request("POST", "/generate", body, headers)
        opened = connection.getresponse()
    else:
        opened = urllib.request.urlopen(urllib.request.Request(url + "/generate", body, headers), timeout=600)
    with opened as reply:
        worker = reply.headers.get("X-Lcr-Worker")   # lcr's routers name the worker that answered
        for line in reply:
            if not line.startswith(b"data:"):
                continue
            if first is None:
                first = time.perf_counter() - started
            payload = line[5:].strip()
            if payload and payload != b"[DONE]":
                meta = json.loads(payload).get("meta_info", meta)
    return {"ttft": first, "latency": time.perf_counter() - started,
            "prompt": meta.get("prompt_tokens", 0), "cached": meta.get("cached_tokens", 0),
            "output": meta.get("completion_tokens", 0), "worker": None if worker is None else int(worker)}


def flush(urls: list[str]) -> None:
    for url in urls:
        urllib.request.urlopen(urllib.request.Request(url + "/flush_cache", b"", method="POST"), timeout=60)


def decode_step(url: str, text: str, batch: int, tokens: int) -> float:
    """Seconds per decode step with ``batch`` copies of a cached prompt decoding together:
    the latency difference between ``tokens`` output tokens and one, per extra token (the
    fixed costs and the prefill cancel)."""
    def mean_latency(n_tokens: int) -> tuple[float, float]:
        with ThreadPoolExecutor(batch) as pool:
            out = list(pool.map(lambda _: one_request(url, text, n_tokens, ignore_eos=True), range(batch)))
        return float(np.mean([r["latency"] for r in out])), float(np.mean([r["output"] for r in out]))
    short, short_out = mean_latency(1)
    long, long_out = mean_latency(tokens)
    return max(0.0, long - short) / max(1.0, long_out - short_out)


def calibrate(urls: list[str], prompts: list[str], samples: int = 3, decode_tokens: int = 17,
              batch: int = 4) -> dict[str, float]:
    """These workers' service model, as ``lcr serve-router`` flags. Each sample prompt runs
    once on a flushed worker, then again cached: (cold TTFT - warm TTFT) / cached tokens is
    what a cached token saves (a cached token is then taken as free). Then, cached, one
    decode step alone and with ``batch`` requests decoding together (``decode_step``):
    the step alone is the decode cost per output token, and the step's growth per extra
    request is what one request's decode delays the others by, so ``slots`` (the requests
    that share a step's cost) is the step over that growth. Medians over the samples; a
    request's fixed costs (HTTP, tokenising, scheduling) cancel in every difference. LBGR is
    told these instead of the GPU defaults, whose scale is far from a CPU worker's: its
    queueing term charges a request's decode share (decode / slots) to the requests queued
    behind it (docs/history.md, "Why LBGR lost with few clients")."""
    saved, alone, growth = [], [], []
    for text in prompts[:samples]:
        flush(urls)
        cold = one_request(urls[0], text, 1)
        warm = one_request(urls[0], text, 1)
        saved.append(max(0.0, cold["ttft"] - warm["ttft"]) / max(1, warm["cached"]))
        alone.append(decode_step(urls[0], text, 1, decode_tokens))
        growth.append((decode_step(urls[0], text, batch, decode_tokens) - alone[-1]) / (batch - 1))
    flush(urls)
    step, extra = float(np.median(alone)), float(np.median(growth))
    slots = int(min(64, max(1, round(step / extra)))) if extra > 0 else 64
    return {"miss-s-per-token": float(np.median(saved)), "hit-s-per-token": 0.0,
            "decode-s-per-token": step, "slots": slots}


def run_router(name: str, urls: list[str], prompts: list[str], clients: int, max_new: int, logs: Path,
               service_flags: list[str], sglang_019: str | None = None, prefix_words: int = 300,
               keep_alive: bool = False) -> dict:
    kind, policy = name.split(":", 1)   # lcr routers may carry parameters: lcr:lbgr:record=1
    port = free_port()
    path_first = None
    if kind == "lcr":
        # The CPU workers' prefill is compute-bound: one prompt at a time (--prefill-slots 1).
        # LBGR records its decisions, so the run reports what moved requests off the worker
        # holding their prefix.
        router = policy + (";record=1" if ":" in policy else ":record=1") if policy.startswith("lbgr") else policy
        cmd = [sys.executable, "-m", "lcr", "serve-router", "--worker-urls", ",".join(urls),
               "--router", router, "--port", str(port), "--prefill-slots", "1", *service_flags]
    elif kind in ("sglang", "sglang019"):
        if kind == "sglang019":
            if not sglang_019:
                raise SystemExit("sglang019:... needs --sglang-router-019 DIR")
            path_first = sglang_019
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *urls,
               "--policy", policy, "--port", str(port), "--host", "127.0.0.1",
               "--prometheus-port", str(free_port())]   # its default 29000 may be taken
    else:
        raise SystemExit(f"unknown router kind {kind!r} in {name!r}: lcr, sglang or sglang019")
    log = logs / f"router-{kind}-{policy}.log"
    proc = start(cmd, log, path_first)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc, 120, log)
        ready_for_requests(url, proc, log)
        local, connections = threading.local(), []

        def send(text: str) -> dict:
            if not keep_alive:
                return one_request(url, text, max_new)
            if not hasattr(local, "connection"):
                address = urllib.parse.urlsplit(url)
                local.connection = HTTPConnection(address.hostname, address.port, timeout=600)
                connections.append(local.connection)
            return one_request(url, text, max_new, connection=local.connection)

        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(send, prompts))
        elapsed = time.perf_counter() - started
        for connection in connections:
            connection.close()
        overhead = moves = None
        if kind == "lcr":
            with urllib.request.urlopen(url + "/lcr/metrics", timeout=10) as reply:
                metrics = json.loads(reply.read())
            overhead, moves = metrics["route_us_per_request"], metrics.get("lbgr_moves")
    finally:
        stop(proc)
    ttft = np.array([r["ttft"] for r in results])
    # Per group (its shared prefix), the workers its requests went to in sending order, as
    # lcr's proxy reports them: where each group was placed, and which groups got split.
    groups: dict[str, list[int]] = {}
    for text, r in zip(prompts, results):
        if r["worker"] is not None:
            groups.setdefault(" ".join(text.split()[:prefix_words]), []).append(r["worker"])
    placement = ["".join(map(str, ws)) for ws in groups.values()]
    return {"router": name, "cached_ratio": sum(r["cached"] for r in results) / max(1, sum(r["prompt"] for r in results)),
            "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p99": float(np.percentile(ttft, 99)),
            "latency_p50": float(np.median([r["latency"] for r in results])),
            "req_per_s": len(results) / elapsed, "route_us": overhead, "lbgr_moves": moves,
            "group_workers": placement or None,
            "groups_split": sum(len(set(ws)) > 1 for ws in placement) if placement else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--pool-tokens", type=int, default=2048, help="KV pool per worker")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--model", default="tiny", help="tests/sglang_e2e_model.py SIZES: tiny or small")
    parser.add_argument("--prefix-words", type=int, default=300, help="words of each group's shared prefix")
    parser.add_argument("--suffix-words", type=int, default=100, help="words of each prompt's own part")
    parser.add_argument("--sglang-router-019", help="a --target directory holding sglang-router 0.1.9")
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--calibrate", action="store_true",
                        help="measure the workers' prefill and decode costs per token first and give them to lcr's routers")
    parser.add_argument("--pin-workers", action=argparse.BooleanOptionalAction, default=True,
                        help="pin worker i to CPU core i (mod the cores), so that workers have "
                             "independent capacity as on separate GPUs (default; unpinned, every "
                             "worker's torch threads compete for every core)")
    parser.add_argument("--keep-alive", action="store_true",
                        help="each client keeps one connection to the router for all its requests")
    parser.add_argument("--out", default="benchmarks/results/routing_live.json")
    args = parser.parse_args()
    from sglang_e2e_model import build_tiny_llama

    logs = Path(tempfile.mkdtemp(prefix="lcr-routing-live-"))
    model = build_tiny_llama(logs / f"{args.model}-llama", size=args.model)
    workers, urls = [], []
    for i in range(args.workers):
        port = free_port()
        urls.append(f"http://127.0.0.1:{port}")
        # Worker i on core i mod cores: independent capacities, as on separate GPUs. Unpinned,
        # each worker's torch threads use every core and the two slow each other down (the
        # small model's prefill: 5.1 ms per token unpinned, 0.67 pinned; docs/history.md).
        core = i % os.cpu_count() if args.pin_workers else None
        workers.append(start([sys.executable, "-m", "sglang_patch.launch_server", "--cache-policy", "lru",
                              "--model-path", str(model), "--device", "cpu", "--attention-backend",
                              "torch_native", "--max-total-tokens", str(args.pool_tokens), "--port",
                              str(port), "--skip-server-warmup"], logs / f"worker{i}.log", core=core))
    rows, service_flags = [], []
    try:
        for i, url in enumerate(urls):
            wait_http(url + "/health", workers[i], 900, logs / f"worker{i}.log")
        prompts = workload(args.groups, args.prompts, prefix_words=args.prefix_words,
                           suffix_words=args.suffix_words)
        names = [n for n in args.routers.split(",") if n]
        if args.calibrate:
            model = calibrate(urls, prompts)
            service_flags = [arg for name, value in model.items() for arg in (f"--{name}", f"{value:.3g}")]
            print(f"calibrated: {model['miss-s-per-token'] * 1e3:.3f} ms per uncached token (cached ones "
                  f"free), {model['decode-s-per-token'] * 1e3:.2f} ms per decode step, shared by "
                  f"{model['slots']} requests", flush=True)
        for repeat in range(args.repeats):
            for name in (names if repeat % 2 == 0 else names[::-1]):
                flush(urls)
                row = run_router(name, urls, prompts, args.clients, args.max_new_tokens, logs,
                                 service_flags, args.sglang_router_019, args.prefix_words, args.keep_alive)
                row["repeat"] = repeat
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for proc in workers:
            stop(proc)
    summary = {}
    print(f"\n{'router':<22} {'cached ratio':>14} {'TTFT p50 (s)':>14} {'TTFT p99 (s)':>14} {'req/s':>12} {'route us':>9}")
    for name in dict.fromkeys(r["router"] for r in rows):
        mine = [r for r in rows if r["router"] == name]
        def stat(key):
            values = np.array([r[key] for r in mine], dtype=float)
            return float(values.mean()), float(values.max() - values.min())
        summary[name] = {k: stat(k) for k in ("cached_ratio", "ttft_p50", "ttft_p99", "req_per_s")}
        us = [r["route_us"] for r in mine if r["route_us"] is not None]
        summary[name]["route_us"] = float(np.mean(us)) if us else None
        s = summary[name]
        print(f"{name:<22} {s['cached_ratio'][0]:>8.3f}±{s['cached_ratio'][1] / 2:.3f} "
              f"{s['ttft_p50'][0]:>8.3f}±{s['ttft_p50'][1] / 2:.3f} {s['ttft_p99'][0]:>8.3f}±{s['ttft_p99'][1] / 2:.3f} "
              f"{s['req_per_s'][0]:>6.2f}±{s['req_per_s'][1] / 2:.2f} "
              f"{'' if s['route_us'] is None else format(s['route_us'], '9.0f')}")
        s["per_repeat"] = {k: [round(r[k], 3) for r in mine] for k in ("cached_ratio", "ttft_p50")}
        print(f"{'':<22} per repeat: cached {s['per_repeat']['cached_ratio']}, TTFT p50 {s['per_repeat']['ttft_p50']}")
        split = [r["groups_split"] for r in mine if r.get("groups_split") is not None]
        if split:
            s["groups_split"] = split
            print(f"{'':<22} groups served by more than one worker: {split} of "
                  f"{[len(r['group_workers']) for r in mine]}; first placements per worker "
                  f"{[[sum(ws[0] == str(w) for ws in r['group_workers']) for w in range(args.workers)] for r in mine]}")
        moves = [r["lbgr_moves"] for r in mine if r.get("lbgr_moves")]
        if moves:
            s["lbgr_moves"] = moves
            print(f"{'':<22} moved off the prefix's worker: {[m['moved'] for m in moves]} of "
                  f"{[m['decisions'] for m in moves]}; by term {[m['moved_by'] for m in moves]}; "
                  f"unseen prefixes placed per worker {[m.get('placed') for m in moves]}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    update_entry(args.out, setting(args), {"args": vars(args), "service_flags": service_flags, "rows": rows,
                                           "summary": summary})
    print(f"wrote {args.out}, setting {setting(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
