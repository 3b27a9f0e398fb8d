"""Live SGLang serving with lcr's cache policies: cached-token ratio, req/s, TTFT, eviction cost.

    PYTHONPATH=. python benchmarks/sglang_serving.py --policies lru,laru,laru:lightgbm --repeats 3

For each repeat, and each policy in turn (interleaved, so load drifts hit all alike), it
launches ``python -m sglang_patch.launch_server`` on CPU with the tiny random Llama of
tests/sglang_e2e_model.py and replays, one request at a time (2 new tokens, streamed):

- ``chat``: multi-turn ShareGPT chats (../shared/data/chat/sharegpt_v3_sample1000.jsonl),
  interleaved turn by turn; a turn's prompt is the conversation so far;
- ``mooncake``: the first Mooncake conversation requests (../shared/data/kv/...), each
  hash block becoming ``--block-tokens`` tokens.

The tree is flushed between the two. Hit rates come from SGLang's own /metrics
(``cached_tokens`` / ``prompt_tokens``), lcr's eviction counters from ``sglang:lcr_*``.
A second part times whole eviction passes in-process on SGLang's tree (mock KV
allocator, same requests): stock ``UnifiedRadixCache`` (LRU) against lcr's backends.
Words and hash blocks become token ids by a fixed hash, so runs are reproducible.
``laru:lightgbm`` means ``--cache-policy laru --predictor lightgbm``.
"""
from __future__ import annotations

import argparse
import json
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


def policy_args(spec: str) -> tuple[str, tuple[str, ...]]:
    policy, _, predictor = spec.partition(":")
    return policy, ("--predictor", predictor) if predictor else ()


def serve(model: Path, spec: str, workloads: dict, pool: int, logdir: Path) -> dict:
    from sglang_server import Server, generate, lcr_counters

    policy, extra = policy_args(spec)
    out = {}
    log = logdir / f"{spec.replace(':', '-')}-{time.time_ns()}.log"
    with Server(model, policy, log, pool, (*extra, "--enable-metrics")) as server:
        for name, prompts in workloads.items():
            server.flush_cache()
            before = server.metrics()
            ttfts, started = [], time.perf_counter()
            for ids in prompts:
                _, ttft, _ = generate(server.url, ids)
                ttfts.append(ttft)
            wall = time.perf_counter() - started
            after = server.metrics()
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            lcr = lcr_counters(delta)
            ttfts.sort()
            out[name] = {
                "cached_ratio": delta.get("cached_tokens", 0) / max(delta.get("prompt_tokens", 0), 1),
                "req_per_s": len(prompts) / wall,
                "ttft_p50_ms": 1e3 * ttfts[len(ttfts) // 2],
                "ttft_p99_ms": 1e3 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
                "wall_s": wall, "lcr": lcr}
    return out


def pass_costs(prompts: list[list[int]], pool: int, specs: list[str], repeats: int) -> dict:
    """Mean seconds per eviction pass on SGLang's tree, stock LRU against lcr's backends."""
    from array import array

    from sglang_server import STUBS
    try:
        import torchvision  # noqa: F401
    except Exception:  # CPU-only machines: the PyPI wheels link CUDA; SGLang only imports it
        sys.path.insert(0, str(STUBS))

    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from lcr.integrations.sglang import CACHE_CLASSES, register_backends
    from lcr.integrations.sglang_sim import MockAllocator

    register_backends()

    def timed(cls):
        class Timed(cls):
            def _evict(self, *args, **kwargs):
                started = time.perf_counter()
                try:
                    return super()._evict(*args, **kwargs)
                finally:
                    self.pass_seconds.append(time.perf_counter() - started)
        return Timed

    def replay(spec):
        policy, _, predictor = spec.partition(":")
        config = {"predictor": predictor} if predictor else None
        allocator = MockAllocator(pool)
        params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                                 page_size=1, tree_components=(ComponentType.FULL,),
                                 eviction_policy_config=config)
        cache = timed(UnifiedRadixCache if policy == "lru" else CACHE_CLASSES[policy])(params)
        cache.pass_seconds = []
        for ids in prompts:
            tokens = array("q", ids)
            match = cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens)))
            lock = cache.lock(match.last_device_node)
            need = len(tokens) - match.device_prefix_len
            if need > allocator.available_size():
                cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
            if need <= allocator.available_size():
                value = torch.cat([cache.path_device_indices(match.last_device_node)[:match.device_prefix_len],
                                   allocator.alloc(need)])
                cache.insert(InsertParams(key=RadixKey(tokens), value=value,
                                          prev_prefix_len=match.device_prefix_len))
            cache.unlock(lock)
        return cache.pass_seconds

    runs = {spec: [] for spec in specs}
    for _ in range(repeats):
        for spec in specs:
            seconds = replay(spec)
            runs[spec].append(sum(seconds) / max(len(seconds), 1))
    return {spec: {"pass_us": [1e6 * s for s in v]} for spec, v in runs.items()}


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
    p.add_argument("--skip-serving", action="store_true", help="only the in-process eviction-pass timing")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
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
    results = {"args": {k: str(v) for k, v in vars(args).items()}, "serving": {}, "pass": {}}
    if not args.skip_serving:
        from sglang_e2e_model import build_tiny_llama

        with tempfile.TemporaryDirectory() as tmp:
            model = build_tiny_llama(Path(tmp) / "model")
            for repeat in range(args.repeats):
                for spec in specs:
                    run = serve(model, spec, workloads, args.pool_tokens, Path(tmp))
                    results["serving"].setdefault(spec, []).append(run)
                    print(f"# repeat {repeat} {spec}: " + json.dumps(run), flush=True)
    results["pass"] = {name: pass_costs(prompts, args.pool_tokens, specs, args.repeats)
                       for name, prompts in workloads.items()}
    report(results, specs, list(workloads))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def report(results: dict, specs: list[str], names: list[str]) -> None:
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
    print("\nWhole eviction pass on SGLang's tree, in-process (mock KV allocator), µs per pass:")
    print("| workload | " + " | ".join(specs) + " |")
    print("|---|" + "---|" * len(specs))
    for name in names:
        row = results["pass"][name]
        print(f"| {name} | " + " | ".join(spread(row[s]["pass_us"]) for s in specs) + " |")


if __name__ == "__main__":
    sys.exit(main())
