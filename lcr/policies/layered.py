"""Layered paging (MoE expert caching): pages, the layer-step clock, and LLRU's order.

A model with ``layers`` layers of ``experts`` experts has pages
``layer * experts + expert``. Every token walks the layers in order, so the request
stream visits layer 0, 1, ..., layers-1, 0, 1, ... With ``experts=None`` every key is a
page of layer 0, and with ``layers=1`` the layered policies reduce to their flat
counterparts (LLRU is then LRU).
"""
from __future__ import annotations

import heapq
from collections import OrderedDict
from itertools import islice
from typing import Iterator


class LayerShape:
    """Maps a page to its layer, and checks the model's shape parameters."""

    def __init__(self, layers: int = 1, experts: int | None = None):
        if int(layers) < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        if experts is not None and int(experts) < 1:
            raise ValueError(f"experts must be at least 1, got {experts}")
        if layers > 1 and experts is None:
            raise ValueError(f"{layers} layers need the number of experts per layer")
        self.layers = int(layers)
        self.experts = None if experts is None else int(experts)

    def layer_of(self, key: int) -> int:
        if self.experts is None:
            return 0
        layer = key // self.experts
        if not 0 <= layer < self.layers:
            raise ValueError(f"page {key} is outside {self.layers} layers x {self.experts} experts")
        return layer


class LayerClock:
    """The position of the current request in the endless layer walk 0, 1, ..., l-1, 0, ...

    A request to layer L moves the clock forward to the next step whose layer is L, so
    on a layered trace the step equals the request index. With ``native_rounds`` a token
    asks for all its top-k experts of a layer at once: consecutive requests to the same
    layer then share one step instead of starting the next round.
    """

    def __init__(self, layers: int, native_rounds: bool = False):
        self.layers = layers
        self.native_rounds = bool(native_rounds)
        self.step = -1

    def advance(self, layer: int) -> int:
        if self.step < 0:
            self.step = layer
            return self.step
        gap = (layer - self.step) % self.layers
        if gap == 0 and not (self.native_rounds and self.layers > 1):
            gap = self.layers
        self.step += gap
        return self.step


class LayeredRecency:
    """LLRU's eviction order over the cached pages, at the current step t.

    A page p last requested at step tau has last-round index R = floor((t - tau) / l)
    and relative layer distance D = (tau - t) mod l (how many steps until its layer
    comes round again). The order is by R, largest first, then by D, largest first;
    pages that still tie are of one layer and the least recently used goes first.

    Within a layer D is the same for every page and R grows with age, so each layer's
    own LRU list is already in eviction order and the global order is a merge of the
    layer heads: an eviction costs O(l), not O(k).

    Drop-in for ``RecencyOrder`` (``touch``, ``remove``, ``oldest``), plus ``arrive``,
    which moves the clock to the incoming request before any eviction is chosen.
    """

    def __init__(self, shape: LayerShape, native_rounds: bool = False):
        self.shape = shape
        self.clock = LayerClock(shape.layers, native_rounds)
        self._by_layer: list[OrderedDict[int, int]] = [OrderedDict() for _ in range(shape.layers)]
        self._layer_of: dict[int, int] = {}

    @property
    def now(self) -> int:
        return self.clock.step

    def arrive(self, key: int) -> int:
        """Move the clock to the step of a request for ``key``; returns the step."""
        return self.clock.advance(self.shape.layer_of(key))

    def touch(self, key: int) -> None:
        """Record a request for ``key`` at the current step (inserting it if absent)."""
        layer = self._layer_of.get(key)
        if layer is None:
            layer = self._layer_of[key] = self.shape.layer_of(key)
        pages = self._by_layer[layer]
        pages[key] = self.clock.step
        pages.move_to_end(key)

    def remove(self, key: int) -> None:
        del self._by_layer[self._layer_of.pop(key)][key]

    def priority(self, last_step: int) -> tuple[int, int]:
        """(R, D) of a page last requested at ``last_step``: larger is evicted first."""
        ell, t = self.shape.layers, self.clock.step
        return (t - last_step) // ell, (last_step - t) % ell

    def oldest(self, count: int = 1) -> list[int]:
        """The first ``count`` pages in LLRU's eviction order."""
        if count == 1:
            heads = [next(iter(pages.items())) for pages in self._by_layer if pages]
            return [max(heads, key=lambda item: self.priority(item[1]))[0]] if heads else []
        return [key for key, _ in islice(self._ordered(), count)]

    def _ordered(self) -> Iterator[tuple[int, int]]:
        def ranked(pages):
            for key, step in pages.items():
                r, d = self.priority(step)
                yield (-r, -d), key, step

        merged = heapq.merge(*(ranked(p) for p in self._by_layer if p), key=lambda item: item[0])
        for _, key, step in merged:
            yield key, step

    def eviction_order(self) -> list[int]:
        """Every cached page, first to be evicted first."""
        return [key for key, _ in self._ordered()]

    def __contains__(self, key: int) -> bool:
        return key in self._layer_of

    def __len__(self) -> int:
        return len(self._layer_of)

    def __iter__(self) -> Iterator[int]:
        return iter(self._layer_of)
