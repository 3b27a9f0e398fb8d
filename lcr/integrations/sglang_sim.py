"""``lcr sim-kv --engine sglang``: SGLang's real radix tree driven by a block workload.

``SGLangStrategy`` runs one of SGLang's own eviction strategies (``lfu``, ``slru``, ...:
its ``evict_policy.py`` classes) the same way: a stock ``UnifiedRadixCache`` on SGLang's
Python TreeCore, whose FULL component ranks the evictable leaves with the strategy
object's ``get_priority``, so no lcr code takes part in the choice. (A live server's
default Rust TreeCore re-implements these strategies natively.)

The KV pool is a mock allocator (slot numbers only, no tensors of KV); every block
becomes ``tokens`` copies of its path id, so SGLang's nodes split exactly where lcr's
do and a node's first token is the key lcr's policies know it by. Each request runs
the scheduler's cycle: match, lock the cached prefix, evict for the missing tokens,
allocate what fits, insert, unlock.

``keys="serving"`` replays the same tree with the keys a live server uses (hashes of
the prefix through each node's first page): a block's tokens are then its rank among
its parent's children followed by filler, so equal pages recur under different
parents, as real prompts' pages do, and only the parent chain tells them apart.
"""
from __future__ import annotations

from array import array

from lcr.errors import LcrInputError
from lcr.kv.policies import LeafPolicy
from lcr.kv.registry import RadixPolicy, TreeEngine, register_engine, register_policy
from lcr.policies.base import PolicyStats
from lcr.kv.requests import BlockWorkload


class MockAllocator:
    """Just enough of SGLang's token-to-KV allocator: slot bookkeeping on the CPU."""

    device = "cpu"
    page_size = 1

    def __init__(self, size: int):
        self.size = self.size_full = int(size)
        self._free = list(range(self.size, 0, -1))  # slot 0 is SGLang's padding slot

    def available_size(self) -> int:
        return len(self._free)

    def alloc(self, count: int):
        import torch

        if count > len(self._free):
            return None
        slots, self._free = self._free[-count:], self._free[:-count] if count else self._free
        return torch.tensor(slots[::-1], dtype=torch.int64)

    def free(self, indices) -> None:
        self._free.extend(int(i) for i in indices.tolist())

    def free_segment(self, indices, start_pos: int = 0) -> None:
        self.free(indices)

    def clear(self) -> None:
        """Every slot free again (SGLang's flush_cache clears the allocator after the tree)."""
        self._free = list(range(self.size, 0, -1))


class SGLangStrategy:
    """One of SGLang's own eviction strategies, by its ``--radix-eviction-policy`` name
    and constructor options: ``build_cache`` hands both to SGLang's stock tree."""

    uses_predictions = False
    #: SGLang counts a node's hits when a finished request is inserted, so a request
    #: served whole from the cache is inserted too (lcr's policies see it at the match).
    counts_hits_at_insert = True

    def __init__(self, name: str, **options):
        self.name, self.options = name, options
        self.stats = PolicyStats()


def build_cache(policy, capacity_tokens: int, sim_keys: bool = True):
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from lcr.integrations.sglang import PolicyRadixCache, register_backends

    register_backends()
    allocator = MockAllocator(capacity_tokens)
    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                             page_size=1, tree_components=(ComponentType.FULL,))
    if isinstance(policy, SGLangStrategy):
        params.eviction_policy, params.eviction_policy_config = policy.name, policy.options or None
        params.tree_core_backend = "python"  # the TreeCore that calls the strategy object
        return UnifiedRadixCache(params), allocator
    cache = PolicyRadixCache(params, policy=policy, sim_keys=sim_keys)
    return cache, allocator


_FILLER = 1


def serving_tokens(workload: BlockWorkload) -> list[array]:
    """Each request's tokens for ``keys="serving"`` (see the module docstring)."""
    rank: dict[tuple[int, int], int] = {}
    children: dict[int, int] = {}
    out = []
    for request in workload.requests:
        tokens, parent = array("q"), -1
        for path, count in zip(request.paths, request.tokens):
            if (parent, path) not in rank:
                rank[parent, path] = children.get(parent, 0)
                children[parent] = rank[parent, path] + 1
            tokens.append(rank[parent, path] + 3)
            tokens.extend([_FILLER] * (count - 1))
            parent = path
        out.append(tokens)
    return out


