"""`lcr sim-route`: a simulated serving cluster under each router x KV policy x size."""
from __future__ import annotations

import json
import math
import sys

import numpy as np

from lcr.atomic import write_output
from lcr.errors import LcrInputError
from lcr.guards import check_output_path
from lcr.route.routers import ROUTERS, make_router
from lcr.route.service import ServiceModel
from lcr.route.sim import KV_POLICIES
from lcr.route.workload import (azure_arrivals, from_trace, poisson_arrivals, shared_prefix,
                                trace_arrivals, with_arrivals)
from lcr.sim.args import check_limit, check_seed
from lcr.sim.cli import split_policies
from lcr.sim.sweep import PolicySpec


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sim-route", help="simulate request routing across serving workers with prefix caches",
        description="Route a workload across N simulated workers, each with its own radix KV "
                    "cache, and report cluster token hit rate, TTFT and latency percentiles, "
                    "throughput and per-worker load for every router x cache policy x worker count.")
    p.add_argument("workload",
                   help="gsp[:groups=128,prompts=32,prompt_tokens=1024,prefix_ratio=0.5,"
                        "output_tokens=128,order=shuffled,zipf_alpha=0], a Mooncake JSONL file, or a prefix-block "
                        "generator spec (online_qa:..., aibrix:..., sharegpt:path=CHATS.jsonl[,half=eval]: the "
                        "ShareGPT multi-turn replay)")
    p.add_argument("--routers", default="random,round_robin,cache_aware,lbgr",
                   help=f"comma-separated, from {', '.join(ROUTERS)}; parameters after ':' "
                        "separated by ';', e.g. cache_aware:defaults=0.1.9 (sglang-router 0.1.9's "
                        "thresholds); lbgr_paper is the RLT/LBGR paper's own rule")
    p.add_argument("--policies", default="lru,rlt",
                   help=f"KV cache policies, from {', '.join(KV_POLICIES)}, parameters after ':' separated "
                        "by ';' (lpc:model=PATH from lcr lpc-train, or model=oracle; the LPC policies "
                        "need a chat trace: sharegpt:...)")
    p.add_argument("--workers", default="4", help="worker counts, e.g. 2,4,8,10")
    p.add_argument("--cache-tokens", default="16384", help="KV cache tokens per worker (comma-separated)")
    p.add_argument("--arrivals", default="poisson:rate=20",
                   help="poisson:rate=R, azure:PATH[,rate=R] (the Azure LLM inference trace's "
                        "timestamps, rescaled to mean rate R if given), closed:clients=C (C "
                        "clients, each sending its next request when its last one completes), or "
                        "trace[:rate=R] (a chat trace's own request times, rescaled to mean rate R if given)")
    p.add_argument("--service-jitter", type=float, default=0.0,
                   help="log standard deviation of each request's real service time around the "
                        "service model's (lognormal, mean 1; the routers still estimate with the model)")
    p.add_argument("--block-tokens", type=int, default=64, help="tokens per prefix block")
    p.add_argument("--limit", type=int, help="route only the first N requests")
    add_service_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write results as JSON here")
    p.set_defaults(func=run)

    s = subparsers.add_parser(
        "serve-router", help="route requests across running SGLang workers (lcr's routers)",
        description="An HTTP router in front of SGLang workers: /generate, /v1/completions and "
                    "/v1/chat/completions are forwarded (streaming too) to the worker the chosen "
                    "router picks; failed workers leave rotation and their requests are retried.")
    s.add_argument("--worker-urls", required=True, help="comma-separated worker base URLs")
    # The same LBGR as sim-route's: one router object, simulated or live.
    s.add_argument("--router", default="lbgr",
                   help=f"one of {', '.join(ROUTERS)}, with parameters after ':' separated by ';', "
                        "e.g. lbgr:record=1 (keep LBGR's recent decisions for /lcr/metrics) (default: lbgr)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=30000)
    s.add_argument("--block-tokens", type=int, default=64, help="tokens per prefix block the router tracks")
    add_service_flags(s)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=serve)


