"""MoE routing as layered-paging traces: the page of (layer, expert), routing tables to
request streams (with checks), and the per-layer Zipf router generator.

A routing table ``selections[token][layer]`` lists the experts a token uses at a layer,
best first. Two ways to turn it into requests:

- ``rounds="split"`` (the paper's): a top-k token is k rounds through the layers, round r
  requesting each layer's r-th expert, so the trace is strictly layered (one page per
  step) and has tokens * k * layers requests.
- ``rounds="native"``: the order a model computes in, all k experts of layer 0, then all
  of layer 1, ...; layered policies then need ``native_rounds=1``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from lcr.errors import LcrInputError
from lcr.traces.trace import Trace

ROUNDS = ("split", "native")


def page(layer: int, expert: int, experts: int) -> int:
    return layer * experts + expert


def routing_trace(selections: Sequence | np.ndarray, layers: int, experts: int, rounds: str = "split",
                  name: str = "moe-routing", source: str | None = None) -> Trace:
    """Requests for a routing table shaped [tokens][layers][top_k] (see the module doc)."""
    if rounds not in ROUNDS:
        raise LcrInputError(f"rounds must be one of {', '.join(ROUNDS)}, got {rounds!r}", source=source)
    table = _routing_array(selections, layers, experts, source)
    tokens, _, top_k = table.shape
    pages = table + (np.arange(layers, dtype=np.int64) * experts)[None, :, None]
    # split: token, rank, layer; native: token, layer, rank.
    keys = pages.transpose(0, 2, 1).reshape(-1) if rounds == "split" else pages.reshape(-1)
    return Trace(keys, name, meta={"layers": layers, "experts": experts, "tokens": tokens,
                                   "top_k": top_k, "rounds": rounds})


def _routing_array(selections, layers: int, experts: int, source: str | None) -> np.ndarray:
    if isinstance(selections, np.ndarray):
        selections = selections.tolist() if selections.dtype.kind not in "iu" else selections
    if not isinstance(selections, np.ndarray):
        for token, per_layer in enumerate(selections):
            if not isinstance(per_layer, (list, tuple)):
                raise LcrInputError(f"token {token}: expected a list of {layers} layers, got "
                                    f"{type(per_layer).__name__}", source=source)
            if len(per_layer) != layers:
                raise LcrInputError(f"token {token}: routes through {len(per_layer)} layers, expected {layers}",
                                    source=source)
            for layer, experts_used in enumerate(per_layer):
                if not isinstance(experts_used, (list, tuple)) or not all(
                        type(e) in (int, np.int64) for e in experts_used):
                    raise LcrInputError(f"token {token} layer {layer}: expected a list of integer expert "
                                        f"ids", source=source)
    try:
        table = np.asarray(selections, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise LcrInputError("every layer of every token must select the same number of experts "
                            "(integers)", source=source) from None
    if table.ndim != 3 or table.shape[2] < 1:
        raise LcrInputError(f"routing must be shaped [tokens][{layers} layers][top_k], got {table.shape}",
                            source=source)
    bad = np.argwhere((table < 0) | (table >= experts))
    if len(bad):
        token, layer, rank = bad[0]
        raise LcrInputError(f"token {token} layer {layer}: expert {table[token, layer, rank]} out of "
                            f"range 0..{experts - 1}", source=source)
    return table


def check_layered(trace: Trace, source: str | None = None) -> None:
    """Raise unless ``trace`` walks the layers in order, one step per request (or, for
    native rounds, each layer's ``top_k`` requests together)."""
    layers, experts = trace.meta.get("layers"), trace.meta.get("experts")
    if not layers or not experts:
        raise LcrInputError("not a MoE trace: its meta needs 'layers' and 'experts'",
                            source=source or trace.name)
    group = trace.meta.get("top_k", 1) if trace.meta.get("rounds") == "native" else 1
    keys = trace.keys
    bad = np.flatnonzero((keys < 0) | (keys >= layers * experts))
    if len(bad):
        raise LcrInputError(f"request {bad[0]}: page {keys[bad[0]]} is outside {layers} layers x "
                            f"{experts} experts", source=source or trace.name)
    expected = (np.arange(len(keys)) // group) % layers
    wrong = np.flatnonzero(keys // experts != expected)
    if len(wrong):
        i = wrong[0]
        raise LcrInputError(f"request {i}: layer {keys[i] // experts} out of order, expected layer "
                            f"{expected[i]}", source=source or trace.name)


def zipf_weights(experts: int, a: float, b: float) -> np.ndarray:
    """p_j proportional to 1 / (j + b)^a for ranks j = 1..experts, normalized."""
    ranks = np.arange(1, experts + 1, dtype=np.float64)
    if np.any(ranks + b <= 0):
        raise LcrInputError(f"Zipf offset b={b} makes rank 1 + b non-positive")
    weights = (ranks + b) ** -float(a)
    return weights / weights.sum()


def zipf_router(layers: int, experts: int, top_k: int, a: float, b: float, tokens: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Routing table [tokens][layers][top_k] and each layer's popularity [layers][experts].

    Each layer ranks its experts by a random permutation and picks a token's top_k
    distinct experts with probability proportional to the Zipf weights of their ranks
    (sampling without replacement, in draw order: the first is the most likely).
    """
    if not 1 <= top_k <= experts:
        raise LcrInputError(f"top_k must be in 1..{experts}, got {top_k}")
    if layers < 1 or tokens < 1:
        raise LcrInputError(f"need at least one layer and one token, got {layers} and {tokens}")
    rng = np.random.default_rng(seed)
    weights = zipf_weights(experts, a, b)
    rank_of = np.argsort(rng.random((layers, experts)), axis=1)  # rank_of[layer, expert]
    popularity = weights[rank_of]
    # Gumbel top-k: sorting log p + Gumbel noise samples without replacement, in order.
    scores = np.log(popularity)[None] + rng.gumbel(size=(tokens, layers, experts))
    table = np.argsort(-scores, axis=2)[:, :, :top_k]
    return table, popularity


def moe(layers: int = 32, experts: int = 8, top_k: int = 2, a: float = 1.0, b: float = 0.0,
        tokens: int = 1_000, seed: int = 0, rounds: str = "split") -> Trace:
    """Synthetic MoE routing: per layer, independent Zipf(a, b) expert popularity under a
    random per-layer ranking; a token picks top_k distinct experts per layer."""
    table, popularity = zipf_router(layers, experts, top_k, a, b, tokens, seed)
    trace = routing_trace(table, layers, experts, rounds,
                          name=f"moe(l={layers},n={experts},top{top_k},a={a:g},b={b:g})")
    trace.meta.update(popularity=popularity, zipf_a=a, zipf_b=b, seed=seed)
    return trace


def mixtral(tokens: int = 1_000, a: float = 1.0, b: float = 0.0, seed: int = 0, rounds: str = "split") -> Trace:
    """Mixtral-shaped routing: 32 layers, 8 experts, top-2."""
    return moe(32, 8, 2, a, b, tokens, seed, rounds)


def llama_moe(tokens: int = 1_000, a: float = 1.0, b: float = 0.0, seed: int = 0,
              rounds: str = "split") -> Trace:
    """Llama-MoE-shaped routing: 32 layers, 16 experts, top-4."""
    return moe(32, 16, 4, a, b, tokens, seed, rounds)
