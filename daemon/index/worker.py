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
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path

from sessiond.protocol.search.files import Transcript, oldest_first, transcripts

from .pipe import Done, Look, Progress, Reindex, Rescan, Splitter, Stop, ToWorker, frame
from .store import Store, remove_index

log = logging.getLogger("sessiond.index")

RESCAN_EVERY = 30.0
COMMIT_BYTES = 32 * 1024 * 1024
COMMIT_EVERY = 0.5
PROGRESS_EVERY = 0.2


class Worker:
    def __init__(self, root: Path, index: Path, out_fd: int) -> None:
        self.root = root
        self.index = index
        self.out_fd = out_fd
        self.store = Store(root, index)
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
            case Stop():
                self.stopping = True

    def rescan(self, projects: list[str] | None, max_age: float = 0.0) -> None:
        now = time.monotonic()
        keys: list[str | None] = [None] if projects is None else list(projects)
        if max_age > 0:
            everything = self.scanned.get(None, -1e9)
            keys = [k for k in keys if now - max(self.scanned.get(k, -1e9), everything) >= max_age]
            if not keys:
                return
            projects = None if keys == [None] else keys
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
        while self.todo and not self.stop_requested.is_set():
            path = next(iter(self.todo))
            del self.todo[path]
            try:
                n = self.store.catch_up(path)
            except OSError as exc:
                log.warning("search index: reading %s failed: %s", path, exc)
                continue
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

    def reindex(self, token: int, projects: list[str] | None) -> Done:
        started = time.monotonic()
        if projects is None:
            self.store.close()
            remove_index(self.index)
            self.store = Store(self.root, self.index)
        else:
            self.store.drop_projects(projects)
            self.store.commit()
        found = list(transcripts(self.root, projects))
        self.queue_oldest_first(found)
        total = sum(t.st.st_size for t in found)
        n = self.catch_up_all(progress=(token, total))
        if projects is None:
            self.store.optimize()
        for k in [None] if projects is None else projects:
            self.scanned[k] = time.monotonic()
        return Done(token=token, files=len(found), bytes=n, seconds=round(time.monotonic() - started, 3))

    def run(self) -> None:
        self.rescan(None)
        while not self.stopping:
            try:
                msg = self.inbox.get(timeout=RESCAN_EVERY if not self.todo else 0)
            except queue.Empty:
                if not self.todo:
                    self.rescan(None)
                msg = None
            if msg is not None:
                self.handle(msg)
                while True:  # everything already sent comes before the answers
                    try:
                        self.handle(self.inbox.get_nowait())
                    except queue.Empty:
                        break
            self.catch_up_all()
            for answer in self.answers:
                self.send(answer)
            self.answers.clear()
            later, self.later = self.later, []
            for projects, max_age in later:
                self.rescan(projects, max_age)
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
    try:
        worker = Worker(root, index, out_fd)
    except Exception as exc:  # an unusable index path: say why, the daemon logs it
        log.error("search index %s cannot be opened: %s", index, exc)
        return 1
    threading.Thread(target=worker.read_stdin, args=(0,), daemon=True, name="stdin").start()
    try:
        worker.run()
    except BrokenPipeError:
        worker.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
