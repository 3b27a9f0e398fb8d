"""ExpertCache: at most k experts of a MoE model on the compute device, the rest in host
memory, paged in on demand under any spec policy (LLRU by default).

Every expert's weights live in host memory (pinned when CUDA is present, so copies to
the device can run asynchronously). The device holds ``capacity`` slots, each a copy of
the expert architecture; loading an expert copies its weights into a slot, and an
eviction only hands the slot over, so the device never allocates after warm-up.

The policy sees one access per ``get`` (or per expert named in ``prefetch``), in call
order, with pages ``layer * experts + expert``: the same stream the simulator replays
for a routing trace with ``rounds="native"`` (a token's top-k experts of one layer, then
the next layer), so fault counts can be checked against ``lcr sim``.

On CUDA, loads run on a side stream and the compute stream waits only for the copy it
needs. ``prefetch(layer, experts)`` issues the next layer's loads early; it makes the
policy decisions at that moment, so the hint must name the experts (and order) the
layer will then ``get``: a hint that turns out wrong costs extra loads, not correctness.

A slot is overwritten in place when its expert is evicted, and the copy waits only for
compute already queued on the current stream. So ``get`` hands out an ``ExpertHandle``,
not the slot: calling it after a later ``get``/``prefetch`` reused the slot raises
``StaleExpertError`` instead of computing with another expert's (or half-copied)
weights. Queue each expert's compute before the next ``get``/``prefetch``.

Not thread-safe: one caller (the model's forward) drives a cache.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Sequence

from lcr.policies import POLICIES, Policy, make_policy


def _torch():
    import torch  # optional dependency: `pip install lcr[moe]`

    return torch


class StaleExpertError(RuntimeError):
    """An expert's slot was reused by a later ``get``/``prefetch`` before its compute ran."""


class ExpertHandle:
    """The device module of one expert, valid while its slot still holds that expert.

    Call it like the module; ``module`` gives the slot module itself (same check). Stale
    use raises: on CUDA the slot may be mid-copy, so running it would race the load."""

    __slots__ = ("_cache", "_key", "_slot", "_generation")

    def __init__(self, cache: "ExpertCache", key: int, slot_index: int):
        self._cache, self._key, self._slot = cache, key, slot_index
        self._generation = cache._generations[slot_index]

    @property
    def module(self):
        if self._cache._generations[self._slot] != self._generation:
            layer, expert = divmod(self._key, self._cache.experts)
            raise StaleExpertError(
                f"expert ({layer}, {expert}) was evicted by a later get/prefetch before its "
                f"compute was queued; queue each expert's compute before the next get/prefetch")
        return self._cache._slots[self._slot]

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)


@dataclass
class ExpertCacheStats:
    hits: int = 0
    faults: int = 0
    evictions: int = 0
    prefetched: int = 0
    load_seconds: float = 0.0  # host time spent issuing loads (on CUDA: enqueue, not transfer)


