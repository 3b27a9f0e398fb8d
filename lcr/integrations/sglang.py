"""lcr's leaf-eviction policies inside SGLang 0.5.23's radix cache.

SGLang's default tree cache is ``UnifiedRadixCache``; its FULL component chooses
device-eviction victims (``_evict_device_start`` / ``_evict_device_next_node``) and
its TreeCore splits nodes. ``PolicyRadixCache`` swaps in a FULL component and a
Python TreeCore that forward those moments to one ``lcr.kv`` ``LeafPolicy`` through
a ``PolicyDriver``, so SGLang's tree makes exactly the choices lcr's own tree makes.
SGLang keeps the locks: a victim is only ever picked from its evictable leaves.

Every policy the radix registry (``lcr.kv.registry``) marks as served gets a backend
``lcr-<name>`` with its own ``PolicyRadixCache`` subclass (``cache_class``; e.g.
``lcr-laru``, ``LARURadixCache``); ``register_backends`` registers them, and
``sglang_patch`` calls it from SGLang's plugin hook.
"""
from __future__ import annotations

import functools
import itertools
import logging
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable

from sglang.srt.mem_cache.registry import create_unified_radix_cache, register_radix_cache_backend
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components.full import FullComponent
from sglang.srt.mem_cache.unified_cache.tree_core_registry import (register_tree_core_backend,
                                                                    registered_tree_core_backends)
from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeCore
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from lcr._native import prefix_keys
from lcr.integrations.sglang_config import PolicyConfig, build_policy, served
from lcr.kv import registry
from lcr.kv.policies import CacheView, LeafPolicy, RadixLRU
from lcr.kv.tree import RadixTree

log = logging.getLogger("lcr.sglang")

TREE_CORE_NAME = "lcr-python"
BACKEND_PREFIX = "lcr-"
_REMEMBERED_REQUESTS = 4096  # waiting requests are re-matched every round; count each once


def prefix_key(parent_key: int, first_tokens) -> int:
    """Serving-mode node key: a hash of the prefix through the node's first page."""
    return hash((parent_key, tuple(first_tokens)))


def request_blocks(token_ids, page_size: int, sim_keys: bool) -> tuple[list[int], list[int]]:
    """A request as blocks (ids, tokens), root first, for policies that keep a shadow
    cache (``LeafPolicy.wants_requests``). Simulation mode: each run of one token value
    is a block and the value its path id; serving mode: a page each, named by a hash
    chain over every token through it (``lcr._native.prefix_keys``: one call, not a
    Python hash per page; the shadow's names need not be the driver's node keys)."""
    paths, tokens = [], []
    if sim_keys:
        for value, run in itertools.groupby(token_ids):
            paths.append(int(value))
            tokens.append(sum(1 for _ in run))
        return paths, tokens
    paths = prefix_keys(token_ids, page_size)
    tokens = [page_size] * len(paths)
    if len(token_ids) % page_size:
        tokens[-1] = len(token_ids) % page_size
    return paths, tokens


def first_token_key(node) -> int:
    """Simulation-mode node key: ``lcr sim-kv`` writes each block as copies of its path
    id, so a node's first token *is* the path id lcr's own tree uses."""
    return int(node.key.token_ids[0])


