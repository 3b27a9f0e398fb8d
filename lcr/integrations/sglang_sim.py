"""``lcr sim-kv --engine sglang``: SGLang's real radix tree driven by a block workload.

The KV pool is a mock allocator (slot numbers only, no tensors of KV); every block
becomes ``tokens`` copies of its path id, so SGLang's nodes split exactly where lcr's
do and a node's first token is the key lcr's policies know it by. Each request runs
the scheduler's cycle: match, lock the cached prefix, evict for the missing tokens,
allocate what fits, insert, unlock.
"""
from __future__ import annotations

from array import array

import torch

from lcr.kv.policies import LeafPolicy
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
        if count > len(self._free):
            return None
        slots, self._free = self._free[-count:], self._free[:-count] if count else self._free
        return torch.tensor(slots[::-1], dtype=torch.int64)

    def free(self, indices) -> None:
        self._free.extend(int(i) for i in indices.tolist())

    def free_segment(self, indices, start_pos: int = 0) -> None:
        self.free(indices)


def build_cache(policy: LeafPolicy, capacity_tokens: int):
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    from lcr.integrations.sglang import PolicyRadixCache, register_backends

    register_backends()
    allocator = MockAllocator(capacity_tokens)
    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                             page_size=1, tree_components=(ComponentType.FULL,))
    cache = PolicyRadixCache(params, policy=policy, sim_keys=True)
    return cache, allocator


def replay_sglang(workload: BlockWorkload, capacity_tokens: int, policy: LeafPolicy) -> int:
    """Hit tokens of ``workload`` through SGLang's tree (same contract as ``replay_lcr``)."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    cache, allocator = build_cache(policy, capacity_tokens)
    hits = 0
    for request in workload.requests:
        tokens = array("q")
        for path, count in zip(request.paths, request.tokens):
            tokens.extend([path] * count)
        match = cache.match_prefix(MatchPrefixParams(key=RadixKey(tokens)))
        matched = match.device_prefix_len
        hits += matched
        if matched == len(tokens):
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
