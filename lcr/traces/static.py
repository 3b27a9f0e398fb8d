"""The static metadata a trace carries, as per-request feature columns for the predictor.

A cache in service hands its predictor what it knows about a key besides when it was
accessed (``FeatureConfig.static_fields``): the embedding table of a DLRM lookup, the
depth of a KV prefix block, an object's size. Replaying a trace offline should give the
model the same columns wherever the trace has them, so that an offline measurement is
of the model a deployment would run:

- ``table``: the embedding table or categorical field of each lookup (``Trace.tables``:
  Criteo's field C1..C26, MovieLens' user or item row);
- ``tokens_from_root``: for block-chain traces (LLM prefixes), the tokens that precede
  the block in its prompt, the radix cache's ``tokens_from_root`` of the block's node;
- ``size``: the object's size (``Trace.sizes``: bytes or tokens).
"""
from __future__ import annotations

import numpy as np

from lcr.errors import LcrInputError
from lcr.traces.trace import Trace

STATIC_FIELDS = ("table", "tokens_from_root", "size")


def static_fields(trace: Trace) -> tuple[str, ...]:
    """The static columns ``trace`` can supply, in ``STATIC_FIELDS`` order."""
    present = {"table": trace.tables is not None, "tokens_from_root": trace.request_offsets is not None,
               "size": trace.sizes is not None}
    return tuple(name for name in STATIC_FIELDS if present[name])


def static_columns(trace: Trace, names: tuple[str, ...]) -> np.ndarray:
    """``len(trace) x len(names)`` float64: request i's value of each named column."""
    present = static_fields(trace)
    columns = np.empty((len(trace), len(names)))
    for j, name in enumerate(names):
        if name not in present:
            raise LcrInputError(f"static field {name!r}: trace {trace.name} has no such metadata "
                                f"(it has: {', '.join(present) or 'none'})")
        columns[:, j] = _column(trace, name)
    return columns


def _column(trace: Trace, name: str) -> np.ndarray:
    if name == "table":
        return trace.tables
    if name == "size":
        return trace.sizes
    offsets = trace.request_offsets  # tokens_from_root: the block's position in its prompt
    starts = np.repeat(offsets[:-1], np.diff(offsets))
    return (np.arange(len(trace)) - starts) * float(trace.meta.get("block_tokens", 1))
