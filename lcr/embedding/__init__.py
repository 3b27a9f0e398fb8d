"""GPU embedding caching (SlabHashCache, SparseLengthsSum, backing stores).

What exists so far is the key -> slabset hash that every engine shares."""
from lcr.embedding.hashing import slabset_of

__all__ = ["slabset_of"]
