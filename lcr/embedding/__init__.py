"""GPU embedding caching: SlabHashCache, SparseLengthsSum and backing stores.

- hashing.py    key -> slabset (shared by every engine) and the LARU record bit
- reference.py  the pure-Python batch reference (the spec the engines are tested against)
- cache.py      SlabHashCache: one class over the C++ CPU engine and the CUDA kernels
- stores.py     HostStore (pinned host tensor) and RedisStore
- sls.py        SparseLengthsSum through the cache
- predictions.py  trace-aligned oracle/noisy predictions, the online model fed per batch,
                  and BatchPredictor (a model on its own thread beside lcr.sls)
- bench.py      `lcr bench sls`

Only hashing and the reference are imported eagerly; the rest needs torch.
"""
from lcr.embedding.hashing import record_bit_of, slabset_of

__all__ = ["slabset_of", "record_bit_of"]
