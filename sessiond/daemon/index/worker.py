"""The indexer process: ``python -m sessiond.daemon.index.worker ROOT INDEX``.

Why a process and not a thread of the daemon: indexing is CPU work in Python
(decoding entries) and a thread of the daemon would hold the GIL the event
loop needs, so appends would wait for it. A process at the lowest CPU priority
(nice 19) takes only what appends leave over, and the daemon's side of it is
one pipe write of paths per loop pass.

It reads messages from stdin (a reader thread feeds a queue), keeps the set of
files to look at, and catches them up one by one (``Store.catch_up``); a
``Rescan`` re-stats a scope (the daemon sends one before each search, so files
that other writers changed are found), ``Reindex`` rebuilds. With no message
for ``RESCAN_EVERY`` seconds it re-stats everything by itself. At start it
re-stats everything: what changed while no daemon ran is caught up. EOF on
stdin (the daemon is gone, even SIGKILLed) commits and exits.

The index is a cache, and the file at its path may be deleted, truncated,
overwritten or replaced under it (``sessiond/search/indexfile.py``): each pass
first checks the path still names the file it writes, and that file, a
SQLite error saying it is damaged, or a search that found it so
(``Damaged``), makes it set the file aside and build a new index from the
files. It tells the daemon what searches may do meanwhile (``State``:
``rebuilding``, or ``scanning`` while it cannot write at all, retried every
``RETRY_EVERY`` s), so a search scans the files instead of reading an index
that lost them.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from sessiond.search.files import Transcript, oldest_first, transcripts
from sessiond.search.indexfile import is_damage

from .pipe import (
    REBUILD_TOKEN,
    Damaged,
    Done,
    Look,
    Progress,
    Reindex,
    Rescan,
    Splitter,
    State,
    Stop,
    ToWorker,
    frame,
)
from .store import IndexUnusable, Store, remove_index, set_aside

log = logging.getLogger("sessiond.index")

RESCAN_EVERY = 30.0
COMMIT_BYTES = 32 * 1024 * 1024
COMMIT_EVERY = 0.5
PROGRESS_EVERY = 0.2
MAX_SCANNED = 65_536
"""Projects whose last re-stat time is remembered (then all forgotten): a
search may name thousands of project dirs that do not exist, a new lot each
time."""
RETRY_EVERY = 5.0
"""Seconds between attempts to write an index that could not be written
(disk full, read-only): searches scan the files meanwhile."""


class Worker:
    """The indexer process's state and loop: the files to catch up, the re-stats to
    run, the answers owed to the daemon, and the index file, checked each pass and
    rebuilt when it is lost or damaged."""

    def __init__(self, root: Path, index: Path, out_fd: int) -> None:
        self.root = root
        self.index = index
        self.out_fd = out_fd
        self.store: Store | None = None
        self.failing: str | None = None
        """Why the index cannot be written now (None: it can)."""
        self.damage: str | None = None
        """Why the index must be rebuilt, found since the last pass."""
        self.failed_at = time.monotonic()
        self.inbox: queue.Queue = queue.Queue()
        self.todo: dict[str, None] = {}
        self.scanned: dict[str | None, float] = {}  # project (None: all) -> monotonic time of its last re-stat
        self.answers: list[Done] = []
        self.later: list[tuple[list[str] | None, float]] = []  # re-stats nobody waits for, done after the answers
        self.stopping = False
        self.stop_requested = threading.Event()
        """Set by the reader as soon as Stop (or EOF) arrives: long work ends early."""

    # -------------------------------------------------------------------- I/O

    def send(self, msg) -> None:
        data = frame(msg)
        while data:
            data = data[os.write(self.out_fd, data):]

    def read_stdin(self, fd: int) -> None:
        split = Splitter(ToWorker)
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if not data:
                self.stop_requested.set()
                self.inbox.put(Stop())
                return
            for msg in split.feed(data):
                if isinstance(msg, Stop):
                    self.stop_requested.set()
                self.inbox.put(msg)

    # ------------------------------------------------------------------- work

    def handle(self, msg) -> None:
        match msg:
            case Look(paths=paths):
                for p in paths:
                    self.todo[p] = None
            case Rescan(token=token, projects=projects, max_age=max_age, wait=wait):
                if wait:
                    self.rescan(projects, max_age)
                else:
                    self.later.append((projects, max_age))
                self.answers.append(Done(token=token))
            case Reindex(token=token, projects=projects):
                self.catch_up_all()
                self.answers.append(self.reindex(token, projects))
            case Damaged(dev=dev, ino=ino, reason=reason):
                if self.store is not None and self.store.identity == (dev, ino):
                    self.damage = self.damage or f"a search could not read it: {reason}"
            case Stop():
                self.stopping = True

    def rescan(self, projects: list[str] | None, max_age: float = 0.0) -> None:
        if self.store is None:
            return
        now = time.monotonic()
        keys: list[str | None] = [None] if projects is None else list(projects)
        if max_age > 0:
            everything = self.scanned.get(None, -1e9)
            keys = [k for k in keys if now - max(self.scanned.get(k, -1e9), everything) >= max_age]
            if not keys:
                return
            projects = None if keys == [None] else [k for k in keys if k is not None]
        known = self.store.rows_of(projects)
        changed = []
        for t in transcripts(self.root, projects):
            st = t.st
            row = known.pop(t.path, None)
            if row is None or row[:4] != (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns):
                changed.append(t)
        self.queue_oldest_first(changed)
        for path in known:  # indexed, but no longer there
            self.todo[path] = None
        self.mark_scanned(keys, now)

    def mark_scanned(self, keys: list[str | None], now: float) -> None:
        """Remember ``keys`` (projects; None: all of them) as re-stat'ed at
        ``now``, within ``MAX_SCANNED``: past it everything is forgotten, and a
        scope asked about again is re-stat'ed again (a cost, never a wrong answer)."""
        if len(self.scanned) + len(keys) > MAX_SCANNED:
            self.scanned.clear()
        for k in keys:
            self.scanned[k] = now

    def queue_oldest_first(self, found: list[Transcript]) -> None:
        for t in oldest_first(found):
            self.todo[t.path] = None

    def catch_up_all(self, progress: tuple[int, int] | None = None) -> int:
        """Catch up every file to look at, committing every few MB or half second."""
        total = 0
        last_commit = last_progress = time.monotonic()
        since_commit = 0
        if self.store is None:
            return 0
        while self.todo and not self.stop_requested.is_set():
            path = next(iter(self.todo))
            del self.todo[path]
            try:
                n = self.store.catch_up(path)
            except OSError as exc:
                log.warning("search index: reading %s failed: %s", path, exc)
                continue
            except sqlite3.Error:
                self.todo[path] = None  # looked at again once the index can be written
                raise
            total += n
            since_commit += n
            now = time.monotonic()
            if since_commit >= COMMIT_BYTES or now - last_commit >= COMMIT_EVERY:
                self.store.commit()
                since_commit, last_commit = 0, now
            if progress is not None and now - last_progress >= PROGRESS_EVERY:
                self.send(Progress(token=progress[0], done=total, total=progress[1]))
                last_progress = now
        self.store.commit()
        return total

    # ----------------------------------------------------------- the index file

    def state(self, state: str, reason: str = "", lost: bool = False) -> None:
        dev, ino = self.store.identity if self.store is not None else (0, 0)
        self.send(State(state=state, reason=reason, dev=dev, ino=ino, lost=lost))

    def open_store(self, why_new: str, fill: bool = True, lost: bool = False) -> bool:
        """Open (or create) the index; False (and ``State(scanning)``) when it
        cannot be. A new, empty index is ``rebuilding`` (``why_new``; ``lost``:
        an index was there, or something set aside) until it is filled from
        every transcript (here, unless not ``fill``)."""
        try:
            self.store = Store(self.root, self.index)
        except (IndexUnusable, sqlite3.Error, OSError) as exc:
            self.store = None
            self.failed(f"cannot be opened: {exc}")
            return False
        self.scanned.clear()
        self.failing = None
        if self.store.empty:
            if not lost and self.store.replaced is not None:
                why_new, lost = self.store.replaced, True
            self.state("rebuilding", why_new, lost)
            if fill:
                found = list(transcripts(self.root))
                self.queue_oldest_first(found)
                self.catch_up_all(progress=(REBUILD_TOKEN, sum(t.st.st_size for t in found)))
                self.scanned[None] = time.monotonic()
            else:
                return True
        self.state("ok")
        return True

    def failed(self, reason: str) -> None:
        if self.failing != reason:
            log.error("search index %s unusable (%s): searches scan the files until it can be written", self.index, reason)
            self.failing = reason
            self.state("scanning", reason)

    def check(self) -> None:
        """Before each pass: a store that could not be opened is tried again
        (every ``RETRY_EVERY`` s), and one whose file is no longer at its path
        (or was found damaged) is set aside and built anew."""
        if self.store is None:
            if time.monotonic() - self.failed_at >= RETRY_EVERY:
                self.failed_at = time.monotonic()
                self.open_store("the previous one could not be opened")
            return
        why = self.damage or self.store.problem()
        self.damage = None
        if why is not None:
            self.rebuild(why)

    def rebuild(self, why: str) -> None:
        log.warning("search index %s unusable (%s): building a new one from the transcripts", self.index, why)
        assert self.store is not None
        self.store.abandon()
        self.store = None
        self.failed_at = time.monotonic()
        try:  # all of it: the side files of the file written may be there still, and would be read as the new one's
            set_aside(self.index, why)
        except IndexUnusable as exc:
            self.failed(str(exc))
            return
        self.open_store(why, lost=True)

    def pass_failed(self, exc: sqlite3.Error) -> None:
        """A pass stopped on a SQLite error: a damaged file is rebuilt by the
        next ``check``; anything else (disk full, read-only) is retried after
        ``RETRY_EVERY`` s, searches scanning the files meanwhile."""
        if self.store is not None:
            try:
                self.store.conn.rollback()
            except sqlite3.Error:
                pass
            self.store.in_tx = False
        if is_damage(exc):
            self.damage = f"SQLite cannot use it: {exc}"
        else:
            self.failed(f"cannot be written: {exc}")
            self.failed_at = time.monotonic()

    def rebuild_now(self) -> None:
        """A pass found the index damaged: rebuild it before the answers go
        out, so the searches waiting for them read the new one."""
        if self.damage is None:
            return
        try:
            self.check()
            self.catch_up_all()
        except sqlite3.Error as exc:
            self.pass_failed(exc)

    def reindex(self, token: int, projects: list[str] | None) -> Done:
        started = time.monotonic()
        if projects is None:
            if self.store is not None:
                self.store.close()
                self.store = None
            remove_index(self.index)
            if not self.open_store("a reindex of everything was asked for", fill=False):
                return Done(token=token)
        elif self.store is not None:
            self.store.drop_projects(projects)
            self.store.commit()
        found = list(transcripts(self.root, projects))
        self.queue_oldest_first(found)
        total = sum(t.st.st_size for t in found)
        n = self.catch_up_all(progress=(token, total))
        if projects is None and self.store is not None:
            self.store.optimize()
            self.state("ok")
        self.mark_scanned([None] if projects is None else list(projects), time.monotonic())
        return Done(token=token, files=len(found), bytes=n, seconds=round(time.monotonic() - started, 3))

    def wait(self) -> float:
        """Seconds to wait for a message before the next pass."""
        if self.damage is not None:
            return 0
        if self.failing is not None:
            return RETRY_EVERY
        return 0 if self.todo else RESCAN_EVERY

    def run(self) -> None:
        try:
            if self.open_store("there was none"):
                self.rescan(None)
        except sqlite3.Error as exc:
            self.pass_failed(exc)
        while not self.stopping:
            wait = self.wait()
            try:
                msg = self.inbox.get(timeout=wait)
            except queue.Empty:
                msg = None
            try:
                self.check()  # first: what the messages ask is done in the index at the path
                if msg is None and wait == RESCAN_EVERY:
                    self.rescan(None)
                if msg is not None:
                    self.handle(msg)
                    while True:  # everything already sent comes before the answers
                        try:
                            self.handle(self.inbox.get_nowait())
                        except queue.Empty:
                            break
                self.catch_up_all()
                if self.failing is not None and self.store is not None:
                    self.failing = None  # written again
                    self.state("ok")
            except sqlite3.Error as exc:
                self.pass_failed(exc)
                self.rebuild_now()
            for answer in self.answers:
                self.send(answer)
            self.answers.clear()
            later, self.later = self.later, []
            try:
                for projects, max_age in later:
                    self.rescan(projects, max_age)
            except sqlite3.Error as exc:
                self.pass_failed(exc)
        if self.store is not None:
            self.store.close()


