"""A tiny seeded generator that every engine (Python, C++, CUDA) reproduces bit for bit.

SplitMix64 (Steele, Lea & Flood 2014). ``below(n)`` maps a 64-bit draw to [0, n)
by a multiply-shift, so randomized policies make the same choices in every engine.
"""
from __future__ import annotations

_MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed: int):
        self.state = seed & _MASK

    def next_u64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return (self.next_u64() * n) >> 64
