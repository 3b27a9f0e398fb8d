"""The SLS benchmark: SparseLengthsSum throughput through SlabHashCache, per policy.

A lookup trace (DLRM locality-shaped, synthetic Zipf, or a trace file mapped onto dense
row ids) is cut into bags of ``pooling`` lookups and batches of ``batch_size`` bags. For
every cache ratio (cache slots / ``cache_base``: a generated table's rows, a trace's
distinct keys), batch size and policy a fresh cache
replays ``warmup`` untimed batches, then ``batches`` timed ones, back to back: on a GPU
one synchronisation before and one after them, none per batch or per stage (``profile``
runs the same batches again with a synchronisation after each stage, for the breakdown).

Predictions come from a ``BatchPredictor`` (``lcr.embedding.predictions``) handed to
``lcr.sls``, a CPU thread beside the serving loop: it takes
each batch's lookups, observes them and predicts the batch's distinct keys while the
next batch is served. Its work runs during the timed batches, so a predictor's cost is on
the clock. Sync mode writes batch i's answers into the cache before batch i + 2, waiting
for the thread when it is behind (the same decisions on every run: what the predictions
are worth); async mode never waits: answers are written when they are ready, and batches
the thread has no time for are never observed (``seen``: the share it observed).

In the same run, ``embedding_bag`` on the whole table where the cache lives (its upper
bound: every row resident) is timed as the row ``embedding_bag``.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from lcr.embedding.cache import SlabHashCache
from lcr.embedding.predictions import BatchPredictor
from lcr.embedding.slab_policies import parse_slab_policy
from lcr.embedding.sls import sls

RESIDENT = "embedding_bag"  # the baseline row: the whole table resident, no cache


@dataclass
class SlsBenchResult:
    policy: str
    cache_ratio: float
    batch_size: int
    batches: int
    latency_ms: float                 # wall time per batch, timed batches back to back
    hit_ratio: float                  # over the distinct keys of the timed batches
    samples_per_s: float
    stages_ms: dict[str, float] = field(default_factory=dict)  # per batch (profile runs only)
    predictor_ms: float = 0.0         # predictor thread's work per batch (observe + predict)
    predictor_wait_ms: float = 0.0    # what the serving loop waited for it, per batch
    predictor: str = ""               # what a predictive policy's predictions came from
    prediction_mode: str = ""         # sync or async (BatchPredictor), with a predictor
    predictor_seen: float = 1.0       # share of the timed lookups the model observed

    @property
    def label(self) -> str:
        if not self.predictor:
            return self.policy
        return f"{self.policy}/{self.predictor}" + (" async" if self.prediction_mode == "async" else "")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SlsWorkload:
    lookups: np.ndarray               # int64 row ids, the flattened trace
    rows: int                         # table rows (>= every id + 1)
    distinct: int                     # distinct ids in the trace
    pooling: int
    cache_base: int = 0               # what cache ratios are fractions of (0: distinct)

    @property
    def cache_rows(self) -> int:
        return self.cache_base or self.distinct


def batches_of(workload: SlsWorkload, batch_size: int, count: int):
    """(start, indices, lengths) of ``count`` consecutive batches, wrapping around."""
    per_batch = batch_size * workload.pooling
    lookups = workload.lookups
    lengths = torch.full((batch_size,), workload.pooling, dtype=torch.int64)
    start = 0
    for _ in range(count):
        if start + per_batch > len(lookups):
            start = 0
        yield start, torch.from_numpy(lookups[start:start + per_batch]), lengths
        start += per_batch


@contextmanager
def _clock(device: str):
    """Wall time of the block, with the device drained before and after it."""
    elapsed = [0.0]
    if device == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    yield elapsed
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed[0] = time.perf_counter() - began


def run_one(workload: SlsWorkload, store, policy: str, cache_ratio: float, batch_size: int,
            dim: int, dtype, device: str, make_model: Callable | None, warmup: int,
            batches: int, profile: bool = False, predictor_name: str = "",
            prediction_mode: str = "sync") -> SlsBenchResult:
    """One cell: ``make_model(lookups per batch)`` builds the predictor's model (None: no
    predictions), run only for a slab policy that reads predictions, on a
    ``BatchPredictor`` in ``prediction_mode`` (sync or async); ``predictor_name`` labels
    its result."""
    choice = parse_slab_policy(policy)
    cache = SlabHashCache.for_capacity(cache_ratio * workload.cache_rows, dim, dtype=dtype,
                                       policy=choice, device=device)
    predictive = make_model is not None and choice.policy.predictive
    predictor = BatchPredictor(make_model(batch_size * workload.pooling), wait=prediction_mode == "sync",
                               raise_errors=True) \
        if predictive else None
    work = [(start, indices.to(device), lengths.to(device))
            for start, indices, lengths in batches_of(workload, batch_size, warmup + batches)]
    timings: dict[str, float] | None = {} if profile else None

    def serve(start, indices, lengths, timed: bool) -> None:
        sls(cache, store, indices, lengths=lengths, predictor=predictor, now=start,
            timings=timings if timed else None)

    try:
        for item in work[:warmup]:
            serve(*item, timed=False)
        cache.reset_stats()
        if predictor is not None:
            predictor.reset_counts()
        with _clock(device) as elapsed:
            for item in work[warmup:]:
                serve(*item, timed=True)
    finally:
        if predictor is not None:
            predictor.close()
    seconds = elapsed[0]
    return SlsBenchResult(
        policy, cache_ratio, batch_size, batches, latency_ms=1e3 * seconds / batches,
        hit_ratio=cache.hit_ratio, samples_per_s=batch_size * batches / seconds,
        stages_ms={s: 1e3 * t / batches for s, t in timings.items()} if profile else {},
        predictor_ms=1e3 * predictor.work_s / batches if predictor else 0.0,
        predictor_wait_ms=1e3 * predictor.wait_s / batches if predictor else 0.0,
        predictor=predictor_name if predictor else "",
        prediction_mode=prediction_mode if predictor else "",
        predictor_seen=predictor.seen_share if predictor else 1.0)


def run_resident(workload: SlsWorkload, table: torch.Tensor, batch_size: int, device: str,
                 warmup: int, batches: int) -> SlsBenchResult:
    """``embedding_bag`` over the whole table on ``device``: every row resident."""
    table = table.to(device)
    work = [(indices.to(device), (torch.cumsum(lengths, 0) - lengths).to(device))
            for _, indices, lengths in batches_of(workload, batch_size, warmup + batches)]
    for indices, offsets in work[:warmup]:
        F.embedding_bag(indices, table, offsets, mode="sum")
    with _clock(device) as elapsed:
        for indices, offsets in work[warmup:]:
            F.embedding_bag(indices, table, offsets, mode="sum")
    seconds = elapsed[0]
    return SlsBenchResult(RESIDENT, 1.0, batch_size, batches, latency_ms=1e3 * seconds / batches,
                          hit_ratio=1.0, samples_per_s=batch_size * batches / seconds)


def run_sls_bench(workload: SlsWorkload, store, *, policies, cache_ratios, batch_sizes, dim,
                  dtype="float32", device="cpu", make_model=None, warmup=3, batches=10,
                  profile=False, table: torch.Tensor | None = None, predictor: str = "",
                  prediction_mode: str = "sync",
                  progress: Callable[[SlsBenchResult], None] | None = None) -> list[SlsBenchResult]:
    """Every (cache ratio, batch size, policy) cell, and, given the full ``table``, the
    resident ``embedding_bag`` row per batch size (first, under the first ratio)."""
    results = []

    def add(result: SlsBenchResult) -> None:
        results.append(result)
        if progress:
            progress(result)

    for ratio in cache_ratios:
        for batch_size in batch_sizes:
            if table is not None and ratio == cache_ratios[0]:
                add(run_resident(workload, table, batch_size, device, warmup, batches))
            for policy in policies:
                add(run_one(workload, store, policy, ratio, batch_size, dim, dtype, device,
                            make_model, warmup, batches, profile, predictor, prediction_mode))
    return results


def format_table(results: list[SlsBenchResult]) -> str:
    stages = list(dict.fromkeys(s for r in results for s in r.stages_ms))  # the paths' own
    header = (f"{'ratio':>6} {'batch':>6} {'policy':>24} {'latency ms':>10} {'hit ratio':>9} "
              f"{'samples/s':>10} {'pred ms':>8} {'wait ms':>8} {'seen':>5}"
              + "".join(f" {s + ' ms':>9}" for s in stages))
    lines = [header, "-" * len(header)]
    for r in results:
        ratio = "-" if r.policy == RESIDENT else f"{r.cache_ratio:.1%}"
        lines.append(f"{ratio:>6} {r.batch_size:>6} {r.label:>24} {r.latency_ms:>10.2f} "
                     f"{r.hit_ratio:>9.3f} {r.samples_per_s:>10.0f} {r.predictor_ms:>8.2f} "
                     f"{r.predictor_wait_ms:>8.2f} {r.predictor_seen:>5.0%}"
                     + "".join(f" {r.stages_ms.get(s, 0.0):>9.2f}" for s in stages))
    return "\n".join(lines)


def markdown_table(path) -> str:
    """The results of an ``lcr bench sls --json`` file as the Markdown table docs/embedding.md
    shows: per batch size and policy, the hit ratio and samples/s at each cache ratio (the
    resident ``embedding_bag`` row under every ratio)."""
    import json

    with open(path) as f:
        rows = [SlsBenchResult(**r) for r in json.load(f)["results"]]
    ratios = sorted({r.cache_ratio for r in rows if r.policy != RESIDENT})
    cells = {(r.batch_size, r.label, r.cache_ratio): r for r in rows}
    lines = ["| batch | policy | " + " | ".join(f"{x:.0%}: hit ratio, samples/s" for x in ratios) + " |",
             "|---|---|" + "---|" * len(ratios)]
    for batch, label in dict.fromkeys((r.batch_size, r.label) for r in rows):
        found = [cells.get((batch, label, 1.0 if label == RESIDENT else x)) for x in ratios]
        lines.append(f"| {batch} | {label} | " + " | ".join(
            f"{r.hit_ratio:.3f}, {r.samples_per_s:,.0f}" if r else "" for r in found) + " |")
    return "\n".join(lines)


def plot_latency(results: list[SlsBenchResult], path, title: str = "") -> None:
    """Paper Figure 9 style: average SLS latency per batch size, one panel per cache ratio,
    bars per policy, LARU's improvement over LRU written above each group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lcr.sim.plot import save_figure

    cached = [r for r in results if r.policy != RESIDENT]
    resident = {r.batch_size: r.latency_ms for r in results if r.policy == RESIDENT}
    ratios = sorted({r.cache_ratio for r in cached})
    sizes = sorted({r.batch_size for r in cached})
    policies = list(dict.fromkeys(r.label for r in cached)) + ([RESIDENT] if resident else [])
    at = {(r.cache_ratio, r.batch_size, r.label): r.latency_ms for r in cached}
    laru = next((label for label in policies if label.split("/")[0] == "laru"), None)
    at.update({(ratio, size, RESIDENT): ms for ratio in ratios for size, ms in resident.items()})
    fig, axes = plt.subplots(1, len(ratios), figsize=(4.2 * len(ratios), 3.4), squeeze=False)
    width = 0.8 / len(policies)
    for ax, ratio in zip(axes[0], ratios):
        for p, policy in enumerate(policies):
            xs = [i + (p - (len(policies) - 1) / 2) * width for i in range(len(sizes))]
            ax.bar(xs, [at.get((ratio, s, policy), 0) for s in sizes], width, label=policy)
        for i, size in enumerate(sizes):
            lru, laru_ms = at.get((ratio, size, "lru")), at.get((ratio, size, laru))
            if lru and laru_ms:
                top = max(at.get((ratio, size, p), 0) for p in policies)
                ax.annotate(f"{(lru - laru_ms) / lru:+.1%}", (i, top), ha="center", va="bottom",
                            fontsize=7, bbox=dict(boxstyle="square,pad=0.2", fc="white", lw=0.5))
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set(xlabel="batch size", ylabel="avg SLS latency (ms)", title=f"cache ratio {ratio:.0%}")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path, title)
