"""Seeded workload generators: the shapes the papers describe, with no data needed.

Each generator is a function of keyword parameters returning a ``Trace``; ``generate``
takes a spec string such as ``zipf:requests=100000,keys=10000,alpha=1.0,seed=0``.
Generators of the layers above register themselves (``register_generator``) from the
module that owns them: ``sharegpt``, LPC's chat replay, from ``lcr.lpc.workload`` when
``lcr.lpc`` is imported (the ``lcr`` command always imports it).
"""
from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from lcr.errors import LcrInputError
from lcr.guards import check_memory
from lcr.traces.moe import llama_moe, mixtral, moe
from lcr.traces.trace import Trace

BLOCK_TOKENS = 512


def zipf(requests: int = 100_000, keys: int = 10_000, alpha: float = 1.0, seed: int = 0) -> Trace:
    """Independent requests with P(rank r) proportional to 1 / r^alpha; ids are shuffled."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** alpha
    cdf = np.cumsum(weights)
    ranks = np.searchsorted(cdf, rng.random(requests) * cdf[-1], side="right")
    ids = rng.permutation(keys).astype(np.int64)
    return Trace(ids[np.minimum(ranks, keys - 1)], f"zipf(a={alpha},n={keys})")


def loop(requests: int = 100_000, keys: int = 1_000, seed: int = 0) -> Trace:
    """Keys 0..keys-1 over and over: LRU misses on every request once keys > cache."""
    return Trace(np.arange(requests, dtype=np.int64) % keys, f"loop(n={keys})")


def scan(requests: int = 100_000, hot_keys: int = 1_000, alpha: float = 0.8, scan_length: int = 2_000,
         scan_every: int = 10_000, seed: int = 0) -> Trace:
    """A Zipf hot set interrupted by sequential scans of keys never seen again: a scan
    flushes an LRU cache of the hot set, which a scan-aware policy keeps."""
    hot = zipf(requests, hot_keys, alpha, seed).keys
    out, next_cold, i = [], hot_keys, 0
    while sum(map(len, out)) < requests:
        out.append(hot[i:i + scan_every])
        i += scan_every
        out.append(np.arange(next_cold, next_cold + scan_length, dtype=np.int64))
        next_cold += scan_length
    return Trace(np.concatenate(out)[:requests], f"scan(hot={hot_keys},scan={scan_length})")


def _lognormal(rng, mean: float, sd: float, size=None):
    """Lognormal draws with the given mean and standard deviation (not of the log)."""
    sigma2 = np.log1p((sd / mean) ** 2)
    return rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), size)


class _BlockChains:
    """Emits prompts as prefix-block chains (Mooncake's format): a conversation's full
    blocks keep their ids across turns; a trailing partial block is new each time."""

    def __init__(self, start_id: int = 0):
        self.next_id = start_id

    def fresh(self, count: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return ids

    def prompt(self, history: list[int], tokens: int) -> list[int]:
        full, partial = divmod(tokens, BLOCK_TOKENS)
        if len(history) < full:
            history.extend(self.fresh(full - len(history)))
        return history[:full] + (self.fresh(1) if partial else [])


def _emit(name: str, requests: list[tuple[float, list[int], int, int]]) -> Trace:
    """Order requests by position and flatten them to block keys."""
    requests.sort(key=lambda r: r[0])
    keys = [b for _, blocks, _, _ in requests for b in blocks]
    offsets = np.cumsum([0] + [len(blocks) for _, blocks, _, _ in requests])
    stamps = np.repeat(np.arange(len(requests), dtype=np.float64), np.diff(offsets))
    return Trace(np.array(keys, dtype=np.int64), name, timestamps=stamps,
                 request_offsets=offsets.astype(np.int64),
                 meta={"block_tokens": BLOCK_TOKENS, "requests": len(requests),
                       "input_lengths": [r[2] for r in requests],
                       "output_lengths": [r[3] for r in requests]})


def online_qa(conversations: int = 2_000, turns_mean: float = 3.63, prompt_mean: float = 3_455,
              gap_mean: float = 266.0, gap_sd: float = 77.5, reply_mean: float = 300,
              question_mean: float = 200, seed: int = 0) -> Trace:
    """The paper's Online-QA workload: multi-turn conversations whose prompts grow by the
    previous turn (question + reply). Turns per conversation are 1 + Poisson(turns_mean - 1);
    the gap between a conversation's turns is lognormal (mean ``gap_mean``, sd ``gap_sd``)
    in units of intervening requests. The first prompt's mean is set so that the mean over
    all prompts is ``prompt_mean``."""
    rng = np.random.default_rng(seed)
    turns = 1 + rng.poisson(turns_mean - 1, conversations)
    # Mean over requests of the turn index (0-based) is E[T(T-1)/2] / E[T].
    lam = turns_mean - 1
    growth_turns = (2 * lam + lam * lam) / 2 / turns_mean
    first_mean = max(prompt_mean - growth_turns * (question_mean + reply_mean), question_mean)
    total = int(turns.sum())
    starts = rng.uniform(0, total, conversations)
    chains = _BlockChains()
    requests = []
    for c in range(conversations):
        position, history = starts[c], []
        tokens = int(_lognormal(rng, first_mean, first_mean / 2))
        for turn in range(turns[c]):
            reply = int(_lognormal(rng, reply_mean, reply_mean / 2))
            requests.append((position, chains.prompt(history, tokens), tokens, reply))
            tokens += reply + int(_lognormal(rng, question_mean, question_mean / 2))
            position += _lognormal(rng, gap_mean, gap_sd)
    return _emit(f"online_qa(conv={conversations})", requests)


def aibrix(sessions: int = 1_000, system_prompts: int = 8, system_tokens: int = 2_048,
           turns_mean: float = 5.0, think_mean: float = 50.0, question_mean: float = 150,
           reply_mean: float = 350, seed: int = 0) -> Trace:
    """Multi-turn chat in the style of AIBrix's benchmark: sessions arrive as a Poisson
    process; each picks one of a few shared system prompts (Zipf-popular), then alternates
    turns separated by exponential think times (in requests). Prompts carry the whole
    history, so sessions share the system prefix and a session shares all earlier turns."""
    rng = np.random.default_rng(seed)
    chains = _BlockChains()
    system_blocks = [chains.fresh(system_tokens // BLOCK_TOKENS) for _ in range(system_prompts)]
    popularity = 1.0 / np.arange(1, system_prompts + 1)
    popularity /= popularity.sum()
    arrivals = np.cumsum(rng.exponential(turns_mean, sessions))
    requests = []
    for s in range(sessions):
        history = list(system_blocks[rng.choice(system_prompts, p=popularity)])
        tokens, position = len(history) * BLOCK_TOKENS, arrivals[s]
        for _ in range(max(1, rng.geometric(1.0 / turns_mean))):
            tokens += int(rng.exponential(question_mean)) + 1
            reply = int(rng.exponential(reply_mean)) + 1
            requests.append((position, chains.prompt(history, tokens), tokens, reply))
            tokens += reply
            position += rng.exponential(think_mean)
    return _emit(f"aibrix(sessions={sessions})", requests)


GENERATORS: dict[str, Callable[..., Trace]] = {
    "zipf": zipf, "loop": loop, "scan": scan, "online_qa": online_qa, "aibrix": aibrix,
    "moe": moe, "mixtral": mixtral, "llama_moe": llama_moe,
}


def register_generator(name: str, func: Callable[..., Trace]) -> None:
    """Make ``name:param=value,...`` run ``func`` (keyword parameters with defaults, which
    give their types). Registering the same function again is a no-op; another one under
    a taken name is a ValueError."""
    if GENERATORS.get(name, func) is not func:
        raise ValueError(f"generator {name!r} is already registered")
    GENERATORS[name] = func


def _coerce(text: str, default, name: str, spec: str):
    kind = type(default)
    try:
        value = kind(float(text)) if kind is int and "e" in text.lower() else kind(text)
        if kind is int and float(text) != value:
            raise ValueError
        return value
    except (ValueError, OverflowError):
        raise LcrInputError(f"generator parameter {name!r}: expected {kind.__name__}, got {text!r}",
                            source=spec) from None


#: Integer parameters that count something: at least 1 (others, e.g. seeds, at least 0).
_COUNTS = frozenset({"requests", "keys", "hot_keys", "scan_every", "conversations", "sessions",
                     "system_prompts", "system_tokens", "tokens", "layers", "experts", "top_k"})


def _check_values(name: str, kwargs: dict, spec: str) -> None:
    for key, value in kwargs.items():
        if isinstance(value, float) and not np.isfinite(value):
            raise LcrInputError(f"generator parameter {key!r} must be finite, got {value}", source=spec)
        if isinstance(value, int) and value < (1 if key in _COUNTS else 0):
            raise LcrInputError(f"generator parameter {key!r} must be at least "
                                f"{1 if key in _COUNTS else 0}, got {value}", source=spec)
    # What the biggest arrays would take (about 48 bytes per request in the worst generator).
    func = GENERATORS[name]
    defaults = {p.name: p.default for p in inspect.signature(func).parameters.values()}
    size = {**defaults, **kwargs}
    if "requests" in size:
        check_memory(48 * size["requests"], f"{size['requests']:,} requests", source=spec)
    if "tokens" in size:
        check_memory(24 * size["tokens"] * size.get("layers", 32) * size.get("experts", 16),
                       f"{size['tokens']:,} tokens", source=spec)
    for count in ("conversations", "sessions"):
        if count in size:
            check_memory(4096 * size[count], f"{size[count]:,} {count}", source=spec)


def generate(spec: str) -> Trace:
    """Run the generator named by ``spec`` (``name`` or ``name:param=value,...``)."""
    name, _, params = spec.partition(":")
    if name not in GENERATORS:
        raise LcrInputError(f"unknown generator {name!r}; valid: {', '.join(GENERATORS)}", source=spec)
    func = GENERATORS[name]
    defaults = {p.name: p.default for p in inspect.signature(func).parameters.values()}
    kwargs = {}
    for item in filter(None, params.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in defaults:
            raise LcrInputError(f"bad generator parameter {item!r}; {name} takes "
                                f"{', '.join(defaults)}", source=spec)
        kwargs[key] = _coerce(value, defaults[key], key, spec)
    _check_values(name, kwargs, spec)
    try:
        trace = func(**kwargs)
    except (ValueError, OverflowError) as err:  # numpy's own parameter checks
        if isinstance(err, LcrInputError):
            raise
        raise LcrInputError(f"generator {name}: {str(err).splitlines()[0]}", source=spec) from None
    trace.meta["generator"] = spec
    return trace


def is_generator_spec(source: str) -> bool:
    return source.partition(":")[0] in GENERATORS
