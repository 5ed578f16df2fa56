"""Opening a transcript for reading only when it is a regular file.

A FIFO (or a device) named ``<uuid>.jsonl`` in the store would block a plain
``open`` forever, waiting for a writer that never comes: ``sessiond check`` hung
on one. Every reader opens with ``O_NONBLOCK`` (which regular files ignore) and
refuses what ``fstat`` does not call a regular file, so it can skip it and say so.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFile(OSError):
    """The path names something other than a regular file (an OSError, so
    readers that skip unreadable files skip it too)."""


def describe(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path | str, flags: int = os.O_RDONLY) -> int:
    """``os.open(path, flags)`` that never blocks on a FIFO and refuses anything
    but a regular file with ``NotRegularFile``."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"not a regular file ({describe(mode)})", str(path))
    return fd