class PolicyDriver(CacheView):
    """Feeds one ``LeafPolicy`` from SGLang's tree and counts what it did."""

    # A request's prompt is inserted after its prefill (or right after its match, when
    # lcr sim-kv drives the tree): ``on_insert`` tells the policy which request it was,
    # and dates the inserted path at the latest request, as SGLang's LRU dates it.
    caches_requests_later = True
    allocates_before_caching = True

    def __init__(self, policy: LeafPolicy, *, capacity_tokens: int, page_size: int = 1,
                 sim_keys: bool = False):
        self._use(policy)
        self.capacity_tokens = capacity_tokens
        self.page_size = max(1, page_size)
        self.sim_keys = sim_keys
        self.tree_core = None
        self.now = -1
        self.pending_missing: int | None = None
        self._keys: dict[int, int] = {}  # node id -> key (serving mode)
        self._request_time: OrderedDict[str, int] = OrderedDict()  # rid -> time of its first match
        self.inserting_time: int | None = None  # set while a known request inserts
        self.inserting_done = True  # whether that request has finished (no longer holds its path)
        self._reported: dict[int, int] = {}  # key -> latest time reported to the policy
        self._pass_leaves: dict[int, object] | None = None  # key -> leaf node, this eviction pass
        self._last_victim = None
        self.policy_seconds = 0.0
        self.eviction_seconds = 0.0
        self.eviction_passes = 0
        self._log_every = 100
        self._logged_prediction = False
        self.exporter = None  # a PolicyMetricsExporter when SGLang runs with --enable-metrics
        self._carried: dict[str, int] = {}  # counts of policies replaced by restart()

    def _use(self, policy: LeafPolicy) -> None:
        self.policy = policy.bind(self)

    # Keys ---------------------------------------------------------------------------
    def key_of(self, node) -> int:
        if self.sim_keys:
            return first_token_key(node)
        key = self._keys.get(node.id)
        if key is None:
            parent = node.parent
            parent_key = 0 if parent is None or parent is self.tree_core.root_node else self.key_of(parent)
            key = self._keys[node.id] = prefix_key(parent_key, node.key.token_ids[:self.page_size])
        return key

    # CacheView ----------------------------------------------------------------------
    def cached_keys(self):
        return [self.key_of(n) for n in self._cached_nodes()]

    def tokens_of(self, keys):
        keys = set(keys)
        return sum(len(n.key) for n in self._cached_nodes() if self.key_of(n) in keys)

    def lru_twin(self) -> RadixTree:
        """lcr's tree with LRU: it hits what SGLang's tree with LRU hits (the engines'
        parity, tests/test_kv_sglang.py) at a fraction of the cost."""
        return RadixTree(self.capacity_tokens, RadixLRU())

    def _cached_nodes(self):
        stack, root = list(self.tree_core.root_node.children.values()), self.tree_core.root_node
        while stack:
            node = stack.pop()
            if node is not root and node.component_data[ComponentType.FULL].value is not None:
                yield node
            stack.extend(node.children.values())

    # Tree events --------------------------------------------------------------------
    def _report(self, node, now: int) -> None:
        """Tell the policy about the path to ``node`` at ``now``: each node once per
        request (a request matches once and inserts up to three times), and never at a
        time older than one already reported for it (requests insert out of order).

        A node is reported with every ancestor, so an ancestor's time is never older
        than its descendants': the walk up stops at the first node reported at ``now``
        or later (an insert re-walks only its new nodes), and only sums the lengths
        above it, for the depths."""
        root, reported = self.tree_core.root_node, self._reported
        fresh = []  # (key, node) bottom-up, not yet reported at ``now``
        while node is not None and node is not root:
            key = self.key_of(node)
            if reported.get(key, -1) >= now:
                break
            reported[key] = now
            fresh.append((key, node))
            node = node.parent
        above = 0  # tokens from the root to the end of the first node not reported now
        while fresh and node is not None and node is not root:
            above += len(node.key)
            node = node.parent
        keys, depths = [], []
        for key, n in reversed(fresh):
            above += len(n.key)
            keys.append(key)
            depths.append(above)
        self.policy.on_access(keys, now, depths)  # even with none: the request still happened

    def on_match(self, params, result) -> None:
        req = getattr(params, "req", None)
        rid = getattr(req, "rid", None)
        if rid is not None:
            if rid in self._request_time:
                return  # a waiting request, matched again this round
            self._request_time[rid] = self.now + 1
            if len(self._request_time) > _REMEMBERED_REQUESTS:
                self._request_time.popitem(last=False)
        self.now += 1
        if self.policy.wants_requests:  # a shadow cache: the blocks matched (a server matches
            # all but a prompt's last token, which must be computed: the key's limit)
            self.policy.on_request(*request_blocks(params.key.raw_token_ids(), self.page_size, self.sim_keys),
                                   self.now)
        on_served = getattr(self.policy, "on_served_request", None)
        if on_served is not None and req is not None:
            on_served(req, self.now)  # policies that read the request itself (LPC), before its accesses
            if self.exporter is not None:  # its counters move per request, not per eviction pass
                self.exporter.update(self.metrics())
        node = self.tree_core.node_by_id(result.last_device_node)
        self._report(node, self.now)
        tokens, matched = params.key.token_ids, result.device_prefix_len
        self.pending_missing = None
        if matched < len(params.key):
            if self.sim_keys:
                self.pending_missing = int(tokens[matched])
            else:
                parent_key = self.key_of(node) if node is not self.tree_core.root_node else 0
                self.pending_missing = prefix_key(parent_key, tokens[matched:matched + self.page_size])
            self.policy.on_miss(self.pending_missing, self.now)

    @contextmanager
    def inserting_for(self, req):
        self.inserting_time = self._request_time.get(getattr(req, "rid", None))
        finished = getattr(req, "finished", None)
        self.inserting_done = finished() if callable(finished) else True
        try:
            yield
        finally:
            self.inserting_time, self.inserting_done = None, True

    def on_insert(self, params, result) -> None:
        node = result.last_device_node
        if node is None:
            return
        if isinstance(node, int):
            node = self.tree_core.node_by_id(node)
        latest = max(self.now, 0)
        t = self.inserting_time if self.inserting_time is not None else latest
        self._report(node, t)  # its new nodes: the request's access, at the request's time
        if latest > t:  # the path was in use until now: as recent as SGLang's LRU dates it
            self.policy.on_touch(self._path_keys(node), latest)
        # An insert outside a known request is the latest's; a shadow gets what was inserted.
        blocks = request_blocks(params.key.raw_token_ids(), self.page_size, self.sim_keys) \
            if self.policy.wants_requests else None
        self.policy.on_request_cached(t, blocks, self.inserting_done, latest)

    def _path_keys(self, node) -> list[int]:
        """The keys from the root down to ``node``."""
        root, keys = self.tree_core.root_node, []
        while node is not None and node is not root:
            keys.append(self.key_of(node))
            node = node.parent
        return keys[::-1]

    def on_split(self, upper, lower) -> None:
        if self.sim_keys:
            old, new = first_token_key(upper), first_token_key(lower)
        else:
            old = self._keys.pop(lower.id, None)
            if old is None:
                return
            self._keys[upper.id] = old
            new = self._keys[lower.id] = prefix_key(old, lower.key.token_ids[:self.page_size])
        if old in self._reported:
            self._reported[new] = self._reported[old]
        self.policy.on_split(old, new)

    def begin_eviction(self) -> None:
        """An eviction pass starts (the policy restarts its predictor's budget); leaves are
        collected on the first pick."""
        self._pass_leaves, self._last_victim = None, None
        self.policy.begin_eviction(self.pending_missing, max(self.now, 0))

    def end_pass(self, seconds: float, fits_in: int | None = None) -> None:
        """An eviction pass ended; ``fits_in``: the tokens it had to bring the tree down to."""
        self.eviction_seconds += seconds
        self.eviction_passes += 1
        self._pass_leaves, self._last_victim = None, None
        self.policy.end_eviction(max(self.now, 0), fits_in)
        if self.exporter is not None:
            self.exporter.update(self.metrics())

    def _leaves_by_key(self, leaves) -> dict:
        """The pass's evictable leaves by key, kept up to date victim by victim (the
        evicted leaf goes, its parent may come) instead of rebuilt for every victim."""
        by_key, last = self._pass_leaves, self._last_victim
        if by_key is not None and last is not None:
            parent = last.parent
            if parent is not None and parent in leaves:
                by_key[self.key_of(parent)] = parent
        if by_key is None or len(by_key) != len(leaves):
            by_key = self._pass_leaves = {self.key_of(node): node for node in leaves}
        return by_key

    def pick(self, leaves) -> object:
        started = time.perf_counter()
        by_key = self._leaves_by_key(leaves)
        key = self.policy.pick_victim(by_key, max(self.now, 0))
        self.policy_seconds += time.perf_counter() - started
        node = by_key.pop(key)
        self._last_victim = node
        self.policy.on_evicted(key)
        self._keys.pop(node.id, None)
        self._reported.pop(key, None)
        stats = self.policy.stats
        first_prediction = stats.prediction_evictions == 1 and not self._logged_prediction
        if first_prediction or stats.evictions % self._log_every == 0:
            self._logged_prediction |= first_prediction
            log.info("lcr %s metrics: %s", self.policy.name,
                     " ".join(f"{k}={v}" for k, v in self.metrics().items()))
        return node

    def restart(self, policy: LeafPolicy) -> None:
        """The tree was flushed: serve on with a fresh ``policy`` (keys, phases and
        predictor history all described nodes that are gone); counters carry on."""
        for name, value in self._policy_counts().items():
            self._carried[name] = self._carried.get(name, 0) + value
        self._use(policy)
        self.now, self.pending_missing = -1, None
        self._keys.clear()
        self._request_time.clear()
        self._reported.clear()

    def _policy_counts(self) -> dict:
        stats = self.policy.stats.as_dict()
        return {"evictions": stats["evictions"],
                "prediction_evictions": stats["prediction_evictions"],
                "predictor_fallbacks": stats.get("predictor_fallbacks", 0),
                "prediction_induced_misses": stats.get("prediction_induced_misses", 0),
                "induced_misses_paid": stats.get("induced_misses_paid", 0),
                "lru_twin_hit_tokens": stats.get("lru_twin_hit_tokens", 0),
                **{k: stats.get(k, 0) for k in ("phases", "races_won", "races_lost", "leads_forgiven")},  # radix LARU's gates
                **{k: v for k, v in stats.items() if k.startswith("lpc_")}}  # lcr.lpc.serving's

    def metrics(self) -> dict:
        counts = self._policy_counts()
        return {**{k: v + self._carried.get(k, 0) for k, v in counts.items()},
                "policy_seconds": round(self.policy_seconds, 6),
                "eviction_passes": self.eviction_passes,
                "eviction_seconds": round(self.eviction_seconds, 6)}


