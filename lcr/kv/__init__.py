"""Radix (prefix) KV caches: block workloads, lcr's own tree, leaf-eviction policies
shared with the SGLang integration, and the ``lcr sim-kv`` replays."""
from lcr.kv.policies import FPB, HF, LARU, LRU, RLT, CacheView, FurthestNextUse, LeafPolicy
from lcr.kv.predictors import PathOracle
from lcr.kv.requests import BLOCK_TOKENS, BlockRequest, BlockWorkload, build_workload
from lcr.kv.sim import POLICIES, KVResult, make_policy, replay_lcr, run_sweep
from lcr.kv.tree import RadixTree

__all__ = ["BLOCK_TOKENS", "BlockRequest", "BlockWorkload", "CacheView", "FPB", "FurthestNextUse",
           "HF", "KVResult", "LARU", "LRU", "LeafPolicy", "POLICIES", "PathOracle", "RLT",
           "RadixTree", "build_workload", "make_policy", "replay_lcr", "run_sweep"]
