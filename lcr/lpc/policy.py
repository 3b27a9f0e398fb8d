"""LPC's eviction order, LARU's view of it, and the Oracle.

Paper rule: a finished sequence's blocks get the conversation's continuation
probability p; at time t a block ranks by p' = p·d / (p·d + 1 − p) with
d = exp(−scale·(t − t_last)), and the smallest p' is evicted first. A block that
several conversations share keeps the larger p' (max pooling) and the latest t_last.

Instead of re-decaying every block periodically we keep one fixed number per block,
``key = logit(p) + scale·t_last``: logit(p') = logit(p) − scale·(t − t_last), so at any
moment logit(p') = key − scale·t, the same shift for every block; the order by p'
is the order by key, and max pooling of p' is max pooling of keys. ``LiteralLPC``
does the literal decay-and-rescan and ``tests/test_lpc.py`` checks both agree.

Time: tree engines call policies with ``now`` = the request index (the order of the
replay); the workload's ``times`` turn it into seconds. Request ``now``'s blocks get
``probabilities[now]`` when the request is served (its prediction only needs the user
prompts, which are known on arrival; the paper assigns it when the reply completes,
a few seconds later in this workload).
"""
from __future__ import annotations

import math
from typing import Sequence

from lcr.kv.policies import LeafPolicy

SCALE = 1e-2  # 1/s; the paper's rule of thumb is 1 / mean inter-turn gap
_EPS = 1e-6   # p is clipped to [eps, 1 - eps] so logit stays finite (the Oracle's 0/1)


def logit(p: float) -> float:
    p = min(max(float(p), _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


class ContinuationKeys:
    """Per-node LPC keys, shared by the ``lpc`` policy and the predictor LARU uses.

    Not thread-safe: one engine (one tree) drives it."""

    def __init__(self, probabilities: Sequence[float], times: Sequence[float], *,
                 scale: float = SCALE, prior: float = 0.5):
        if len(probabilities) != len(times):
            raise ValueError("one probability per request is needed")
        if scale <= 0:
            raise ValueError(f"lpc scale must be positive, got {scale}")
        self.logits = [logit(p) for p in probabilities]
        self.times = list(map(float, times))
        self.scale = float(scale)
        self.prior = logit(prior)  # for a request index outside the workload (serving)
        self.key: dict[int, float] = {}

    def seconds(self, now: int) -> float:
        return self.times[now] if 0 <= now < len(self.times) else float(now)

    def request_logit(self, now: int) -> float:
        return self.logits[now] if 0 <= now < len(self.logits) else self.prior

    def access(self, keys: Sequence[int], now: int) -> None:
        """Request ``now`` used these nodes: max-pool its fresh key into theirs."""
        fresh = self.request_logit(now) + self.scale * self.seconds(now)
        get = self.key.get
        for k in keys:
            old = get(k)
            self.key[k] = fresh if old is None or fresh > old else old

    def split(self, key: int, lower_key: int) -> None:
        if key in self.key:
            self.key[lower_key] = self.key[key]

    def forget(self, key: int) -> None:
        self.key.pop(key, None)

    def current_logit(self, key: int, now: int) -> float:
        """logit(p') of a node at request ``now`` (−inf when never assigned)."""
        k = self.key.get(key)
        return -math.inf if k is None else k - self.scale * self.seconds(now)


class LPC(LeafPolicy):
    """Evict the leaf with the smallest decayed continuation probability; ties go to
    the least recently used (then the smaller key), as in every lcr policy."""

    name = "lpc"

    def __init__(self, keys: ContinuationKeys):
        super().__init__()
        self.keys = keys

    def on_access(self, keys, now, depths=None):
        super().on_access(keys, now, depths)
        self.keys.access(keys, now)

    def on_split(self, key, lower_key):
        super().on_split(key, lower_key)
        self.keys.split(key, lower_key)

    def on_evicted(self, key):
        super().on_evicted(key)
        self.keys.forget(key)

    def pick_victim(self, leaves, now):
        get, last = self.keys.key.get, self.last_access.get
        self.stats.prediction_evictions += 1
        return min(leaves, key=lambda k: (get(k, -math.inf), last(k, -1), k))


class LiteralLPC(LeafPolicy):
    """The paper's rule written out: (p, t_last) per node, decayed at every eviction
    ("rescan"), max pooling of the decayed probability on access. Slow; a reference."""

    name = "lpc-literal"

    def __init__(self, probabilities: Sequence[float], times: Sequence[float], scale: float = SCALE):
        super().__init__()
        self.p = [min(max(float(p), _EPS), 1 - _EPS) for p in probabilities]
        self.times = list(map(float, times))
        self.scale = scale
        self.state: dict[int, tuple[float, float]] = {}  # node -> (p at t_last, t_last)

    def decayed(self, key: int, t: float) -> float:
        if key not in self.state:
            return 0.0
        p, t_last = self.state[key]
        d = math.exp(-self.scale * (t - t_last))
        return p * d / (p * d + 1 - p)

    def on_access(self, keys, now, depths=None):
        super().on_access(keys, now, depths)
        t = self.times[now]
        for k in keys:
            self.state[k] = (max(self.decayed(k, t), self.p[now]), t)

    def on_split(self, key, lower_key):
        super().on_split(key, lower_key)
        if key in self.state:
            self.state[lower_key] = self.state[key]

    def on_evicted(self, key):
        super().on_evicted(key)
        self.state.pop(key, None)

    def pick_victim(self, leaves, now):
        t, last = self.times[now], self.last_access.get
        return min(leaves, key=lambda k: (self.decayed(k, t), last(k, -1), k))


class ContinuationNextAccess:
    """LPC's probability as a next-access time, for LARU (``predict(keys, now)``).

    If a conversation is still going, its next turn comes about one mean gap
    (1/scale) after the last; weighting by the odds that it is still going gives
    predicted next access = t + (1/scale)·(1 − p')/p' = t + exp(−logit p')/scale.
    It is decreasing in p', so "evict the largest predicted time" is LPC's order; a
    node never assigned a probability predicts +inf (evict first)."""

    name = "lpc"

    def __init__(self, keys: ContinuationKeys):
        self.keys = keys

    def observe(self, key: int, now: int) -> None:
        self.keys.access([key], now)

    def on_split(self, key: int, lower_key: int) -> None:
        self.keys.split(key, lower_key)

    def predict(self, keys: Sequence[int], now: int) -> list[float]:
        t = self.keys.seconds(now)
        out = []
        for k in keys:
            lg = self.keys.current_logit(k, now)
            out.append(math.inf if lg == -math.inf else t + math.exp(min(-lg, 700.0)) / self.keys.scale)
        return out
