"""Per-file write queues and the drain: the only code that writes transcripts.

One ``FileQueue`` per target file (a main transcript and each agent file are
separate queues). ``queued`` appends wait out the coalescing window; a request for
``written`` or ``durable`` makes its file drain at the end of the current event-loop
pass (the writer's stage of ``looppass.EndOfPass``) together with everything else pending (group commit), and ``durable`` joins a
sync round (``syncs``): what waits while a sync is in flight goes out in one
``syncfs`` (or one fdatasync for a lone file) in a worker thread. Descriptors
come from the open-file cache (``openfiles``). Each drain joins the queued
lines and hands them to ``locked_append`` (flock, torn-tail guard, ≤100 MB writes).
Waiters are plain callbacks taking ``None`` or the error, so the hot path creates
no tasks.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from sessiond.config import Settings
from sessiond.store.appendfile import Appended, TornTail, TornTailFound, locked_append
from sessiond.store.safeopen import APPEND_FLAGS, StoreRoot, error_for
from sessiond.store.writers import open_for_writing
from sessiond.wire.errors import SessiondError, io_error

from .filequeue import FileQueue, Stats, Waiter
from .filework import CREATE_BATCH, FileWork, create_files, cut_torn_file
from .looppass import WRITES, EndOfPass
from .openfiles import OpenFiles, open_files_budget
from .pathwatch import PathWatch
from .syncs import SyncRounds

log = logging.getLogger("sessiond")

LOCK_RETRY = 0.005
ERROR_RETRY = 1.0
MID_LINE_SETTLE = 2.0
"""A file ending inside a line that changed less than this long ago, or that
another process holds open for writing, is another writer's line still being
written (Claude Code writes a line per ``write``, but a buffered writer may
put a long one out in parts): the daemon's lines wait for its end, looked at
again every ``MID_LINE_RECHECK``, rather than cutting it off as torn, which
would leave its rest, written later, as a fragment after them. One older than
that, in a file nobody holds open, was left by a writer that died: it is
moved aside."""
MID_LINE_RECHECK = 0.25
MID_LINE_MAX_WAIT = 20.0
"""How long the daemon's lines wait for another writer's line at most (a
writer stopped for good mid-line, its file still open, must not hold the
session's writes for ever): then the line is cut off as torn. Under the
clients' 30 s timeout, so a ``written`` append is answered."""


class MidLine(NamedTuple):
    """Another writer is in the middle of the file's last line: its pid when it
    holds the file open, and how long ago the file last changed."""

    pid: int | None
    age: float


def cut_torn_unless_written(root: StoreRoot, path: Path, ident: tuple[int, int] | None,
                            waited: float = 0.0) -> TornTail | MidLine | None:
    """Worker thread: ``cut_torn_file``, unless another writer is still writing
    the line the file ends in (``MID_LINE_SETTLE``) and the daemon's lines
    have ``waited`` less than ``MID_LINE_MAX_WAIT`` for it: then that, and
    nothing cut."""
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and (st.st_dev, st.st_ino) == ident and waited < MID_LINE_MAX_WAIT:
        age = time.time() - st.st_mtime
        if age < MID_LINE_SETTLE:
            return MidLine(None, age)
        pid = open_for_writing([str(path)]).get(str(path))
        if pid is not None:
            return MidLine(pid, age)
    return cut_torn_file(root, path, ident)


class Writer:
    """The only code that writes transcripts: a queue per file, drained at the
    end of a loop pass when a request waits for it (group commit) or after the
    coalescing window, synced in rounds for ``durable``; tells its observers of
    every write and answers its waiters with plain callbacks."""

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: Settings, stats: Stats,
                 end_of_pass: EndOfPass | None = None) -> None:
        self.loop = loop
        self.settings = settings
        self.stats = stats
        self.root = StoreRoot(settings.root)
        """Every transcript is opened through it: inside the root, no symlink
        followed below it, regular files only, never blocking (``safeopen``)."""
        self.files = FileWork(loop)
        """Creating files and directories, replacing meta files: off the loop."""
        self._to_create: list[FileQueue] = []
        """Queues whose files wait for the next ``create_files`` job."""
        self._creating = False
        self.queues: dict[Path, FileQueue] = {}
        self.queued_bytes = 0
        self.queued_entries = 0
        self._soon: list[FileQueue] = []
        self._to_arm: list[FileQueue] = []
        self.end_of_pass = end_of_pass or EndOfPass(loop)
        """Runs ``end_pass`` at the end of every loop pass that queued or asked for a drain."""
        self.end_of_pass.register(WRITES, self.end_pass)
        self._below_limit: list[Callable[[], None]] = []
        self.observers: list[Callable[[Path, list[bytes], int], None]] = []
        """Called after every successful write with (path, lines written, file size
        after the write): the session catalog, the remote mirror, the search
        index and the watchers follow the files through this, never by re-reading
        them. Lines other writers put in a file (the follower) are told through
        ``publish``, the same way."""
        self.own_observer: Callable[[Path, bytes, int, tuple[int, int] | None], None] | None = None
        """Told of every write of the writer's own before the observers, with
        the bytes written (the lines joined, each with its newline), the size
        after them and the file written into (its device and inode): the
        follower of foreign writers, which moves past them (it would otherwise
        join the lines again to measure and hash them), and tells the observers
        when that file is not the one it followed at the path (replaced under
        the daemon)."""
        self.gone_observers: list[Callable[[Path], None]] = []
        """Called with a path whose reported content no longer stands: the file
        was deleted, replaced or truncated (``published_gone``)."""
        self.closed = False
        self.unwritten_at_exit = 0
        self.mid_line: dict[Path, float] = {}
        """Files whose writes wait for another writer to end its line (``MidLine``), and since when."""
        self.watch = PathWatch(loop, settings.root, self._suspect, self._all_suspect)
        self._recheck: asyncio.TimerHandle | None = None
        self.open_files = OpenFiles(settings.max_open_files or open_files_budget(), self.watch)
        """The descriptors kept open, at most ``max_open`` of them (``openfiles``)."""
        self.sync = SyncRounds(loop, settings, stats, self.root, self.queues, self.open_files, self._drain_soon)
        """Every fdatasync and syncfs (``syncs``): ``sync.start(q)`` asks for one."""

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
            self.end_of_pass.request(WRITES)

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
            self.sync.start(q)
        else:
            self._drain_soon(q)

    # ------------------------------------------------------------------- draining

    def _drain_soon(self, q: FileQueue) -> None:
        if q.soon or q.retry is not None:
            return
        q.soon = True
        self._soon.append(q)
        self.end_of_pass.request(WRITES)

    def end_pass(self) -> None:
        """The writer's stage at the end of a loop pass: drain what was asked
        for (group commit), then arm the coalescing timer of what was not. The
        answers the drains make are sent by the next stage (``looppass``)."""
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

    def _drain(self, q: FileQueue) -> None:
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        q.retry = None
        if q.lines:
            if not self._write(q):
                return
        if q.sync_waiters and not q.syncing and q.sync_waiters[0][0] <= q.written:
            self.sync.start(q)
        elif self.settings.fsync == "always" and q.synced < q.written:
            self.sync.start(q)

    def _fd(self, q: FileQueue, *, create_here: bool = False) -> int | None:
        """The queue's descriptor, opened on demand. At most ``max_open`` stay open:
        a session with hundreds of subagents must not run the daemon out of fds.

        None while the file is being created: making its directories and the
        file, each synced in its parent, waits on the disk, so it runs in a
        worker thread and drains the queue when done (``create_here``: at
        shutdown, blocking). Likewise while its torn tail is cut."""
        if q.fd is not None:
            self.open_files.used(q)
            return q.fd
        if q.in_worker and not create_here:
            return None
        if q.entries_unsynced and not create_here:  # the file may be there, its entries not on disk
            self._create(q)
            return None
        self.open_files.make_room()  # before the open: the budget holds at every instant
        try:
            fd = self.root.open(q.path, APPEND_FLAGS)
        except FileNotFoundError:
            if not create_here:
                self._create(q)
                return None
            fd, _ = self.root.open_append(q.path)
        q.fd = fd
        # Watched from now on; the first write still stats the path once: it
        # may have changed between the open and the watch.
        if self.watch.watch(q, q.path) and self._recheck is None and self.settings.path_recheck > 0:
            self._recheck = self.loop.call_later(self.settings.path_recheck, self._recheck_paths)
        q.suspect = True
        st = os.fstat(q.fd)
        if (st.st_dev, st.st_ino) != q.ident:
            q.ident, q.end = (st.st_dev, st.st_ino), None
        self.open_files.add(q)
        self.sync.opened(st.st_dev, q.path.parent)
        return q.fd

    def _create(self, q: FileQueue) -> None:
        q.in_worker = True
        self._to_create.append(q)
        if not self._creating:
            self._create_batch()

    def _create_batch(self) -> None:
        """Give the files waiting to be made to the file thread as one job;
        those asked for while it runs go together in the next. The directories
        the job holds until their sync are borrowed from the fd budget (three a
        file, an eighth of the budget at most): beside a full LRU they would run
        a daemon at a low fd limit out of descriptors. A file whose last batch
        failed to sync has every directory level synced again (``resync``)."""
        batch, self._to_create = self._to_create[:CREATE_BATCH], self._to_create[CREATE_BATCH:]
        held = min(CREATE_BATCH, max(1, self.open_files.max_open // 8), 3 * len(batch))
        resync = frozenset(i for i, q in enumerate(batch) if q.entries_unsynced)
        self.open_files.borrow(held)
        try:
            fut = self.files.submit(create_files, self.root, [q.path for q in batch], held, resync)
        except RuntimeError:  # the thread is shut down: the daemon is stopping, its drain makes them
            self.open_files.give_back(held)
            self._to_create[:0] = batch
            return
        self._creating = True
        fut.add_done_callback(lambda f: self._created(batch, held, f))

    def _created(self, batch: list[FileQueue], held: int, fut: asyncio.Future) -> None:
        self.open_files.give_back(held)
        try:
            if self.closed or fut.cancelled():
                for q in batch:
                    q.in_worker = False
                return
            exc = fut.exception()
            results: list[BaseException | None] = [exc] * len(batch) if exc is not None else fut.result()
            for q, error in zip(batch, results):
                q.entries_unsynced = error is not None
                try:
                    self._prepared(q, error, None)
                except Exception:  # a bug: the rest of the batch still gets written and answered
                    log.exception("internal error after creating %s", q.path)
        finally:
            self._creating = False
            if self._to_create and not self.closed:
                self._create_batch()

    def _cut_torn(self, q: FileQueue) -> None:
        """The file ends inside a line another writer left: move the fragment
        aside (read back, synced) in a worker thread, then write; or, when that
        writer is still at it (``cut_torn_unless_written``), write once its
        line has ended. A default pool thread, not the file thread: it waits
        for the file's lock."""
        q.in_worker = True
        self.open_files.borrow()  # the job's own descriptor on the file
        q.suspect = True  # the job skips a path that names another file now: the next write stats it
        since = self.mid_line.get(q.path)
        waited = 0.0 if since is None else self.loop.time() - since
        fut = self.loop.run_in_executor(None, cut_torn_unless_written, self.root, q.path, q.ident, waited)
        fut.add_done_callback(lambda f: self._worker_done(q, f, borrowed=True))

    def _worker_done(self, q: FileQueue, fut: asyncio.Future, borrowed: bool = False) -> None:
        if borrowed:
            self.open_files.give_back()
        if self.closed or fut.cancelled():
            q.in_worker = False
            return
        exc = fut.exception()
        self._prepared(q, exc, fut.result() if exc is None else None)

    def _prepared(self, q: FileQueue, exc: BaseException | None, torn: TornTail | MidLine | None) -> None:
        """A worker thread is done with ``q``'s file (made, or its torn tail cut):
        drain it, or fail its waiters; or, when another writer is in the middle
        of its last line, look again shortly (its waiters keep waiting)."""
        q.in_worker = False
        if self.closed:
            return
        if isinstance(torn, MidLine):
            if q.path not in self.mid_line:
                self.mid_line[q.path] = self.loop.time()
                by = f"pid {torn.pid}, which holds it open" if torn.pid is not None else f"written {torn.age:.1f} s ago"
                log.warning("%s ends inside a line another writer is in the middle of (%s): "
                            "%d entries wait for its end", q.path, by, len(q.lines))
            q.retry = self.loop.call_later(MID_LINE_RECHECK, self._drain, q)
            return
        if self.mid_line:
            self.mid_line.pop(q.path, None)
        if exc is None:
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
            if st is None or self.own_observer is None:
                # A file replaced is told by the follower instead, once: it
                # compares the file each write went into with the one it
                # follows (``own_observer``), whichever of them saw it first.
                self.published_gone(q.path)
            return self._fd(q, create_here=create_here)  # stays suspect: its first write stats it again
        q.suspect = not self.watch.watching(q)
        return fd

    def _close_fd(self, q: FileQueue) -> None:
        self.open_files.close(q)

    def _suspect(self, q: FileQueue) -> None:
        q.suspect = True

    def _all_suspect(self) -> None:
        for q in self.open_files:
            q.suspect = True

    def _recheck_paths(self) -> None:
        """What no watch sees (a symlinked ancestor re-pointed, a mount on top):
        every open file is stat'ed again at its next write, every ``path_recheck``
        seconds while any is open (an idle daemon does not wake up for it)."""
        self._all_suspect()
        every = self.settings.path_recheck
        self._recheck = self.loop.call_later(every, self._recheck_paths) if self.open_files and every > 0 else None

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
        self._wrote(q, data, done)
        if self._below_limit and not self.over_limit:
            callbacks, self._below_limit = self._below_limit, []
            for cb in callbacks:
                cb()
        return True

    def _wrote(self, q: FileQueue, data: bytes, done: Appended) -> None:
        """Everything queued on ``q`` is in the file now: tell the observers,
        count it, answer the write waiters."""
        if done.torn is not None:
            log.warning("%s ended in a torn line: %d bytes at offset %d moved to %s.torn",
                        q.path, done.torn.length, done.torn.offset, q.path.name)
        if self.mid_line:
            self.mid_line.pop(q.path, None)
        if q.observed:
            if self.own_observer is not None:
                self.own_observer(q.path, data, done.size, q.ident)
            for observe in self.observers:
                observe(q.path, q.lines, done.size)
        self.stats.writes += 1
        self.stats.bytes_written += len(data)
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
        self.mid_line.pop(q.path, None)
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
        self.sync.stop()
        self._soon, self._to_arm = [], []
        # A batch of new files in flight finishes first: its files exist before
        # their directory entries are synced, and nothing is written into them
        # until then. Its answer never reaches the loop now, so each of its
        # files (and any still waiting for a batch, or whose batch failed to
        # sync) has every directory level synced here before its write.
        self.files.wait()
        unsure = set(self._to_create)
        unsure.update(q for q in self.queues.values() if q.in_worker or q.entries_unsynced)
        self._to_create = []
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
                if q in unsure:
                    error = create_files(self.root, [q.path], resync=frozenset({0}))[0]
                    if error is not None:
                        raise error
                    q.entries_unsynced = False
                data = b"\n".join(q.lines) + b"\n"
                fd = self._current_fd(q, create_here=True)
                assert fd is not None
                done = locked_append(fd, q.path, data, blocking=True, known_end=q.end, root=self.root)
                assert done is not None  # a blocking append waits for the lock: it never gives up
                self._wrote(q, data, done)
            except OSError as exc:
                self.stats.errors += 1
                self.unwritten_at_exit += len(q.lines)
                log.error("shutdown: %s failed: %s; %d entries NOT written", q.path, exc.strerror or exc, len(q.lines))
                errors[q] = io_error(f"{q.path.name}: {exc.strerror or exc}")
        self.sync.final([q for q in queues if q.synced < q.written], errors)
        for q in queues:
            err = errors.get(q)
            for waiters, reached in ((q.write_waiters, q.written), (q.sync_waiters, q.synced)):
                while waiters:
                    seq, waiter = waiters.popleft()
                    waiter(None if seq <= reached else err or io_error("not written at shutdown"))
            if not q.syncing:
                self._close_fd(q)

    def close(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
        for q in self.open_files:
            self._close_fd(q)
        self.sync.close()
        self.watch.close()
        self.files.close()
        self.root.close()


