"""Resource guards: refuse up front what cannot fit in memory, with the reason."""
from __future__ import annotations

import os

from lcr.errors import LcrInputError


def available_memory() -> int:
    """Bytes this process could still allocate: MemAvailable, else physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 62


def require_memory(nbytes: float, what: str, source: str | None = None) -> None:
    """Raise ``LcrInputError`` if ``nbytes`` (an estimate for ``what``) exceeds what is free."""
    free = available_memory()
    if nbytes > free:
        raise LcrInputError(f"{what} would need about {_gib(nbytes)} of memory; "
                            f"{_gib(free)} is available", source=source)


def _gib(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):.3g} GiB"
