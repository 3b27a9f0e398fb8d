"""A short CUDA workload for compute-sanitizer (racecheck / synccheck / memcheck):

    compute-sanitizer --tool racecheck python tests/gpu_sanitize_slabhash.py

Every kernel of the CUDA SlabHashCache engine runs on small overfull tables: probe,
refresh with repeated keys, insert with eviction and bypass under each policy, gather
and set_predictions.
"""
import numpy as np
import torch

import lcr
from lcr.embedding.slab_policies import SLAB_POLICIES

rng = np.random.default_rng(0)
table = torch.randn(3000, 8)
store = lcr.HostStore(table)
for policy in SLAB_POLICIES:
    cache = lcr.SlabHashCache(5, 8, policy=policy, device="cuda")
    for _ in range(6):
        indices = torch.as_tensor(rng.zipf(1.2, size=800) % 3000)
        lengths = torch.full((80,), 10)
        out = lcr.sls(cache, store, indices.cuda(), lengths=lengths.cuda())
        rows = cache.gather(cache.find(indices.cuda()))
        cache.set_predictions(indices, rng.normal(size=indices.numel()))
    torch.cuda.synchronize()
    print(policy, "hits", cache.hits, "misses", cache.misses, "bypassed", cache.bypassed)
