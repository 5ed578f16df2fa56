"""One target file's write queue, as the writer, the sync rounds and the
open-file cache all see it: what is accepted, written and synced so far (as
sequence numbers the waiters wait on), and the flags saying which of them holds
it right now. Its own module so that each of those three can name it without
importing the others.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sessiond.wire.errors import SessiondError

Waiter = Callable[[SessiondError | None], None]
"""Called with None once its entries are written (synced), or with the error."""


class Stats:
    """The write counters `status` reports (one set per daemon, shared by the
    writer and the sync rounds)."""

    __slots__ = ("writes", "bytes_written", "fsyncs", "errors")

    def __init__(self) -> None:
        self.writes = self.bytes_written = self.fsyncs = self.errors = 0


class FileQueue:
    """One file's queue of lines on their way to disk: its fd, the lines not written
    yet, the accepted/written/synced sequence numbers its waiters wait on, and the
    flags saying what holds it now."""

    __slots__ = (
        "path", "fd", "lines", "nbytes", "accepted", "written", "synced",
        "write_waiters", "sync_waiters", "timer", "soon", "arming", "syncing", "pinned", "sync_queued", "retry", "ident", "end",
        "suspect", "retired", "observed", "in_worker", "entries_unsynced",
    )

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.lines: list[bytes] = []
        self.nbytes = 0
        self.accepted = 0  # entries accepted so far (a sequence number)
        self.written = 0  # entries written so far
        self.synced = 0  # entries covered by a completed fdatasync
        self.write_waiters: deque[tuple[int, Waiter]] = deque()
        self.sync_waiters: deque[tuple[int, Waiter]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.soon = False
        self.arming = False
        self.syncing = False
        self.pinned = False  # its fd is in use by an fdatasync in flight: the LRU keeps it
        self.sync_queued = False  # waiting in the backlog for the next sync round
        self.retry: asyncio.TimerHandle | None = None
        self.ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file fd is open on
        self.end: int | None = None  # the file's size after our last write
        self.suspect = True  # the path may no longer name the file fd is open on: stat before writing
        self.retired: int | None = None  # an fd replaced while its fdatasync was in flight, closed after it
        self.observed = True  # the write observers see its writes (not a spool file's)
        self.in_worker = False  # its file is being created, or its torn tail cut, in a worker thread
        self.entries_unsynced = False  # its creation's sync failed: the directories are synced again before a write

    @property
    def idle(self) -> bool:
        return not (self.lines or self.write_waiters or self.sync_waiters or self.syncing or self.sync_queued
                    or self.in_worker)

