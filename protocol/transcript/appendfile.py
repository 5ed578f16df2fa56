"""Appending whole lines to a transcript, safely beside any other writer.

The daemon's drain and the client's direct-append fallback both go through
``locked_append``: an exclusive ``flock`` on an ``O_APPEND`` descriptor, a newline
first if the file ends in a torn line (so a torn line can never swallow a good
one), and writes of at most 100 MB each, retried until every byte is out. Two
writers that both use this interleave whole lines only.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_WRITE = 100 * 1024 * 1024
FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path: Path) -> None:
    """Create ``path`` and its missing parents 0700 (whatever the umask), fsyncing
    each new directory's parent so the entry survives a crash."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)
        fsync_dir(d.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_append(path: Path) -> tuple[int, bool]:
    """An O_APPEND descriptor on ``path`` (created 0600 with its dirs); and whether
    this call created the file."""
    ensure_dir(path.parent)
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW  # RDWR: the torn-tail check preads
    try:
        return os.open(path, flags), False
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags), False
    os.fchmod(fd, FILE_MODE)
    fsync_dir(path.parent)
    return fd, True


def ends_torn(fd: int, size: int) -> bool:
    """True when a non-empty file does not end with a newline."""
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def write_all(fd: int, data: bytes | memoryview) -> int:
    """write(2) until every byte is out, at most ``MAX_WRITE`` per call."""
    view = memoryview(data)
    total = len(view)
    done = 0
    while done < total:
        done += os.write(fd, view[done : done + MAX_WRITE])
    return total


def locked_append(fd: int, data: bytes | memoryview, *, blocking: bool = True) -> int | None:
    """Append ``data`` (whole lines) under an exclusive flock; returns the file size
    after the write, or None when ``blocking`` is False and another writer holds
    the lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return None
    try:
        return append_unlocked(fd, data)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def append_unlocked(fd: int, data: bytes | memoryview) -> int:
    """The body of ``locked_append`` for a caller already holding the lock.

    On a failed or short write the file is cut back to where it was, so a
    failure never leaves a partial line behind; the error is re-raised.
    """
    size = os.fstat(fd).st_size
    if ends_torn(fd, size):
        size += write_all(fd, b"\n")
    try:
        return size + write_all(fd, data)
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise


@contextmanager
def file_lock(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
