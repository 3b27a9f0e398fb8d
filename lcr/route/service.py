"""The simulated workers' service time: what a request costs a serving worker.

A worker runs up to ``slots`` requests at once (continuous batching seen from one request:
its own work is not slowed by the others, but a request waits for a free slot). A request
costs prefill for the prompt tokens its radix cache misses, a much smaller cost for the
cached ones, and decode per output token; ``speed`` scales one worker (a slower GPU, a
noisy neighbour). The defaults are round numbers of the order of an 8B model on one GPU:
5,000 prefill tokens/s, 100,000 cached tokens/s, 20 ms per output token, 8 slots.

``prefill_slots`` is how many requests a worker prefills at once. 0 (the default) lets
every slot prefill on its own, as if prefill were as parallel as decode. A real serving
engine batches decode (one step serves every running request in about the time of one)
but prefill is compute-bound: prefilling two prompts together takes as long as one after
the other. ``prefill_slots=1`` models that: a worker's uncached prompt tokens queue behind
each other, so cache misses eat the worker's capacity, not just the request's own TTFT.
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
    prefill_slots: int = 0

    def __post_init__(self):
        for name in ("miss_s_per_token", "hit_s_per_token", "decode_s_per_token"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise LcrInputError(f"service model: {name} must be a finite number >= 0, got {value!r}")
        if self.slots < 1:
            raise LcrInputError(f"service model: slots must be at least 1, got {self.slots}")
        if not 0 <= self.prefill_slots <= self.slots:
            raise LcrInputError(f"service model: prefill_slots must be in [0, slots={self.slots}], "
                                f"got {self.prefill_slots}")

    @property
    def prefill_parallel(self) -> int:
        """Requests a worker prefills at once."""
        return self.prefill_slots or self.slots

    def prefill(self, hit_tokens: int, miss_tokens: int) -> float:
        return self.hit_s_per_token * hit_tokens + self.miss_s_per_token * miss_tokens

    def decode(self, output_tokens: float) -> float:
        return self.decode_s_per_token * output_tokens

    def prefill_occupancy(self, hit_tokens: int, miss_tokens: int) -> float:
        """Seconds of the worker's prefill capacity a request takes (shared by
        ``prefill_parallel`` requests)."""
        return self.prefill(hit_tokens, miss_tokens) / self.prefill_parallel

    def occupancy(self, hit_tokens: int, miss_tokens: int, output_tokens: float) -> float:
        """Seconds of the worker's whole capacity a request takes: what it delays the requests
        behind it. Prefill is shared by ``prefill_parallel`` requests, decode by ``slots``."""
        return self.prefill_occupancy(hit_tokens, miss_tokens) + self.decode(output_tokens) / self.slots
