"""lcr._native.leaf_window (LARU's window in one call) against a Python transcription
of the rule: the ``count`` oldest leaves by (last access, key), a leaf never accessed
counting as -1; the largest rank among them, the older leaf on ties. Whole-policy
decisions are compared with the reference in test_kv_laru_reference."""
from __future__ import annotations

import math
import random

import pytest

from lcr._native import leaf_window


def reference(leaves, stamps, count, predicted, ranks):
    order = sorted(leaves, key=lambda key: (stamps.get(key, -1), key))
    if not order:
        return None, None, []
    window = order[:max(count, 1)]
    if len(window) == 1:
        return None, window[0], []
    fresh = [key for key in window if key not in predicted]
    if fresh:
        return None, window[0], fresh
    return max(window, key=lambda key: ranks.get(key, math.inf)), window[0], []  # max keeps the first


def case(rng: random.Random):
    n = rng.randrange(0, 12)
    keys = rng.sample(range(-5, 40), n) + [rng.getrandbits(63) - (1 << 62) for _ in range(rng.randrange(3))]
    stamps = {key: rng.randrange(4) for key in keys if rng.random() < 0.9}  # ties; some never seen
    ranks = {key: rng.choice([1.0, 2.0, 2.0, math.inf, -3.5]) for key in keys if rng.random() < 0.8}
    predicted = {key for key in keys if rng.random() < 0.85}
    return keys, stamps, rng.randrange(0, n + 3), predicted, ranks


@pytest.mark.parametrize("container", [dict.fromkeys, set, list])
def test_leaf_window_makes_the_reference_choice(container):
    rng = random.Random(7)
    decided = tied = 0
    for _ in range(3000):
        keys, stamps, count, predicted, ranks = case(rng)
        expected = reference(keys, stamps, count, predicted, ranks)
        assert leaf_window(container(keys), stamps, count, predicted, ranks) == expected, \
            (keys, stamps, count, predicted, ranks)
        decided += expected[0] is not None
        tied += expected[0] is not None and sum(
            ranks.get(k, math.inf) == ranks.get(expected[0], math.inf)
            for k in sorted(keys, key=lambda k: (stamps.get(k, -1), k))[:count]) > 1
    assert decided > 500 and tied > 200  # the cases reach decisions, and ties among them


def test_leaf_window_names_the_window_s_unpredicted_leaves_oldest_first():
    stamps = {1: 5, 2: 3, 3: 3, 4: 9}
    assert leaf_window({1, 2, 3, 4}, stamps, 3, {2}, {}) == (None, 2, [3, 1])
    assert leaf_window({1, 2, 3, 4}, stamps, 3, {1, 2, 3}, {1: 4.0, 3: 4.0}) == (2, 2, [])  # inf: unknown
    assert leaf_window({1, 2, 3, 4}, stamps, 2, {1, 2, 3}, {2: 1.0, 3: 4.0}) == (3, 2, [])
    assert leaf_window({4}, stamps, 5, set(), {}) == (None, 4, [])  # one leaf: LRU's, no prediction
