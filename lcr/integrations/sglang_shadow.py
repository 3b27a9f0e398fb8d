"""The LRU that LARU's ``confidence=shadow`` compares with, inside SGLang.

It is SGLang's own radix cache with its stock LRU (on the Rust TreeCore where SGLang
has one), over an allocator of the same size that holds no KV tensors. The driver hands
it what the real cache sees, in the same order: every request's match (hits counted,
recency refreshed) and every insert (a prefilled prompt, a finished turn with its
reply). So its hit tokens are what stock SGLang would have cached on the same requests
(running requests' locks aside), at SGLang's own cost per call, where lcr's tree over one
block per page costs Python work per prompt token and never sees replies. Page size 1 (SGLang's default); other page sizes use lcr's
tree over pages (``PolicyDriver.lru_shadow``). Not thread-safe: the scheduler thread
drives it.
"""
from __future__ import annotations

import torch
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache


class SGLangShadowLRU:
    def __init__(self, capacity_tokens: int):
        self._allocator = TokenToKVPoolAllocator(max(1, capacity_tokens), torch.float16, "cpu", None,
                                                 need_sort=False)
        self._cache = UnifiedRadixCache(CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self._allocator,
            page_size=1, tree_components=(ComponentType.FULL,)))
        self.hits = 0  # stock LRU's hit tokens on the requests so far
        self.requests = 0

    def request(self, key, now: int) -> int:
        """A request's prompt (SGLang's ``RadixKey``) is matched: stock LRU's hit tokens
        (the prompt is cached when the real cache inserts it: ``extend``)."""
        hit = self._cache.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
        self.hits += hit
        self.requests += 1
        return hit

    def extend(self, key) -> None:
        """The real cache inserted ``key``: the shadow caches it too, evicting by LRU."""
        cache, allocator = self._cache, self._allocator
        match = cache.match_prefix(MatchPrefixParams(key=key))
        hit = match.device_prefix_len
        need = len(key) - hit
        if need <= 0:
            return
        lock = cache.lock(match.last_device_node)  # the matched prefix stays while we make room
        try:
            if need > allocator.available_size():
                cache.evict(EvictParams(num_tokens=need - allocator.available_size()))
            if need <= allocator.available_size():
                value = torch.cat([cache.path_device_indices(match.last_device_node)[:hit], allocator.alloc(need)])
                cache.insert(InsertParams(key=key, value=value, prev_prefix_len=hit))
        finally:
            cache.unlock(lock)
