"""lcr._native.prefix_keys (the serving shadow's page names) against its Python spec:
after each token the name becomes SplitMix64's next draw seeded with (name + token);
a page takes the name at its last token."""
from __future__ import annotations

import random
from array import array

import pytest

from lcr._native import prefix_keys
from lcr.policies.rng import SplitMix64


def reference(tokens, page_size):
    name, out = 0, []
    for i, token in enumerate(tokens):
        name = SplitMix64(name + token).next_u64()
        if (i + 1) % page_size == 0 or i == len(tokens) - 1:
            out.append(name - (1 << 64) if name >= 1 << 63 else name)  # signed, as C++ hands it over
    return out


@pytest.mark.parametrize("page_size", [1, 2, 3, 16])
def test_prefix_keys_follow_the_python_spec(page_size):
    rng = random.Random(page_size)
    for _ in range(300):
        tokens = [rng.randrange(-3, 1 << 40) for _ in range(rng.randrange(0, 40))]
        expected = reference(tokens, page_size)
        assert prefix_keys(tokens, page_size) == expected
        assert prefix_keys(array("q", tokens), page_size) == expected
        assert len(expected) == -(-len(tokens) // page_size)


def test_a_page_is_named_by_its_whole_prefix():
    keys = prefix_keys([5, 6, 7, 8, 9], 2)
    assert keys[:2] == prefix_keys([5, 6, 7, 8], 2)  # a prefix names its pages alike
    assert prefix_keys([4, 6, 7, 8], 2)[1] != keys[1]  # same page, other prefix: other name
    assert prefix_keys([6, 5, 7, 8], 2)[0] != keys[0]  # order inside a page counts
    assert len(set(prefix_keys(list(range(10_000)), 1))) == 10_000
    with pytest.raises(ValueError):
        prefix_keys([1], 0)
