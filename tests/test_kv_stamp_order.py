"""lcr._native.StampOrder (the radix policies' recency order) against a sorted list."""
import bisect
import random

import pytest

from lcr._native import StampOrder


class SortedPairs:
    """The reference: a plain sorted list of (stamp, key)."""

    def __init__(self):
        self.items = []

    def add(self, stamp, key):
        bisect.insort(self.items, (stamp, key))

    def discard(self, stamp, key):
        i = bisect.bisect_left(self.items, (stamp, key))
        if i < len(self.items) and self.items[i] == (stamp, key):
            del self.items[i]
            return True
        return False

    def oldest_in(self, container, count, after=None):
        start = 0 if after is None else bisect.bisect_right(self.items, after)
        return [e for e in self.items[start:] if e[1] in container][:max(count, 0)]


@pytest.mark.parametrize("seed", range(4))
def test_stamp_order_equals_a_sorted_list(seed):
    rng = random.Random(seed)
    native, reference = StampOrder(), SortedPairs()
    live = {}  # key -> stamp, as a policy keeps it
    for step in range(3000):
        key = rng.randrange(60) - 30 + (2**62 if rng.random() < 0.1 else 0)  # negatives and large keys
        if rng.random() < 0.6:
            if key in live:
                assert native.discard(live[key], key) == reference.discard(live[key], key)
            live[key] = rng.randrange(step + 1) - 1  # stamps arrive out of order, ties happen
            native.add(live[key], key)
            reference.add(live[key], key)
        elif key in live:
            stamp = live.pop(key)
            assert native.discard(stamp, key) is reference.discard(stamp, key) is True
        else:
            assert native.discard(0, key) is reference.discard(0, key) is False
        assert len(native) == len(reference.items)
        assert native.first() == (reference.items[0] if reference.items else None)
        if step % 50 == 0:
            assert native.entries() == reference.items
            leaves = set(rng.sample(sorted(live), min(len(live), 10)))
            count = rng.randrange(1, 8)
            after = rng.choice(reference.items) if reference.items and rng.random() < 0.5 else None
            assert native.oldest_in(leaves, count, after) == reference.oldest_in(leaves, count, after)
            assert native.oldest_in(dict.fromkeys(leaves), count) == reference.oldest_in(leaves, count)


def test_oldest_in_ties_go_to_the_smaller_key():
    order = StampOrder()
    for key in (5, 3, 9):
        order.add(7, key)
    assert order.oldest_in({9, 5, 3}, 2) == [(7, 3), (7, 5)]
    assert order.oldest_in({9, 5, 3}, 5, (7, 3)) == [(7, 5), (7, 9)]
    assert order.oldest_in({9}, 0) == []
