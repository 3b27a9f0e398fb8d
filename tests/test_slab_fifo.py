"""The slab policy fifo on one slabset, against hand-computed victims, in every engine.

FIFO evicts the unpinned key inserted longest ago; a hit does not move it, a bypassed
miss is never queued, an evicted key that comes back joins the end. The cross-engine
tests (test_slabhash_cache, test_slab_warp_model, test_slab_fused) run it with every
other registered policy. Run time: about 2 s.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from lcr import _native  # noqa: E402
from lcr.cuda import gpu_available  # noqa: E402
from lcr.embedding.cache import SlabHashCache  # noqa: E402
from lcr.embedding.reference import BYPASSED, HIT, INSERTED, SlabsetReference  # noqa: E402


def fifo_steps() -> list[tuple[list[int], list[int], list[int]]]:
    """Batches into one slabset with the outcome and evicted key of each distinct key.
    Key k < 64 is inserted k-th, into slot k."""
    rest = list(range(7, 64)) + [100, 101, 102, 103, 104, 105]  # cached after step 7, with 6
    return [
        (list(range(64)), [INSERTED] * 64, [-1] * 64),
        ([0, 1, 0], [HIT, HIT], [-1, -1]),       # hits: LRU's oldest is now 2, FIFO's still 0
        ([100], [INSERTED], [0]),
        ([1, 101], [HIT, INSERTED], [-1, 2]),    # 1 is the oldest but pinned by its hit
        ([102], [INSERTED], [1]),                # and its hit did not move it
        ([103, 104], [INSERTED] * 2, [3, 4]),
        ([100, 105], [HIT, INSERTED], [-1, 5]),
        # Every cached key pinned: 200 is bypassed and never joins the queue.
        ([6] + rest + [200], [HIT] * 64 + [BYPASSED], [-1] * 65),
        ([201], [INSERTED], [6]),
        ([0], [INSERTED], [7]),                  # 0 comes back at the end of the queue
        ([202, 203], [INSERTED] * 2, [8, 9]),
    ]


@pytest.mark.parametrize("engine", [
    "native", "warp-model",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU")])])
def test_fifo_evicts_the_oldest_insertion(engine):
    _native.warp_model.set_seed(3)
    reference = SlabsetReference(1, "fifo")
    device = "cuda" if engine == "cuda" else "cpu"
    cache = SlabHashCache(1, dim=2, policy="fifo", device=device, engine=engine)
    for batch, outcome, evicted in fifo_steps():
        expected = reference.access(batch)
        assert (expected.outcome, expected.evicted) == (outcome, evicted)
        got = cache.access(torch.tensor(batch, device=cache.device))
        assert (got.outcome.tolist(), got.evicted.tolist()) == (outcome, evicted)
        # Predictions that would make FPB evict the newest key: FIFO ignores them.
        keys = sorted(cache.cached_keys())
        cache.set_predictions(keys, [-float(k) for k in keys])
    assert cache.cached_keys() == reference.cached_keys()
