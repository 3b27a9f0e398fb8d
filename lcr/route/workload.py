"""Routed workloads: prefix-block requests with arrival times and output lengths.

A router sees a request's prefix blocks (path ids, as in ``lcr.kv.requests``), its
prompt length and nothing of its output but a running mean. Arrivals come from a
Poisson process or from the Azure LLM inference trace's timestamps.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from lcr.errors import LcrInputError
from lcr.kv.requests import BlockRequest, build_workload


@dataclass(frozen=True)
class RoutedRequest:
    rid: int
    arrival: float            # seconds
    request: BlockRequest     # prefix blocks: path ids and tokens
    output_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.request.total_tokens


def shared_prefix(groups: int = 128, prompts: int = 32, prompt_tokens: int = 1024,
                  prefix_ratio: float = 0.5, output_tokens: int = 128, block_tokens: int = 64,
                  order: str = "shuffled", zipf_alpha: float = 0.0,
                  seed: int = 0) -> list[tuple[BlockRequest, int]]:
    """SGLang's generated-shared-prefix workload: ``groups`` system prompts, each followed by
    ``prompts`` distinct questions; ``prefix_ratio`` of every prompt is its group's prefix.
    ``order`` is ``shuffled`` (groups interleaved at random) or ``grouped``. ``zipf_alpha`` > 0
    draws each of the groups x prompts requests' group from a rank Zipf law instead
    (group g with weight 1/(g+1)^alpha), like bench_serving's ``--gsp-group-distribution zipf``."""
    if groups < 1 or prompts < 1 or prompt_tokens < 1 or block_tokens < 1 or output_tokens < 0:
        raise LcrInputError("shared_prefix: groups, prompts, prompt_tokens and block_tokens must "
                            "be >= 1 and output_tokens >= 0")
    if not 0 <= prefix_ratio <= 1:
        raise LcrInputError(f"shared_prefix: prefix_ratio must be in [0, 1], got {prefix_ratio:g}")
    if order not in ("shuffled", "grouped"):
        raise LcrInputError(f"shared_prefix: order must be shuffled or grouped, got {order!r}")
    if not (math.isfinite(zipf_alpha) and zipf_alpha >= 0):
        raise LcrInputError(f"shared_prefix: zipf_alpha must be >= 0, got {zipf_alpha!r}")
    prefix = _split(round(prompt_tokens * prefix_ratio), block_tokens)
    suffix = _split(prompt_tokens - sum(prefix), block_tokens)
    if zipf_alpha > 0:
        weights = 1.0 / np.arange(1, groups + 1) ** zipf_alpha
        assignment = np.sort(np.random.default_rng(seed).choice(groups, groups * prompts,
                                                                p=weights / weights.sum()))
    else:
        assignment = np.repeat(np.arange(groups), prompts)
    shared_paths = [tuple(range(g * len(prefix), (g + 1) * len(prefix))) for g in range(groups)]
    next_path = groups * len(prefix)
    out = []
    for g in assignment:
        own = tuple(range(next_path, next_path + len(suffix)))
        next_path += len(suffix)
        out.append((BlockRequest(shared_paths[g] + own, tuple(prefix + suffix)), output_tokens))
    if order == "shuffled":
        perm = np.random.default_rng(seed).permutation(len(out))
        out = [out[i] for i in perm]
    return out


def shared_prefix_hit_ceilings(pairs: list[tuple[BlockRequest, int]], cluster_tokens: int) -> dict[str, float]:
    """Two ceilings on the expected cluster token hit rate of a ``shared_prefix`` workload,
    for any router and any KV policies that decide without seeing requests not yet started
    (docs/routing.md, "A ceiling"). The cluster holds at most ``held`` = cluster_tokens /
    prefix of the groups' prefixes; a question's tokens are never shared, so only prefix
    tokens can hit.

    - ``independent``: a policy that treats each request's group as an independent draw
      from the groups' shares (none here counts what a group has left) does best holding
      the ``held`` largest groups, so at most their share of requests hits.
    - ``count_aware``: the shuffle draws the next request in proportion to the prompts each
      group has left, so a policy counting them down could do better; at each request the
      ideal one holds the groups with the most prompts left (refilling them for free)."""
    if not pairs or cluster_tokens < 0:
        raise LcrInputError("shared_prefix_hit_ceilings: need requests and cluster_tokens >= 0")
    seen: dict[int, int] = {}
    for request, _ in pairs:
        for path in request.paths:
            seen[path] = seen.get(path, 0) + 1
    prefix = max(sum(t for path, t in zip(request.paths, request.tokens) if seen[path] > 1)
                 for request, _ in pairs)
    if prefix == 0:
        raise LcrInputError("shared_prefix_hit_ceilings: no block is shared by two requests")
    groups: dict[int, int] = {}   # a group's first block -> its index
    order = np.array([groups.setdefault(request.paths[0], len(groups)) for request, _ in pairs])
    held, part = divmod(cluster_tokens, prefix)

    def best_share(counts: np.ndarray) -> float:
        most = np.sort(counts)[::-1]
        top = most[:held].sum() + (most[held] * part / prefix if held < len(most) else 0.0)
        return float(top / counts.sum())

    left = np.bincount(order).astype(float)
    independent = best_share(left)
    count_aware = 0.0
    for group in order:
        count_aware += best_share(left)
        left[group] -= 1
    share = prefix / pairs[0][0].total_tokens
    return {"independent": independent * share, "count_aware": count_aware / len(order) * share}


