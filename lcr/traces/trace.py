"""The Trace: a request sequence as numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from lcr.traces.next_use import next_use as compute_next_use


@dataclass
class Trace:
    """Requests in order. ``keys[i]`` is the key of request i (int64).

    Optional arrays, each aligned with ``keys``: ``timestamps`` (source units),
    ``sizes`` (bytes or tokens). Block-chain traces (LLM prefixes) also keep
    ``request_offsets``: the blocks of prompt r are ``keys[offsets[r]:offsets[r+1]]``.
    """

    keys: np.ndarray
    name: str = "trace"
    timestamps: np.ndarray | None = None
    sizes: np.ndarray | None = None
    request_offsets: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    _next_use: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.keys = np.ascontiguousarray(self.keys, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def next_use(self) -> np.ndarray:
        """Index of the next request to the same key (``NEVER`` if none), computed once."""
        if self._next_use is None:
            self._next_use = compute_next_use(self.keys)
        return self._next_use

    @cached_property
    def distinct_keys(self) -> int:
        return int(len(np.unique(self.keys)))

    def head(self, n: int) -> "Trace":
        """The first ``n`` requests (block traces: the first ``n`` block references)."""
        cut = lambda a: None if a is None else a[:n]  # noqa: E731
        offsets = self.request_offsets
        if offsets is not None:
            offsets = offsets[offsets <= n]
        return Trace(self.keys[:n], f"{self.name}[:{n}]", cut(self.timestamps), cut(self.sizes),
                     offsets, dict(self.meta))