class PolicyFullComponent(FullComponent):
    """SGLang's FULL component with victims chosen by the cache's ``PolicyDriver``."""

    def __init__(self, cache, params):
        super().__init__(cache, params)
        self.driver: PolicyDriver = cache.driver

    def _evict_device_start(self, request_cnt: int) -> None:
        # Not SGLang's: it builds a heap over every leaf that the driver would not use.
        self._evict_device_request_cnt = request_cnt
        self._evict_device_heap = []
        self._evict_device_last_node = None
        self.driver.begin_eviction()

    def _evict_device_next_node(self, tracker, device_frees, host_frees, cache_actions):
        return self.next_victim(tracker)

    def next_victim(self, tracker) -> int | None:
        """The next victim's node id, or None when enough is evicted or none is
        evictable. Selecting frees nothing (the leaf's eviction does)."""
        leaves = self.tree_core.evictable_device_leaves
        if tracker[self.component_type] >= self._evict_device_request_cnt or not leaves:
            return None
        return self.driver.pick(leaves).id


class PolicyTreeCore(UnifiedTreeCore):
    """The Python TreeCore, telling the driver when a node is split in two."""

    def __init__(self, params, components):
        super().__init__(params, components)
        self.driver: PolicyDriver = components[ComponentType.FULL].driver
        self.driver.tree_core = self

    def _split_node(self, key, child, split_len):
        new_node, action = super()._split_node(key, child, split_len)
        self.driver.on_split(new_node, child)
        return new_node, action


