"""The interface every policy implements, and the counters every policy keeps.

A policy manages a cache of ``capacity`` unit-size items keyed by integers. The
simulator (or a cache engine) calls ``access(key, t)`` once per request, with ``t``
the request's logical time (its index in the trace). The policy answers hit or
miss and, on a miss into a full cache, evicts exactly one item, which it reports in
``last_evicted`` so that engines can be compared decision by decision.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Collection, Iterator


@dataclass
class PolicyStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    # Evictions chosen by a prediction, and evictions that followed recency (LRU) instead.
    prediction_evictions: int = 0
    lru_evictions: int = 0
    # Calls into the predictor, and the number of keys they asked about.
    predictor_calls: int = 0
    predicted_keys: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        out.update(self.extra)
        return out


class Policy(ABC):
    """A cache of ``capacity`` unit-size items with one eviction rule."""

    #: Registry name, e.g. ``"laru"``.
    name: ClassVar[str]
    #: Whether the constructor takes a ``predictor`` (see ``lcr.policies.predictions``).
    uses_predictions: ClassVar[bool] = False
    #: Whether the constructor takes ``next_use`` (offline policies such as OPT).
    uses_future: ClassVar[bool] = False
    #: Whether the constructor takes the MoE shape ``layers`` and ``experts`` (layered paging).
    layered: ClassVar[bool] = False
    #: Whether a hit may evict another key (libCacheSim's LIRS and W-TinyLFU's SLRU do).
    evicts_on_hit: ClassVar[bool] = False
    #: The smallest capacity the policy is defined for.
    min_capacity: ClassVar[int] = 1
    #: Whether the decisions depend on the key values, not only on which requests repeat
    #: (W-TinyLFU's sketch hashes the keys): an engine that renumbers the keys must hand
    #: such a policy the original keys too.
    hashes_keys: ClassVar[bool] = False

    def __init__(self, capacity: int):
        if int(capacity) < self.min_capacity:
            raise ValueError(f"cache capacity must be at least {self.min_capacity} item"
                             f"{'s' if self.min_capacity > 1 else ''} for {self.name}, got {capacity}")
        self.capacity = int(capacity)
        self.stats = PolicyStats()
        #: The key evicted by the latest ``access``, or None.
        self.last_evicted: int | None = None

    def access(self, key: int, t: int) -> bool:
        """Serve one request; return True on a hit."""
        self.last_evicted = None
        hit = self._access(key, t)
        if hit:
            self.stats.hits += 1
        else:
            self.stats.misses += 1
        if self.last_evicted is not None:  # a few policies (LIRS) also evict on a hit
            self.stats.evictions += 1
        return hit

    def _evict(self, key: int) -> None:
        """Record that ``key`` left the cache. A policy that may evict several keys in one
        request (libCacheSim's W-TinyLFU) reports the last and counts them all."""
        if self.last_evicted is not None:
            self.stats.evictions += 1
        self.last_evicted = key

    @abstractmethod
    def _access(self, key: int, t: int) -> bool:
        """Serve one request; set ``last_evicted`` when evicting."""

    #: The container of cached keys (a RecencyOrder, a dict, ...), set by each policy;
    #: membership, size and iteration (in the policy's own order) come from it.
    resident: Collection[int]

    def __contains__(self, key: int) -> bool:
        return key in self.resident

    def __len__(self) -> int:
        return len(self.resident)

    def __iter__(self) -> Iterator[int]:
        return iter(self.resident)

    @property
    def full(self) -> bool:
        return len(self) >= self.capacity

    def native_args(self) -> dict:
        """This policy's options as the keyword arguments of its C++ core
        ``lcr._native.replay_<name>`` (the engine adds the requests, ``capacity``, and the
        predictions or next uses: ``lcr.sim.native.core_args``). A policy has a core exactly
        when its class defines this method itself; tests/test_native_params.py checks that
        every constructor option reaches it and that the core takes exactly these names."""
        raise NotImplementedError(f"policy {self.name!r} has no native core")

    @classmethod
    def has_native_core(cls) -> bool:
        """Whether ``native_args`` is this class's own: a subclass changes the rule, so it
        never inherits its parent's core (``laru_llru`` does not replay as ``laru``)."""
        return "native_args" in vars(cls)