def _split(tokens: int, block_tokens: int) -> list[int]:
    full, rest = divmod(tokens, block_tokens)
    return [block_tokens] * full + ([rest] if rest else [])


def from_trace(trace, block_tokens: int, default_output: int = 256) -> list[tuple[BlockRequest, int]]:
    """A prefix-block trace (Mooncake JSONL, online_qa, aibrix) with its output lengths."""
    workload = build_workload(trace, block_tokens)
    outputs = trace.meta.get("output_lengths") or []
    return [(r, int(outputs[i]) if i < len(outputs) else default_output)
            for i, r in enumerate(workload.requests)]


def poisson_arrivals(count: int, rate: float, seed: int = 0) -> np.ndarray:
    if not (math.isfinite(rate) and rate > 0):
        raise LcrInputError(f"arrival rate must be a positive number of requests/s, got {rate!r}")
    return np.cumsum(np.random.default_rng(seed + 7919).exponential(1.0 / rate, count))


def azure_arrivals(path: str | Path, count: int, rate: float | None = None) -> np.ndarray:
    """Arrival times (s, from 0) of the Azure LLM inference trace (``TIMESTAMP`` column),
    repeated end to end when ``count`` exceeds its rows; rescaled to a mean ``rate`` if given."""
    path = Path(path)
    stamps = []
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "TIMESTAMP" not in reader.fieldnames:
                raise LcrInputError("no TIMESTAMP column (expected the Azure LLM inference trace)",
                                    source=str(path))
            for number, row in enumerate(reader, start=2):
                try:
                    stamps.append(datetime.fromisoformat(row["TIMESTAMP"][:26]).timestamp())
                except (TypeError, ValueError):
                    raise LcrInputError(f"field 'TIMESTAMP': not a timestamp: {row['TIMESTAMP']!r}",
                                        source=str(path), line=number) from None
    except (OSError, UnicodeDecodeError) as err:
        raise LcrInputError(f"cannot read arrivals: {err}", source=str(path)) from None
    if len(stamps) < 2:
        raise LcrInputError("needs at least two timestamps", source=str(path))
    gaps = np.diff(np.sort(np.array(stamps)))
    mean_gap = float(gaps.mean()) if gaps.mean() > 0 else 1.0
    # Past the trace's end, start it again one mean gap later.
    cycle = np.concatenate([gaps, [mean_gap]])
    repeated = np.tile(cycle, -(-max(count - 1, 1) // len(cycle)))[:max(count - 1, 0)]
    arrivals = np.concatenate([[0.0], np.cumsum(repeated)])[:count]
    if rate is not None:
        if not (math.isfinite(rate) and rate > 0):
            raise LcrInputError(f"arrival rate must be positive, got {rate!r}")
        arrivals = arrivals * (1.0 / rate) / mean_gap
    return arrivals


def trace_arrivals(times, count: int, rate: float | None = None) -> np.ndarray:
    """Arrival times (s, from 0) of the first ``count`` requests of a trace that records
    them (a chat trace's replay: ``meta["times"]``); rescaled to a mean ``rate`` if given,
    the same pattern faster or slower."""
    if times is None or len(times) < count:
        raise LcrInputError("--arrivals trace: the workload has no request times in seconds "
                            "(a chat trace has them: sharegpt:...)")
    stamps = np.asarray(times[:count], dtype=float)
    if np.any(np.diff(stamps) < 0):
        raise LcrInputError("--arrivals trace: the workload's request times are not in order")
    stamps = stamps - stamps[0]
    if rate is not None and count > 1 and stamps[-1] > 0:
        stamps *= (count - 1) / stamps[-1] / rate
    return stamps


def with_arrivals(requests: list[tuple[BlockRequest, int]], arrivals: np.ndarray) -> list[RoutedRequest]:
    return [RoutedRequest(i, float(t), r, out)
            for i, ((r, out), t) in enumerate(zip(requests, arrivals))]