def lower_priority() -> None:
    """Take only the CPU time the daemon leaves over: nice 19, and the
    SCHED_IDLE class (a waking daemon preempts it at once). Linux weighs nice
    values only against the other processes of an autogroup (one per session),
    so the indexer stays in the daemon's session: in a session of its own, its
    group weighed as much as the daemon's, and appends with the index on ran at
    ~60 % of off on 2 cores (bench/search.py). Either setting may be refused
    (a container, another OS); what is refused is left as it is."""
    try:
        os.nice(19)
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # before any thread: they inherit it
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s sessiond-index[%(process)d] %(levelname)s %(message)s")
    os.umask(0o077)
    try:
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the daemon only, which stops the indexer cleanly
    except OSError:
        pass
    lower_priority()
    root, index = Path(argv[0]), Path(argv[1])
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print can never corrupt the answer pipe
    worker = Worker(root, index, out_fd)
    threading.Thread(target=worker.read_stdin, args=(0,), daemon=True, name="stdin").start()
    # Until here nothing was written, and a SIGTERM ends the indexer at once: the daemon sends one
    # when it stops before hearing from it (IndexLink.close). From here on (the index opened, then
    # written) the daemon's Stop, or EOF on stdin, ends it, after a commit.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        worker.run()
    except BrokenPipeError:
        if worker.store is not None:
            worker.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