def sim_tokens(workload: BlockWorkload) -> list[array]:
    out = []
    for request in workload.requests:
        tokens = array("q")
        for path, count in zip(request.paths, request.tokens):
            tokens.extend([path] * count)
        out.append(tokens)
    return out


def replay_sglang(workload: BlockWorkload, capacity_tokens: int, policy: LeafPolicy,
                  keys: str = "sim", cache=None) -> int:
    """Hit tokens of ``workload`` through SGLang's tree (same contract as ``replay_lcr``).
    ``cache``: an existing ``(cache, allocator)`` to continue with instead of a new one."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    if keys not in ("sim", "serving"):
        raise ValueError(f"keys must be 'sim' or 'serving', got {keys!r}")
    cache, allocator = cache or build_cache(policy, capacity_tokens, sim_keys=keys == "sim")
    hits = 0
    prompts = sim_tokens(workload) if keys == "sim" else serving_tokens(workload)
    for request, tokens in zip(workload.requests, prompts):
        match = cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens)))
        matched = match.device_prefix_len
        hits += matched
        if matched == len(tokens):
            if getattr(policy, "counts_hits_at_insert", False):
                cache.insert(InsertParams(key=RadixKey(tokens), prev_prefix_len=matched,
                                          value=cache.path_device_indices(match.last_device_node)[:matched]))
            continue
        lock = cache.lock(match.last_device_node)
        try:
            need = len(tokens) - matched
            if need > allocator.available_size():
                cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
            # Whole blocks that fit, as lcr's tree does.
            room, end, offset = allocator.available_size(), matched, 0
            for count in request.tokens:
                offset += count
                if offset <= matched:
                    continue
                if offset - matched > room:
                    break
                end = offset
            if end > matched:
                value = torch.cat([cache.path_device_indices(match.last_device_node)[:matched],
                                   allocator.alloc(end - matched)])
                # prev_prefix_len: the cached prefix is the tree's own, not a duplicate to free.
                cache.insert(InsertParams(key=RadixKey(tokens[:end]), value=value, prev_prefix_len=matched))
        finally:
            cache.unlock(lock)
    return hits


def check_sglang() -> None:
    """SGLang 0.5.23 can run here, or a one-line error saying what to install."""
    try:
        import sglang.srt.mem_cache.unified_radix_cache  # noqa: F401
    except ImportError as err:
        hint = ("pip install --no-deps -r sglang_patch/requirements-cpu.txt"
                if getattr(err, "name", None) != "torchvision" else
                "CPU-only machines lack a usable torchvision; put tests/sglang_stubs on PYTHONPATH")
        raise LcrInputError(f"--engine sglang needs SGLang 0.5.23 ({err}); {hint}") from None


# Registered here, not in lcr.kv: the radix layer does not know SGLang. Importing this
# module loads neither torch nor SGLang (a replay does).
register_engine(TreeEngine("sglang", replay_sglang, "SGLang's tree in simulation mode", check_sglang))


def _register_strategy(name: str, strategy: str, summary: str) -> None:
    """One of SGLang's built-in strategies, its options read from its class in
    ``sglang.srt.mem_cache.evict_policy`` (loaded only when they are asked for)."""
    register_policy(RadixPolicy(name, lambda w, pred, seed, **o: SGLangStrategy(name, **o),
                                (f"sglang.srt.mem_cache.evict_policy:{strategy}",), f"SGLang's {summary}",
                                engines=("sglang",)))


_register_strategy("lfu", "LFUStrategy", "least frequently used leaf (hit count, then recency)")
_register_strategy("slru", "SLRUStrategy", "segmented LRU: leaves hit fewer than protected_threshold "
                                           "times go first, least recent first")
_register_strategy("priority", "PriorityStrategy", "lowest request priority first, then least recent "
                                                   "(a replay's requests all have priority 0: LRU)")
_register_strategy("fifo", "FIFOStrategy", "the leaf created first")
_register_strategy("tlru", "TLRUStrategy", "tail-optimised LRU: leaves past their conversation's TTFT "
                                           "budget (threshold, next_prompt_estimate tokens) go first")
