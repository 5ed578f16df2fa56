"""The inotify primitives (ctypes on libc) shared by every watcher in the daemon.

Why one module: the open-file watch (``pathwatch``) and the tree follower
(``follow``) need the same three calls and the same event decoding; keeping
them here means one place knows the kernel's struct layout and masks.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Iterator

from .libc import libc_function

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
_EVENT = struct.Struct("iIII")

init = libc_function("inotify_init1", [ctypes.c_int])
add_watch = libc_function("inotify_add_watch", [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32])
rm_watch = libc_function("inotify_rm_watch", [ctypes.c_int, ctypes.c_int])

AVAILABLE = sys.platform == "linux" and init is not None and add_watch is not None and rm_watch is not None


def open_fd() -> int:
    """A non-blocking, close-on-exec inotify fd (OSError when there is none)."""
    if not AVAILABLE:
        raise OSError("inotify is not available on this system")
    return init(os.O_NONBLOCK | os.O_CLOEXEC)  # type: ignore[misc]  # AVAILABLE: init exists


def events(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(wd, mask, name) of each event in one read; name is b"" for the watched
    object itself."""
    pos = 0
    while pos + _EVENT.size <= len(data):
        wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
        name = data[pos + _EVENT.size: pos + _EVENT.size + length].rstrip(b"\0")
        pos += _EVENT.size + length
        yield wd, mask, name


READ_SIZE = 65536
_LARGEST_EVENT = _EVENT.size + 256  # a name is at most NAME_MAX bytes, NUL-padded


def read_events(fd: int) -> list[tuple[int, int, bytes]]:
    """Every event queued on a non-blocking inotify ``fd`` (OSError when reading fails).

    A read that leaves room for one more event of any size has emptied the
    queue: no second read to meet EAGAIN (a raised exception per call, on the
    loop at every write the follower sees). Events queued after it make the
    fd readable again."""
    out: list[tuple[int, int, bytes]] = []
    while True:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return out
        out.extend(events(data))
        if len(data) <= READ_SIZE - _LARGEST_EVENT:
            return out
