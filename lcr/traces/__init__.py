"""Traces: readers for real formats, seeded generators, next-use computation."""
from __future__ import annotations

import os

from lcr.errors import LcrInputError

from lcr.traces.generators import GENERATORS, generate, is_generator_spec, register_generator
from lcr.traces.next_use import NEVER, next_use, next_use_reference
from lcr.traces.readers import FORMAT_NAMES, FORMATS, detect_format, format_label, read_trace
from lcr.traces.trace import Trace


def load_trace(source: str, fmt: str | None = None, limit: int | None = None) -> Trace:
    """A file path, or a generator spec such as ``zipf:requests=1e6,alpha=0.9``."""
    if not os.path.exists(source) and is_generator_spec(source):
        if limit is not None and limit < 1:
            raise LcrInputError(f"limit must be at least 1 request, got {limit}", source=source)
        trace = generate(source)
        return trace.head(limit) if limit is not None and limit < len(trace) else trace
    name, colon, _ = source.partition(":")
    if colon and name.isidentifier() and not os.path.exists(source):
        raise LcrInputError(f"no such trace file, nor a generator {name!r}; generators: {', '.join(GENERATORS)} "
                            "(the layers above register theirs when imported: sharegpt with lcr.lpc)", source=source)
    return read_trace(source, fmt, limit)


__all__ = ["Trace", "NEVER", "FORMATS", "FORMAT_NAMES", "format_label", "GENERATORS", "generate", "load_trace", "read_trace",
           "detect_format", "next_use", "next_use_reference", "is_generator_spec", "register_generator"]
