"""Telling the writer when a transcript it holds open may have left its path.

A transcript renamed, replaced or deleted under the daemon must be reopened at
its path, not written into a file nobody will read. Checking that with a
``stat`` of the path before every write cost one path walk per write (9 % of
the loop's time at 16-entry appends). Instead each open file gets an inotify
watch for the events that can move it off its path (moved, unlinked or renamed
over, which show as ``IN_MOVE_SELF`` / ``IN_ATTRIB`` on the open inode), and an
event only marks the file *suspect*: the writer then does the one ``stat`` that
decides. So inotify is a gate, never the judge: a spurious event (a chmod, a
touch) costs one stat, and where inotify is missing (not Linux) or out of
watches, a file simply stays suspect and is stat'ed before every write, as
before. A rename of a whole project directory is not seen by a file's watch;
the sweep re-checks every open file's path once a second (``recheck_all``).

The inotify fd is read by the event loop, in the same poll as the client
sockets: a rename done before a client sent its append has been seen by the
time that append's drain runs, which happens after the poll.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("sessiond")

IN_ATTRIB = 0x00000004
IN_MOVE_SELF = 0x00000800
IN_DELETE_SELF = 0x00000400
IN_IGNORED = 0x00008000
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
_EVENT = struct.Struct("iIII")


class _Inotify:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._init = libc.inotify_init1
        self._add = libc.inotify_add_watch
        self._rm = libc.inotify_rm_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = self._init(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd

    def add(self, path: Path) -> int:
        wd = self._add(self.fd, os.fsencode(path), MASK)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return wd

    def remove(self, wd: int) -> None:
        self._rm(self.fd, wd)  # EINVAL when the kernel already dropped it: fine


class PathWatch:
    """Watches on open transcripts; calls ``suspect(key)`` when one may have moved.

    ``watch`` returns False when the file cannot be watched: the caller must then
    treat it as always suspect.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, suspect: Callable[[object], None],
                 overflow: Callable[[], None]) -> None:
        self._loop = loop
        self._suspect = suspect
        self._overflow = overflow
        self._keys: dict[int, object] = {}  # wd -> key
        self._wds: dict[object, int] = {}  # key -> wd
        self._inotify: _Inotify | None = None
        if sys.platform == "linux":
            try:
                self._inotify = _Inotify()
                loop.add_reader(self._inotify.fd, self._read)
            except (OSError, AttributeError, NotImplementedError) as exc:
                log.info("no inotify (%s): transcripts are stat'ed before every write", exc)
                self._inotify = None

    @property
    def available(self) -> bool:
        return self._inotify is not None

    def watch(self, key: object, path: Path) -> bool:
        """Watch the file at ``path`` (just opened by the caller) for ``key``."""
        if self._inotify is None:
            return False
        try:
            wd = self._inotify.add(path)
        except OSError as exc:
            log.warning("cannot watch %s (%s): it is stat'ed before every write", path, exc.strerror or exc)
            return False
        # Two paths of one inode (hard links) share a wd: the last key wins, the
        # other is left unwatched, so mark it suspect for good.
        other = self._keys.get(wd)
        if other is not None and other is not key:
            self._wds.pop(other, None)
            self._suspect(other)
        self._keys[wd] = key
        self._wds[key] = wd
        return True

    def watching(self, key: object) -> bool:
        return key in self._wds

    def unwatch(self, key: object) -> None:
        wd = self._wds.pop(key, None)
        if wd is not None and self._keys.get(wd) is key:
            del self._keys[wd]
            if self._inotify is not None:
                self._inotify.remove(wd)

    def _read(self) -> None:
        assert self._inotify is not None
        while True:
            try:
                data = os.read(self._inotify.fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                log.error("reading inotify events failed: %s; every write stats its path", exc)
                self.close()
                self._overflow()
                return
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                pos += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    self._overflow()
                    continue
                key = self._keys.get(wd)
                if key is None:
                    continue
                if mask & IN_IGNORED:  # the kernel dropped the watch (inode gone)
                    del self._keys[wd]
                    self._wds.pop(key, None)
                self._suspect(key)

    def close(self) -> None:
        if self._inotify is not None:
            try:
                self._loop.remove_reader(self._inotify.fd)
            except (RuntimeError, ValueError):
                pass
            os.close(self._inotify.fd)
            self._inotify = None
        self._keys.clear()
        self._wds.clear()
