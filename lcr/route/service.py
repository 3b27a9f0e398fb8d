"""The simulated workers' service time: what a request costs a serving worker.

A worker runs up to ``slots`` requests at once (continuous batching seen from one request:
its own work is not slowed by the others, but a request waits for a free slot). A request
costs prefill for the prompt tokens its radix cache misses, a much smaller cost for the
cached ones, and decode per output token; ``speed`` scales one worker (a slower GPU, a
noisy neighbour). The defaults are round numbers of the order of an 8B model on one GPU:
5,000 prefill tokens/s, 100,000 cached tokens/s, 20 ms per output token, 8 slots.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lcr.errors import LcrInputError


@dataclass(frozen=True)
class ServiceModel:
    miss_s_per_token: float = 2e-4
    hit_s_per_token: float = 1e-5
    decode_s_per_token: float = 0.02
    slots: int = 8

    def __post_init__(self):
        for name in ("miss_s_per_token", "hit_s_per_token", "decode_s_per_token"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise LcrInputError(f"service model: {name} must be a finite number >= 0, got {value!r}")
        if self.slots < 1:
            raise LcrInputError(f"service model: slots must be at least 1, got {self.slots}")

    def prefill(self, hit_tokens: int, miss_tokens: int) -> float:
        return self.hit_s_per_token * hit_tokens + self.miss_s_per_token * miss_tokens

    def decode(self, output_tokens: int) -> float:
        return self.decode_s_per_token * output_tokens
