"""Files written whole or not at all.

Every file lcr writes (``--json``, ``--plot``, a trained model, a prediction-cache array)
goes through ``atomic_file``: the bytes go to a hidden temporary file beside the target,
are flushed to disk, and the file is then renamed over the target (``os.replace``: atomic
within one file system). A write that fails partway (disk full, a file-size limit, an
encoding error halfway, Ctrl-C) removes the temporary file and leaves the previous
target, if any, byte for byte as it was. Only a process killed outright (SIGKILL, power
loss) can leave a ``.NAME.PID.XXXXXXXX.tmp`` behind, never a torn target.

Thread- and process-safe: every call has a temporary file of its own; when several write
one target, the last rename wins and the target is always one of the whole files.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from lcr.errors import LcrInputError

#: Text (written as UTF-8), bytes, or a function that writes into the open binary file.
Content = str | bytes | Callable[[BinaryIO], object]


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file whose contents replace ``path`` (its folders created) when the block
    ends normally, and are thrown away on any exception, KeyboardInterrupt included."""
    target = Path(os.path.realpath(path))  # writing through a symlink keeps the link
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name[:200]}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # 0o666 less the umask, as a plain open() would create it; an existing target's mode is kept.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            with contextlib.suppress(FileNotFoundError):
                os.chmod(fd, stat.S_IMODE(target.stat().st_mode))
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _sync_folder(target.parent)


def write_atomic(path: str | os.PathLike, content: Content) -> None:
    """Write ``content`` to ``path`` through ``atomic_file``; OSError as it comes."""
    with atomic_file(path) as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode() if isinstance(content, str) else content)


def write_output(path: str | os.PathLike, content: Content, what: str) -> None:
    """``write_atomic`` for a file the user asked for (``what``: "JSON", "the plot", ...):
    an OSError becomes a one-line ``LcrInputError`` naming the file."""
    try:
        write_atomic(path, content)
    except OSError as err:
        raise LcrInputError(f"cannot write {what}: {err.strerror or err}", source=str(path)) from None


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; file systems that cannot sync a folder skip it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["Content", "atomic_file", "write_atomic", "write_output"]
