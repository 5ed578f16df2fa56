"""Per-file write queues and the drain: the only code that writes transcripts.

One ``FileQueue`` per target file (a main transcript and each agent file are
separate queues). ``queued`` appends wait out the coalescing window; a request for
``written`` or ``durable`` makes its file drain at the end of the current event-loop
pass together with everything else pending (group commit), and ``durable`` joins a
sync round: what waits while a sync is in flight goes out in one ``syncfs`` (or
one fdatasync for a lone file) in a worker thread. Each drain joins the queued
lines and hands them to ``locked_append`` (flock, torn-tail guard, ≤100 MB writes).
Waiters are plain callbacks taking ``None`` or the error, so the hot path creates
no tasks.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import resource
import sys
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sessiond.protocol.transcript.appendfile import Appended, TornTail, TornTailFound, cut_torn_tail, file_lock, locked_append
from sessiond.protocol.transcript.safeopen import APPEND_FLAGS, StoreRoot, error_for
from sessiond.protocol.wire.errors import SessiondError, io_error

from sessiond.common.config import Settings

from .filework import FileWork
from .libc import libc_function
from .pathwatch import PathWatch

log = logging.getLogger("sessiond")

Waiter = Callable[[SessiondError | None], None]

LOCK_RETRY = 0.005
ERROR_RETRY = 1.0


class Stats:
    __slots__ = ("writes", "bytes_written", "fsyncs", "errors")

    def __init__(self) -> None:
        self.writes = self.bytes_written = self.fsyncs = self.errors = 0


class FileQueue:
    __slots__ = (
        "path", "fd", "lines", "nbytes", "accepted", "written", "synced",
        "write_waiters", "sync_waiters", "timer", "soon", "arming", "syncing", "pinned", "sync_queued", "retry", "ident", "end",
        "suspect", "retired", "observed", "in_worker",
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

    @property
    def idle(self) -> bool:
        return not (self.lines or self.write_waiters or self.sync_waiters or self.syncing or self.sync_queued
                    or self.in_worker)


class Writer:
    def __init__(self, loop: asyncio.AbstractEventLoop, settings: Settings, stats: Stats) -> None:
        self.loop = loop
        self.settings = settings
        self.stats = stats
        self.root = StoreRoot(settings.root)
        """Every transcript is opened through it: inside the root, no symlink
        followed below it, regular files only, never blocking (``safeopen``)."""
        self.files = FileWork(loop)
        """Creating files and directories, replacing meta files: off the loop."""
        self.queues: dict[Path, FileQueue] = {}
        self.queued_bytes = 0
        self.queued_entries = 0
        self._soon: list[FileQueue] = []
        self._to_arm: list[FileQueue] = []
        self._pass_scheduled = False
        self.after_pass: Callable[[], None] | None = None
        self._below_limit: list[Callable[[], None]] = []
        self._interval: asyncio.TimerHandle | None = None
        self.observers: list[Callable[[Path, list[bytes], int], None]] = []
        """Called after every successful write with (path, lines written, file size
        after the write): the session catalog, the remote mirror, the search
        index and the watchers follow the files through this, never by re-reading
        them. Lines other writers put in a file (the follower) are told through
        ``publish``, the same way."""
        self.gone_observers: list[Callable[[Path], None]] = []
        """Called with a path whose reported content no longer stands: the file
        was deleted, replaced or truncated (``published_gone``)."""
        self._open: OrderedDict[Path, FileQueue] = OrderedDict()  # LRU of open fds
        self.max_open = settings.max_open_files or open_files_budget()
        # fdatasyncs in flight at once: each pins an fd the LRU cannot close, and
        # the disk serializes them anyway.
        self.sync_slots = max(1, min(8, self.max_open // 4))
        self.syncs = ThreadPoolExecutor(max_workers=self.sync_slots, thread_name_prefix="sessiond-sync")
        """The sync jobs' own threads: a durable append never waits behind a
        read (List pages, scans) for a thread (see ``workers``)."""
        self._syncing = 0
        self._sync_backlog: deque[FileQueue] = deque()
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
        self.unwritten_at_exit = 0
        self.watch = PathWatch(loop, settings.root, self._suspect, self._all_suspect)
        self._recheck: asyncio.TimerHandle | None = None
        if settings.fsync == "interval":
            self._interval = loop.call_later(settings.fsync_interval, self._sync_interval)

    # ------------------------------------------------------------------ accepting

    def queue(self, path: Path) -> FileQueue:
        q = self.queues.get(path)
        if q is None:
            q = self.queues[path] = FileQueue(path)
        return q

    def enqueue(self, q: FileQueue, lines: list[bytes]) -> None:
        size = sum(map(len, lines)) + len(lines)
        q.lines.extend(lines)
        q.nbytes += size
        q.accepted += len(lines)
        self.queued_bytes += size
        self.queued_entries += len(lines)
        if q.timer is None and not q.soon and q.retry is None and not q.arming:
            # The coalescing timer is armed at the end of the pass, and only if
            # nothing asked for a drain by then (written/durable do, at once).
            q.arming = True
            self._to_arm.append(q)
            self._schedule_pass()

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
        self._schedule_pass()

    def _schedule_pass(self) -> None:
        if not self._pass_scheduled:
            self._pass_scheduled = True
            self.loop.call_soon(self._end_of_pass)

    def _end_of_pass(self) -> None:
        """After the requests of one loop pass: drain what was asked for (group
        commit), arm the coalescing timer of what was not, then let the
        ``after_pass`` hook send the answers of this pass at once."""
        self._pass_scheduled = False
        if self.closed:
            return
        batch, self._soon = self._soon, []
        for q in batch:
            q.soon = False
            try:
                self._drain(q)
            except Exception:  # a bug: one file's trouble must not stall the others
                log.exception("internal error draining %s", q.path)
        arm, self._to_arm = self._to_arm, []
        for q in arm:
            q.arming = False
            if q.lines and q.timer is None and q.retry is None and not q.soon:
                q.timer = self.loop.call_later(self.settings.flush_interval, self._drain, q)
        if self.after_pass is not None:
            self.after_pass()

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

    def _fd(self, q: FileQueue, *, create_here: bool = False) -> int | None:
        """The queue's descriptor, opened on demand. At most ``max_open`` stay open:
        a session with hundreds of subagents must not run the daemon out of fds.

        None while the file is being created: making its directories and the
        file, each synced in its parent, waits on the disk, so it runs in a
        worker thread and drains the queue when done (``create_here``: at
        shutdown, blocking). Likewise while its torn tail is cut."""
        if q.fd is not None:
            self._open.move_to_end(q.path)
            return q.fd
        if q.in_worker and not create_here:
            return None
        try:
            fd = self.root.open(q.path, APPEND_FLAGS)
        except FileNotFoundError:
            if not create_here:
                self._create(q)
                return None
            fd, _ = self.root.open_append(q.path)
        if len(self._open) >= self.max_open:
            for path, other in list(self._open.items()):
                if not other.pinned:
                    self._close_fd(other)
                    if len(self._open) < self.max_open:
                        break
        q.fd = fd
        # Watched from now on; the first write still stats the path once: it
        # may have changed between the open and the watch.
        if self.watch.watch(q, q.path) and self._recheck is None and self.settings.path_recheck > 0:
            self._recheck = self.loop.call_later(self.settings.path_recheck, self._recheck_paths)
        q.suspect = True
        st = os.fstat(q.fd)
        if (st.st_dev, st.st_ino) != q.ident:
            q.ident, q.end = (st.st_dev, st.st_ino), None
        self._open[q.path] = q
        if SYNCFS is not None and st.st_dev not in self._fs_fds:
            try:
                self._fs_fds[st.st_dev] = self.root.open_dir(q.path.parent)
            except OSError:
                pass  # no syncfs there: its files get one fdatasync each
        return q.fd

    def _create(self, q: FileQueue) -> None:
        q.in_worker = True
        self.files.submit(_create_file, self.root, q.path).add_done_callback(lambda f: self._worker_done(q, f))

    def _cut_torn(self, q: FileQueue) -> None:
        """The file ends inside a line another writer left: move the fragment
        aside (read back, synced) in a worker thread, then write. A default
        pool thread, not the file thread: it waits for the file's lock."""
        q.in_worker = True
        q.suspect = True  # the job skips a path that names another file now: the next write stats it
        fut = self.loop.run_in_executor(None, _cut_torn_file, self.root, q.path, q.ident)
        fut.add_done_callback(lambda f: self._worker_done(q, f))

    def _worker_done(self, q: FileQueue, fut: asyncio.Future) -> None:
        q.in_worker = False
        if self.closed:
            return
        exc = fut.exception()
        if exc is None:
            torn = fut.result()
            if isinstance(torn, TornTail):
                log.warning("%s ended in a torn line: %d bytes at offset %d moved to %s.torn",
                            q.path, torn.length, torn.offset, q.path.name)
            self._drain(q)
        elif isinstance(exc, OSError):
            self._write_failed(q, exc)
        else:  # a bug: answer the waiters rather than leave them hanging
            log.error("preparing %s failed: %r", q.path, exc)
            self._write_failed(q, OSError(errno.EIO, repr(exc)))

    def _current_fd(self, q: FileQueue, *, create_here: bool = False) -> int | None:
        """``_fd``, checked to be the file at the queue's path when that is in
        doubt (see ``pathwatch``): a transcript renamed or deleted under the
        daemon is reopened (recreated) at its path, rather than written into a
        file nobody will read. The reopen goes through the root like the first
        open: a directory swapped for a symlink meanwhile is refused."""
        fd = self._fd(q, create_here=create_here)
        if fd is None or not q.suspect:
            return fd
        try:
            st = os.stat(q.path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != q.ident:
            log.warning("%s was %s under the daemon; reopening it", q.path, "deleted" if st is None else "replaced")
            self._close_fd(q)
            self.published_gone(q.path)
            return self._fd(q, create_here=create_here)  # stays suspect: its first write stats it again
        q.suspect = not self.watch.watching(q)
        return fd

    def _close_fd(self, q: FileQueue) -> None:
        if q.fd is not None:
            self.watch.unwatch(q)
            if q.pinned and q.retired is None:
                # An fdatasync in flight uses this fd: closing it now could let
                # the number be reused and the sync land on another file.
                q.retired = q.fd
            else:
                os.close(q.fd)
            q.fd = None
        self._open.pop(q.path, None)

    def _suspect(self, q: FileQueue) -> None:
        q.suspect = True

    def _all_suspect(self) -> None:
        for q in self._open.values():
            q.suspect = True

    def _recheck_paths(self) -> None:
        """What no watch sees (a symlinked ancestor re-pointed, a mount on top):
        every open file is stat'ed again at its next write, every ``path_recheck``
        seconds while any is open (an idle daemon does not wake up for it)."""
        self._all_suspect()
        every = self.settings.path_recheck
        self._recheck = self.loop.call_later(every, self._recheck_paths) if self._open and every > 0 else None

    def _write(self, q: FileQueue) -> bool:
        q.lines.append(b"")  # one join gives the trailing newline too: no second copy
        data = b"\n".join(q.lines)
        q.lines.pop()
        try:
            fd = self._current_fd(q)
            if fd is None:
                return False  # being created: its worker drains the queue when done
            done = locked_append(fd, q.path, data, blocking=False, known_end=q.end, root=self.root, defer_torn=True)
        except TornTailFound:
            self._cut_torn(q)
            return False
        except OSError as exc:
            self._write_failed(q, exc)
            return False
        if done is None:  # a fallback writer holds the lock: try again shortly
            q.retry = self.loop.call_later(LOCK_RETRY, self._drain, q)
            return False
        self._wrote(q, len(data), done)
        if self._below_limit and not self.over_limit:
            callbacks, self._below_limit = self._below_limit, []
            for cb in callbacks:
                cb()
        return True

    def _wrote(self, q: FileQueue, nbytes: int, done: Appended) -> None:
        """Everything queued on ``q`` is in the file now: tell the observers,
        count it, answer the write waiters."""
        if done.torn is not None:
            log.warning("%s ended in a torn line: %d bytes at offset %d moved to %s.torn",
                        q.path, done.torn.length, done.torn.offset, q.path.name)
        if q.observed:
            for observe in self.observers:
                observe(q.path, q.lines, done.size)
        self.stats.writes += 1
        self.stats.bytes_written += nbytes
        self.queued_bytes -= q.nbytes
        self.queued_entries -= len(q.lines)
        q.lines = []
        q.nbytes = 0
        q.end = done.size
        q.written = q.accepted
        waiters = q.write_waiters
        while waiters and waiters[0][0] <= q.written:
            waiters.popleft()[1](None)

    def publish(self, path: Path, lines: list[bytes], end: int) -> None:
        """Tell every write observer that ``lines`` (whole lines, without their
        newlines) are now in ``path``, ending at byte ``end``: the writer's own
        writes and those another writer made, seen by the follower."""
        for observe in self.observers:
            observe(path, lines, end)

    def published_gone(self, path: Path) -> None:
        """Tell the observers that what they were told of ``path`` no longer
        stands (deleted, replaced or truncated under the daemon)."""
        for observe in self.gone_observers:
            observe(path)

    def _write_failed(self, q: FileQueue, exc: OSError) -> None:
        self.stats.errors += 1
        log.error("write to %s failed: %s; %d entries kept queued, retrying", q.path, exc.strerror or exc, len(q.lines))
        err = error_for(exc, f"writing {q.path.name}")
        for waiters in (q.write_waiters, q.sync_waiters):
            while waiters:
                waiters.popleft()[1](err)
        q.retry = self.loop.call_later(ERROR_RETRY, self._drain, q)

    def _start_sync(self, q: FileQueue) -> None:
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
        self._sync_backlog.append(q)
        self._schedule_round()

    def _schedule_round(self) -> None:
        if self._sync_backlog and not self._round_scheduled:
            self._round_scheduled = True
            self.loop.call_soon(self._sync_round)

    def _sync_round(self) -> None:
        """Start sync jobs for what waits in the backlog.

        Durable requests are group-committed: where ``syncfs`` is usable, each
        filesystem has at most one such job in flight, and the files that come
        to need a sync meanwhile go together in the next one, as a single
        ``syncfs`` (one journal commit: 1.3-3 ms for 16 files here, against 3-5.6
        ms for 16 parallel fdatasyncs and 11.8 ms one by one) or one fdatasync
        for a lone file. Syncs nobody waits for (the ``interval`` and ``always``
        policies) stay one fdatasync per file: they must not write out other
        programs' data every second. So does everything with ``group_sync`` off
        or without syncfs. At most ``sync_slots`` jobs run at once.
        """
        self._round_scheduled = False
        if self.closed:
            return
        waiting, self._sync_backlog = self._sync_backlog, deque()
        groups: dict[int, list[FileQueue]] = {}
        for q in waiting:
            q.sync_queued = False
            if q.syncing:
                continue  # its sync in flight re-queues it when done, if need be
            if q.synced >= q.written:
                self._start_sync(q)  # nothing left to sync: answers its waiters
                continue
            dev = q.ident[0] if q.ident is not None else 0
            groups.setdefault(dev, []).append(q)
        grouping = SYNCFS is not None and self.settings.group_sync
        for dev, queues in groups.items():
            durable = [q for q in queues if q.sync_waiters] if grouping and self._groups_syncs(dev) else []
            for q in queues:
                if not durable or not q.sync_waiters:
                    if self._syncing >= self.sync_slots:
                        self._requeue([q])
                    else:
                        self._start_job([q], os.fdatasync, None)
            if not durable:
                continue
            if dev in self._devices_syncing or self._syncing >= self.sync_slots:
                self._requeue(durable)
            elif len(durable) == 1:
                self._start_job(durable, os.fdatasync, dev)
            else:
                self._start_job(durable, SYNCFS, dev)

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
            self._sync_backlog.append(q)

    def _start_job(self, queues: list[FileQueue], call: Callable[[int], object], dev: int | None) -> None:
        targets = [(q, q.written) for q in queues]
        own_fd = False
        if call is os.fdatasync:
            q = queues[0]
            if q.fd is not None:
                fd = q.fd
                q.pinned = True  # the LRU must not close it under the sync
            else:  # the LRU closed it: a descriptor of this job's own, never creating the file
                try:
                    fd = _open_to_sync(self.root, q)
                except OSError as exc:
                    for q, target in targets:
                        self._synced_failed(q, target, exc)
                    return
                own_fd = True
        else:
            fd = self._fs_fds[dev]  # type: ignore[index]
        for q in queues:
            q.syncing = True
        self._syncing += 1
        if dev is not None:
            self._devices_syncing.add(dev)
        fut = self.loop.run_in_executor(self.syncs, call, fd)
        if own_fd:
            fut.add_done_callback(lambda f: os.close(fd))
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
                os.close(q.retired)
                q.retired = None
            try:
                self._sync_done(q, target, exc, call)
            except Exception:  # a bug: the other files of the job still get their answers
                log.exception("internal error after syncing %s", q.path)
        self._schedule_round()

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
                self._start_sync(q)
            else:
                self._drain_soon(q)
        elif self.settings.fsync == "always" and q.synced < q.written:
            self._start_sync(q)

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
                self._start_sync(q)
        self._interval = None
        if self.settings.fsync == "interval":
            self._interval = self.loop.call_later(self.settings.fsync_interval, self._sync_interval)

    # ---------------------------------------------------------------- lifecycle

    def forget(self, q: FileQueue) -> None:
        """Close and drop an idle queue (its session left memory)."""
        if not q.idle or q.timer is not None or q.retry is not None or q.soon or q.arming:
            return
        self._close_fd(q)
        self.queues.pop(q.path, None)

    def release(self, q: FileQueue) -> None:
        """Close a queue's file and drop the queue whatever its sync state (its
        file is moving away: an fd still open would write into the moved file,
        or reopen would recreate it). A sync in flight keeps its fd until done."""
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        self._close_fd(q)
        if self.queues.get(q.path) is q:
            del self.queues[q.path]

    def drain_everything(self) -> None:
        """Shutdown: write every queue, then make every written file durable,
        blocking, and close the files. Waiters are answered. What cannot be
        written is logged and counted in ``unwritten_at_exit`` (the exit code
        says so). Afterwards the writer is closed: a pass or sync round still
        scheduled on the loop does nothing (it would write after the files were
        closed)."""
        self.closed = True
        for q in self._soon:
            q.soon = False
        for q in self._to_arm:
            q.arming = False
        for q in self._sync_backlog:
            q.sync_queued = False
        self._soon, self._to_arm, self._sync_backlog = [], [], deque()
        queues = list(self.queues.values())
        errors: dict[FileQueue, SessiondError] = {}
        for q in queues:
            for handle in (q.timer, q.retry):
                if handle is not None:
                    handle.cancel()
            q.timer = q.retry = None
            if not q.lines:
                continue
            try:
                data = b"\n".join(q.lines) + b"\n"
                fd = self._current_fd(q, create_here=True)
                assert fd is not None
                self._wrote(q, len(data), locked_append(fd, q.path, data, blocking=True, known_end=q.end, root=self.root))
            except OSError as exc:
                self.stats.errors += 1
                self.unwritten_at_exit += len(q.lines)
                log.error("shutdown: %s failed: %s; %d entries NOT written", q.path, exc.strerror or exc, len(q.lines))
                errors[q] = io_error(f"{q.path.name}: {exc.strerror or exc}")
        self._final_syncs([q for q in queues if q.synced < q.written], errors)
        for q in queues:
            err = errors.get(q)
            for waiters, reached in ((q.write_waiters, q.written), (q.sync_waiters, q.synced)):
                while waiters:
                    seq, waiter = waiters.popleft()
                    waiter(None if seq <= reached else err or io_error("not written at shutdown"))
            if not q.syncing:
                self._close_fd(q)

    def _final_syncs(self, queues: list[FileQueue], errors: dict[FileQueue, SessiondError]) -> None:
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

    def close(self) -> None:
        for handle in (self._interval, self._recheck):
            if handle is not None:
                handle.cancel()
        for q in list(self._open.values()):
            self._close_fd(q)
        for dev, fd in self._fs_fds.items():
            if dev not in self._devices_syncing:  # else a worker thread's syncfs still uses it: exit closes it
                os.close(fd)
        self._fs_fds.clear()
        self.watch.close()
        self.files.close()
        self.root.close()
        self.syncs.shutdown(wait=False)


def _create_file(root: StoreRoot, path: Path) -> None:
    """Create a transcript and its directories (worker thread)."""
    fd, _ = root.open_append(path)
    os.close(fd)


def _cut_torn_file(root: StoreRoot, path: Path, ident: tuple[int, int] | None) -> TornTail | None:
    """Cut the torn tail of the file at ``path`` under its lock (worker thread),
    on a descriptor of its own; nothing if the path names another file now
    (the writer's next drain notices that)."""
    fd = root.open(path, os.O_RDWR | os.O_APPEND)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != ident:
            return None
        with file_lock(fd):
            return cut_torn_tail(fd, path, os.fstat(fd).st_size, root)
    finally:
        os.close(fd)


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
