"""Live SGLang serving with lcr's cache policies: cached-token ratio, req/s, TTFT, eviction cost.

    PYTHONPATH=. nice -n 5 python benchmarks/sglang_serving.py --policies lru,laru --repeats 5

It launches one ``python -m sglang_patch.launch_server`` per policy on CPU with the tiny
random Llama of tests/sglang_e2e_model.py, all at once (``--sleep-on-idle``: a waiting
server takes no CPU), warms each up, then for each repeat runs every policy in turn,
the order reversed every other repeat (ABBA), so load drifts on a shared host hit all
alike. A run replays, from ``--concurrency`` closed-loop clients (2 new tokens, streamed):

- ``chat``: multi-turn ShareGPT chats (../shared/data/chat/sharegpt_v3_sample1000.jsonl),
  interleaved turn by turn; a turn's prompt is the conversation so far;
- ``mooncake``: the first Mooncake conversation requests (../shared/data/kv/...), each
  hash block becoming ``--block-tokens`` tokens.

The tree is flushed before each. Hit rates come from SGLang's own /metrics
(``cached_tokens`` / ``prompt_tokens``), lcr's eviction counters from ``sglang:lcr_*``.
Ratios to LRU are taken within a repeat (neighbours in time), then summarised as
median [min, max]. A second part times whole eviction passes in-process on SGLang's
tree (see ``pass_costs``). Words and hash blocks become token ids by a fixed hash.
``laru:lightgbm`` means ``--cache-policy laru --predictor lightgbm``. SGLang's spawned
scheduler finds lcr's backends through the ``sglang.srt.plugins`` entry point: install
lcr (``pip install -e .``) or put its egg-info metadata on PYTHONPATH.

``--lpc-model MODEL [--lpc-only]`` also serves LPC live (``lpc_live``): the paper's
closed-loop ShareGPT replay sent as chat messages (LPC reads the rendered prompt's turns)
to a tiny model whose tokenizer covers the replay's words and renders ChatML, paced in
compressed time (``--lpc-speedup``), beside stock LRU and LPC without a model.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
DATA = REPO.parent / "shared" / "data"
VOCAB = 1000  # the tiny model's


def word_ids(text: str, limit: int) -> list[int]:
    return [3 + zlib.crc32(w.encode()) % (VOCAB - 3) for w in text.split()[:limit]]


def chat_prompts(path: Path, chats: int, turns: int, words: int) -> list[list[int]]:
    """Turn-by-turn interleaving of ``chats`` conversations with at least ``turns`` turns."""
    convs = []
    for line in path.open():
        messages = json.loads(line)["conversations"]
        if messages and messages[0].get("from") != "human":
            messages = messages[1:]
        if len(messages) >= 2 * turns - 1:
            convs.append([word_ids(m["value"], words) for m in messages])
        if len(convs) == chats:
            break
    prompts = []
    for turn in range(turns):
        for messages in convs:
            prompts.append([1] + [t for m in messages[:2 * turn + 1] for t in m])
    return prompts


def mooncake_prompts(path: Path, requests: int, block_tokens: int) -> list[list[int]]:
    prompts = []
    for line in path.open():
        doc = json.loads(line)
        blocks = doc["hash_ids"]
        tail = max(1, (doc["input_length"] - 512 * (len(blocks) - 1)) * block_tokens // 512)
        ids = [1]
        for i, block in enumerate(blocks):
            rng = random.Random(block)
            ids += [rng.randrange(3, VOCAB) for _ in range(block_tokens if i < len(blocks) - 1 else tail)]
        prompts.append(ids)
        if len(prompts) == requests:
            break
    return prompts


# Live LPC (``--lpc-model``) ---------------------------------------------------------------
def lpc_chats(path: Path, conversations: int, words: int, max_active: int, gap_mean: float,
              seed: int = 0) -> list[tuple[float, list[dict]]]:
    """(arrival seconds, chat messages) of the paper's closed-loop replay
    (``lcr.lpc.workload.schedule``) over the first ``conversations`` held-out ShareGPT
    conversations (the half ``lcr lpc-train`` did not train on), each message cut to
    ``words`` words when ``words`` > 0."""
    from lcr.lpc.chats import load_conversations, split_conversations
    from lcr.lpc.workload import schedule

    _, held = split_conversations(load_conversations(path), seed)
    convs = held[:conversations]

    def cut(text: str) -> str:
        return " ".join(text.split()[:words]) if words > 0 else text

    turns = [[(cut(t.user), cut(t.assistant)) for t in c.turns] for c in convs]
    reply_tokens = [[len(reply.split()) for _, reply in conv] for conv in turns]
    out = []
    for t, c, turn in schedule(convs, reply_tokens, gap_mean=gap_mean, max_active=max_active, seed=seed):
        messages = [m for user, reply in turns[c][:turn] for m in ({"role": "user", "content": user},
                                                                  {"role": "assistant", "content": reply})]
        out.append((t, messages + [{"role": "user", "content": turns[c][turn][0]}]))
    return out


def chat_vocabulary(requests) -> list[str]:
    """Every word (as the tiny model's word-level tokenizer cuts them) of the replay."""
    from tokenizers import pre_tokenizers

    cut = pre_tokenizers.Whitespace()
    seen: dict[str, None] = {}
    for _, messages in requests:
        for m in messages:
            for word, _ in cut.pre_tokenize_str(m["content"]):
                seen.setdefault(word, None)
    return list(seen)


def chat_completion(url: str, messages: list[dict]) -> float:
    """One chat completion (2 tokens): seconds to the answer."""
    from sglang_server import post

    started = time.perf_counter()
    post(url + "/v1/chat/completions", {"model": "default", "messages": messages, "max_tokens": 2,
                                        "temperature": 0}, timeout=300)
    return time.perf_counter() - started


def paced(url: str, requests, speedup: float, workers: int) -> dict:
    """Send each request at its arrival time / ``speedup`` (open loop on the schedule, which
    is itself closed loop per conversation), ``workers`` in flight at most."""
    from concurrent.futures import ThreadPoolExecutor

    late, futures = [], []
    with ThreadPoolExecutor(workers) as pool:
        start = time.perf_counter()
        for t, messages in requests:
            delay = start + t / speedup - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            late.append(max(0.0, -delay))
            futures.append(pool.submit(chat_completion, url, messages))
        latencies = sorted(f.result() for f in futures)
    return {"wall_s": time.perf_counter() - start, "latency_p50_ms": 1e3 * latencies[len(latencies) // 2],
            "send_late_p50_ms": 1e3 * statistics.median(late)}


def lpc_live(args, results: dict) -> None:
    """LRU (stock SGLang), LPC with the trained model, and LPC without one (every request
    the prior: LRU's order through lcr's driver, the control) on the same paced replay,
    interleaved ABBA over ``--repeats``."""
    import contextlib

    from sglang_e2e_model import build_tiny_llama
    from sglang_server import Server, lcr_counters

    requests = lpc_chats(DATA / "chat" / "sharegpt_v3_sample1000.jsonl", args.lpc_conversations, args.lpc_words,
                         args.lpc_max_active, args.lpc_gap)
    vocab = chat_vocabulary(requests)
    scale = 0.01 * args.lpc_speedup  # the paper's 1/100 s, in compressed time
    specs = {"lru": ("lru", ()), "lpc": ("lpc", ("--lpc-model", args.lpc_model, "--lpc-scale", str(scale))),
             "lpc-prior": ("lpc", ("--lpc-scale", str(scale)))}
    names = args.lpc_policies.split(",")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        model = build_tiny_llama(Path(tmp) / "model", words=vocab)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model))
        lengths = [len(tok.apply_chat_template(m, tokenize=True, add_generation_prompt=True)["input_ids"])
                   for _, m in requests]
        pool = max(int(args.lpc_pool_share * sum(lengths)), 2 * max(lengths) + 64)
        info = {"requests": len(requests), "conversations": args.lpc_conversations, "vocabulary": len(vocab),
                "prompt_tokens": sum(lengths), "longest": max(lengths), "pool_tokens": pool, "scale": scale,
                "simulated_s": requests[-1][0]}
        print("# lpc live: " + json.dumps(info), flush=True)
        results["lpc_live"] = {"info": info, "runs": {}}
        servers = {}
        for name in names:
            policy, extra = specs[name]
            servers[name] = stack.enter_context(_Stopping(Server(
                model, policy, Path(tmp) / f"{name}.log", pool,
                (*extra, "--enable-metrics", "--sleep-on-idle", "--max-running-requests", str(args.concurrency)))))
        for name in names:
            servers[name].server.wait_ready()
            chat_completion(servers[name].server.url, requests[0][1])  # first-call costs
        for repeat in range(args.repeats):
            for name in (names if repeat % 2 == 0 else names[::-1]):
                server = servers[name].server
                server.flush_cache()
                before = server.metrics()
                run = paced(server.url, requests, args.lpc_speedup, args.concurrency)
                after = server.metrics()
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
                run["cached_ratio"] = delta.get("cached_tokens", 0) / max(delta.get("prompt_tokens", 0), 1)
                run["lcr"] = lcr_counters(delta)
                results["lpc_live"]["runs"].setdefault(name, []).append(run)
                print(f"# lpc repeat {repeat} {name}: " + json.dumps(run), flush=True)
    report_lpc(results["lpc_live"], names)


