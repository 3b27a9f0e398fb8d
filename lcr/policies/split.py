"""Split ("Dist") caches: the cache is cut into one private part per layer, each run by
its own copy of a flat policy (LRU-Dist, Marker-Dist, OPT-Dist).

Layer L gets floor(k / l) slots, plus one more for the first k mod l layers, so the
parts add up to k. Serving a page means holding it, so every layer needs a slot: a
split cache requires k >= l. ``native_rounds`` is accepted like every layered policy's,
and ignored: a layer's part never sees another layer, so the step clock does not matter.
"""
from __future__ import annotations

from typing import Callable, Sequence

from lcr.policies.base import Policy
from lcr.policies.layered import LayerShape
from lcr.policies.lru import LRU
from lcr.policies.marker import Marker
from lcr.policies.opt import OPT


def layer_capacities(capacity: int, layers: int) -> list[int]:
    """Slots per layer: k // l each, the first k % l layers one more."""
    base, extra = divmod(capacity, layers)
    return [base + (layer < extra) for layer in range(layers)]


class SplitPolicy(Policy):
    """One flat policy per layer; ``part(layer, slots)`` builds layer ``layer``'s."""

    layered = True

    def __init__(self, capacity: int, layers: int, experts: int | None,
                 part: Callable[[int, int], Policy]):
        super().__init__(capacity)
        self.shape = LayerShape(layers, experts)
        if self.capacity < self.shape.layers:
            raise ValueError(f"a split cache needs a slot per layer: k = {self.capacity} < "
                             f"{self.shape.layers} layers")
        self.parts = [part(layer, slots)
                      for layer, slots in enumerate(layer_capacities(self.capacity, self.shape.layers))]

    def _access(self, key, t):
        part = self.parts[self.shape.layer_of(key)]
        hit = part.access(key, t)
        self.last_evicted = part.last_evicted
        return hit

    def __contains__(self, key):
        return key in self.parts[self.shape.layer_of(key)]

    def __len__(self):
        return sum(len(part) for part in self.parts)

    def __iter__(self):
        for part in self.parts:
            yield from part


class LRUDist(SplitPolicy):
    name = "lru_dist"

    def __init__(self, capacity: int, layers: int = 1, experts: int | None = None,
                 native_rounds: bool = False):
        super().__init__(capacity, layers, experts, lambda layer, slots: LRU(slots))


class MarkerDist(SplitPolicy):
    """Each layer's Marker draws from its own generator, seeded ``seed + layer``."""

    name = "marker_dist"

    def __init__(self, capacity: int, layers: int = 1, experts: int | None = None,
                 native_rounds: bool = False, seed: int = 0):
        super().__init__(capacity, layers, experts, lambda layer, slots: Marker(slots, seed + layer))


class OPTDist(SplitPolicy):
    """Belady inside each layer's part (the best any split cache can do)."""

    name = "opt_dist"
    uses_future = True

    def __init__(self, capacity: int, next_use: Sequence[int], layers: int = 1,
                 experts: int | None = None, native_rounds: bool = False):
        super().__init__(capacity, layers, experts, lambda layer, slots: OPT(slots, next_use))
