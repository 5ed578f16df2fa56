"""Per-file write queues and the drain: the only code that writes transcripts.

One ``FileQueue`` per target file (a main transcript and each agent file are
separate queues). ``queued`` appends wait out the coalescing window; a request for
``written`` or ``durable`` makes its file drain at the end of the current event-loop
pass together with everything else pending (group commit), and ``durable`` batches
one fdatasync per file per pass in a worker thread. Each drain joins the queued
lines and hands them to ``locked_append`` (flock, torn-tail guard, ≤100 MB writes).
Waiters are plain callbacks taking ``None`` or the error, so the hot path creates
no tasks.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sessiond.protocol.transcript.appendfile import locked_append, open_append
from sessiond.protocol.wire.errors import SessiondError, io_error

from .config import Settings

log = logging.getLogger("sessiond")

Waiter = Callable[[SessiondError | None], None]

LOCK_RETRY = 0.005
ERROR_RETRY = 1.0


class Stats:
    __slots__ = ("writes", "bytes_written", "fsyncs", "errors", "entries_written")

    def __init__(self) -> None:
        self.writes = self.bytes_written = self.fsyncs = self.errors = self.entries_written = 0


class FileQueue:
    __slots__ = (
        "path", "fd", "lines", "nbytes", "accepted", "written", "synced",
        "write_waiters", "sync_waiters", "timer", "soon", "syncing", "retry",
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
        self.syncing = False
        self.retry: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        return not self.lines and not self.write_waiters and not self.sync_waiters and not self.syncing


class Writer:
    def __init__(self, loop: asyncio.AbstractEventLoop, settings: Settings, stats: Stats) -> None:
        self.loop = loop
        self.settings = settings
        self.stats = stats
        self.queues: dict[Path, FileQueue] = {}
        self.queued_bytes = 0
        self.queued_entries = 0
        self._soon: list[FileQueue] = []
        self._soon_scheduled = False
        self._below_limit: list[Callable[[], None]] = []
        self._interval: asyncio.TimerHandle | None = None
        if settings.fsync == "interval":
            self._interval = loop.call_later(settings.fsync_interval, self._sync_interval)

    # ------------------------------------------------------------------ accepting

    def queue(self, path: Path) -> FileQueue:
        q = self.queues.get(path)
        if q is None:
            q = self.queues[path] = FileQueue(path)
        return q

    def enqueue(self, q: FileQueue, lines: list[bytes]) -> None:
        size = 0
        for line in lines:
            size += len(line) + 1
        q.lines.extend(lines)
        q.nbytes += size
        q.accepted += len(lines)
        self.queued_bytes += size
        self.queued_entries += len(lines)
        if q.timer is None and not q.soon and q.retry is None:
            q.timer = self.loop.call_later(self.settings.flush_interval, self._drain, q)

    @property
    def over_limit(self) -> bool:
        return self.queued_bytes > self.settings.max_queued_bytes

    def when_below_limit(self, callback: Callable[[], None]) -> None:
        self._below_limit.append(callback)

    def when_written(self, q: FileQueue, waiter: Waiter) -> None:
        """Call ``waiter`` once everything accepted on ``q`` so far is written."""
        if q.written >= q.accepted:
            waiter(None)
            return
        q.write_waiters.append((q.accepted, waiter))
        self._drain_soon(q)

    def when_durable(self, q: FileQueue, waiter: Waiter) -> None:
        """Call ``waiter`` once everything accepted on ``q`` so far is fdatasync'ed."""
        if q.synced >= q.accepted:
            waiter(None)
            return
        q.sync_waiters.append((q.accepted, waiter))
        if q.written >= q.accepted:
            self._start_sync(q)
        else:
            self._drain_soon(q)

    # ------------------------------------------------------------------- draining

    def _drain_soon(self, q: FileQueue) -> None:
        if q.soon or q.retry is not None:
            return
        q.soon = True
        self._soon.append(q)
        if not self._soon_scheduled:
            self._soon_scheduled = True
            self.loop.call_soon(self._run_soon)

    def _run_soon(self) -> None:
        batch, self._soon = self._soon, []
        self._soon_scheduled = False
        for q in batch:
            q.soon = False
            self._drain(q)

    def _drain(self, q: FileQueue) -> None:
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        q.retry = None
        if q.lines:
            if not self._write(q):
                return
        if q.sync_waiters and not q.syncing and q.sync_waiters[0][0] <= q.written:
            self._start_sync(q)
        elif self.settings.fsync == "always" and q.synced < q.written:
            self._start_sync(q)

    def _write(self, q: FileQueue) -> bool:
        lines = q.lines
        data = b"\n".join(lines) + b"\n"
        try:
            if q.fd is None:
                q.fd, _ = open_append(q.path)
            size = locked_append(q.fd, data, blocking=False)
        except OSError as exc:
            self._write_failed(q, exc)
            return False
        if size is None:  # a fallback writer holds the lock: try again shortly
            q.retry = self.loop.call_later(LOCK_RETRY, self._drain, q)
            return False
        count = len(lines)
        self.stats.writes += 1
        self.stats.bytes_written += len(data)
        self.stats.entries_written += count
        self.queued_bytes -= q.nbytes
        self.queued_entries -= count
        q.lines = []
        q.nbytes = 0
        q.written = q.accepted
        waiters = q.write_waiters
        while waiters and waiters[0][0] <= q.written:
            waiters.popleft()[1](None)
        if self._below_limit and not self.over_limit:
            callbacks, self._below_limit = self._below_limit, []
            for cb in callbacks:
                cb()
        return True

    def _write_failed(self, q: FileQueue, exc: OSError) -> None:
        self.stats.errors += 1
        log.error("write to %s failed: %s; %d entries kept queued, retrying", q.path, exc.strerror or exc, len(q.lines))
        err = io_error(f"writing {q.path.name} failed: {exc.strerror or exc}")
        for waiters in (q.write_waiters, q.sync_waiters):
            while waiters:
                waiters.popleft()[1](err)
        q.retry = self.loop.call_later(ERROR_RETRY, self._drain, q)

    def _start_sync(self, q: FileQueue) -> None:
        if q.syncing or q.fd is None:
            if q.fd is None and q.written >= q.accepted:  # nothing was ever written
                while q.sync_waiters:
                    q.sync_waiters.popleft()[1](None)
            return
        q.syncing = True
        target = q.written
        fut = self.loop.run_in_executor(None, os.fdatasync, q.fd)
        fut.add_done_callback(lambda f: self._synced(q, target, f))

    def _synced(self, q: FileQueue, target: int, fut: asyncio.Future) -> None:
        q.syncing = False
        exc = fut.exception()
        waiters = q.sync_waiters
        if exc is not None:
            self.stats.errors += 1
            log.error("fdatasync of %s failed: %s", q.path, exc)
            err = io_error(f"fdatasync of {q.path.name} failed: {exc}")
            while waiters and waiters[0][0] <= target:
                waiters.popleft()[1](err)
        else:
            self.stats.fsyncs += 1
            q.synced = max(q.synced, target)
            while waiters and waiters[0][0] <= q.synced:
                waiters.popleft()[1](None)
        if waiters:
            if waiters[0][0] <= q.written:
                self._start_sync(q)
            else:
                self._drain_soon(q)

    def _sync_interval(self) -> None:
        for q in self.queues.values():
            if q.synced < q.written and not q.syncing:
                self._start_sync(q)
        self._interval = self.loop.call_later(self.settings.fsync_interval, self._sync_interval)

    # ---------------------------------------------------------------- lifecycle

    def forget(self, q: FileQueue) -> None:
        """Close and drop an idle queue (its session left memory)."""
        if not q.idle or q.timer is not None or q.retry is not None or q.soon:
            return
        if q.fd is not None:
            os.close(q.fd)
        self.queues.pop(q.path, None)

    def drain_everything(self) -> None:
        """Shutdown: write every queue and fdatasync every file, blocking. Waiters
        are answered. Errors are logged; nothing is silently dropped."""
        for q in list(self.queues.values()):
            for handle in (q.timer, q.retry):
                if handle is not None:
                    handle.cancel()
            q.timer = q.retry = None
            if q.lines:
                try:
                    if q.fd is None:
                        q.fd, _ = open_append(q.path)
                    data = b"\n".join(q.lines) + b"\n"
                    locked_append(q.fd, data, blocking=True)
                    self.stats.writes += 1
                    self.stats.bytes_written += len(data)
                    self.stats.entries_written += len(q.lines)
                    self.queued_bytes -= q.nbytes
                    self.queued_entries -= len(q.lines)
                    q.lines, q.nbytes, q.written = [], 0, q.accepted
                except OSError as exc:
                    self.stats.errors += 1
                    log.error("shutdown: writing %s failed: %s; %d entries NOT written", q.path, exc, len(q.lines))
                    continue
            if q.fd is not None and q.synced < q.written:
                try:
                    os.fdatasync(q.fd)
                    self.stats.fsyncs += 1
                    q.synced = q.written
                except OSError as exc:
                    self.stats.errors += 1
                    log.error("shutdown: fdatasync of %s failed: %s", q.path, exc)
            while q.write_waiters:
                q.write_waiters.popleft()[1](None)
            while q.sync_waiters:
                q.sync_waiters.popleft()[1](None if q.synced >= q.accepted else io_error("fdatasync failed"))

    def close(self) -> None:
        if self._interval is not None:
            self._interval.cancel()
        for q in self.queues.values():
            if q.fd is not None:
                os.close(q.fd)
                q.fd = None
