"""Up-front checks for CLI flags: refuse, with the reason, before any work starts.

- ``check_output_path``: an output file (``--json``, ``--plot``) must be creatable, so a
  long run does not end in a traceback at the last step.
- ``check_memory``: a size that cannot fit in this machine's memory is refused instead
  of running it out of memory (trace readers and generators ask it too).
"""
from __future__ import annotations

import os
from pathlib import Path

from lcr.errors import LcrInputError


def check_output_path(path: str | None, flag: str, suffixes: tuple[str, ...] = ()) -> None:
    """Refuse before any work an output path that cannot be written: a directory, a
    folder that cannot be created or written, or (when ``suffixes`` is given, for plots)
    a name without one of them (matplotlib would append ``.png`` and write beside the
    name given). ``None`` means the output was not asked for."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise LcrInputError(f"{flag} {path}: is a directory; give a file name")
    if suffixes and target.suffix.lower() not in suffixes:
        raise LcrInputError(f"{flag} {path}: give a file name ending in {', '.join(suffixes)}")
    existing = target.parent.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise LcrInputError(f"{flag} {path}: {str(existing)!r} is not a directory")
    try:  # root passes os.access everywhere: only really creating the file tells
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.open("x").close()
            target.unlink()
        elif not os.access(target, os.W_OK):
            raise PermissionError(13, "file is not writable")
    except OSError as err:
        raise LcrInputError(f"{flag} {path}: cannot write there ({err.strerror or err})") from None


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


def check_memory(nbytes: float, what: str, source: str | None = None) -> None:
    """Raise ``LcrInputError`` (naming ``source``, e.g. the trace) when ``what`` needs
    about ``nbytes``, more than the memory available now."""
    available = available_memory()
    if nbytes > available:
        raise LcrInputError(f"{what} would need about {_gib(nbytes)}; {_gib(available)} of memory "
                            "is available", source=source)


def _gib(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):.3g} GiB"


__all__ = ["available_memory", "check_memory", "check_output_path"]
