"""Key -> slabset hashing: the spec of ``csrc/common/slab_hash.h``.

SlabHash (HugeCTR's gpu_cache layout) hashes a key to one slabset of 2 x 32 slots and
runs the policy locally there. The MurmurHash3 64-bit finalizer spreads dense
embedding row ids evenly across slabsets.

``record_bit_of`` picks a key's bit in a slabset's 8192-bit record of prediction-driven
evictions (LARU). It takes the hash's top 13 bits: the keys of one slabset share
``mix64(key) % num_slabsets``, i.e. its low bits when num_slabsets is a power of two,
so low bits would crowd a slabset's keys onto a few record bits.

``tag_of`` is the byte stored beside a key's slot (``SlabMetadata.tags``): a probe
compares a slabset's 64 tags and reads only the keys whose tag matches. Bits 40-47 of
the hash; 0 is kept for free slots, so a zero tag becomes 1.
"""
from __future__ import annotations

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    x &= _MASK
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK
    return x ^ (x >> 33)


def slabset_of(key: int, num_slabsets: int) -> int:
    if num_slabsets < 1:
        raise ValueError(f"num_slabsets must be at least 1, got {num_slabsets}")
    return mix64(key) % num_slabsets


RECORD_BITS = 8192


def record_bit_of(key: int) -> int:
    return mix64(key) >> 51


def tag_of(key: int) -> int:
    return (mix64(key) >> 40) & 0xFF or 1