def add_service_flags(parser) -> None:
    """The service model: simulated workers' costs, and what LBGR assumes of real ones."""
    parser.add_argument("--miss-s-per-token", type=float, default=ServiceModel.miss_s_per_token,
                        help="prefill seconds per uncached prompt token")
    parser.add_argument("--hit-s-per-token", type=float, default=ServiceModel.hit_s_per_token,
                        help="seconds per cached prompt token")
    parser.add_argument("--decode-s-per-token", type=float, default=ServiceModel.decode_s_per_token)
    parser.add_argument("--slots", type=int, default=ServiceModel.slots,
                        help="requests a worker runs at once")
    parser.add_argument("--prefill-slots", type=int, default=ServiceModel.prefill_slots,
                        help="requests a worker prefills at once (0: every slot on its own; 1: "
                             "prefill is compute-bound and queues, as on a real GPU)")


def service_model(args) -> ServiceModel:
    return ServiceModel(args.miss_s_per_token, args.hit_s_per_token, args.decode_s_per_token, args.slots,
                        args.prefill_slots)


def _ints(text: str, flag: str, low: int = 1, high: int = 1 << 40) -> list[int]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            value = int(item)
        except ValueError:
            raise LcrInputError(f"{flag}: {item!r} is not an integer") from None
        if not low <= value <= high:
            raise LcrInputError(f"{flag}: {value} is outside [{low}, {high}]")
        out.append(value)
    if not out:
        raise LcrInputError(f"{flag}: give at least one value")
    return out


def _spec_params(text: str) -> dict[str, str]:
    params = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise LcrInputError(f"{item!r}: expected name=value")
        params[key.strip()] = value.strip()
    return params


def load_requests(spec: str, block_tokens: int, seed: int, limit: int | None):
    """(BlockRequest, output tokens) pairs of the workload argument, and the trace's meta
    (a chat trace's conversations, for the LPC policies; empty for gsp)."""
    meta: dict = {}
    name, _, rest = spec.partition(":")
    if name == "gsp":
        params = _spec_params(rest)
        kinds = dict(groups=int, prompts=int, prompt_tokens=int, prefix_ratio=float,
                     output_tokens=int, order=str, zipf_alpha=float, seed=int)
        unknown = set(params) - set(kinds)
        if unknown:
            raise LcrInputError(f"gsp: unknown parameter(s) {', '.join(sorted(unknown))}; "
                                f"valid: {', '.join(kinds)}")
        try:
            kwargs = {k: kinds[k](v) for k, v in params.items()}
        except ValueError as err:
            raise LcrInputError(f"gsp: {err}") from None
        kwargs.setdefault("seed", seed)
        requests = shared_prefix(block_tokens=block_tokens, **kwargs)
    else:
        from lcr.traces import load_trace
        trace = load_trace(spec, limit=limit)
        requests, meta = from_trace(trace, block_tokens), trace.meta
    if limit is not None:
        requests = requests[:limit]
    if not requests:
        raise LcrInputError(f"{spec}: no requests")
    return requests, meta


def arrival_times(spec: str, count: int, seed: int, meta: dict | None = None) -> tuple[np.ndarray, int | None]:
    """The requests' arrival times and, for a closed loop, its number of clients. ``trace``:
    the workload's own request times (a chat trace's replay, ``meta["times"]``, seconds),
    ``trace:rate=R`` the same pattern scaled to a mean rate of R requests per second."""
    kind, _, rest = spec.partition(":")
    if kind == "trace":
        params = _spec_params(rest)
        if set(params) - {"rate"}:
            raise LcrInputError(f"--arrivals {spec!r}: expected trace or trace:rate=R")
        rate = _positive(params["rate"], "--arrivals rate") if "rate" in params else None
        return trace_arrivals((meta or {}).get("times"), count, rate), None
    if kind == "closed":
        params = _spec_params(rest)
        if set(params) != {"clients"}:
            raise LcrInputError(f"--arrivals {spec!r}: expected closed:clients=C")
        return np.zeros(count), _ints(params["clients"], "--arrivals clients", 1, 1 << 20)[0]
    if kind == "poisson":
        params = _spec_params(rest)
        if set(params) != {"rate"}:
            raise LcrInputError(f"--arrivals {spec!r}: expected poisson:rate=R")
        return poisson_arrivals(count, _positive(params["rate"], "--arrivals rate"), seed), None
    if kind == "azure":
        path, _, tail = rest.partition(",")
        params = _spec_params(tail)
        rate = _positive(params["rate"], "--arrivals rate") if "rate" in params else None
        return azure_arrivals(path, count, rate), None
    raise LcrInputError(f"--arrivals {spec!r}: expected poisson:rate=R, azure:PATH[,rate=R], "
                        "closed:clients=C or trace")


