"""The frequency sketch W-TinyLFU admits by: libCacheSim 0.3.5's counting Bloom filter.

``entries`` expected keys at error 0.001 give about 14.4 counters per key and 10 hash
positions (a + i b) mod counters, with a and b the low 32 bits of XXH64 of the key's 8
little-endian bytes under two seeds. ``add`` raises all of a key's counters, ``estimate``
is their minimum, ``halve`` ages every counter. The C++ core hashes the same way
(``csrc/cpu/xxh64.h``), so both engines make the same admission decisions.
"""
from __future__ import annotations

import math

MASK64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
SEED_A, SEED_B = 0x12345678, 0x12344321


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK64


def xxh64_u64(value: int, seed: int) -> int:
    """XXH64 of one 64-bit integer's 8 little-endian bytes (the short-input path)."""
    lane = value & MASK64
    h = (seed + P5 + 8) & MASK64
    h ^= (_rotl((lane * P2) & MASK64, 31) * P1) & MASK64
    h = (_rotl(h, 27) * P1 + P4) & MASK64
    h ^= h >> 33
    h = (h * P2) & MASK64
    h ^= h >> 29
    h = (h * P3) & MASK64
    return h ^ (h >> 32)


class CountingBloomSketch:
    def __init__(self, entries: int, error: float = 0.001):
        per_key = -math.log(error) / 0.480453013918201  # ln(2)^2
        self.hashes = math.ceil(0.693147180559945 * per_key)
        size = min(math.ceil(per_key * entries), 2**31 - 1)
        self.size = size if size >= self.hashes else 2 * self.hashes
        self.counters = [0] * self.size

    def _slots(self, key: int):
        a = xxh64_u64(key, SEED_A) & 0xFFFFFFFF
        b = xxh64_u64(key, SEED_B) & 0xFFFFFFFF
        return [((a + i * b) & 0xFFFFFFFF) % self.size for i in range(self.hashes)]

    def estimate(self, key: int) -> int:
        return min(self.counters[x] for x in self._slots(key))

    def add(self, key: int) -> None:
        for x in self._slots(key):
            self.counters[x] += 1

    def halve(self) -> None:
        self.counters = [c >> 1 for c in self.counters]
