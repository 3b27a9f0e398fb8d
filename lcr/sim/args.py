"""Parsing of the list arguments the simulator CLIs share (sizes, noise levels)."""
from __future__ import annotations

import math

from lcr.errors import LcrInputError


def parse_sizes(text: str, total: int, flag: str, unit: str = "item") -> list[int]:
    """``1%,5%,100``: absolute sizes, or percentages of ``total``; each at least one ``unit``."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            value = float(item[:-1]) / 100 * total if item.endswith("%") else float(item)
        except ValueError:
            raise LcrInputError(f"{flag}: {item!r} is neither a number nor a percentage") from None
        if not math.isfinite(value) or value <= 0:
            raise LcrInputError(f"{flag}: {item!r} gives no room; sizes must be at least 1 {unit}")
        if value > MAX_SIZE:
            raise LcrInputError(f"{flag}: {item!r} is more than 2^62 {unit}s, beyond any memory")
        out.append(max(1, round(value)))
    if not out:
        raise LcrInputError(f"{flag}: give at least one size")
    return out


def parse_noises(text: str, probability: bool = False) -> list[float]:
    """``0,0.1,0.5``: finite, non-negative noise levels (probabilities in [0, 1] if asked)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        try:
            value = float(item)
        except ValueError:
            raise LcrInputError(f"--noise: {item!r} is not a number") from None
        if probability and not 0 <= value <= 1:
            raise LcrInputError(f"--noise: {item!r} must be a probability in [0, 1]")
        if not math.isfinite(value) or value < 0:
            raise LcrInputError(f"--noise: {item!r} must be a finite number >= 0")
        out.append(value)
    return out or [0.0]


#: The largest cache size accepted: beyond it sizes no longer index memory (and 2^62
#: items would not fit anyway).
MAX_SIZE = 1 << 62


def check_seed(seed: int, flag: str = "--seed") -> int:
    """Seeds feed numpy's generators, which take integers in 0 .. 2^63 - 1."""
    if not 0 <= seed < 1 << 63:
        raise LcrInputError(f"{flag} must be a non-negative integer below 2^63, got {seed}")
    return seed


def check_limit(limit: int | None, unit: str = "requests") -> None:
    if limit is not None and limit < 1:
        raise LcrInputError(f"--limit must be at least 1 ({unit}), got {limit}")


PLOT_SUFFIXES = (".png", ".pdf", ".svg")