def _positive(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise LcrInputError(f"{flag}: {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise LcrInputError(f"{flag}: must be a positive number, got {text!r}")
    return value


def run(args) -> int:
    from lcr.route.sim import check_jitter, simulate

    routers = [PolicySpec.parse(item, registry=ROUTERS) for item in split_policies(args.routers)]
    if not routers:
        raise LcrInputError("--routers: give at least one router")
    policies = [PolicySpec.parse(item, registry=KV_POLICIES).label for item in split_policies(args.policies)]
    if not policies:
        raise LcrInputError("--policies: give at least one policy")
    worker_counts = _ints(args.workers, "--workers", 1, 1024)
    sizes = _ints(args.cache_tokens, "--cache-tokens", 1, 1 << 40)
    if args.block_tokens < 1:
        raise LcrInputError(f"--block-tokens must be at least 1, got {args.block_tokens}")
    check_limit(args.limit)
    check_seed(args.seed)
    check_output_path(args.json, "--json")  # before the run, not after it
    service = service_model(args)
    check_jitter(args.service_jitter)
    pairs, meta = load_requests(args.workload, args.block_tokens, args.seed, args.limit)
    arrivals, clients = arrival_times(args.arrivals, len(pairs), args.seed, meta)
    requests = with_arrivals(pairs, arrivals)

    results = []
    width = max(6, *(len(p) for p in policies))
    header = (f"{'router':<28} {'policy':<{width}} {'workers':>7} {'cache':>8} {'hit rate':>8} "
              f"{'TTFT p50':>9} {'p95':>8} {'lat p50':>8} {'p95':>8} {'req/s':>7}")
    print(f"# {args.workload}: {len(requests)} requests, arrivals {args.arrivals}")
    print(header)
    print("-" * len(header))
    for workers in worker_counts:
        for size in sizes:
            for policy in policies:
                for spec in routers:
                    try:
                        router = make_router(spec.name, workers, args.seed, service=service, **spec.kwargs)
                    except TypeError as err:
                        raise LcrInputError(f"router {spec.label}: {err}") from None
                    r = simulate(requests, router, policy=policy, cache_tokens=size,
                                 service=service, seed=args.seed, clients=clients,
                                 jitter=args.service_jitter, meta=meta)
                    results.append({"router_spec": spec.label, **r.as_dict()})
                    print(f"{spec.label:<28} {policy:<{width}} {workers:>7} {size:>8} {r.hit_rate:>8.4f} "
                          f"{r.ttft_p50:>9.3f} {r.ttft_p95:>8.3f} {r.latency_p50:>8.3f} "
                          f"{r.latency_p95:>8.3f} {r.throughput:>7.2f}", flush=True)
    if args.json:
        write_output(args.json, json.dumps({"workload": args.workload, "arrivals": args.arrivals,
                                            "service": service.__dict__, "results": results}, indent=1), "JSON")
    return 0


def serve(args) -> int:
    urls = [u.strip() for u in args.worker_urls.split(",") if u.strip()]
    if not urls:
        raise LcrInputError("--worker-urls: give at least one worker URL")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise LcrInputError(f"--worker-urls: {url!r} is not an http(s) URL")
    if not 1 <= args.port <= 65535:
        raise LcrInputError(f"--port must be in 1..65535, got {args.port}")
    if args.block_tokens < 1:
        raise LcrInputError(f"--block-tokens must be at least 1, got {args.block_tokens}")
    specs = [PolicySpec.parse(item, registry=ROUTERS) for item in split_policies(args.router)]
    if len(specs) != 1:
        raise LcrInputError("--router: give exactly one router")
    service = service_model(args)
    try:
        router = make_router(specs[0].name, len(urls), args.seed, service=service, **specs[0].kwargs)
    except TypeError as err:
        raise LcrInputError(f"router {specs[0].label}: {err}") from None
    try:
        import aiohttp  # noqa: F401
        from lcr.route.serve import RoutingProxy, listen, run
    except ImportError as err:
        raise LcrInputError(f"serve-router needs lcr[router] (aiohttp): {err}") from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"lcr serve-router: warning: listening on {args.host} without TLS or authentication",
              file=sys.stderr)
    sock = listen(args.host, args.port)
    print(f"lcr serve-router: {specs[0].label} over {len(urls)} workers on {args.host}:{args.port}",
          file=sys.stderr, flush=True)
    run(RoutingProxy(urls, router, block_tokens=args.block_tokens), sock)
    return 0
