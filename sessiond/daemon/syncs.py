"""The sync rounds: every fdatasync and syncfs the daemon makes, off the loop.

Split from the writer, which only says *that* a queue needs syncing
(``SyncRounds.start``): which files go together in one ``syncfs`` and which get
an fdatasync each, how many jobs run at once, which filesystems fall back to
file-by-file syncs after a failure, the ``interval`` policy's timer and the
blocking syncs of shutdown all live here. What the writer gave it is answered
through the queues' ``sync_waiters``; a waiter whose entries are not written yet
goes back to the writer through ``drain_soon``.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sessiond.config import Settings
from sessiond.store.safeopen import StoreRoot
from sessiond.wire.errors import SessiondError, io_error

from .filequeue import FileQueue, Stats
from .libc import libc_function
from .openfiles import OpenFiles

log = logging.getLogger("sessiond")


class SyncRounds:
    """Every fdatasync and syncfs the daemon makes, in threads of its own: files are
    grouped into rounds, the syncs in flight are bounded, and the queues' sync
    waiters are answered."""

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: Settings, stats: Stats, root: StoreRoot,
                 queues: dict[Path, FileQueue], open_files: OpenFiles, drain_soon: Callable[[FileQueue], None]) -> None:
        self.loop = loop
        self.settings = settings
        self.stats = stats
        self.root = root
        self.queues = queues
        """The writer's queues (the same dict): what the ``interval`` timer syncs."""
        self.open_files = open_files
        """The writer's fd LRU: a job's own descriptor is borrowed from its budget."""
        self.drain_soon = drain_soon
        """The writer's: a queue whose next sync waiter's entries are not written yet."""
        # fdatasyncs in flight at once: each pins an fd the LRU cannot close, and
        # the disk serializes them anyway.
        self.slots = max(1, min(8, open_files.max_open // 4))
        self.pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="sessiond-sync")
        """The sync jobs' own threads: a durable append never waits behind a
        read (List pages, scans) for a thread (see ``workers``)."""
        self._syncing = 0
        self._backlog: deque[FileQueue] = deque()
        self._round_scheduled = False
        self._devices_syncing: set[int | None] = set()
        self._fs_fds: dict[int, int] = {}
        """Per filesystem (st_dev): a directory fd opened before the daemon's first
        write there, that ``syncfs`` is called on: its view of the filesystem's
        writeback errors starts before any of our data, so none is missed."""
        self._syncfs_failed: set[int] = set()
        """Filesystems where a syncfs failed: synced file by file from then on.
        syncfs reports a writeback error once per descriptor; the file it was
        in may not have been in that group, and only its own fdatasync will
        tell (its descriptor's error cursor is still behind)."""
        self.closed = False
        self._interval: asyncio.TimerHandle | None = None
        if settings.fsync == "interval":
            self._interval = loop.call_later(settings.fsync_interval, self._sync_interval)

    def opened(self, dev: int, directory: Path) -> None:
        """A file on filesystem ``dev`` was just opened for writing, before any
        write to it: open that filesystem's syncfs descriptor now if it has none."""
        if SYNCFS is not None and dev not in self._fs_fds:
            try:
                self._fs_fds[dev] = self.root.open_dir(directory)
            except OSError:
                pass  # no syncfs there: its files get one fdatasync each

    def start(self, q: FileQueue) -> None:
        """Sync what is written on ``q``: joins the next sync round (group commit)."""
        if q.syncing or q.sync_queued:
            return
        if q.synced >= q.written:
            # Nothing written since the last sync (or never written at all):
            # waiters whose entries are all written are already durable.
            waiters = q.sync_waiters
            while waiters and waiters[0][0] <= q.written:
                waiters.popleft()[1](None)
            return
        q.sync_queued = True
        self._backlog.append(q)
        self._schedule_round()

    def _schedule_round(self) -> None:
        if self._backlog and not self._round_scheduled:
            self._round_scheduled = True
            self.loop.call_soon(self._sync_round)

    def _sync_round(self) -> None:
        """Start sync jobs for what waits in the backlog.

        Durable requests are group-committed: where ``syncfs`` is usable, each
        filesystem has at most one such job in flight, and the files that come
        to need a sync meanwhile go together in the next one, as a single
        ``syncfs`` (one journal commit for them all, where an fdatasync each
        commits once per file; figures in docs/benchmarks.md, "Append load") or
        one fdatasync for a lone file. Syncs nobody waits for (the ``interval`` and ``always``
        policies) stay one fdatasync per file: they must not write out other
        programs' data every second. So does everything with ``group_sync`` off
        or without syncfs. At most ``sync_slots`` jobs run at once.
        """
        self._round_scheduled = False
        if self.closed:
            return
        waiting, self._backlog = self._backlog, deque()
        groups: dict[int, list[FileQueue]] = {}
        for q in waiting:
            q.sync_queued = False
            if q.syncing:
                continue  # its sync in flight re-queues it when done, if need be
            if q.synced >= q.written:
                self.start(q)  # nothing left to sync: answers its waiters
                continue
            dev = q.ident[0] if q.ident is not None else 0
            groups.setdefault(dev, []).append(q)
        grouping = SYNCFS is not None and self.settings.group_sync
        for dev, queues in groups.items():
            durable = [q for q in queues if q.sync_waiters] if grouping and self._groups_syncs(dev) else []
            for q in queues:
                if not durable or not q.sync_waiters:
                    if self._syncing >= self.slots:
                        self._requeue([q])
                    else:
                        self._start_job([q], os.fdatasync, None)
            if not durable:
                continue
            if dev in self._devices_syncing or self._syncing >= self.slots:
                self._requeue(durable)
            elif len(durable) == 1:
                self._start_job(durable, os.fdatasync, dev)
            else:
                self._start_job(durable, SYNCFS, dev)  # type: ignore[arg-type]  # durable is empty unless SYNCFS exists

    def _groups_syncs(self, dev: int) -> bool:
        return dev in self._fs_fds and dev not in self._syncfs_failed

    def _syncfs_gave_up(self, dev: int, exc: BaseException) -> None:
        if dev not in self._syncfs_failed:
            self._syncfs_failed.add(dev)
            log.error("syncfs failed (%s): files on that filesystem are synced one by one from now on, "
                      "so each file's own error is seen", exc)

    def _requeue(self, queues: list[FileQueue]) -> None:
        for q in queues:
            q.sync_queued = True
            self._backlog.append(q)

    def _start_job(self, queues: list[FileQueue], call: Callable[[int], object], dev: int | None) -> None:
        targets = [(q, q.written) for q in queues]
        own_fd = False
        if call is os.fdatasync:
            q = queues[0]
            if q.fd is not None:
                fd = q.fd
                q.pinned = True  # the LRU must not close it under the sync
            else:  # the LRU closed it: a descriptor of this job's own, never creating the file
                self.open_files.borrow()
                try:
                    fd = _open_to_sync(self.root, q)
                except OSError as exc:
                    self.open_files.give_back()
                    for q, target in targets:
                        self._synced_failed(q, target, exc)
                    return
                own_fd = True
        else:
            fd = self._fs_fds[dev]  # type: ignore[index]  # grouped syncs have a device
        for q in queues:
            q.syncing = True
        self._syncing += 1
        if dev is not None:
            self._devices_syncing.add(dev)
        fut = self.loop.run_in_executor(self.pool, call, fd)
        if own_fd:
            fut.add_done_callback(lambda f: self._close_own(fd))
        fut.add_done_callback(lambda f: self._synced(targets, dev, call.__name__, f))

    def _synced(self, targets: list[tuple[FileQueue, int]], dev: int | None, call: str, fut: asyncio.Future) -> None:
        self._syncing -= 1
        self._devices_syncing.discard(dev)
        exc = fut.exception()
        if exc is None:
            self.stats.fsyncs += 1
        elif call == "syncfs" and dev is not None:
            self._syncfs_gave_up(dev, exc)
        for q, target in targets:
            q.syncing = q.pinned = False
            if q.retired is not None:
                self._close_own(q.retired)
                q.retired = None
            try:
                self._sync_done(q, target, exc, call)
            except Exception:  # a bug: the other files of the job still get their answers
                log.exception("internal error after syncing %s", q.path)
        self._schedule_round()

    def _close_own(self, fd: int) -> None:
        os.close(fd)
        self.open_files.give_back()

    def _sync_done(self, q: FileQueue, target: int, exc: BaseException | None, call: str) -> None:
        waiters = q.sync_waiters
        if exc is not None:
            self._synced_failed(q, target, exc, call)
        else:
            q.synced = max(q.synced, target)
            while waiters and waiters[0][0] <= q.synced:
                waiters.popleft()[1](None)
        if self.closed:
            return
        if waiters:
            if waiters[0][0] <= q.written:
                self.start(q)
            else:
                self.drain_soon(q)
        elif self.settings.fsync == "always" and q.synced < q.written:
            self.start(q)

    def _synced_failed(self, q: FileQueue, target: int, exc: BaseException, call: str = "fdatasync") -> None:
        self.stats.errors += 1
        log.error("%s of %s failed: %s", call, q.path, exc)
        err = io_error(f"{call} of {q.path.name} failed: {exc}")
        waiters = q.sync_waiters
        while waiters and waiters[0][0] <= target:
            waiters.popleft()[1](err)

    def policy_changed(self) -> None:
        """The fsync policy may have changed (SIGHUP): start or stop the timer."""
        if self.settings.fsync == "interval" and self._interval is None:
            self._interval = self.loop.call_later(self.settings.fsync_interval, self._sync_interval)
        elif self.settings.fsync != "interval" and self._interval is not None:
            self._interval.cancel()
            self._interval = None

    def _sync_interval(self) -> None:
        for q in self.queues.values():
            if q.synced < q.written and not q.syncing:
                self.start(q)
        self._interval = None
        if self.settings.fsync == "interval":
            self._interval = self.loop.call_later(self.settings.fsync_interval, self._sync_interval)

    # ---------------------------------------------------------------- lifecycle
    def final(self, queues: list[FileQueue], errors: dict[FileQueue, SessiondError]) -> None:
        """Shutdown's syncs: with ``group_sync``, one ``syncfs`` per filesystem
        for all its files (a stop with hundreds of dirty files took one
        fdatasync each); if that fails, or without it, one fdatasync per file,
        which also tells which file the failure was in."""
        by_dev: dict[int, list[FileQueue]] = {}
        for q in queues:
            by_dev.setdefault(q.ident[0] if q.ident is not None else 0, []).append(q)
        for dev, group in by_dev.items():
            if SYNCFS is not None and self.settings.group_sync and len(group) > 1 and self._groups_syncs(dev):
                try:
                    SYNCFS(self._fs_fds[dev])
                except OSError as exc:
                    self.stats.errors += 1
                    log.error("shutdown: syncfs failed: %s; syncing file by file", exc.strerror or exc)
                    self._syncfs_failed.add(dev)
                else:
                    self.stats.fsyncs += 1
                    for q in group:
                        q.synced = q.written
                    continue
            for q in group:
                try:
                    _fdatasync_queue(self.root, q)
                except OSError as exc:
                    self.stats.errors += 1
                    log.error("shutdown: fdatasync of %s failed: %s", q.path, exc.strerror or exc)
                    errors.setdefault(q, io_error(f"fdatasync of {q.path.name} failed: {exc.strerror or exc}"))
                else:
                    self.stats.fsyncs += 1
                    q.synced = q.written

    def stop(self) -> None:
        """Shutdown: no round starts any more (``final`` syncs what is left)."""
        self.closed = True
        for q in self._backlog:
            q.sync_queued = False
        self._backlog = deque()

    def close(self) -> None:
        if self._interval is not None:
            self._interval.cancel()
        for dev, fd in self._fs_fds.items():
            if dev not in self._devices_syncing:  # else a worker thread's syncfs still uses it: exit closes it
                os.close(fd)
        self._fs_fds.clear()
        self.pool.shutdown(wait=False)


def _fdatasync_queue(root: StoreRoot, q: FileQueue) -> None:
    """fdatasync what was written on ``q`` (shutdown: blocking)."""
    if q.fd is not None:
        os.fdatasync(q.fd)
        return
    fd = _open_to_sync(root, q)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _open_to_sync(root: StoreRoot, q: FileQueue) -> int:
    """A read-only descriptor on ``q``'s file, for syncing what was written
    through a descriptor the LRU has since closed. Never creates the file: one
    deleted or replaced under the daemon is an error, what was written went
    with it, unsynced."""
    fd = root.open(q.path, os.O_RDONLY)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != q.ident:
        os.close(fd)
        raise OSError(errno.ESTALE, "replaced under the daemon")
    return fd


def _load_syncfs() -> Callable[[int], int] | None:
    """``syncfs(2)`` (Linux; Python has no binding), raising OSError like
    ``os.fdatasync``. Since Linux 5.8 it reports writeback errors of the
    filesystem since the descriptor was opened, so a failure is never hidden."""
    if sys.platform != "linux":
        return None
    try:  # before 5.8, syncfs did not report writeback errors
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < (5, 8):
        return None
    return libc_function("syncfs", [ctypes.c_int])


SYNCFS = _load_syncfs()
