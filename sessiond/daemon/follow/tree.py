"""Following the transcripts other programs write under the root (Claude Code itself).

Why: most transcripts are written by the agents, not through the daemon; the
catalog, the mirror (and the index and watchers) must see those appends live.
One inotify watch per *directory* of the project tree (``watches``), never per
file: 10,000 sessions in a handful of project dirs cost a handful of watches,
plus one per session that has subagents. Watches are bounded
(``follow_max_watches``): a directory past the bound, or one the kernel
refuses (the user's ``max_user_watches`` is shared), is re-stat'ed every
``POLL_EVERY`` instead. After an event queue overflow every file is read
again and the tree walked anew (the files and dirs made meanwhile lost their
events). A directory deleted or moved away loses its watches at once (its
own may outlive it while something holds a file in it open), so one made
again at its path is watched anew; ``projects/`` itself gone, the root is
watched until it is back. Nothing is read through a symlinked directory
below ``projects/`` (``reading.LINKED``).
An event only marks a file dirty; the events of ``COALESCE`` seconds after a
pass make the next one, in which a worker thread reads what is new in each
dirty file once (``reading.read_new``; a file whose last change was the
daemon's own write is looked at on the loop, ``_look_at_own``, and a pass
that only such files made waits ``OWN_SETTLE`` first) and the loop
hands each file's complete lines to the writer's observers in one
``Writer.publish`` (the catalog, the mirror, the index, the watchers: one
interface for both writers). A file that
shrank, was replaced or rewritten goes to ``Writer.published_gone`` first and
is then re-read from 0. The follower only reads: it never writes a followed file.

The start walk takes, per file, what was in it when the walk sized its dir
(``Watches.walk``); events that arrive while it runs wait for it, so every
byte written after that is passed on, once, and none before it.

The daemon's own writes reach the observers from the writer; the follower is
the first writer observer and moves its offset past them, so nothing is
reported twice (foreign lines written just before are passed on first). A
write into another file than the one followed at the path (the writer found
it replaced and reopened the path) is where that replacement is told to the
observers when the follower has not told it yet: once, whoever saw it first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from sessiond.store.crc import crc32
from sessiond.store.linecap import MAX_LINE
from sessiond.store.paths import projects_dir
from sessiond.store.writers import RECENT_WRITE_S

from .. import inotify
from . import watches
from .reading import DELETED, FINGERPRINT, LINKED, MAX_READ, Budget, FileState, Found, read_new
from .watches import POLL_EVERY, Watches

log = logging.getLogger("sessiond")

MAX_FILES = 200_000
MAX_KNOWN = 4096
"""Modify events whose file path is kept (``Follower._known``): past it, they are forgotten all at once."""
MAX_WRITTEN = 4096
"""Sessions remembered as written outside sessiond just now (the oldest go first)."""
COALESCE = 0.005
"""An event this soon after the last pass waits this long for the ones that
follow it, to be read in one pass with them: a writer appending line by line
costs one thread hop and one publish per file per pass, not per line, and the
first line after a quiet spell is still read at once."""
OWN_SETTLE = 0.1
"""A pass that only the daemon's own writes made (every dirty file was last
changed by the writer, which told the observers itself) waits this long
before it looks, the event queue left unread meanwhile: while the daemon
writes, the look that checks nobody else wrote into its files (an open, two
fstats, the fingerprint reads, the loop's wake-ups around them) is made about
ten times a second, not after every few writes. What the wait delays, by at
most this long: another program's lines in such a file (or sooner, at the
daemon's next write into it, where ``own_write`` passes them on first), and
the events of other files that queued meanwhile."""
REHASH_PER_S = 64 * 1024 * 1024
"""Bytes of followed prefixes re-hashed per second at most, on average (a
file rewritten over and over cannot make the follower read without end)."""
Publish = Callable[[Path, list[bytes], int], None]
Gone = Callable[[Path], None]


class Follower:
    """Watches the project tree; see the module docstring."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop, publish: Publish, gone: Gone,
                 max_watches: int = 8192) -> None:
        self.projects = projects_dir(root)
        self.tree = Watches(self.projects, max_watches)
        self.loop = loop
        self.publish = publish
        self.gone = gone
        self.files: dict[Path, FileState] = {}
        self.dirty: set[Path] = set()
        self.lines_followed = 0
        self.bytes_followed = 0
        self.bytes_known = 0
        """Bytes the start walk found in the files (known, not passed on)."""
        self.bytes_rehashed = 0
        self.resets = 0
        self.loop_looks = 0
        """Files looked at on the loop after the daemon's own writes (``_look_at_own``)."""
        self.worker_reads = 0
        """Files read by a pass in the worker thread."""
        self._early: set[Path] | None = None
        """Files events named during the start walk, before it had their state."""
        self._tokens = float(REHASH_PER_S)
        self._tokens_at = loop.time()
        self._busy = False
        self._listening = False
        """The inotify fd is watched by the loop (not while a pass is due: ``_deafen``)."""
        self._last_pass = -1.0
        self._closed = False
        self._poll: asyncio.TimerHandle | None = None
        self._passing: asyncio.Task | None = None
        """The pass in flight (``_kick``), cancelled by ``close``."""
        self.written: dict[str, tuple[float, str]] = {}
        """Session id -> the mtime (epoch seconds) of its newest line followed
        while new (its file or an agent file of it), and its project dir's name:
        who writes outside sessiond right now (``written_recently``); at most
        ``MAX_WRITTEN``."""
        self._known: dict[tuple[int, int, bytes], tuple[Path, Path]] = {}
        """A modify event -> its watched dir (the ``Watches.dirs`` entry it was
        found under) and the file's path: the path of a file's next modify
        events is found without building it (every write makes one); an entry
        stands only while its wd still names that same dir object. At most
        ``MAX_KNOWN``."""
        self.own: dict[str, float] = {}
        """Session id -> until when its followed lines are the daemon's own
        (``mine``); at most ``MAX_WRITTEN``."""

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        fd = self.tree.open()
        if fd is not None:
            self.loop.add_reader(fd, self._read_events)
            self._listening = True
        self._early = set()
        try:
            found = await self.loop.run_in_executor(None, self.tree.walk, self.projects, 0, False)
        finally:
            early, self._early = self._early, None
        self._merge(found)
        early = early or set()
        if self.projects in early:  # the queue overflowed during the walk: every file may have grown
            early.discard(self.projects)
            self.dirty.update(self.files)
            self._lost_events()
        for path in early:  # written while the walk ran: from what it read, or from 0 if it came after
            if path not in self.files and len(self.files) < MAX_FILES:
                self.files[path] = FileState()
            if path in self.files:
                self.dirty.add(path)
        self._kick()
        self._poll = self.loop.call_later(POLL_EVERY, self._poll_dirs)

    def _merge(self, found: list[tuple[Path, FileState | None, bool]]) -> None:
        """Take what a walk found (files already followed stay as they are)."""
        for path, state, now in found:
            if path in self.files or state is None or len(self.files) >= MAX_FILES:
                continue
            self.files[path] = state
            self.bytes_known += state.offset
            if now:
                self.dirty.add(path)
        self._kick()

    # ------------------------------------------------------------ the daemon's own writes

    def own_write(self, path: Path, mine: bytes, size: int, ident: tuple[int, int] | None = None) -> None:
        """The writer's own observer (told before the others): the daemon wrote
        ``mine`` (whole lines) ending at ``size`` into the file ``ident``
        (device, inode); foreign lines before them are passed on now, then
        skipped past. A file written into that is not the one followed at the
        path (the writer found that one replaced or deleted, and reopened the
        path) is told to the observers as gone here, once, whoever noticed it
        first, and followed from its start."""
        state = self.files.get(path)
        if state is not None and ident is not None and state.ino and (state.dev, state.ino) != ident:
            _call(self.gone, path)
            self.resets += 1
            log.info("followed file %s is another file now (the daemon reopened it): read again from the start", path)
            dev, ino = ident
            state = self.files[path] = FileState(0, ino, dev, hashed=True)
        elif state is not None and size <= state.offset:
            return  # lines the follower itself published
        start = size - len(mine)
        if state is None:
            if len(self.files) >= MAX_FILES or not path.is_relative_to(self.projects):
                return
            # New to the follower: made by the daemon (the file it opened, through
            # the store root's checks), or another writer's lines come before the
            # daemon's (a session it made a moment ago, whose event is not read
            # yet): those are passed on first, the path checked as for any new
            # file; more than a read holds are taken as known, as at start.
            dev, ino = ident if ident is not None and start == 0 else (0, 0)
            state = self.files[path] = FileState(0, ino, dev, hashed=True) if start <= MAX_READ else FileState(start)
        while state.offset < start:  # not on through our own lines
            try:
                found = read_new(path, msgspec.structs.replace(state), until=start, top=self.projects)
            except OSError:
                break
            if found.reset is not None or found.deferred or found.end <= state.offset:
                break
            self._apply(path, state, found)
        if state.offset == start:  # the bytes before ours are the ones followed: the fingerprints go on
            state.crc = crc32(mine, state.crc)
            # the last FINGERPRINT bytes followed (not a copy of the whole write to take them)
            state.tail = mine[-FINGERPRINT:] if len(mine) >= FINGERPRINT else (state.tail + mine)[-FINGERPRINT:]
            if start == 0:
                state.head = mine[:FINGERPRINT]
        else:  # not read back: the next read does not compare, the prefix is hashed anew
            state.hashed, state.tail = False, b""
        state.offset = state.size = size
        state.own = True
        self.dirty.discard(path)

    # ------------------------------------------------------------------ events

    def _read_events(self) -> None:
        self._take_events()
        self._kick()

    def _take_events(self) -> None:
        """Read the queued events: each file they name is marked dirty."""
        if self.tree.fd is None:
            return
        try:
            pending = inotify.read_events(self.tree.fd)
        except OSError as exc:
            log.error("reading inotify events failed: %s; foreign writes are re-stat'ed", exc)
            self.close_watches()
            pending = []
        files, dirty, dirs, known = self.files, self.dirty, self.tree.dirs, self._known
        left: set[Path] = set()
        lost = False
        for event in pending:
            wd, mask, name = event
            if mask == inotify.IN_MODIFY:  # the common event (every write, the daemon's own too): no Path made
                hit = known.get(event)
                if hit is not None and dirs.get(wd) is hit[0] and hit[1] in files:
                    dirty.add(hit[1])
                    continue
            if mask & inotify.IN_Q_OVERFLOW:
                self.dirty.update(self.files)
                if self._early is not None:  # events were lost during the walk: read every file it finds
                    self._early.add(self.projects)
                else:
                    lost = True
                continue
            d = self.tree.dirs.get(wd)
            if d is None:
                continue
            if mask & (inotify.IN_IGNORED | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
                self.tree.forget(wd, mask)
                if d == self.projects:  # the root is watched (or re-stat'ed) until it is back, as at start
                    left.add(d)
                    self._new_dir(d)
                continue
            if not name:
                continue
            path = d / os.fsdecode(name)
            if d == self.projects.parent:  # the root, watched until projects/ appears
                if path == self.projects and mask & inotify.IN_ISDIR and mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO):
                    self._new_dir(path)
                continue
            if mask & inotify.IN_ISDIR:
                if mask & (inotify.IN_DELETE | inotify.IN_MOVED_FROM):
                    left.add(path)
                if mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO):
                    self._new_dir(path)
                continue
            if not path.name.endswith(".jsonl"):
                continue
            if path not in self.files:
                if self._early is not None:  # the start walk may have it: it decides where it starts
                    self._early.add(path)
                    continue
                if mask & (inotify.IN_CREATE | inotify.IN_MOVED_TO | inotify.IN_MODIFY) and len(self.files) < MAX_FILES:
                    self.files[path] = FileState()
                else:
                    continue
            if mask == inotify.IN_MODIFY:
                if len(known) >= MAX_KNOWN:
                    known.clear()
                known[event] = (d, path)
            self.dirty.add(path)
        if left:
            self._dirs_left(left)
        if lost:
            self._lost_events()

    def _dirs_left(self, left: set[Path]) -> None:
        """Directories of the tree were deleted or moved away: their watches go
        (one made again there is watched anew), and the files followed in them
        are looked at, which finds them gone (what was passed on of them is
        told gone; moved, they are followed at their new path from its walk).
        One pass over the files for all the events read together."""
        self.tree.forget_below(left)
        below = watches.under(left)
        self.dirty.update(p for p in self.files if str(p).startswith(below))

    def _lost_events(self) -> None:
        """The kernel's event queue overflowed: the files followed are read
        again (by the caller), and the tree is walked for the dirs and files
        made meanwhile, whose events were among those lost (those already
        followed stay as they are)."""
        log.warning("the inotify event queue overflowed: every followed file is read again and %s walked anew",
                    self.projects)
        self._new_dir(self.projects)

    def _new_dir(self, path: Path) -> None:
        depth = self.tree.depth(path)
        if depth is None:
            return

        async def walk() -> None:
            found = await self.loop.run_in_executor(None, self.tree.walk, path, depth, True)
            self._merge(found)

        self.loop.create_task(walk())

    def _poll_dirs(self) -> None:
        """Dirs without a watch (over the bound, refused, or no inotify): their
        files' sizes and inodes are compared with what was followed, and new
        dirs beneath them are walked."""
        if self._closed:
            return
        dirs = set(self.tree.polled)
        if self.tree.fd is None:
            dirs.add(self.projects)
        if not dirs:  # every dir watched (the usual case): nothing to poll, and no pass over every file
            self._poll = self.loop.call_later(POLL_EVERY, self._poll_dirs)
            return
        files = list(self.files.items())  # a C-speed copy: which of them lie in polled dirs is sorted out off the loop

        def scan() -> tuple[list[Path], watches.Found]:
            known = {p: (s.size, s.ino, s.mtime_ns) for p, s in files if p.parent in dirs}
            return self.tree.scan_polled(dirs, known)

        async def run() -> None:
            try:
                changed, new = await self.loop.run_in_executor(None, scan)
                self._merge(new)
                for p in changed:
                    if p not in self.files and len(self.files) < MAX_FILES:
                        self.files[p] = FileState()
                    if p in self.files:
                        self.dirty.add(p)
                self._kick()
            finally:
                if not self._closed:
                    self._poll = self.loop.call_later(POLL_EVERY, self._poll_dirs)

        self.loop.create_task(run())

    # ------------------------------------------------------------------ reading

    def _kick(self) -> None:
        if self.dirty and not self._busy and not self._closed:
            self._busy = True
            self._deafen()
            self._passing = self.loop.create_task(self._pass())

    def _deafen(self) -> None:
        """While a pass is due or running, events are left in the kernel's
        queue: it merges a file's repeated modify events into one, so a file
        appended to a thousand times during a pass (the daemon's own writes
        make events too) is one event read after it, not a thousand loop
        wake-ups. Nothing is lost: the pass's end reads what queued."""
        if self._listening and self.tree.fd is not None:
            self.loop.remove_reader(self.tree.fd)
            self._listening = False

    def _listen(self) -> None:
        if not self._listening and not self._closed and self.tree.fd is not None:
            self.loop.add_reader(self.tree.fd, self._read_events)
            self._listening = True

    async def _pass(self) -> None:
        """Read every dirty file in a worker thread, then apply on the loop."""
        try:
            if self.loop.time() - self._last_pass < COALESCE:  # a writer at work: the next few ms join this pass
                await asyncio.sleep(COALESCE)
            if not self._listening:  # what queued while the pass was due joins it
                self._take_events()
            if self._own_only():
                await asyncio.sleep(OWN_SETTLE)
                self._take_events()
            while self.dirty and not self._closed:
                batch = {p: self.files[p] for p in self.dirty if p in self.files}
                self.dirty.clear()
                self._look_at_own(batch)
                if not batch:
                    continue  # a look that found a reset made the file dirty again: the loop's test sees it
                snap = {p: msgspec.structs.replace(s) for p, s in batch.items()}
                self.worker_reads += len(snap)
                budget = Budget(self._refill())
                results = await self.loop.run_in_executor(None, _read_all, snap, budget, self.projects)
                self._tokens -= budget.used
                self.bytes_rehashed += budget.used
                for path, found in results:
                    state = self.files.get(path)
                    if state is None or state.offset != snap[path].offset:
                        continue  # the daemon wrote meanwhile: its observer moved the offset
                    self._apply(path, state, found)
                if self.dirty and not self._listening:  # another turn is due (a file read in parts): every file has its turn in it
                    self._take_events()
        finally:
            self._busy = False
            self._last_pass = self.loop.time()
            self._listen()

    def _own_only(self) -> bool:
        """Every dirty file was last changed by the daemon's own write (``OWN_SETTLE``)."""
        files = self.files
        return bool(self.dirty) and all(files[p].own for p in self.dirty if p in files)

    def _look_at_own(self, batch: dict[Path, FileState]) -> None:
        """Look on the loop at the files of ``batch`` whose last change was the
        daemon's own write (the modify events of its own appends make most
        passes while it writes), and take them out of it: a look that reads
        nothing new is an open, an fstat and the fingerprint reads, far less
        than the worker thread's hop. The same look as the worker's
        (``read_new``), reading nothing past what was followed and never
        re-hashing; a file that holds more than the daemon wrote stays in
        ``batch``, for the worker to read."""
        for path in [p for p, s in batch.items() if s.own]:
            state = batch[path]
            try:
                found = read_new(path, msgspec.structs.replace(state), until=state.offset, top=self.projects)
            except OSError as exc:
                log.debug("cannot read followed file %s: %s", path, exc)
                del batch[path]
                continue
            if found.more or found.deferred:
                continue  # another writer appended (or the look wants a re-hash): the worker reads it
            del batch[path]
            self.loop_looks += 1
            self._apply(path, state, found)

    def _refill(self) -> float:
        """The re-hash budget of this pass: ``REHASH_PER_S``, at most a second's worth saved."""
        now = self.loop.time()
        self._tokens = min(float(REHASH_PER_S), self._tokens + (now - self._tokens_at) * REHASH_PER_S)
        self._tokens_at = now
        return self._tokens

    def _apply(self, path: Path, state: FileState, found: Found) -> None:
        if found.reset is not None:
            _call(self.gone, path)
            if found.reset in (DELETED, LINKED):
                if found.reset == LINKED:
                    log.warning("followed file %s is %s now: no longer followed", path, LINKED)
                self.files.pop(path, None)
                return
            self.resets += 1
            log.info("followed file %s %s: read again from the start", path, found.reset)
            self.files[path] = FileState(0, found.ino, found.dev)
            self.dirty.add(path)
            return
        if found.deferred:  # to be re-hashed when the budget allows: nothing else moved
            self.loop.call_later(POLL_EVERY, self._look_again, path)
            return
        state.ino, state.dev = found.ino, found.dev
        state.size, state.mtime_ns, state.ctime_ns, state.own = found.size, found.mtime_ns, found.ctime_ns, False
        state.crc, state.hashed = found.crc, found.hashed
        moved = found.end > found.start  # lines, or only a line over the cap passed over
        state.scanned, state.scanned_crc = found.scanned, found.scanned_crc
        if moved:
            state.offset, state.tail = found.end, found.tail
            if len(found.head) > len(state.head):
                state.head = found.head
            self.lines_followed += len(found.lines)
            self.bytes_followed += found.end - found.start
            if found.skipped:
                log.warning("followed file %s: passed over %d lines longer than %d bytes", path, found.skipped, MAX_LINE)
            if found.lines:  # the observers see the lines after a skipped one as a gap, and read it
                self._note_written(path, found.mtime_ns / 1e9)
                _call(self.publish, path, found.lines, found.end)
        if found.more:  # the rest after the other dirty files' turn
            self.dirty.add(path)

    def _note_written(self, path: Path, mtime: float) -> None:
        """Remember that ``path``'s session was written outside sessiond at
        ``mtime``, if that is recent (a file caught up after a restart was not
        written now); the oldest are forgotten past ``MAX_WRITTEN``."""
        if time.time() - mtime > RECENT_WRITE_S:
            return
        found = _session_of(self.projects, path)
        if found is None:
            return
        project, sid = found
        if self.own.get(sid, 0.0) >= time.time():
            return
        self.written.pop(sid, None)
        self.written[sid] = (mtime, project)
        if len(self.written) > MAX_WRITTEN:
            del self.written[next(iter(self.written))]

    def mine(self, sid: str) -> None:
        """Lines of ``sid`` followed in the next ``RECENT_WRITE_S`` seconds are
        the daemon's own (an import's copies), not another program's writes."""
        self.written.pop(sid, None)
        now = time.time()
        if len(self.own) >= MAX_WRITTEN:
            for old in [s for s, until in self.own.items() if until < now]:
                del self.own[old]
            if len(self.own) >= MAX_WRITTEN:
                del self.own[next(iter(self.own))]
        self.own.pop(sid, None)
        self.own[sid] = now + RECENT_WRITE_S

    def written_recently(self) -> dict[str, tuple[float, str]]:
        """Session id -> seconds since it was last written outside sessiond, and
        its project dir's name, for those written at most ``RECENT_WRITE_S`` ago
        (the rest are forgotten)."""
        now = time.time()
        for sid in [sid for sid, (at, _) in self.written.items() if now - at > RECENT_WRITE_S]:
            del self.written[sid]
        return {sid: (max(0.0, now - at), project) for sid, (at, project) in self.written.items()}

    def _look_again(self, path: Path) -> None:
        if path in self.files:
            self.dirty.add(path)
            self._kick()

    # ------------------------------------------------------------------ closing

    def close_watches(self) -> None:
        if self.tree.fd is not None and self._listening:
            try:
                self.loop.remove_reader(self.tree.fd)
            except (RuntimeError, ValueError):
                pass
        self._listening = False
        self.tree.close()

    def close(self) -> None:
        self._closed = True
        if self._passing is not None:  # none left pending on a loop that may close next
            self._passing.cancel()
        if self._poll is not None:
            self._poll.cancel()
        self.close_watches()

    def status(self) -> dict[str, int]:
        return {"files": len(self.files), "watches": len(self.tree.dirs), "polled_dirs": len(self.tree.polled),
                "lines": self.lines_followed, "bytes": self.bytes_followed, "known_bytes": self.bytes_known,
                "rehashed_bytes": self.bytes_rehashed, "resets": self.resets,
                "loop_looks": self.loop_looks, "worker_reads": self.worker_reads}


def _session_of(projects: Path, path: Path) -> tuple[str, str] | None:
    """The project dir's name and the session a followed file belongs to:
    ``<project>/<id>.jsonl``, or an agent file under ``<project>/<id>/``; None
    for another (a 2.0.x flat agent file names its session only inside)."""
    try:
        parts = path.relative_to(projects).parts
    except ValueError:
        return None
    if len(parts) == 2:
        return None if parts[1].startswith("agent-") else (parts[0], parts[1].removesuffix(".jsonl"))
    return (parts[0], parts[1]) if len(parts) > 2 else None


def _read_all(snap: dict[Path, FileState], budget: Budget, top: Path) -> list[tuple[Path, Found]]:
    out = []
    for path, state in snap.items():
        try:
            out.append((path, read_new(path, state, budget, top=top)))
        except OSError as exc:
            log.debug("cannot read followed file %s: %s", path, exc)
    return out


def _call(fn: Callable, *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # an observer must never stop the following
        log.exception("follow observer %r failed", fn)
