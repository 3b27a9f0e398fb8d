"""Radix (prefix) KV caches: block workloads, lcr's own tree, leaf-eviction policies
shared with the SGLang integration, their registry, and the ``lcr sim-kv`` replays."""
from lcr.kv.policies import (CacheView, FurthestNextUse, LeafPolicy, RadixFPB, RadixHF, RadixLARU, RadixLRU,
                             RadixRLT)
from lcr.kv.predictors import PathOracle
from lcr.kv.registry import RadixPolicy, register_policy
from lcr.kv.requests import BLOCK_TOKENS, BlockRequest, BlockWorkload, build_workload
from lcr.kv.sim import POLICIES, KVResult, make_radix_policy, replay_lcr, run_radix_sweep
from lcr.kv.tree import RadixTree

__all__ = ["BLOCK_TOKENS", "BlockRequest", "BlockWorkload", "CacheView", "FurthestNextUse", "KVResult",
           "LeafPolicy", "POLICIES", "PathOracle", "RadixFPB", "RadixHF", "RadixLARU", "RadixLRU",
           "RadixPolicy", "RadixRLT", "RadixTree", "build_workload", "make_radix_policy", "register_policy",
           "replay_lcr", "run_radix_sweep"]
