"""A short CUDA workload of the fused SLS for compute-sanitizer (memcheck / synccheck):

    compute-sanitizer --tool memcheck python tests/gpu_sanitize_fused.py

Both fused kernels (csrc/common/slab_fused.h) on small overfull tables under each policy:
pooling from the cache and from the pinned host table, misses listed and inserted with
eviction and bypass, rows of every piece width (fp32 dims 1 / 6 / 128, fp16 dims 3 / 200),
staging rows exhausted (misses read from the table twice), and a batch whose bad indices
and offsets reach the kernels unchecked. The kernels use no shared memory (racecheck has
nothing to check).
"""
import numpy as np
import torch

import lcr
from lcr.embedding import fused
from lcr.embedding.slab_policies import SLAB_POLICIES
from lcr.embedding.sls import read_bags

rng = np.random.default_rng(0)
for policy in SLAB_POLICIES:
    for dtype, dim in ((torch.float32, 1), (torch.float32, 6), (torch.float32, 128),
                       (torch.float16, 3), (torch.float16, 200)):
        table = torch.randn(3000, dim).to(dtype)
        store = lcr.HostStore(table)
        cache = lcr.SlabHashCache(5, dim, dtype=dtype, policy=policy, device="cuda")
        for _ in range(4):
            indices = torch.as_tensor(rng.zipf(1.2, size=800) % 3000).cuda()
            fused.fused_sls(cache, store, indices, lengths=torch.full((80,), 10, device="cuda"))
        fused.STAGING_BYTES = 8 * cache.dim * cache.rows.element_size()
        fresh = lcr.SlabHashCache(5, dim, dtype=dtype, policy=policy, device="cuda")
        fused.fused_sls(fresh, store, torch.arange(3000, device="cuda"),
                        torch.arange(0, 3000, 30, device="cuda"))
        fused.STAGING_BYTES = 64 << 20
        bad = read_bags(torch.tensor([3, 5000, -2, 7], device="cuda"),
                        torch.tensor([0, 3, 1], device="cuda"), rows=3000, dtype=dtype,
                        device="cuda", defer=True)
        fused.fused_pool(cache, store, bad)
        torch.cuda.synchronize()
        print(policy, dtype, dim, "hits", cache.hits, "misses", cache.misses,
              "bypassed", cache.bypassed)
