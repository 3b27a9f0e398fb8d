"""Live time-to-first-token of SGLang radix-cache policies at the LCR paper's shape.

    PYTHONPATH=. nice -n 5 python benchmarks/sglang_ttft.py                 # every plan, ~2 h
    PYTHONPATH=. python benchmarks/sglang_ttft.py --plans grid --dry-run    # the cells, sizes
    PYTHONPATH=. python benchmarks/sglang_ttft.py --plans grid --replay     # the same through lcr sim-kv

Real SGLang 0.5.23 CPU servers (``python -m sglang_patch.launch_server``, the ``small``
model of tests/sglang_e2e_model.py, whose prefill costs tens of microseconds a token, so a
cached prefix saves time as on a GPU) serve block-prefix workloads; a block of B tokens
becomes ``ceil(B * scale)`` token ids (``SCALES``, per workload, times ``--token-scale``) drawn from its path id, so equal prefixes are
equal token ids and the cache sees the workload's sharing, at a CPU's size. The KV pool is
a share of the workload's distinct (scaled) prompt tokens.

Plans (``--plans``):

- ``grid``: Online-QA (``online_qa`` with the paper's parameters; a run serves its first
  ``--requests``, the pool a share of the whole trace's distinct tokens: ``run_prompts``),
  pools 2.5/5/8% (``--grid-pools``), closed-loop concurrency 10 and 20, every policy of
  ``--policies``;
- ``confirm``: Aibrix-like (``aibrix``), the shared Mooncake conversation trace (its own
  order and prefix chains) and ShareGPT multi-turn chats, pool 5%, concurrency 10, then
  open-loop Poisson arrivals at ``--open-loads`` (0.7) x LRU's measured closed-loop rate;
  ``lru``, ``laru`` and ``--builtin``. 0.7, the low end of the paper's 70-90%: this host's
  closed-loop rate moves by ~15% between runs, and a run on a slow stretch builds a queue
  its P99 then measures (P99 over 4 s in 5 of 18 Aibrix and chat runs at 0.8 on 302b41d,
  1 of 18 at 0.7 on c263b73);
- ``robust``: Online-QA 5%, concurrency 10, LARU with predictions negated with probability
  0.5 and 1 (the paper's robustness figure, live), and ``laru-service!kill``: the predictor
  service killed halfway through the run (every request must still be answered; the
  server falls back to LRU, and its lcr counters show it).

Policies: ``lru`` (stock SGLang, its Rust tree core), SGLang's own ``lfu``, ``slru``,
``tlru`` and ``priority`` (``--radix-eviction-policy``), ``laru`` (lcr's radix LARU with
its serving default, the residual-life predictor learned in process), ``laru-service`` (the same predictor shared through a
running ``lcr serve-predictor --model residual``) and ``lpc`` (chat only).

Sizes: 1,000 requests a run (Online-QA: ~97 token ids a prompt at its scale). On this
2-core machine every policy serves that at 31-51 req/s (the grid, 2026-11-28), so a run
takes ~40 s: the grid and robustness plans (105 runs) about 80 minutes, with the
confirming plan (60 runs) about two hours.

Every run is one cell (workload, pool, load, policy, repeat); repeats are interleaved
(every policy of a repeat before the next repeat, the order reversed every other one), so
load drifting on a shared host falls on all policies alike. Each finished run is written
at once (atomically) to its workload's file, ``--out-dir``/sglang_ttft_<workload>_<model>.json;
a re-run skips the runs already there (``--fresh`` starts over). TTFT is timed by the
client from the moment it sends a request to its first streamed chunk, with the collector
frozen in server and client from the run's start; cached tokens come from SGLang's
/metrics. A run keeps its requests' TTFTs, and the report gives P99 both as the median of
the repeats' ratios to LRU's and pooled over the repeats' requests (``pooled_p99_ratio``).

``--replay`` serves nothing: it replays each (plan, workload, pool) of the plans, the same
prompts and pool, one request at a time through SGLang's tree in simulation mode (``lcr
sim-kv --engine sglang``, SGLang's own strategy objects for its policies, lcr's serving
policies built as the server builds them), prints each policy's hit-token ratio beside its
live median at concurrency 10 with both orders of the policies, and writes
``sglang_ttft_<workload>_replay.json`` (a few minutes for every plan). ``--batch N`` replays
as a live server serves, through lcr's tree (``lcr.kv.tree.replay_served``, lcr's policies
only): prefill batches of N requests (live: ~6 at concurrency 10, ~8 at 20), the batch
before still holding its prompts while it decodes, and each request's generated token
cached under its prompt (no later prompt carries it); at 4x the grid's token scale it
puts every policy within ~0.03 of its live cached tokens (docs/kv.md). What it leaves
out: the time a request waits, and the pool a batch's decode tokens take.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
VOCAB = 1000  # the tiny/small models'
CACHED_OUTPUT = 1  # tokens a finished request caches past its prompt: generate()'s 2, the last without KV

# SGLang 0.5.23 serves these besides lru (its RADIX_EVICTION_POLICY_CHOICES; a test keeps
# them equal); `lcr sim-kv --engine sglang` replays them and fifo on SGLang's own tree.
SGLANG_BUILTINS = ("lfu", "slru", "tlru", "priority")
POLICIES = ("lru", *SGLANG_BUILTINS, "laru", "laru-service", "lpc")
# Token ids per workload token, so a run's prefill fits a CPU: Online-QA and Aibrix prompts
# average ~3,500 tokens, Mooncake's ~13,000; the chat blocks are 32 words.
SCALES = {"online_qa": 1 / 32, "aibrix": 1 / 32, "mooncake": 1 / 128, "chat": 1 / 4}
PLANS = ("grid", "confirm", "robust")
NOISES = (0.5, 1.0)


# -- workloads ------------------------------------------------------------------------------
def block_ids(path: int, count: int) -> list[int]:
    """The token ids of one block: fixed by its path id (its whole prefix)."""
    rng = random.Random(path)
    return [rng.randrange(3, VOCAB) for _ in range(count)]


def workload_prompts(workload, scale: float) -> list[list[int]]:
    """Each request of a ``BlockWorkload`` as token ids, blocks scaled by ``scale``."""
    sizes = [max(1, math.ceil(tokens * scale)) for tokens in workload.path_tokens]
    return [[1] + [t for path in request.paths for t in block_ids(path, sizes[path])]
            for request in workload.requests]


def new_tokens(prompts: list[list[int]]) -> list[int]:
    """Per prompt, the tokens no earlier prompt shares with it (beyond the longest common
    prefix with any of them): what it adds to a cache that forgot nothing."""
    root: dict = {}
    added = []
    for ids in prompts:
        node, count = root, 0
        for t in ids:
            nxt = node.get(t)
            if nxt is None:
                nxt = node[t] = {}
                count += 1
            node = nxt
        added.append(count)
    return added


def distinct_tokens(prompts: list[list[int]]) -> int:
    """Tokens of the distinct prefixes (a trie's size) over all prompts."""
    return sum(new_tokens(prompts))


def tlru_config(prompts: list[list[int]]) -> dict:
    """SGLang's T-LRU needs its two token counts (it refuses threshold <= estimate): the
    next prompt's estimate is the mean tokens a prompt adds, and the threshold (what a
    prefill may take within the TTFT target) twice that."""
    estimate = max(1, round(sum(new_tokens(prompts)) / len(prompts)))
    return {"threshold": 2 * estimate, "next_prompt_estimate": estimate}


def run_prompts(name: str, requests: int, scale: float, workload=None) -> tuple[list[list[int]], list[list[int]]]:
    """(the prompts a run serves, the prompts its pool is sized on). Online-QA runs the
    first ``requests`` of the paper's trace (2,000 conversations, 7,186 requests) with the
    pool a share of the whole trace's distinct tokens, as the paper sizes it: a run is a
    window of the deployment's traffic, and the pool keeps the paper's ratio to the
    running requests (c20: ~2,240 of a 7,176-token pool at 2.5%) and to the gap between a
    conversation's turns (~266 requests). The other workloads are sized on what they serve."""
    prompts = workload_prompts(workload or load_workload(name, requests), scale)
    return (prompts[:requests], prompts) if name == "online_qa" else (prompts, prompts)


def load_workload(name: str, requests: int):
    """A ``BlockWorkload`` by name: online_qa, aibrix, mooncake or chat."""
    from lcr.kv.requests import build_workload
    from lcr.traces import load_trace

    if name == "online_qa":  # the paper's whole trace: the pool is sized on it (``run_prompts``)
        return build_workload(load_trace("online_qa"))
    if name == "aibrix":
        return build_workload(load_trace(f"aibrix:sessions={max(1, requests // 5)}"))
    if name == "mooncake":
        path = DATA / "kv" / "mooncake_conversation_trace.jsonl"
        workload = build_workload(load_trace(str(path)))
        workload.requests = workload.requests[:requests]
        return workload
    if name == "chat":
        from lcr.kv.chat import chat_workload

        return chat_workload(DATA / "chat" / "sharegpt_v3_sample1000.jsonl", sessions=max(1, requests // 4))
    raise SystemExit(f"unknown workload {name!r}")


# -- the client -------------------------------------------------------------------------------
def timed_request(url: str, ids: list[int]) -> float:
    """Seconds from sending one streamed request to its first chunk."""
    from sglang_server import generate

    _, ttft, _ = generate(url, ids)
    return ttft


def closed_loop(url: str, prompts: list[list[int]], concurrency: int, send=timed_request) -> dict:
    """``concurrency`` clients; each sends the next prompt (in order) as soon as its last is
    answered. Each TTFT runs from that request's own send."""
    ttfts, lock, cursor = [], threading.Lock(), iter(range(len(prompts)))

    def client():
        while (i := _next(cursor, lock)) is not None:
            ttft = send(url, prompts[i])
            with lock:
                ttfts.append(ttft)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wall_s": time.perf_counter() - started, "ttfts": ttfts}


def _next(cursor, lock):
    with lock:
        return next(cursor, None)


def open_loop(url: str, prompts: list[list[int]], rate: float, seed: int, send=timed_request,
              workers: int = 256) -> dict:
    """Poisson arrivals at ``rate`` requests/s, prompts in order. A TTFT runs from the
    request's send; ``late_p99_ms`` is how far sends trailed their schedule (the client's
    own queueing, which must stay near 0 for the arrivals to be Poisson)."""
    rng = random.Random(seed)
    ttfts, late, futures = [], [], []
    with ThreadPoolExecutor(workers) as pool:
        started = time.perf_counter()
        due = started
        for ids in prompts:
            due += rng.expovariate(rate)
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            futures.append(pool.submit(_scheduled, send, url, ids, due))
        for future in futures:
            ttft, lateness = future.result()
            ttfts.append(ttft)
            late.append(lateness)
    return {"wall_s": time.perf_counter() - started, "ttfts": ttfts,
            "late_p99_ms": 1e3 * percentile(late, 0.99)}


def _scheduled(send, url, ids, due):
    lateness = max(0.0, time.perf_counter() - due)
    return send(url, ids), lateness


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


# -- cells ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    plan: str
    workload: str
    pool: float        # share of the distinct prompt tokens
    load: str          # "c10": closed loop, 10 clients; "o0.8": Poisson at 0.8 x LRU's c10 rate
    policy: str
    repeat: int

    @property
    def key(self) -> str:
        return f"{self.plan}|{self.workload}|{self.pool:g}|{self.load}|{self.policy}|{self.repeat}"


CONFIRM_WORKLOADS = ("aibrix", "mooncake", "chat")
GRID_POOLS = (0.025, 0.05, 0.08)  # the paper's cache ratios


def plan_cells(plans, policies, builtin: str, repeats: int, open_loads,
               confirm_workloads=CONFIRM_WORKLOADS, grid_pools=GRID_POOLS) -> list[Cell]:
    """Every run, in the order they are made: per (plan, workload, pool), repeats outermost,
    policies alternating direction."""
    groups = []
    if "grid" in plans:
        groups += [("grid", "online_qa", pool, [f"c{c}" for c in (10, 20)], policies)
                   for pool in grid_pools]
    if "confirm" in plans:
        for workload in confirm_workloads:
            chosen = ["lru", "laru", builtin] + (["lpc"] if workload == "chat" and "lpc" in policies else [])
            groups.append(("confirm", workload, 0.05, ["c10", *(f"o{x:g}" for x in open_loads)], chosen))
    if "robust" in plans:
        groups.append(("robust", "online_qa", 0.05, ["c10"],
                       ["lru", *(f"laru~{p:g}" for p in NOISES), "laru-service", "laru-service!kill"]))
    cells = []
    for plan, workload, pool, loads, names in groups:
        for repeat in range(repeats):
            for load in loads:
                order = names if repeat % 2 == 0 else names[::-1]
                cells += [Cell(plan, workload, pool, load, name, repeat) for name in order]
    return cells


def server_args(policy: str, predictor_url: str | None, tlru: dict | None = None) -> tuple[str, tuple[str, ...]]:
    """(lcr --cache-policy, extra launch flags) of a policy name; ``tlru``: T-LRU's config."""
    if policy == "lru":
        return "lru", ()
    if policy == "tlru":
        return "lru", ("--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", json.dumps(tlru or {}))
    if policy in SGLANG_BUILTINS:
        return "lru", ("--radix-eviction-policy", policy)
    if policy == "laru":
        return "laru", ()  # the serving default: the residual-life predictor, in process
    if policy.startswith("laru-service"):
        return "laru", ("--predictor-url", predictor_url or "")
    if policy.startswith("laru~"):
        return "laru", ("--predictor-noise", policy[len("laru~"):])
    if policy == "lpc":
        return "lpc", ()
    raise SystemExit(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")


# -- replay -----------------------------------------------------------------------------------
def replay_workload(workload, requests: int, scale: float):
    """The first ``requests`` of ``workload`` (``load_workload``'s) as a run serves them and
    ``lcr sim-kv`` replays them: blocks scaled as ``workload_prompts`` scales them, behind
    the one token every prompt starts with (path 0, shared by all), so each replayed
    request has its live prompt's tokens and sharing."""
    from lcr.kv.requests import BlockRequest, BlockWorkload

    sizes = [max(1, math.ceil(tokens * scale)) for tokens in workload.path_tokens]
    replayed = BlockWorkload([BlockRequest((0, *(p + 1 for p in r.paths)), (1, *(sizes[p] for p in r.paths)))
                              for r in workload.requests[:requests]], workload.name)
    replayed.meta = workload.meta
    return replayed


def replay_policy(policy: str, tlru: dict, capacity: int):
    """What a live run of ``policy`` serves, for SGLang's tree in simulation mode: SGLang's
    own strategy objects for its policies; lcr's serving policy built as the server builds
    it (``laru-service`` is not replayed: ``replay_cells``)."""
    from lcr.integrations.sglang_config import PolicyConfig, build_policy
    from lcr.integrations.sglang_sim import SGLangStrategy

    if policy == "lru" or policy in SGLANG_BUILTINS:
        return SGLangStrategy(policy, **(tlru if policy == "tlru" else {}))
    options = {"predictor_noise": float(policy[len("laru~"):])} if policy.startswith("laru~") else {}
    return build_policy(PolicyConfig.parse(policy.split("~")[0], json.dumps(options)), capacity)


def replay_cells(cells: list[Cell], args) -> dict:
    """Each (plan, workload, pool) of ``cells`` replayed once per policy through SGLang's
    tree (``lcr sim-kv --engine sglang``'s replay, with the keys a live server uses), one
    request at a time: {"plan|workload|pool": {policy: hit tokens / prompt tokens}}.
    ``laru-service`` is left out: its model fits in the background of another process, so
    its answers depend on timing, and no replay repeats them."""
    from sglang_server import use_stubs_if_needed

    use_stubs_if_needed()  # as the live servers run
    from lcr.integrations.sglang_sim import check_sglang, replay_sglang
    from lcr.kv.policies import RadixLRU
    from lcr.kv.tree import replay_served

    check_sglang()
    groups: dict[str, list[str]] = {}
    for cell in cells:
        names = groups.setdefault(f"{cell.plan}|{cell.workload}|{cell.pool:g}", [])
        if not cell.policy.startswith("laru-service") and cell.policy not in names:
            names.append(cell.policy)
    out = {}
    for key, policies in groups.items():
        _, name, pool = key.split("|")
        scale = SCALES[name] * args.token_scale
        source = load_workload(name, args.requests)
        prompts, sizing = run_prompts(name, args.requests, scale, source)
        workload, capacity = replay_workload(source, args.requests, scale), pool_size(float(pool), sizing)
        out[key] = {}
        for policy in policies:
            if args.batch > 1 and policy in SGLANG_BUILTINS:
                continue  # SGLang's strategies run on its own tree, one request at a time
            started = time.perf_counter()
            built = replay_policy(policy, tlru_config(prompts), capacity)
            if args.batch > 1:  # lcr's tree (the engines agree, tests/test_kv_sglang.py)
                hits = replay_served(workload, capacity, RadixLRU() if policy == "lru" else built, args.batch,
                                     CACHED_OUTPUT)
            else:
                hits = replay_sglang(workload, capacity, built, keys="serving")
            out[key][policy] = hits / workload.total_tokens
            print(f"replay {key.replace('|', ' ')} {policy}: {out[key][policy]:.4f} of the prompt tokens "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    return out


def replay_table(replayed: dict, runs: dict) -> str:
    """Per (plan, workload, pool): each policy's replayed hit-token ratio and its live
    median cached-token ratio at concurrency 10 (where run), and both orders of the policies."""
    rows = by_cell(runs)
    lines = ["| cell | replay / live c10 | replay order | live order |", "|---|---|---|---|"]
    for key, ratios in replayed.items():
        plan, workload, pool = key.split("|")
        live = {p: statistics.median(r["cached_ratio"] for r in rows[(plan, workload, pool, "c10", p)])
                for p in ratios if (plan, workload, pool, "c10", p) in rows}
        parts = [f"{p} {v:.3f}" + (f" / {live[p]:.3f}" if p in live else "") for p, v in ratios.items()]
        lines.append(f"| {plan} {workload} {float(pool):.1%} | " + ", ".join(parts) + f" | "
                     f"{_order({p: ratios[p] for p in live} or ratios)} | {_order(live) if live else '-'} |")
    return "\n".join(lines)


def _order(values: dict) -> str:
    """Policies from most to least cached, '=' joining those within 0.001."""
    ranked = sorted(values, key=lambda p: -values[p])
    out = ranked[:1]
    for prev, p in zip(ranked, ranked[1:]):
        out.append(("= " if values[prev] - values[p] < 0.001 else "> ") + p)
    return " ".join(out)


# -- running ----------------------------------------------------------------------------------
class Results:
    """One results file: every finished run, written after each one (atomic replace)."""

    def __init__(self, path: Path, meta: dict, fresh: bool):
        self.path = path
        old = json.loads(path.read_text()) if path.exists() and not fresh else {}
        if old and old.get("meta") != meta:
            refuse(f"{path}: made with other settings ({old.get('meta')}); pass --fresh or another --out-dir")
        self.doc = {"meta": meta, "runs": old.get("runs", {})}

    def __contains__(self, cell: Cell) -> bool:
        return cell.key in self.doc["runs"]

    def add(self, cell: Cell, run: dict) -> None:
        from lcr.atomic import write_atomic

        self.doc["runs"][cell.key] = run
        write_atomic(self.path, self.text().encode())

    def text(self) -> str:
        """The file: one line per run (a run keeps its 1,000 TTFTs), so a rerun of one
        cell changes only its own lines."""
        runs = ",\n".join(f"  {json.dumps(key)}: {json.dumps(run)}" for key, run in self.doc["runs"].items())
        return f'{{\n "meta": {json.dumps(self.doc["meta"])},\n "runs": {{\n{runs}\n }}\n}}\n'

    def runs(self) -> dict:
        return self.doc["runs"]


class ResultFiles:
    """One results file per workload and model (``sglang_ttft_<workload>_<model>.json`` in
    ``--out-dir``), each a ``Results``."""

    def __init__(self, folder: Path, model: str, meta: dict, fresh: bool):
        self.folder, self.model, self.meta, self.fresh = folder, model, meta, fresh
        self.files: dict[str, Results] = {}

    def of(self, workload: str) -> Results:
        if workload not in self.files:
            path = self.folder / f"sglang_ttft_{workload}_{self.model}.json"
            self.files[workload] = Results(path, self.meta, self.fresh)
        return self.files[workload]

    def __contains__(self, cell: Cell) -> bool:
        return cell in self.of(cell.workload)

    def add(self, cell: Cell, run: dict) -> None:
        self.of(cell.workload).add(cell, run)

    def runs(self) -> dict:
        return {k: v for results in self.files.values() for k, v in results.runs().items()}


def measure(server, prompts, cell: Cell, lru_rate: float | None, seed: int, fault=None) -> dict:
    """One run; ``fault`` (if any) is called once half the requests have been sent."""
    from sglang_server import lcr_counters

    server.flush_cache()
    # A full collection over the imports and the model takes ~0.5 s here, and the ~15
    # requests it stalls are P99's: freeze what exists before the run, in the server (as
    # SGLang's own warm-up does) and in this client, so no run draws one.
    server.freeze_gc()
    gc.collect()
    gc.freeze()
    before = server.metrics()
    send = timed_request if fault is None else _halfway(fault, len(prompts))
    if cell.load.startswith("c"):
        run = closed_loop(server.url, prompts, int(cell.load[1:]), send)
    else:
        if not lru_rate:
            raise SystemExit(f"{cell.key}: no LRU closed-loop rate measured before the open-loop run")
        run = open_loop(server.url, prompts, float(cell.load[1:]) * lru_rate, seed, send)
    after = server.metrics()
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    ttfts = run.pop("ttfts")
    failed = sum(1 for t in ttfts if math.isnan(t))
    ok = [t for t in ttfts if not math.isnan(t)]
    return {**run, "requests": len(ttfts), "failed": failed, "req_per_s": len(ttfts) / run["wall_s"],
            "cached_ratio": delta.get("cached_tokens", 0) / max(delta.get("prompt_tokens", 0), 1),
            "prompt_tokens": delta.get("prompt_tokens", 0),
            **{f"ttft_p{q}_ms": 1e3 * percentile(ok, q / 100) for q in (50, 95, 99)},
            "ttfts_ms": [round(1e3 * t) for t in ok],  # pooled P99 over repeats (report)
            "lcr": lcr_counters(delta)}


class PredictorService:
    """A real ``lcr serve-predictor --model MODEL`` on a fixed port: started, killed mid-run
    by the ``laru-service!kill`` cells (the fault a server must ride out with LRU),
    restarted. ``residual`` (the default): the predictor the radix LARU serves with in
    process, shared."""

    def __init__(self, logdir: Path, model: str = "residual"):
        from ports import free_port

        self.port, self.logdir, self.model, self.proc = free_port(), logdir, model, None
        self.url = f"http://127.0.0.1:{self.port}"

    def ensure_up(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        log = (self.logdir / "predictor.log").open("a")
        self.proc = subprocess.Popen([sys.executable, "-m", "lcr", "serve-predictor", "--port", str(self.port),
                                      "--model", self.model],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(self.url + "/health", self.proc)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def _halfway(fault, total: int):
    """A sender that calls ``fault`` when request ``total // 2`` is about to be sent."""
    count, lock = [0], threading.Lock()

    def send(url, ids):
        with lock:
            count[0] += 1
            now = count[0] == total // 2
        if now:
            fault()
        return timed_request(url, ids)

    return send


def _wait_http(url: str, proc, timeout: float = 120) -> None:
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited ({proc.returncode})")
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"{url}: not up after {timeout:.0f} s")


def pool_size(share: float, prompts: list[list[int]]) -> int:
    """KV pool tokens: ``share`` of the distinct prompt tokens, at least two of the longest
    prompt (so a request always fits). The pool also holds the running requests' tokens,
    as on a GPU; a request holds them only while it runs (its queue wait holds none)."""
    return max(int(share * distinct_tokens(prompts)), 2 * max(map(len, prompts)) + 64)


def run_cells(args, cells: list[Cell], results: ResultFiles) -> None:
    from sglang_e2e_model import build_tiny_llama
    from sglang_server import Server

    todo = [c for c in cells if c not in results]
    print(f"# {len(cells) - len(todo)} of {len(cells)} runs already in {args.out_dir}; {len(todo)} to go", flush=True)
    groups: dict[tuple, list[Cell]] = {}
    for cell in todo:
        groups.setdefault((cell.workload, cell.pool), []).append(cell)
    done, started = 0, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llama(Path(tmp) / "model", size=args.model)
        for (workload, pool), group in groups.items():
            prompts, sizing = run_prompts(workload, args.requests, SCALES[workload] * args.token_scale)
            pool_tokens = pool_size(pool, sizing)
            names = list(dict.fromkeys(c.policy for c in group))
            with contextlib.ExitStack() as stack:
                service = (stack.enter_context(contextlib.closing(PredictorService(Path(tmp))))
                           if any(n.startswith("laru-service") for n in names) else None)
                if service:
                    service.ensure_up()
                url = service.url if service else None
                servers = {}
                for name in names:
                    policy, extra = server_args(name, url, tlru_config(prompts))
                    servers[name] = stack.enter_context(contextlib.closing(_Closing(Server(
                        model, policy, Path(tmp) / f"{name}.log", pool_tokens,
                        (*extra, "--enable-metrics", "--sleep-on-idle")))))
                for server in servers.values():
                    server.server.wait_ready()
                    timed_request(server.server.url, prompts[0])  # first-call costs
                for cell in group:
                    lru = [r["req_per_s"] for k, r in results.runs().items()
                           if k.startswith(f"{cell.plan}|{workload}|{pool:g}|c10|lru|")]
                    if cell.policy.startswith("laru-service"):
                        service.ensure_up()
                    fault = service.kill if cell.policy.endswith("!kill") else None
                    run = measure(servers[cell.policy].server, prompts, cell,
                                  statistics.median(lru) if lru else None, seed=cell.repeat, fault=fault)
                    run["pool_tokens"] = pool_tokens
                    results.add(cell, run)
                    done += 1
                    eta = (time.perf_counter() - started) / done * (len(todo) - done)
                    print(f"[{done}/{len(todo)}, {eta / 60:.0f} min left] {cell.key}: TTFT p99 "
                          f"{run['ttft_p99_ms']:.0f} ms, cached {run['cached_ratio']:.3f}, "
                          f"{run['req_per_s']:.1f} req/s, failed {run['failed']}"
                          + _fallbacks(run["lcr"]), flush=True)


def _fallbacks(counters: dict) -> str:
    """The server's LRU fallbacks (a dead or slow predictor), when it has any."""
    n = int(counters.get("predictor_fallbacks", 0))
    return f", predictor fallbacks {n} (served by LRU meanwhile)" if n else ""


class _Closing:
    def __init__(self, server):
        self.server = server

    def close(self):
        self.server.stop()


# -- report -----------------------------------------------------------------------------------
def by_cell(runs: dict) -> dict[tuple, list[dict]]:
    """Runs grouped by (plan, workload, pool, load, policy), each with its repeat."""
    rows: dict[tuple, list[dict]] = {}
    for key, run in runs.items():
        plan, workload, pool, load, policy, repeat = key.split("|")
        rows.setdefault((plan, workload, pool, load, policy), []).append({**run, "repeat": int(repeat)})
    return rows


def p99_ratios(rows: dict, cell: tuple) -> list[float]:
    """P99 TTFT over LRU's in the same repeat, one per repeat that has both."""
    lru = {r["repeat"]: r["ttft_p99_ms"] for r in rows.get((*cell[:4], "lru"), [])}
    return [r["ttft_p99_ms"] / lru[r["repeat"]] for r in rows[cell] if r["repeat"] in lru]


def pooled_p99_ratio(rows: dict, cell: tuple) -> float | None:
    """P99 TTFT over all the repeats' requests together, over LRU's so pooled; None unless
    every run of both kept its requests' TTFTs. A closed loop's clients send in step, so
    its slowest requests come in bursts of about one batch (~10 sent at one instant, held
    by one stall): one run's P99 is its worst burst or two, and pooled three runs' are
    three to six."""
    lru = rows.get((*cell[:4], "lru"), [])
    if not lru or not all("ttfts_ms" in r for r in (*rows[cell], *lru)):
        return None
    pooled = [percentile([t for r in runs for t in r["ttfts_ms"]], 0.99) for runs in (rows[cell], lru)]
    return pooled[0] / pooled[1]


def table(runs: dict) -> str:
    """One row per (plan, workload, pool, load, policy): medians over repeats [min, max],
    P99 TTFT as a ratio to LRU's within each repeat, and pooled over the repeats."""
    rows = by_cell(runs)
    lines = ["| plan | workload | pool | load | policy | TTFT p50 ms | p95 | p99 | p99 / LRU [min, max] | "
             "pooled p99 / LRU | cached | req/s | failed |", "|" + "---|" * 13]
    for (plan, workload, pool, load, policy), cell in sorted(rows.items()):
        ratio = p99_ratios(rows, (plan, workload, pool, load, policy))
        pooled = pooled_p99_ratio(rows, (plan, workload, pool, load, policy))
        med = {m: statistics.median(r[m] for r in cell) for m in ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms",
                                                               "cached_ratio", "req_per_s")}
        spread = (f"{statistics.median(ratio):.3f} [{min(ratio):.3f}, {max(ratio):.3f}]" if ratio else "-")
        lines.append(f"| {plan} | {workload} | {float(pool):.1%} | {load} | {policy} | {med['ttft_p50_ms']:.0f} | "
                     f"{med['ttft_p95_ms']:.0f} | {med['ttft_p99_ms']:.0f} | {spread} | "
                     f"{'-' if pooled is None else f'{pooled:.3f}'} | {med['cached_ratio']:.3f} | {med['req_per_s']:.1f} | {sum(r['failed'] for r in cell)} |")
    return "\n".join(lines)


def summary(runs: dict) -> str:
    """One row per (plan, workload, pool, load): each policy's median P99 TTFT over LRU's
    (per repeat; pooled over the repeats where kept) and its median cached-token ratio,
    LRU's first."""
    rows = by_cell(runs)
    cells = sorted({key[:4] for key in rows}, key=lambda c: (PLANS.index(c[0]), c[1], float(c[2]), c[3]))
    policies = list(dict.fromkeys(key[4] for key in sorted(rows, key=lambda k: k[4] != "lru")))
    lines = ["| cell | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
    for cell in cells:
        parts = []
        for policy in policies:
            if (*cell, policy) not in rows:
                parts.append("")
                continue
            cached = statistics.median(r["cached_ratio"] for r in rows[(*cell, policy)])
            ratios, pooled = p99_ratios(rows, (*cell, policy)), pooled_p99_ratio(rows, (*cell, policy))
            parts.append(f"{cached:.3f}" + (f" / **{statistics.median(ratios):.2f}**" if policy != "lru" and ratios else "")
                         + (f" (pooled {pooled:.2f})" if policy != "lru" and pooled is not None else ""))
        lines.append(f"| {cell[0]} {cell[1]} {float(cell[2]):.1%} {cell[3]} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def plot(runs: dict, path: Path) -> None:
    """P99 TTFT over LRU's (median of the repeats, whiskers min and max) per policy in
    every (plan, workload, pool, load) cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = by_cell(runs)
    cells = sorted({key[:4] for key in rows}, key=lambda c: (PLANS.index(c[0]), c[1], float(c[2]), c[3]))
    policies = [p for p in dict.fromkeys(key[4] for key in sorted(rows)) if p != "lru"]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(cells)), 3.6))
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        xs, mids, lows, highs = [], [], [], []
        for x, cell in enumerate(cells):
            ratios = p99_ratios(rows, (*cell, policy)) if (*cell, policy) in rows else []
            if ratios:
                mid = statistics.median(ratios)
                xs.append(x + (i - (len(policies) - 1) / 2) * width)
                mids.append(mid)
                lows.append(mid - min(ratios))
                highs.append(max(ratios) - mid)
        ax.bar(xs, mids, width, yerr=[lows, highs], label=policy, capsize=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cells)), [f"{w}\n{float(p):.1%} {ld}" for _, w, p, ld in cells], fontsize=7)
    ax.set_ylabel("P99 TTFT / LRU's")
    ax.legend(fontsize=7, ncol=len(policies))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def refuse(message: str):
    """Bad input: one line on stderr, exit 2."""
    print(f"sglang_ttft.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.error = refuse  # one line, not argparse's usage block
    p.add_argument("--plans", default=",".join(PLANS), help=f"comma-separated: {', '.join(PLANS)}")
    p.add_argument("--policies", default="lru,lfu,slru,tlru,laru",
                   help=f"the grid's policies (of {', '.join(POLICIES)})")
    p.add_argument("--builtin", default="slru", help="the SGLang built-in of the confirming runs "
                   "(the best one in replay, `lcr sim-kv --engine sglang`)")
    p.add_argument("--requests", type=int, default=1000, help="requests per run (>= 1,000 for the grid)")
    p.add_argument("--token-scale", type=float, default=1.0,
                   help="multiplies every workload's scale (SCALES: token ids per workload token)")
    p.add_argument("--confirm-workloads", default=",".join(CONFIRM_WORKLOADS),
                   help="the confirming plan's workloads (comma-separated)")
    p.add_argument("--grid-pools", default=",".join(f"{x:g}" for x in GRID_POOLS),
                   help="the grid's KV pools, as shares of the distinct prompt tokens (comma-separated)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--open-loads", default="0.7", help="open-loop rates as shares of LRU's c10 rate")
    p.add_argument("--model", default="small", choices=("tiny", "small"))
    p.add_argument("--out-dir", type=Path, default=RESULTS,
                   help="where sglang_ttft_<workload>_<model>.json go (one file per workload and model)")
    p.add_argument("--fresh", action="store_true", help="start the files over instead of resuming them")
    p.add_argument("--dry-run", action="store_true", help="list the runs and the workloads' sizes; start nothing")
    p.add_argument("--report", action="store_true", help="print the table of the runs already made; start nothing")
    p.add_argument("--plot", type=Path, help="also draw P99 TTFT over LRU's per cell into this PNG")
    p.add_argument("--replay", action="store_true",
                   help="replay the plans' workloads and pools through SGLang's tree (lcr sim-kv --engine "
                   "sglang) instead of serving them; print them beside the live runs in --out-dir and write "
                   "sglang_ttft_<workload>_replay.json there")
    p.add_argument("--batch", type=int, default=1,
                   help="with --replay: replay as a live server serves, in prefill batches of this many "
                   "requests (live: ~6 at concurrency 10), each caching its generated token; lcr's tree, lcr's "
                   "policies only; writes sglang_ttft_<workload>_replay_b<N>.json")
    args = p.parse_args(argv)
    args.plans = _names("--plans", args.plans, PLANS)
    args.policies = _names("--policies", args.policies, POLICIES)
    args.confirm_workloads = _names("--confirm-workloads", args.confirm_workloads, CONFIRM_WORKLOADS)
    if args.builtin not in SGLANG_BUILTINS:
        refuse(f"--builtin must be one of {', '.join(SGLANG_BUILTINS)}, got {args.builtin!r}")
    for flag, value in (("--requests", args.requests), ("--repeats", args.repeats), ("--batch", args.batch)):
        if value < 1:
            refuse(f"{flag} must be at least 1, got {value}")
    if not 0 < args.token_scale <= 32:
        refuse(f"--token-scale must be in (0, 32], got {args.token_scale:g}")
    args.open_loads = _numbers("--open-loads", args.open_loads, 10)
    args.grid_pools = _numbers("--grid-pools", args.grid_pools, 1)
    return args


def _numbers(flag: str, text: str, below: float) -> list[float]:
    """Comma-separated numbers in (0, ``below``), or a one-line refusal naming ``flag``."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        refuse(f"{flag} must be comma-separated numbers, got {text!r}")
    if not all(0 < x < below for x in values):
        refuse(f"{flag} must lie in (0, {below:g}), got {values}")
    return values


def _names(flag: str, text: str, valid) -> list[str]:
    names = [n for n in text.split(",") if n]
    bad = [n for n in names if n not in valid]
    if bad or not names:
        refuse(f"{flag}: unknown {', '.join(bad) or '(none given)'}; valid: {', '.join(valid)}")
    return names


def main(argv=None) -> int:
    args = parse_args(argv)
    cells = plan_cells(args.plans, args.policies, args.builtin, args.repeats, args.open_loads,
                       args.confirm_workloads, args.grid_pools)
    meta = {"model": args.model, "requests": args.requests, "token_scale": args.token_scale}
    if args.dry_run:
        for workload in dict.fromkeys(c.workload for c in cells):
            prompts, sizing = run_prompts(workload, args.requests, SCALES[workload] * args.token_scale)
            print(f"# {workload}: {len(prompts)} requests, {sum(map(len, prompts))} prompt tokens, "
                  f"{distinct_tokens(prompts)} distinct, longest {max(map(len, prompts))}; pools "
                  + ", ".join(f"{share:g}: {pool_size(share, sizing)}"
                              for share in sorted({c.pool for c in cells if c.workload == workload})))
        print("\n".join(c.key for c in cells))
        return 0
    if args.replay:
        from lcr.atomic import write_atomic

        replayed = replay_cells(cells, args)
        for workload in dict.fromkeys(c.workload for c in cells):  # one file per workload, as live
            mine = {k: v for k, v in replayed.items() if k.split("|")[1] == workload}
            suffix = f"_b{args.batch}" if args.batch > 1 else ""
            write_atomic(args.out_dir / f"sglang_ttft_{workload}_replay{suffix}.json",
                         json.dumps({"meta": {k: v for k, v in meta.items() if k != "model"}, "cells": mine},
                                    indent=1).encode())
        live = ResultFiles(args.out_dir, args.model, meta, False)
        for workload in dict.fromkeys(c.workload for c in cells):
            live.of(workload)
        print(replay_table(replayed, live.runs()))
        return 0
    results = ResultFiles(args.out_dir, args.model, meta, args.fresh and not args.report)
    for cell in cells:
        results.of(cell.workload)  # every file's settings checked before anything starts
    if not args.report:
        run_cells(args, cells, results)
    print(table(results.runs()))
    print("\ncached-token ratio / P99 TTFT over LRU's (medians of the repeats):\n")
    print(summary(results.runs()))
    if args.plot:
        plot(results.runs(), args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
