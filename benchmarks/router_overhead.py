"""What `lcr serve-router` adds to a streamed request's time to first token.

Stand-in workers (`lcr.route.stub_worker`, in a child process) answer every request after a
fixed delay, so the time a proxy adds is all that differs between a client talking to the
workers directly and through the router. Closed-loop clients send streamed `/generate`
requests (a text prompt of `--prompt-chars`), one direct and one routed run per repeat,
interleaved; the report gives TTFT p50/p99 of each and the overhead (routed - direct).

    PYTHONPATH=. python benchmarks/router_overhead.py --clients 4 --repeats 5

The results file (``--out``) holds one entry per setting (clients, workers, first-token
delay, prompt length); a re-run of a setting replaces its entry and keeps the others.

`--baseline-tree DIR` also runs the router of another checkout (e.g. a `git worktree` of an
older commit) in the same interleaved repeats, for a before/after on the same machine.
`--sglang-router DIR` runs sglang-router (a release unpacked with `pip install --no-deps
--target DIR sglang-router==0.3.2`) with `--sglang-policy` over the same workers, in the
same repeats: what SGLang's own (Rust) router adds, beside lcr's.
"""
import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from multiprocessing import Process
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lcr.route.stub_worker import StubWorker  # noqa: E402
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_file import update_entry  # noqa: E402
from routing_live import free_port  # noqa: E402


def serve_stubs(ports: list[int], first_token_s: float, chunks: int, gap_s: float) -> None:
    async def main():
        for port in ports:
            await StubWorker(first_token_s, chunks, gap_s).start(port=port)
        await asyncio.Event().wait()
    asyncio.run(main())


def wait_up(url: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up in {timeout:.0f} s")


def start_router(tree: Path, urls: list[str], router: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lcr", "serve-router", "--worker-urls", ",".join(urls),
         "--router", router, "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return proc, url


def start_sglang_router(package_dir: Path, urls: list[str], policy: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *urls, "--policy", policy,
         "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())],
        env={**os.environ, "PYTHONPATH": str(package_dir)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return proc, url


async def closed_loop(targets: list[str], clients: int, requests: int, prompt_chars: int) -> list[float]:
    """TTFTs of ``clients`` closed-loop clients, ``requests`` each; client c sends to
    targets[c % len(targets)] (the workers round robin when direct, the router otherwise)."""
    ttfts: list[float] = []

    async def client(session, c):
        for i in range(requests):
            body = {"text": f"client {c} " + "w" * prompt_chars + f" {i}",
                    "sampling_params": {"max_new_tokens": 4}, "stream": True}
            started = time.perf_counter()
            async with session.post(targets[(c + i) % len(targets)] + "/generate", json=body) as reply:
                await reply.content.readany()
                ttfts.append(time.perf_counter() - started)
                await reply.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session, c) for c in range(min(clients, 4))))   # warm up
        ttfts.clear()
        await asyncio.gather(*(client(session, c) for c in range(clients)))
    return ttfts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=100, help="per client per run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--router", default="lbgr")
    ap.add_argument("--prompt-chars", type=int, default=2400)
    ap.add_argument("--first-token-ms", type=float, default=20.0)
    ap.add_argument("--baseline-tree", type=Path, help="another checkout whose router runs beside this one")
    ap.add_argument("--sglang-router", type=Path, metavar="DIR",
                    help="an unpacked sglang-router release whose router runs beside lcr's")
    ap.add_argument("--sglang-policy", default="cache_aware")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/router_overhead.json")
    args = ap.parse_args(argv)
    for flag in ("clients", "requests", "repeats", "workers"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be at least 1")
    if args.prompt_chars < 0 or args.first_token_ms < 0:
        ap.error("--prompt-chars and --first-token-ms must be >= 0")
    if args.baseline_tree and not (args.baseline_tree / "lcr" / "route" / "serve.py").is_file():
        ap.error(f"--baseline-tree {args.baseline_tree}: not an lcr checkout with lcr/route/serve.py")
    if args.sglang_router and not (args.sglang_router / "sglang_router" / "launch_router.py").is_file():
        ap.error(f"--sglang-router {args.sglang_router}: no sglang_router/launch_router.py there")

    ports = [free_port() for _ in range(args.workers)]
    stubs = Process(target=serve_stubs, args=(ports, args.first_token_ms / 1000, 4, 0.005), daemon=True)
    stubs.start()
    direct = [f"http://127.0.0.1:{p}" for p in ports]
    for url in direct:
        wait_up(url)
    trees = {"this tree": ROOT}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree.resolve()
    routers = {name: start_router(tree, direct, args.router) for name, tree in trees.items()}
    if args.sglang_router:
        routers[f"sglang-router {args.sglang_policy}"] = start_sglang_router(
            args.sglang_router.resolve(), direct, args.sglang_policy)
    runs: dict[str, list[dict]] = {"direct": [], **{name: [] for name in routers}}
    try:
        for repeat in range(args.repeats):
            order = [("direct", direct)] + [(name, [url]) for name, (_, url) in routers.items()]
            if repeat % 2:
                order.reverse()
            for name, targets in order:
                ttfts = asyncio.run(closed_loop(targets, args.clients, args.requests, args.prompt_chars))
                # as benchmarks/routing_live.py reports them
                runs[name].append({"p50_ms": 1e3 * float(np.percentile(ttfts, 50)),
                                   "p99_ms": 1e3 * float(np.percentile(ttfts, 99))})
    finally:
        for proc, _ in routers.values():
            proc.terminate()
        stubs.terminate()

    def spread(values):
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"{args.clients} clients, {args.workers} stand-in workers ({args.first_token_ms:.0f} ms to the "
          f"first token), {args.prompt_chars}-character prompts, router {args.router}; "
          f"median over {args.repeats} repeats (range)")
    print("| target | TTFT p50 (ms) | TTFT p99 (ms) | added p50 (ms) | added p99 (ms) |")
    print("|---|---|---|---|---|")
    summary = {}
    for name, rows in runs.items():
        p50 = [r["p50_ms"] for r in rows]
        p99 = [r["p99_ms"] for r in rows]
        add50 = [r["p50_ms"] - d["p50_ms"] for r, d in zip(rows, runs["direct"])]
        add99 = [r["p99_ms"] - d["p99_ms"] for r, d in zip(rows, runs["direct"])]
        added = ("–", "–") if name == "direct" else (spread(add50), spread(add99))
        print(f"| {name} | {spread(p50)} | {spread(p99)} | {added[0]} | {added[1]} |")
        summary[name] = {"p50_ms": p50, "p99_ms": p99, "added_p50_ms": add50, "added_p99_ms": add99}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    update_entry(args.out, setting(args), {"args": {k: str(v) for k, v in vars(args).items()}, "runs": summary})
    return 0


def setting(args) -> str:
    """The key of a run's entry in the results file (what shapes the measurement, not the
    routers compared or the number of repeats)."""
    return (f"{args.clients}c-{args.workers}w-first{args.first_token_ms:g}ms-{args.prompt_chars}chars-"
            f"{args.router}")


if __name__ == "__main__":
    sys.exit(main())
