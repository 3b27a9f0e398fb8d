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
    ``sizes`` (bytes or tokens), ``tables`` (the embedding table or categorical field
    each lookup reads). Block-chain traces (LLM prefixes) also keep ``request_offsets``:
    the blocks of prompt r are ``keys[offsets[r]:offsets[r+1]]``.
    """

    keys: np.ndarray
    name: str = "trace"
    timestamps: np.ndarray | None = None
    sizes: np.ndarray | None = None
    request_offsets: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    tables: np.ndarray | None = None
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
        """The first ``n`` requests. A block-chain trace cut inside a prompt keeps that
        prompt's first blocks as a shorter prompt."""
        cut = lambda a: None if a is None else a[:n]  # noqa: E731
        offsets, meta = self.request_offsets, dict(self.meta)
        if offsets is not None:
            n = min(n, len(self.keys))
            offsets = offsets[offsets <= n]
            if offsets[-1] < n:
                offsets = np.append(offsets, n)
            meta = _cut_prompt_meta(meta, len(offsets) - 1)
        return Trace(self.keys[:n], f"{self.name}[:{n}]", cut(self.timestamps), cut(self.sizes),
                     offsets, meta, cut(self.tables))

    def first_prompts(self, n: int) -> "Trace":
        """The first ``n`` prompts of a block-chain trace (all of it if it has fewer)."""
        if self.request_offsets is None:
            raise ValueError("not a block-chain trace: it has no prompts")
        n = min(n, len(self.request_offsets) - 1)
        trace = self.head(int(self.request_offsets[n]))
        trace.name = f"{self.name}[:{n} prompts]"
        return trace


def _cut_prompt_meta(meta: dict, prompts: int) -> dict:
    """Per-prompt lists in ``meta`` cut to the first ``prompts``."""
    for key in ("input_lengths", "output_lengths"):
        if key in meta:
            meta[key] = meta[key][:prompts]
    if "requests" in meta:
        meta["requests"] = prompts
    return meta
