"""The daemon's spend book: the sums of every transcript's counted API
responses per session, model and quarter hour (``store.spend.cells``), kept as
lines are written and followed, so ``sessiond usage`` is a lookup, not a read
of the store.

Lines reach it two ways, like the catalog: the writer's observer (the daemon's
own appends and the follower's lines of foreign writers: Claude Code itself)
only queues them, on the event loop, at the cost of a deque append; the queue
is drained in a worker thread a moment later (``DRAIN_AFTER``, in batches) and
before every answer, so an answer counts every write acknowledged before it.
The queue is bounded (``MAX_PENDING`` writes, ``MAX_PENDING_BYTES``): past
that, writes are dropped from it and the next answer's re-stat reads them from
the files instead. That re-stat of every ``*.jsonl`` under ``projects/`` (a
worker thread) reads what no observer reported, from the offset reached (a file
that shrank or was replaced is read again whole): before a scope's first
answer, and in the background after an answer once the last one is
``RESTAT_AFTER`` old (stale-while-revalidate, as the catalog does). The files
stay the truth: ``forget`` (``reindex``) drops it all, the next answer
rebuilds it.

Counting once across files (ccusage's dedup) depends only on the copies of the
same message id, in path order: the book keeps, per message id, where its
copies are and which of them are counted, and when a copy comes or goes it
replays that id's copies alone and moves the difference into the sums (a new
response, the common case, is one addition). Per transcript it keeps each
response's record (one per response: the lines of one response's content
blocks are folded as they come) and the offset read, to take a file's
responses away again when it shrinks or goes. Bounded: at most
``MAX_RESPONSES`` responses are kept; a store with more is answered
``too_large`` and the CLI computes from the files instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sessiond.store.paths import projects_dir
from sessiond.store.spend import charges as rules
from sessiond.store.spend.cells import Tally
from sessiond.store.spend.prices import Prices
from sessiond.store.spend.reports import Pricer, SessionMemo, report_of
from sessiond.wire.errors import too_large
from sessiond.wire.spend import SpendReport

from .scopes import Scope, scope_key

log = logging.getLogger("sessiond")

MAX_RESPONSES = 1_000_000
"""API responses the book keeps, about a KiB each with their sums and index (a
store of 3 GB of transcripts holds some 200,000)."""
MAX_ANSWERS = 32
"""Reports remembered until the next change."""
RESTAT_AFTER = 1.0
"""Seconds a scope's re-stat stands. Answers trust the observers (the
daemon's own writes, the follower's lines of Claude Code's); the first answer
after this long starts a re-stat in the background, so a write no observer
saw shows from the answer after it, and no answer waits for a walk of the store."""
MAX_SCOPES = 1024
DRAIN_AFTER = 0.1
"""Seconds after a write before its lines are parsed (in a worker, with those
that came meanwhile): the append path only queues them."""
MAX_PENDING = 4096
"""Writes queued for the worker at most; past that the re-stat reads them."""
MAX_PENDING_BYTES = 4 << 20
"""Bytes of queued lines at most: the lines are the writer's own, not copies,
but the queue keeps them alive after their write, so this is memory a fast
writer makes the daemon hold (past it, the re-stat reads the file instead)."""


_PIECE = 1 << 20
"""A line longer than this is measured (``find_newline``) before it is read, so
one over the line cap is passed over without ever being held in memory."""


def _whole(line: bytes) -> bool:
    """Whether a line is one whole JSON value (a last line without its newline
    that is complete, not one being written)."""
    import msgspec

    try:
        msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return True


Found = tuple[rules.Charge, bool]
"""A line's response, and whether only the daily report counts it (``charge_and_kind``)."""


def _fold(items: list[Found], found: Found) -> None:
    """Add a line's response to a list read from a file: a copy of the response
    just before it (Claude Code writes a response's content blocks on
    consecutive lines) is folded into it, the copy the dedup would keep taking
    its place, so a file holds one record per response, not per line."""
    charge, progress = found
    if items and charge.message_id is not None:
        last, last_progress = items[-1]
        if last.message_id == charge.message_id and last.request_id == charge.request_id and last_progress == progress:
            if rules.Ledger.replaces(charge, last):
                items[-1] = found
            return
    items.append(found)


