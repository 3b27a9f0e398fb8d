"""Next-use indices: for each request, the index of the next request to the same key.

This is what OPT and oracle predictions read. ``next_use_reference`` is the spec
(a dict, one backward pass); ``next_use`` runs the C++ twin in ``lcr._native``.
"""
from __future__ import annotations

import numpy as np

#: The next-use value of a request whose key is never requested again.
NEVER = np.iinfo(np.int64).max


def next_use_reference(keys) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.int64)
    out = np.empty(len(keys), dtype=np.int64)
    seen: dict[int, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        key = int(keys[i])
        out[i] = seen.get(key, NEVER)
        seen[key] = i
    return out


def next_use(keys) -> np.ndarray:
    from lcr import _native

    return _native.next_use(np.ascontiguousarray(keys, dtype=np.int64))