class ExpertCache:
    """Serve ``experts[layer][expert]`` modules from at most ``capacity`` device slots.

    ``policy`` is any registered spec policy name; layered ones get the model's shape
    (``layers``, ``experts``, native rounds) automatically; ``policy_params`` go to its
    constructor (e.g. a ``predictor`` for LARU). Offline policies (OPT) need ``next_use``.
    """

    def __init__(self, experts: Sequence[Sequence["torch.nn.Module"]], capacity: int,
                 policy: str = "llru", device=None, prefetch: bool = True, **policy_params):
        torch = _torch()
        self.layers = len(experts)
        self.experts = len(experts[0]) if self.layers else 0
        if self.layers == 0 or any(len(row) != self.experts for row in experts):
            raise ValueError("experts must be a non-empty [layers][experts] table with equal rows")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 expert, got {capacity}")
        self.capacity = min(int(capacity), self.layers * self.experts)
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        self._cuda = self.device.type == "cuda"
        pin = torch.cuda.is_available()
        # Host copies, flattened to one tensor list per expert (parameters, then buffers).
        self._host = [[self._to_host(module, pin) for module in row] for row in experts]
        self._template = copy.deepcopy(experts[0][0]).to("cpu")
        self.policy = self._make_policy(policy, policy_params)
        self._slots: list = []                # device modules, at most `capacity`
        self._generations: list[int] = []     # per slot: loads so far (stale-handle check)
        self._resident: dict[int, int] = {}     # page -> slot index
        self._ready: dict[int, object] = {}     # page -> CUDA event of its pending load
        self._prefetched: dict[int, int] = {}   # page -> pending prefetched gets
        self._t = 0
        self._stream = torch.cuda.Stream(self.device) if self._cuda and prefetch else None
        self.prefetch_enabled = bool(prefetch)
        self.stats = ExpertCacheStats()

    # --- policy and memory ---------------------------------------------------------------------

    def _make_policy(self, name: str, params: dict) -> Policy:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")
        if POLICIES[name].layered:
            params = {"layers": self.layers, "experts": self.experts, "native_rounds": True, **params}
        return make_policy(name, self.capacity, **params)

    @staticmethod
    def _to_host(module, pin: bool) -> list:
        tensors = [t.detach().to("cpu") for t in [*module.parameters(), *module.buffers()]]
        return [t.pin_memory() if pin else t.clone() for t in tensors]

    def _new_slot(self):
        module = copy.deepcopy(self._template).to(self.device)
        module.requires_grad_(False)
        return module

    def page(self, layer: int, expert: int) -> int:
        if not 0 <= layer < self.layers or not 0 <= expert < self.experts:
            raise IndexError(f"expert ({layer}, {expert}) outside {self.layers} layers x {self.experts}")
        return layer * self.experts + expert

    # --- serving -------------------------------------------------------------------------------

    def get(self, layer: int, expert: int) -> ExpertHandle:
        """A handle on the device module of ``experts[layer][expert]``, loading it on a fault.

        Queue its compute before the next ``get``/``prefetch``: a later load may reuse its
        slot (it waits only for compute already queued), and the handle then raises
        ``StaleExpertError``.
        """
        key = self.page(layer, expert)
        if self._prefetched.get(key) and key in self._resident:
            self._prefetched[key] -= 1
        else:
            self._access(key)
        self._wait(key)
        return ExpertHandle(self, key, self._resident[key])

    def prefetch(self, layer: int, experts: Sequence[int]) -> None:
        """Start loading the experts ``layer`` will ``get`` next (in that order)."""
        if not self.prefetch_enabled:
            return
        for expert in experts:
            key = self.page(layer, expert)
            self._access(key)
            self._prefetched[key] = self._prefetched.get(key, 0) + 1
            self.stats.prefetched += 1

    def _access(self, key: int) -> None:
        hit = self.policy.access(key, self._t)
        self._t += 1
        if hit:
            self.stats.hits += 1
            return
        self.stats.faults += 1
        victim = self.policy.last_evicted
        if victim is not None:
            self.stats.evictions += 1
            slot = self._resident.pop(victim)
            self._ready.pop(victim, None)
            self._prefetched.pop(victim, None)
        elif len(self._slots) < self.capacity:
            slot = len(self._slots)
            self._slots.append(self._new_slot())
            self._generations.append(0)
        else:  # the policy admitted without evicting although every slot is taken
            raise RuntimeError(f"policy {self.policy.name} exceeded {self.capacity} slots")
        self._load(key, slot)
        self._resident[key] = slot

    def _load(self, key: int, slot_index: int) -> None:
        torch = _torch()
        start = time.perf_counter()
        layer, expert = divmod(key, self.experts)
        self._generations[slot_index] += 1  # handles on the slot's previous expert go stale
        slot = self._slots[slot_index]
        targets = [*slot.parameters(), *slot.buffers()]
        with torch.no_grad():
            if self._stream is None:
                for dst, src in zip(targets, self._host[layer][expert]):
                    dst.copy_(src, non_blocking=self._cuda)
            else:
                # The slot may still be read by queued compute: copy after it.
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self._stream):
                    for dst, src in zip(targets, self._host[layer][expert]):
                        dst.copy_(src, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record(self._stream)
                self._ready[key] = event
        self.stats.load_seconds += time.perf_counter() - start

    def _wait(self, key: int) -> None:
        event = self._ready.pop(key, None)
        if event is not None:
            _torch().cuda.current_stream(self.device).wait_event(event)

    # --- inspection ----------------------------------------------------------------------------

    def resident(self) -> list[tuple[int, int]]:
        """The (layer, expert) pairs on the device now."""
        return sorted(divmod(key, self.experts) for key in self._resident)

    def __len__(self) -> int:
        return len(self._resident)
