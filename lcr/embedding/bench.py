"""The SLS benchmark: SparseLengthsSum latency through SlabHashCache, per policy.

A lookup trace (synthetic Zipf or a trace file mapped onto dense row ids) is cut into
bags of ``pooling`` lookups and batches of ``batch_size`` bags. For every cache ratio
(cache slots / distinct keys), batch size and policy a fresh cache replays ``warmup``
untimed batches, then ``batches`` timed ones. Predictions are written after each batch
outside the timed region, as the paper's asynchronous predictor does.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from lcr.embedding.cache import SlabHashCache
from lcr.embedding.predictions import TracePredictor
from lcr.embedding.sls import STAGES, sls


@dataclass
class SlsBenchResult:
    policy: str
    cache_ratio: float
    batch_size: int
    batches: int
    latency_ms: float                 # average SLS latency per batch
    hit_ratio: float                  # over the distinct keys of the timed batches
    samples_per_s: float
    stages_ms: dict[str, float] = field(default_factory=dict)  # per batch

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SlsWorkload:
    lookups: np.ndarray               # int64 row ids, the flattened trace
    rows: int                         # table rows (>= every id + 1)
    distinct: int                     # distinct ids in the trace
    pooling: int


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


def run_one(workload: SlsWorkload, store, policy: str, cache_ratio: float, batch_size: int,
            dim: int, dtype, device: str, predictions: np.ndarray | None, warmup: int,
            batches: int) -> SlsBenchResult:
    cache = SlabHashCache.for_capacity(cache_ratio * workload.distinct, dim, dtype=dtype,
                                       policy=policy, device=device)
    predictor = None if predictions is None or policy == "lru" else \
        TracePredictor(predictions, workload.rows)
    timings: dict[str, float] = {}
    elapsed = 0.0
    for i, (start, indices, lengths) in enumerate(batches_of(workload, batch_size, warmup + batches)):
        timed = i >= warmup
        if i == warmup:
            cache.reset_stats()
        indices = indices.to(device)
        lengths_d = lengths.to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        sls(cache, store, indices, lengths=lengths_d, timings=timings if timed else None)
        if device == "cuda":
            torch.cuda.synchronize()
        if timed:
            elapsed += time.perf_counter() - began
        if predictor is not None:  # the asynchronous predictor's work: off the clock
            predictor.observe_batch(indices.cpu().numpy(), start)
            keys = np.unique(indices.cpu().numpy())
            cache.set_predictions(keys, predictor.predict(keys, start))
    return SlsBenchResult(policy, cache_ratio, batch_size, batches,
                          latency_ms=1e3 * elapsed / batches, hit_ratio=cache.hit_ratio,
                          samples_per_s=batch_size * batches / elapsed,
                          stages_ms={s: 1e3 * timings.get(s, 0.0) / batches for s in STAGES})


def run_sls_bench(workload: SlsWorkload, store, *, policies, cache_ratios, batch_sizes, dim,
                  dtype="float32", device="cpu", predictions=None, warmup=3, batches=10,
                  progress: Callable[[SlsBenchResult], None] | None = None) -> list[SlsBenchResult]:
    results = []
    for ratio in cache_ratios:
        for batch_size in batch_sizes:
            for policy in policies:
                result = run_one(workload, store, policy, ratio, batch_size, dim, dtype, device,
                                 predictions, warmup, batches)
                results.append(result)
                if progress:
                    progress(result)
    return results


def format_table(results: list[SlsBenchResult]) -> str:
    header = (f"{'ratio':>6} {'batch':>6} {'policy':>6} {'latency ms':>10} {'hit ratio':>9} "
              f"{'samples/s':>10} " + " ".join(f"{s + ' ms':>9}" for s in STAGES))
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(f"{r.cache_ratio:>6.1%} {r.batch_size:>6} {r.policy:>6} {r.latency_ms:>10.2f} "
                     f"{r.hit_ratio:>9.3f} {r.samples_per_s:>10.0f} "
                     + " ".join(f"{r.stages_ms[s]:>9.2f}" for s in STAGES))
    return "\n".join(lines)


def plot_latency(results: list[SlsBenchResult], path, title: str = "") -> None:
    """Paper Figure 9 style: average SLS latency per batch size, one panel per cache ratio,
    bars per policy, LARU's improvement over LRU written above each group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lcr.sim.plot import save_figure

    ratios = sorted({r.cache_ratio for r in results})
    sizes = sorted({r.batch_size for r in results})
    policies = list(dict.fromkeys(r.policy for r in results))
    at = {(r.cache_ratio, r.batch_size, r.policy): r.latency_ms for r in results}
    fig, axes = plt.subplots(1, len(ratios), figsize=(4.2 * len(ratios), 3.4), squeeze=False)
    width = 0.8 / len(policies)
    for ax, ratio in zip(axes[0], ratios):
        for p, policy in enumerate(policies):
            xs = [i + (p - (len(policies) - 1) / 2) * width for i in range(len(sizes))]
            ax.bar(xs, [at.get((ratio, s, policy), 0) for s in sizes], width, label=policy)
        for i, size in enumerate(sizes):
            lru, laru = at.get((ratio, size, "lru")), at.get((ratio, size, "laru"))
            if lru and laru:
                top = max(at.get((ratio, size, p), 0) for p in policies)
                ax.annotate(f"{(lru - laru) / lru:+.1%}", (i, top), ha="center", va="bottom",
                            fontsize=7, bbox=dict(boxstyle="square,pad=0.2", fc="white", lw=0.5))
        ax.set_xticks(range(len(sizes)), [str(s) for s in sizes])
        ax.set(xlabel="batch size", ylabel="avg SLS latency (ms)", title=f"cache ratio {ratio:.0%}")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path, title)
