"""The open-file cache: which transcripts keep a descriptor open, and how many.

A session with hundreds of subagents, or thousands of sessions, must not run the
daemon out of descriptors: at most ``max_open`` stay open (half the fd limit,
``open_files_budget``; the rest is for client connections), the least recently
written one closed first, never one an fdatasync in flight uses (``pinned``).
A closed file is simply reopened at its next write. Every fd kept here is also
watched (``pathwatch``), so the writer hears when its path may name another file.

A transcript fd can also be open outside the LRU: a sync job's own descriptor on
a file the LRU had closed (``_open_to_sync``), or one retired while its
fdatasync runs. Those are ``borrowed`` and count against ``max_open`` too: under
load, up to ``sync_slots`` of them on top of a full LRU ran a daemon at a low fd
limit out of descriptors ("Too many open files" for a new agent file).
"""

from __future__ import annotations

import os
import resource
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from .filequeue import FileQueue
from .pathwatch import PathWatch


class OpenFiles:
    """The LRU of transcript descriptors the writer keeps open, at most ``max_open``
    with the borrowed ones counted, so many sessions and subagents never run the
    daemon out of descriptors."""

    def __init__(self, max_open: int, watch: PathWatch) -> None:
        self.max_open = max_open
        self.watch = watch
        self._lru: OrderedDict[Path, FileQueue] = OrderedDict()
        self.borrowed = 0
        """Transcript fds open outside the LRU (a sync job's own, a retired one)."""

    def __len__(self) -> int:
        return len(self._lru)

    def __iter__(self) -> Iterator[FileQueue]:
        return iter(list(self._lru.values()))

    def used(self, q: FileQueue) -> None:
        """``q``'s open fd is about to be written: the most recently used now."""
        self._lru.move_to_end(q.path)

    def make_room(self) -> None:
        """Close the least recently used unpinned files until one more fits."""
        if len(self._lru) + self.borrowed >= self.max_open:
            for other in list(self._lru.values()):
                if not other.pinned:
                    self.close(other)
                    if len(self._lru) + self.borrowed < self.max_open:
                        break

    def borrow(self, n: int = 1) -> None:
        """Room for ``n`` fds opened outside the LRU; ``give_back`` once they are closed."""
        for _ in range(n):
            self.make_room()
            self.borrowed += 1

    def give_back(self, n: int = 1) -> None:
        self.borrowed -= n

    def add(self, q: FileQueue) -> None:
        self._lru[q.path] = q

    def close(self, q: FileQueue) -> None:
        """Close ``q``'s fd (if open) and stop watching it."""
        if q.fd is not None:
            self.watch.unwatch(q)
            if q.pinned and q.retired is None:
                # An fdatasync in flight uses this fd: closing it now could let
                # the number be reused and the sync land on another file.
                q.retired = q.fd
                self.borrowed += 1  # until the sync closes it
            else:
                os.close(q.fd)
            q.fd = None
        self._lru.pop(q.path, None)


def open_files_budget() -> int:
    """How many transcript fds may stay open: half the soft RLIMIT_NOFILE (raised
    to the hard limit first), leaving the rest for client connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(8, min(soft // 2, 4096))
