"""A one-line progress bar on stderr for long sweeps (only when stderr is a terminal)."""
from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, total: int, label: str = "", stream=sys.stderr, width: int = 30):
        self.total, self.label, self.stream, self.width = max(total, 1), label, stream, width
        self.done = 0
        self.start = time.perf_counter()

    def __call__(self, n: int) -> None:
        self.done += n
        frac = min(self.done / self.total, 1.0)
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        bar = "#" * int(frac * self.width)
        self.stream.write(f"\r{self.label} [{bar:<{self.width}}] {frac:5.1%} {rate / 1e6:.2f} Mreq/s")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def maybe_progress(total: int, label: str, enabled: bool | None = None):
    """A bar if ``enabled`` (default: stderr is a terminal and the sweep is long), else None."""
    if enabled is None:
        enabled = sys.stderr.isatty() and total > 2_000_000
    return ProgressBar(total, label) if enabled else None