def report_lpc(live: dict, names: list[str]) -> None:
    runs = live["runs"]
    print("| policy | cached-token ratio per repeat | median | ratio to lru per repeat | median [min, max] | "
          "prediction ms per request |")
    print("|---|---|---|---|---|---|")
    for name in names:
        ratios_ = ratios([r["cached_ratio"] for r in runs[name]], [r["cached_ratio"] for r in runs.get("lru", [])])
        lcr = [r["lcr"] for r in runs[name]]
        per_request = [1e3 * x["lpc_predict_seconds"] / x["lpc_requests_text"] for x in lcr
                       if x.get("lpc_requests_text")]
        hit = [r["cached_ratio"] for r in runs[name]]
        print(f"| {name} | {', '.join(f'{x:.4f}' for x in hit)} | {statistics.median(hit):.4f} | "
              f"{', '.join(f'{x:.3f}' for x in ratios_)} | {median_range(ratios_, 3)} | "
              f"{median_range(per_request, 2) if per_request else 'n/a'} |")


def policy_args(spec: str) -> tuple[str, tuple[str, ...]]:
    policy, _, predictor = spec.partition(":")
    return policy, ("--predictor", predictor) if predictor else ()


def launch(model: Path, spec: str, pool: int, log: Path, threads: int):
    """One server for ``spec``; ``threads`` is its torch intra-op thread count (OMP_NUM_THREADS)."""
    from sglang_server import Server

    policy, extra = policy_args(spec)
    return Server(model, policy, log, pool, (*extra, "--enable-metrics", "--sleep-on-idle"),
                  env={"OMP_NUM_THREADS": str(threads)} if threads else None)


