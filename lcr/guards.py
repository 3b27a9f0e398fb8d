"""Up-front checks for CLI flags: refuse, with the reason, before any work starts.

- ``check_output_path``: an output file (``--json``, ``--plot``) must be creatable, so a
  long run does not end in a traceback at the last step.
- ``check_memory``: a size that cannot fit in this machine's memory is refused instead
  of running it out of memory.
"""
from __future__ import annotations

import os

from lcr.errors import LcrInputError
from lcr.traces.guard import available_memory


def check_output_path(path: str, flag: str) -> None:
    """Raise unless ``path`` names a file that can be written (its folder may be new)."""
    if os.path.isdir(path):
        raise LcrInputError(f"{flag}: {path!r} is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise LcrInputError(f"{flag}: cannot create {folder!r}: {existing!r} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise LcrInputError(f"{flag}: {path!r} is not writable")


def check_memory(nbytes: float, what: str) -> None:
    """Raise when ``what`` needs more than the memory available now."""
    available = available_memory()
    if nbytes > available:
        raise LcrInputError(f"{what} needs {nbytes / 2**30:.3g} GiB but only "
                            f"{available / 2**30:.3g} GiB of memory is available")


__all__ = ["available_memory", "check_memory", "check_output_path"]
