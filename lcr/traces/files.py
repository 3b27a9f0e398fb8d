"""Opening trace files: compression is recognised by its magic bytes, not by the name.

gzip, xz, bzip2 and zstd (libCacheSim ships its traces as ``.zst``) decompress
transparently; anything else is read as is. Deciding by content means a gzip file
named ``.trace`` or an uncompressed one named ``.gz`` is still read right.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from pathlib import Path

from lcr.errors import LcrInputError

_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"),
          (b"\x28\xb5\x2f\xfd", "zstd"))

#: Exceptions a broken compressed or unreadable file raises while being read; the
#: readers turn them into one ``LcrInputError`` line.
READ_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError, zlib.error,
                                                 UnicodeDecodeError, MemoryError)
try:  # optional: only needed for .zst traces
    import zstandard as _zstd

    READ_ERRORS += (_zstd.ZstdError,)
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None


def compression(path: Path) -> str | None:
    """The compression of ``path`` from its first bytes (None: not compressed)."""
    with open(path, "rb") as f:
        head = f.read(6)
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def open_binary(path: Path):
    """``path`` opened for reading bytes, decompressed on the fly."""
    kind = compression(path)
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    if kind == "bzip2":
        return bz2.open(path, "rb")
    if kind == "zstd":
        if _zstd is None:
            raise LcrInputError("zstd-compressed; reading it needs the 'zstandard' package "
                                "(pip install zstandard)", source=str(path))
        return _zstd.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
    return open(path, "rb")


def read_prefix(path: Path, size: int) -> bytes:
    """Up to ``size`` decompressed bytes from the start of ``path``."""
    with open_binary(path) as f:
        chunks, left = [], size
        while left > 0:
            chunk = f.read(left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    return b"".join(chunks)