class _File:
    __slots__ = ("offset", "items", "relative", "inode", "scope", "open_end")

    def __init__(self, relative: tuple[str, ...], inode: int) -> None:
        self.offset = 0
        self.open_end = False
        """The last line taken had no newline: bytes after it make it another
        line (ccusage reads the two as one), so the file is read again whole."""
        self.items: list[Found] = []
        self.relative = relative
        self.inode = inode
        self.scope = relative[0] if relative else ""


Counted = tuple[tuple[str, rules.Charge], ...]
"""Responses in the sums: (scope, response)."""


Member = tuple[str, int]
"""Where a response's record is: its file's key and its index in the file's records."""


class _Copies:
    """The copies of one message id (file key, index in its records) and which
    of them the daily and the other reports count now: for an id seen more
    than once (a response's sole copy is kept as its ``Member`` alone)."""

    __slots__ = ("members", "daily", "other")

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.daily: Counted = ()
        self.other: Counted = ()


class SpendBook:
    """The counted responses of every transcript under one root, their sums,
    and the reports made of them (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.projects = projects_dir(root)
        self._base = len(self.projects.parts)
        self.files: dict[str, _File] = {}
        self.copies: dict[str, Member | _Copies] = {}
        self.daily = Tally(timed=False)
        """The daily report's sums (``progress`` lines' responses too)."""
        self.other = Tally(timed=True)
        """The monthly, session and block reports' sums."""
        self.lock = threading.Lock()
        self.version = 0
        self.responses = 0
        self._answers: dict[tuple, tuple[int, SpendReport]] = {}
        self._session_rows: SessionMemo = {}
        """The session report's rows, each kept until its session's sums change."""
        self._restated: dict[Scope, float] = {}
        """When each scope was last re-stated (``scope_key``); a scope not in it is re-stated
        before its next answer (observers clear it for what they cannot apply)."""
        self._revalidating: set[Scope] = set()
        self.prices = Prices.load()
        self.pricer = Pricer(self.prices)
        self._pending: deque[tuple[Path, list[bytes] | None, int, int]] = deque()
        self._queued_bytes = 0  # written on the loop only
        self._drained_bytes = 0  # written by the drainer only
        self._dropped = False
        self._drain_lock = threading.Lock()
        self._scheduled = False
        self.schedule: Callable[[], object] | None = None
        """Set by the server: run ``drain`` in a worker soon (``DRAIN_AFTER``)."""

    # -------------------------------------------------------------- observer

    def written(self, path: Path, lines: list[bytes], end: int) -> None:
        """Writer observer (on the loop): ``lines`` now end ``path`` at byte
        ``end``. Only queued: ``drain`` parses them in a worker."""
        if len(self._pending) >= MAX_PENDING or self._queued_bytes - self._drained_bytes >= MAX_PENDING_BYTES:
            self._dropped = True  # the re-stat reads them
        else:
            n = sum(map(len, lines)) + len(lines)
            self._queued_bytes += n
            self._pending.append((path, lines, end, n))
        self._wake()

    def gone(self, path: Path) -> None:
        """Writer gone-observer (on the loop): what was read of ``path`` no longer stands."""
        if len(self._pending) >= MAX_PENDING:
            self._dropped = True
        else:
            self._pending.append((path, None, 0, 0))
        self._wake()

    def attach(self, loop, fair) -> None:
        """Drain the queue in ``fair``'s pool (as the daemon's own work)
        ``DRAIN_AFTER`` after a write, with the writes that come meanwhile."""
        from .workers import BACKGROUND

        def drain_logged() -> None:
            try:
                self.drain()
            except Exception:  # a bug must not leave the queue undrained for ever: the next write retries
                log.exception("the spend book could not take the written lines in")

        def soon() -> None:
            try:
                fair.submit(drain_logged, owner=BACKGROUND)
            except RuntimeError:  # the pool is shut down: the daemon is stopping
                self._scheduled = False

        self.schedule = lambda: loop.call_later(DRAIN_AFTER, soon)

    def _wake(self) -> None:
        if not self._scheduled and self.schedule is not None:
            self._scheduled = True
            self.schedule()

    def drain(self) -> None:
        """Parse the queued writes, in order (worker thread)."""
        self._scheduled = False  # a write queued from now on schedules another drain
        with self._drain_lock:
            while self._pending:
                path, lines, end, n = self._pending.popleft()
                self._drained_bytes += n
                if lines is None:
                    self._gone(str(path))
                else:
                    self._written(str(path), lines, end)
            if self._dropped:
                self._dropped = False
                self._restated.clear()  # the next answer reads what was dropped

    def _written(self, key: str, lines: list[bytes], end: int) -> None:
        f = self.files.get(key)
        if f is None:  # a file the book has not read (a new session): the next answer looks
            if key.endswith(".jsonl"):
                self._restated.clear()
            return
        start = end - sum(map(len, lines)) - len(lines)
        with self.lock:
            if f.offset != start or f.open_end or self.files.get(key) is not f or self.responses >= MAX_RESPONSES:
                self._restated.clear()  # not what the book read up to (or over the bound): the next answer reads it
                return
            session, project = rules.session_of(f.relative)
            for line in lines:
                if isinstance(line, memoryview):  # a line over a MiB the follower passes on as a view
                    line = bytes(line) if rules.MARKER in line.obj else b""
                if rules.MARKER in line:
                    found = rules.charge_and_kind(line, session, project)
                    if found is not None:
                        self._take(key, f, found)
            f.offset = end
            self.version += 1

    def _gone(self, key: str) -> None:
        with self.lock:
            self._restated.clear()  # the next answer looks again
            f = self.files.get(key)
            if f is not None:
                self._drop(key, f)
                self.version += 1

    def forget(self) -> None:
        """Drop everything (``reindex``): the next answer reads every file."""
        with self.lock:
            self.files.clear()
            self.copies.clear()
            self.daily = Tally(timed=False)
            self.other = Tally(timed=True)
            self.responses = 0
            self.version += 1
            self._answers.clear()
            self._session_rows.clear()
            self._restated.clear()

    # ---------------------------------------------------------------- sums (lock held)

    def _take(self, key: str, f: _File, found: Found) -> None:
        """Add a response read from ``f`` (the next line of it) to the records and the sums."""
        charge, progress = found
        items = f.items
        mid = charge.message_id
        if items and mid is not None:
            last, last_progress = items[-1]
            if last.message_id == mid and last.request_id == charge.request_id and last_progress == progress:
                if rules.Ledger.replaces(charge, last):
                    items[-1] = found
                    kept = self.copies[mid]
                    if isinstance(kept, _Copies):
                        self._replay(kept)
                    else:  # the only copy: its sums move from the record it replaces
                        self._count(f.scope, last, last_progress, -1)
                        self._count(f.scope, charge, progress, 1)
                return
        items.append(found)
        self.responses += 1
        if mid is None:  # never merged with another
            self._count(f.scope, charge, progress, 1)
            return
        member = (key, len(items) - 1)
        entry = self.copies.get(mid)
        if entry is None:  # the first copy of a response (the common case): counted as it is
            self.copies[mid] = member
            self._count(f.scope, charge, progress, 1)
            return
        if not isinstance(entry, _Copies):
            entry = self._copies(mid, entry)
        entry.members.append(member)
        self._replay(entry)

    def _count(self, scope: str, charge: rules.Charge, progress: bool, sign: int) -> None:
        """Add (or take away) a response that is the only copy of its message id."""
        cost, unpriced = self.pricer.units(charge)
        self.daily.count(scope, charge, cost, unpriced, sign)
        if not progress:
            self.other.count(scope, charge, cost, unpriced, sign)

    def _copies(self, mid: str, only: Member) -> _Copies:
        """A message id's one copy, now that another comes, as the record of its copies."""
        f = self.files[only[0]]
        charge, progress = f.items[only[1]]
        copies = self.copies[mid] = _Copies()
        copies.members.append(only)
        counted = ((f.scope, charge),)
        copies.daily, copies.other = counted, () if progress else counted
        return copies

    def _replay(self, copies: _Copies) -> None:
        """Count a message id's copies again, as ccusage's dedup does over the
        files in path order, and move the difference into the sums."""
        daily, other = rules.Ledger(progress=True), rules.Ledger()
        scope_of: dict[int, str] = {}
        for key, index in sorted(copies.members):
            f = self.files[key]
            charge, progress = f.items[index]
            scope_of[id(charge)] = f.scope
            daily.add(charge)
            if not progress:
                other.add(charge)
        self._move(copies, tuple((scope_of[id(c)], c) for c in daily.charges),
                   tuple((scope_of[id(c)], c) for c in other.charges))

    def _move(self, copies: _Copies, daily: Counted, other: Counted) -> None:
        for tally, old, new in ((self.daily, copies.daily, daily), (self.other, copies.other, other)):
            if len(old) == len(new) and all(a[1] is b[1] and a[0] == b[0] for a, b in zip(old, new, strict=True)):
                continue
            for scope, charge in old:
                tally.count(scope, charge, *self.pricer.units(charge), sign=-1)
            for scope, charge in new:
                tally.count(scope, charge, *self.pricer.units(charge))
        copies.daily, copies.other = daily, other

    def _drop(self, key: str, f: _File) -> None:
        """Take a file's responses away from the records and the sums."""
        del self.files[key]
        self.responses -= len(f.items)
        touched: dict[str, _Copies] = {}
        for charge, progress in f.items:
            mid = charge.message_id
            entry = None if mid is None else self.copies.get(mid)
            if isinstance(entry, _Copies):
                touched[mid] = entry  # type: ignore[index]  # (mid is not None here)
                continue
            if mid is not None:
                if entry is None:
                    continue
                del self.copies[mid]  # its only copy was this one
            self._count(f.scope, charge, progress, -1)
        for mid, copies in touched.items():
            copies.members = [m for m in copies.members if m[0] != key]
            if copies.members:
                self._replay(copies)
            else:
                self._move(copies, (), ())
                del self.copies[mid]

    # ------------------------------------------------------------ the answer

    def refresh(self, names: set[str] | None = None) -> None:
        """Re-stat the transcripts (of the project dirs ``names``, else all)
        and read what the book has not (worker thread)."""
        if names is None:
            found = rules.transcripts(self.projects)
        else:
            found = []
            for name in sorted(names):
                found += [(p, (name, *rel)) for p, rel in rules.transcripts(self.projects / name)]
        seen: set[str] = set()
        for path, relative in found:
            key = str(path)
            seen.add(key)
            try:
                st = os.stat(key, follow_symlinks=False)
            except OSError:
                continue
            f = self.files.get(key)
            if f is not None and f.inode == st.st_ino and f.offset == st.st_size:
                continue
            if f is None or f.inode != st.st_ino or st.st_size < f.offset or f.open_end:
                f = _File(relative, st.st_ino)
            self._read_from(key, f)
        with self.lock:
            for key in [k for k, f in self.files.items() if k not in seen and (names is None or f.scope in names)]:
                self._drop(key, self.files[key])
                self.version += 1

    def stale(self, names: set[str] | None) -> bool:
        """Whether the scope's last re-stat is older than ``RESTAT_AFTER`` and
        none is under way: the handler then runs ``revalidate`` in the background."""
        scope = scope_key(names)
        last = self._restated.get(scope)
        return scope not in self._revalidating and (last is None or time.monotonic() - last >= RESTAT_AFTER)

    def revalidate(self, names: set[str] | None) -> None:
        """Re-stat the scope and note when (worker thread)."""
        scope = scope_key(names)
        with self.lock:
            if scope in self._revalidating:
                return
            self._revalidating.add(scope)
        try:
            started = time.monotonic()
            self.refresh(names)
            with self.lock:
                if len(self._restated) >= MAX_SCOPES:
                    self._restated.clear()
                self._restated[scope] = started
        finally:
            with self.lock:
                self._revalidating.discard(scope)

    def _read_from(self, key: str, f: _File) -> None:
        from sessiond.store.linecap import MAX_LINE, find_newline
        from sessiond.store.regular import open_regular

        start = f.offset
        items: list[Found] = []
        session, project = rules.session_of(f.relative)
        try:
            fd = open_regular(key)
        except OSError:
            return
        end = start
        open_end = False
        try:
            with os.fdopen(fd, "rb", buffering=1 << 20) as fh:
                fh.seek(start)
                while line := fh.readline(_PIECE + 1):
                    if not line.endswith(b"\n") and len(line) > _PIECE:  # a long line: is its end within the cap?
                        at = fh.tell() - len(line)
                        nl = find_newline(fd, at, at + MAX_LINE + 1)
                        if nl < 0 and os.fstat(fd).st_size > at + MAX_LINE:  # over it: passed over, never held
                            nl = find_newline(fd, at + MAX_LINE + 1)
                            if nl < 0:
                                break  # the file ends inside it
                            end += nl + 1 - at
                            fh.seek(nl + 1)
                            continue
                        line += fh.readline(MAX_LINE + 1 - len(line))  # within it: the rest of the line
                    if not line.endswith(b"\n"):
                        if len(line) <= MAX_LINE:  # the last line, without its newline
                            if _whole(line):  # a whole entry (ccusage counts it): taken
                                end += len(line)
                                open_end = True
                                found = rules.charge_and_kind(line, session, project)
                                if found is not None:
                                    _fold(items, found)
                            break  # else not whole yet: read again when it is
                        skipped = len(line)  # over the cap: no entry; skip to its end
                        while (more := fh.readline(MAX_LINE + 1)) and not more.endswith(b"\n"):
                            skipped += len(more)
                        if not more:
                            break
                        end += skipped + len(more)
                        continue
                    end += len(line)
                    if rules.MARKER in line:
                        found = rules.charge_and_kind(line[:-1], session, project)
                        if found is not None:
                            _fold(items, found)
        except OSError:
            return
        with self.lock:
            current = self.files.get(key)
            if current is f and f.offset != start:
                return  # the observer moved on meanwhile: keep its reading
            replaced = len(current.items) if current is not None and current is not f else 0
            if self.responses - replaced + len(items) > MAX_RESPONSES:
                raise too_large(f"the store holds more than {MAX_RESPONSES:,} API responses: "
                                "the daemon keeps no usage figures for it")
            if current is not None and current is not f:
                self._drop(key, current)
            self.files[key] = f
            for found in items:
                self._take(key, f, found)
            f.offset = end
            f.open_end = open_end
            self.version += 1

    def answer(self, kind: str, names: set[str] | None, since, until, tz, tz_label: str, by_model: bool) -> SpendReport:
        """A report (worker thread) from the sums as they stand, once the queued
        writes are in them, after a re-stat of the scope when it never had one
        (or an observer saw a file the book has not read); remembered until a
        file changes. A re-stat older than ``RESTAT_AFTER`` is redone after the
        answer (``stale``, ``revalidate``)."""
        self.drain()
        scope = None if names is None else tuple(sorted(names))
        remembered = scope_key(names)
        if remembered not in self._restated:
            self.revalidate(names)
        key = (kind, remembered, since, until, tz_label, by_model)
        with self.lock:
            kept = self._answers.get(key)
            if kept is not None and kept[0] == self.version and not any(b.is_active for b in kept[1].blocks):
                return kept[1]  # (an active block's rate and projection change with the time: made anew)
            tally = self.daily if kind == "daily" else self.other
            out = report_of(kind, tally.sessions(scope), tally.responses_in(scope), self.prices, tz, tz_label,
                            "daemon", since, until, by_model, memo=self._session_rows)
            if len(self._answers) >= MAX_ANSWERS:
                self._answers.clear()
            self._answers[key] = (self.version, out)
        return out