def start_servers(stack, model: Path, specs: list[str], pool: int, logdir: Path, threads: int = 0) -> dict:
    """One server per spec, all up at once (they sleep when idle, so a waiting one takes
    no CPU from the one being measured). A launch whose port was taken meanwhile by
    another process (slow start-ups on a busy host) is retried on a fresh port."""
    holders = {}
    for spec in specs:  # all launched before any is waited for: start-ups overlap
        server = launch(model, spec, pool, logdir / f"{spec.replace(':', '-')}.log", threads)
        holders[spec] = stack.enter_context(_Stopping(server))
    return {spec: _ready(holder, model, spec, pool, logdir, threads) for spec, holder in holders.items()}


class _Stopping:
    """Stops a server on exit, whatever became of it (a retried launch replaces it)."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop()


def _ready(holder: _Stopping, model: Path, spec: str, pool: int, logdir: Path, threads: int):
    for attempt in range(3):
        try:
            holder.server.wait_ready()
            return holder.server
        except AssertionError:
            if "address already in use" not in holder.server.log.read_text() or attempt == 2:
                raise
            holder.server.stop()
            holder.server = launch(model, spec, pool, logdir / f"{spec.replace(':', '-')}-retry{attempt}.log", threads)
    raise AssertionError("unreachable")


def closed_loop(url: str, prompts: list[list[int]], concurrency: int) -> tuple[float, list[float]]:
    """Send ``prompts`` in order from ``concurrency`` clients, each sending its next one as
    soon as its last is answered: (wall seconds, TTFTs). With a few requests always in
    flight, the server's own speed sets the rate, not one client's round trips."""
    import threading

    from sglang_server import generate

    ttfts, lock, cursor = [], threading.Lock(), iter(range(len(prompts)))

    def client():
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                return
            _, ttft, _ = generate(url, prompts[i])
            with lock:
                ttfts.append(ttft)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, ttfts


def serve(server, workloads: dict, concurrency: int) -> dict:
    from sglang_server import lcr_counters

    out = {}
    for name, prompts in workloads.items():
        server.flush_cache()
        before, cpu_before = server.metrics(), server.cpu_seconds()
        wall, ttfts = closed_loop(server.url, prompts, concurrency)
        after, cpu = server.metrics(), server.cpu_seconds() - cpu_before
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        ttfts.sort()
        out[name] = {
            "cached_ratio": delta.get("cached_tokens", 0) / max(delta.get("prompt_tokens", 0), 1),
            "req_per_s": len(prompts) / wall,
            # requests per CPU second of the server's processes: its rate on cores of its own,
            # which other jobs on a shared host move far less than the wall-clock rate
            "req_per_cpu_s": len(prompts) / max(cpu, 1e-9), "server_cpu_s": cpu,
            "ttft_p50_ms": 1e3 * ttfts[len(ttfts) // 2],
            "ttft_p99_ms": 1e3 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
            "wall_s": wall, "lcr": lcr_counters(delta)}
    return out


def pass_costs(prompts: list[list[int]], pool: int, specs: list[str], repeats: int) -> dict:
    """Whole eviction passes on SGLang's tree, in this process, per spec: stock
    ``UnifiedRadixCache`` (``lru``: SGLang's LRU on its Rust TreeCore), ``lcr-lru`` (lcr's
    LRU through the driver on the Python TreeCore every lcr backend needs: the floor of
    any lcr policy) and lcr's backends. The KV allocator is SGLang's own
    ``TokenToKVPoolAllocator`` over no KV tensors. Each pass is timed in this thread's
    CPU time (what the pass costs, whatever else the machine runs) and in wall time;
    so are a request's ``match_prefix`` and ``insert`` (with lcr's access hooks).
    Specs are interleaved within every repeat, so a ratio is taken between neighbours."""
    from array import array

    from sglang_server import STUBS
    try:
        import torchvision  # noqa: F401
    except Exception:  # CPU-only machines: the PyPI wheels link CUDA; SGLang only imports it
        sys.path.insert(0, str(STUBS))

    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from lcr.integrations.sglang import CACHE_CLASSES, PolicyRadixCache, register_backends
    from lcr.kv.policies import RadixLRU

    register_backends()

    def build(spec, params):
        policy, _, predictor = spec.partition(":")
        if policy == "lru":
            return UnifiedRadixCache(params)
        if policy == "lcr-lru":
            return PolicyRadixCache(params, policy=RadixLRU())
        params.eviction_policy_config = {"predictor": predictor} if predictor else None
        return CACHE_CLASSES[policy](params)

    def replay(spec):
        allocator = TokenToKVPoolAllocator(pool, torch.float16, "cpu", None, need_sort=False)
        params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                                 page_size=1, tree_components=(ComponentType.FULL,))
        cache = build(spec, params)
        cpu = wall = hooks = 0.0
        passes = 0
        for ids in prompts:
            tokens = array("q", ids)
            hook_started = time.thread_time()
            match = cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens)))
            hooks += time.thread_time() - hook_started
            lock = cache.lock(match.last_device_node)
            need = len(tokens) - match.device_prefix_len
            if need > allocator.available_size():
                wall_started, cpu_started = time.perf_counter(), time.thread_time()
                cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
                cpu += time.thread_time() - cpu_started
                wall += time.perf_counter() - wall_started
                passes += 1
            if need <= allocator.available_size():
                value = torch.cat([cache.path_device_indices(match.last_device_node)[:match.device_prefix_len],
                                   allocator.alloc(need)])
                hook_started = time.thread_time()
                cache.insert(InsertParams(key=RadixKey(tokens), value=value,
                                          prev_prefix_len=match.device_prefix_len))
                hooks += time.thread_time() - hook_started
            cache.unlock(lock)
        return 1e6 * cpu / max(passes, 1), 1e6 * wall / max(passes, 1), passes, 1e6 * hooks / len(prompts)

    runs = {spec: {"cpu_us": [], "wall_us": [], "passes": 0, "match_insert_cpu_us": []} for spec in specs}
    for spec in specs:
        replay(spec)  # warm-up: imports, first-call costs
    for repeat in range(repeats):
        order = specs if repeat % 2 == 0 else specs[::-1]  # ABBA: drift hits every spec alike
        for spec in order:
            cpu_us, wall_us, passes, hook_us = replay(spec)
            runs[spec]["match_insert_cpu_us"].append(hook_us)
            runs[spec]["cpu_us"].append(cpu_us)
            runs[spec]["wall_us"].append(wall_us)
            runs[spec]["passes"] = passes
    return runs


def median_range(values: list[float], digits: int = 2) -> str:
    """Median [min, max]: what a ratio of neighbours looks like on a noisy machine."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def ratios(values: list[float], base: list[float]) -> list[float]:
    return [v / b for v, b in zip(values, base) if b > 0]


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.4g} ± {statistics.pstdev(values):.2g}" if len(values) > 1 else f"{mean:.4g}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policies", default="lru,laru,laru:lightgbm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool-tokens", type=int, default=1024, help="SGLang's --max-total-tokens")
    p.add_argument("--chats", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--words", type=int, default=30, help="words kept per chat message")
    p.add_argument("--mooncake-requests", type=int, default=150)
    p.add_argument("--block-tokens", type=int, default=16, help="tokens per Mooncake hash block")
    p.add_argument("--concurrency", type=int, default=4, help="clients in the closed loop")
    p.add_argument("--model", choices=("tiny", "small"), default="tiny",
                   help="the random Llama's shape (tests/sglang_e2e_model.py SIZES): tiny measures the scheduler's "
                        "overhead; small makes prefill cost what it does next to the scheduler on a GPU")
    p.add_argument("--server-threads", type=int, default=1,
                   help="each server's torch intra-op threads (OMP_NUM_THREADS; 0: torch's default, one per "
                        "core). One keeps a server's forward from spinning on a core another job holds")
    p.add_argument("--skip-serving", action="store_true", help="only the in-process eviction-pass timing")
    p.add_argument("--pass-policies", default="lru,lcr-lru,laru,laru:lightgbm",
                   help="in-process pass timing; lru (stock, first: the ratios' base), lcr-lru, lcr backends")
    p.add_argument("--pass-repeats", type=int, default=7)
    p.add_argument("--json", type=Path)
    p.add_argument("--lpc-model", help="also serve LPC live on the ShareGPT chat replay with this model "
                   "(lcr lpc-train --model lightgbm --features length), beside LRU")
    p.add_argument("--lpc-only", action="store_true", help="only the live LPC part")
    p.add_argument("--lpc-policies", default="lru,lpc,lpc-prior", help="of lru, lpc, lpc-prior (LPC without a model)")
    p.add_argument("--lpc-conversations", type=int, default=100, help="held-out conversations replayed")
    p.add_argument("--lpc-words", type=int, default=0,
                   help="words kept per message (0: all; cutting them hides the lengths LPC's predictor reads)")
    p.add_argument("--lpc-max-active", type=int, default=30, help="live conversations at most")
    p.add_argument("--lpc-gap", type=float, default=100.0, help="mean think time, simulated seconds")
    p.add_argument("--lpc-speedup", type=float, default=20.0, help="simulated seconds per wall second")
    p.add_argument("--lpc-pool-share", type=float, default=0.05, help="KV pool as a share of the prompt tokens")
    args = p.parse_args(argv)
    if args.lpc_model:
        results = {"args": {k: str(v) for k, v in vars(args).items()}, "load_average_before": os.getloadavg()}
        lpc_live(args, results)
        results["load_average_after"] = os.getloadavg()
        print(f"# load average before {results['load_average_before']}, after {results['load_average_after']}")
        if args.lpc_only:
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
            return 0
    specs = args.policies.split(",")
    workloads = {}
    chat, mooncake = DATA / "chat" / "sharegpt_v3_sample1000.jsonl", DATA / "kv" / "mooncake_conversation_trace.jsonl"
    if chat.exists():
        workloads["chat"] = chat_prompts(chat, args.chats, args.turns, args.words)
    if mooncake.exists():
        workloads["mooncake"] = mooncake_prompts(mooncake, args.mooncake_requests, args.block_tokens)
    if not workloads:
        print(f"no data under {DATA}; nothing to replay", file=sys.stderr)
        return 2
    for name, prompts in workloads.items():
        distinct = len({tuple(p[:i]) for p in prompts for i in range(1, len(p) + 1)})
        print(f"# {name}: {len(prompts)} requests, {sum(map(len, prompts))} prompt tokens, "
              f"{distinct} distinct prefix tokens, pool {args.pool_tokens} tokens", flush=True)
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "serving": {}, "pass": {},
               **({"lpc_live": results["lpc_live"]} if args.lpc_model else {})}
    if not args.skip_serving:
        import contextlib

        from sglang_e2e_model import build_tiny_llama

        results["load_average"] = {"before": os.getloadavg()}
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            model = build_tiny_llama(Path(tmp) / "model", size=args.model)
            servers = start_servers(stack, model, specs, args.pool_tokens, Path(tmp), args.server_threads)
            warmup = {name: prompts[:args.concurrency] for name, prompts in workloads.items()}
            for spec in specs:
                serve(servers[spec], warmup, args.concurrency)  # first-call costs and lazy imports
                servers[spec].flush_cache()
                servers[spec].freeze_gc()  # else a full collection (~0.5 s) lands in some runs, not others
            for repeat in range(args.repeats):
                for spec in (specs if repeat % 2 == 0 else specs[::-1]):  # ABBA
                    run = serve(servers[spec], workloads, args.concurrency)
                    run["load_average"] = os.getloadavg()[0]
                    results["serving"].setdefault(spec, []).append(run)
                    print(f"# repeat {repeat} {spec}: " + json.dumps(run), flush=True)
        results["load_average"]["after"] = os.getloadavg()
        print(f"# load average before {results['load_average']['before']}, after {results['load_average']['after']}")
    pass_specs = args.pass_policies.split(",")
    results["pass"] = {name: pass_costs(prompts, args.pool_tokens, pass_specs, args.pass_repeats)
                       for name, prompts in workloads.items()}
    report(results, specs, pass_specs, list(workloads))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def report(results: dict, specs: list[str], pass_specs: list[str], names: list[str]) -> None:
    print("| workload | policy | cached-token ratio | req/s | TTFT p50 ms | TTFT p99 ms | "
          "lcr eviction s per pass (policy part) | eviction share of serving time |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        for spec in specs:
            runs = [r[name] for r in results["serving"].get(spec, [])]
            if not runs:
                continue
            lcr = [r["lcr"] for r in runs]
            per_pass = [x.get("eviction_seconds", 0) / x["eviction_passes"] for x in lcr if x.get("eviction_passes")]
            policy = [x.get("policy_seconds", 0) / x["eviction_passes"] for x in lcr if x.get("eviction_passes")]
            share = [x.get("eviction_seconds", 0) / r["wall_s"] for x, r in zip(lcr, runs)]
            cost = f"{spread([1e6 * v for v in per_pass])} µs ({spread([1e6 * v for v in policy])} µs)" \
                if per_pass else "n/a (stock)"
            print(f"| {name} | {spec} | {spread([r['cached_ratio'] for r in runs])} | "
                  f"{spread([r['req_per_s'] for r in runs])} | {spread([r['ttft_p50_ms'] for r in runs])} | "
                  f"{spread([r['ttft_p99_ms'] for r in runs])} | {cost} | "
                  f"{spread([100 * s for s in share]) + ' %' if per_pass else 'n/a'} |")
    serving = results["serving"]
    if serving and specs[0] == "lru":
        print("\nRatio to stock LRU within each repeat (neighbours in time), median [min, max] over repeats:")
        print("| workload | policy | req/s ratio | req per server CPU-s ratio | cached-token ratio ratio "
              "| per-repeat req/s ratios |")
        print("|---|---|---|---|---|---|")
        for name in names:
            base = [r[name] for r in serving["lru"]]
            for spec in specs[1:]:
                runs = [r[name] for r in serving.get(spec, [])]
                rps = ratios([r["req_per_s"] for r in runs], [b["req_per_s"] for b in base])
                per_cpu = ratios([r["req_per_cpu_s"] for r in runs], [b["req_per_cpu_s"] for b in base])
                hit = ratios([r["cached_ratio"] for r in runs], [b["cached_ratio"] for b in base])
                print(f"| {name} | {spec} | {median_range(rps)} | {median_range(per_cpu)} | {median_range(hit)} | "
                      f"{', '.join(f'{x:.2f}' for x in rps)} |")
    print("\nWhole eviction pass on SGLang's tree, in-process (SGLang's allocator, no KV tensors): "
          "CPU µs per pass, median [min, max] over repeats; ratio to stock LRU taken within each repeat")
    base = pass_specs[0] if pass_specs[0] == "lru" else None
    print("| workload | policy | passes | CPU µs per pass | wall µs per pass | CPU ratio to lru | wall ratio to lru "
          "| match+insert CPU µs per request |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        row = results["pass"][name]
        for spec in pass_specs:
            r = row[spec]
            cpu_ratio = median_range(ratios(r["cpu_us"], row[base]["cpu_us"])) if base else "n/a"
            wall_ratio = median_range(ratios(r["wall_us"], row[base]["wall_us"])) if base else "n/a"
            print(f"| {name} | {spec} | {r['passes']} | {median_range(r['cpu_us'], 0)} | "
                  f"{median_range(r['wall_us'], 0)} | {cpu_ratio} | {wall_ratio} | "
                  f"{median_range(r['match_insert_cpu_us'], 0)} |")

if __name__ == "__main__":
    sys.exit(main())