def _tree_core_factory(params, components):
    return PolicyTreeCore(params, components)


class PolicyRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` whose evictions follow an lcr ``LeafPolicy``.

    Options come from ``--radix-eviction-policy-config '<json>'`` (see
    ``lcr.integrations.sglang_config``); they are consumed here and cleared so that
    SGLang does not hand them to its built-in strategy.
    """

    policy_name = "laru"

    def __init__(self, params, *, policy: LeafPolicy | None = None, sim_keys: bool = False):
        config = PolicyConfig.parse(self.policy_name, params.eviction_policy_config)
        params.eviction_policy_config = None
        params.eviction_policy = "lru"
        params.tree_core_backend = TREE_CORE_NAME
        params.component_registry_override = {**(params.component_registry_override or {}),
                                               ComponentType.FULL: PolicyFullComponent}
        allocator = params.token_to_kv_pool_allocator
        capacity = int(getattr(allocator, "size", 0) or 0)
        self._new_policy = lambda: build_policy(config, capacity, params.page_size)
        self.driver = PolicyDriver(policy or self._new_policy(), capacity_tokens=capacity,
                                   page_size=params.page_size, sim_keys=sim_keys)
        super().__init__(params)
        if params.enable_metrics:
            from lcr.integrations.sglang_metrics import PolicyMetricsExporter

            labels = getattr(getattr(self, "metrics_collector", None), "labels", None) or {}
            self.driver.exporter = PolicyMetricsExporter(dict(labels))
        log.info("lcr: %s radix cache over %d tokens (%s)%s", self.policy_name, capacity, config.describe(),
                 _predictor_line(self.driver.policy))

    def reset(self) -> None:
        super().reset()
        if self.driver.now >= 0:  # flushed after serving (not the reset inside __init__)
            self.driver.restart(self._new_policy())

    def match_prefix(self, params):
        result = super().match_prefix(params)
        self.driver.on_match(params, result)
        return result

    def insert(self, params):
        result = super().insert(params)
        self.driver.on_insert(params, result)
        return result

    # Inserts made for a request are its own accesses: dated at its match, not the latest.
    def checkpoint_into_tree(self, req, *, up_to: int, **kwargs) -> None:
        with self.driver.inserting_for(req):
            super().checkpoint_into_tree(req, up_to=up_to, **kwargs)

    def advance_unpublished_req(self, req) -> None:
        with self.driver.inserting_for(req):
            super().advance_unpublished_req(req)

    def _evict_device_next_node(self, component_type, tracker):
        """The walk's next victim. SGLang's step wraps each selection in a result of
        frees, tracker deltas and cache actions for the caller to drain; selecting a
        FULL victim here produces none of them, so the victim is asked for directly
        (an eviction pass makes one such step per victim, plus one that ends it)."""
        component = self.tree_core.components_by_type[component_type]
        if not isinstance(component, PolicyFullComponent):
            return super()._evict_device_next_node(component_type, tracker)
        assert component.is_evict_device_ongoing, "FULL device eviction not started"
        node_id = component.next_victim(tracker)
        return node_id, node_id is not None

    def _evict(self, params, *args, **kwargs):
        # A pass frees ``num_tokens`` (an allocation's shortfall; SGLang stops at the victim
        # that meets it): what an LRU in the tree's place must fit in after it.
        fits_in = max(0, self.evictable_size() + self.protected_size() - params.num_tokens)
        started = time.perf_counter()
        try:
            return super()._evict(params, *args, **kwargs)
        finally:
            self.driver.end_pass(time.perf_counter() - started, fits_in)


def _predictor_line(policy) -> str:
    """'; predictor NAME' for the start-up line, saying what answers until a fit."""
    predictor = getattr(policy, "predictor", None)
    if predictor is None:
        return ""
    name = getattr(predictor, "name", type(predictor).__name__)
    serving = getattr(policy, "predictor_name", name)
    return f"; predictor {name}" + (f" (answered by {serving} until it fits)" if serving != name else "")


@functools.cache
def cache_class(policy: str) -> type[PolicyRadixCache]:
    """The radix cache serving ``policy`` (one class per policy: SGLang builds a
    backend's cache from a class)."""
    served(policy)
    name = f"{policy.upper().replace('-', '_')}RadixCache"
    return type(name, (PolicyRadixCache,), {"policy_name": policy, "__module__": __name__,
                                            "__doc__": f"PolicyRadixCache serving {policy}."})


CACHE_CLASSES: dict[str, type[PolicyRadixCache]] = {name: cache_class(name) for name in registry.SERVED}
globals().update({cls.__name__: cls for cls in CACHE_CLASSES.values()})  # e.g. LARURadixCache


def _backend_factory(cls: type[PolicyRadixCache]) -> Callable:
    def factory(ctx):
        return create_unified_radix_cache(ctx, cache_class=cls)
    return factory


def register_backends() -> None:
    """Register the TreeCore and one radix-cache backend per policy (idempotent:
    SGLang raises on a second registration, and plugins load in every process)."""
    from sglang.srt.mem_cache.registry import registered_radix_cache_backends

    if TREE_CORE_NAME not in registered_tree_core_backends():
        register_tree_core_backend(TREE_CORE_NAME, _tree_core_factory)
    known = set(registered_radix_cache_backends())
    for name in registry.SERVED:
        if BACKEND_PREFIX + name not in known:
            register_radix_cache_backend(BACKEND_PREFIX + name, _backend_factory(cache_class(name)))
