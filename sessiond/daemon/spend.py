"""The daemon's spend book: every transcript's counted API responses, kept as
lines are written and followed, so ``sessiond usage`` is a lookup, not a read
of the store.

Per transcript file it holds the responses its lines record (``store.spend``'s
rules) and the byte offset they reach. Lines reach it two ways, like the
catalog: the writer's observer (the daemon's own appends and the follower's
lines of foreign writers: Claude Code itself) parses each new line as it is
written; and a re-stat of every ``*.jsonl`` under ``projects/`` (a worker
thread) reads what no observer reported, from the offset reached (a file that
shrank or was replaced is read again whole): before a scope's first answer,
and in the background after an answer once the last one is ``RESTAT_AFTER``
old (stale-while-revalidate, as the catalog does). The files stay the truth:
``forget`` (``reindex``) drops it all, the next answer rebuilds it.

Counting once across files (ccusage's dedup, which depends on the order of
files) is redone per answer over the kept responses, and the answer is
remembered until a file changes, so a repeated report costs a re-stat.
Bounded: at most ``MAX_RESPONSES`` responses are kept; a store with more is
answered ``too_large`` and the CLI computes from the files instead.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sessiond.store.paths import projects_dir
from sessiond.store.spend import charges as rules
from sessiond.store.spend.prices import Prices
from sessiond.store.spend.reports import Pricer, report
from sessiond.wire.errors import too_large
from sessiond.wire.spend import SpendReport

MAX_RESPONSES = 1_000_000
"""API responses the book keeps, about half a KiB each (a store of 3 GB of
transcripts holds some 200,000)."""
MAX_ANSWERS = 32
"""Reports remembered until the next change."""
RESTAT_AFTER = 1.0
"""Seconds a scope's re-stat stands. Answers trust the observers (the
daemon's own writes, the follower's lines of Claude Code's); the first answer
after this long starts a re-stat in the background, so a write no observer
saw shows from the answer after it, and no answer waits for a walk of the store."""
MAX_SCOPES = 1024


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


class _File:
    __slots__ = ("offset", "items", "relative", "inode")

    def __init__(self, relative: tuple[str, ...], inode: int) -> None:
        self.offset = 0
        self.items: list[tuple[rules.Charge, bool]] = []
        self.relative = relative
        self.inode = inode


def _fold(items: list[tuple[rules.Charge, bool]], found: tuple[rules.Charge, bool]) -> int:
    """Add a line's response to a file's list: a copy of the response just
    before it (Claude Code writes a response's content blocks on consecutive
    lines) is folded into it, the copy the dedup would keep taking its place,
    so a file holds one record per response, not per line. 1 when the list grew."""
    charge, progress = found
    if items and charge.message_id is not None:
        last, last_progress = items[-1]
        if last.message_id == charge.message_id and last.request_id == charge.request_id and last_progress == progress:
            if rules.Ledger.replaces(charge, last):
                items[-1] = found
            return 0
    items.append(found)
    return 1


class SpendBook:
    """The counted responses of every transcript under one root, and the
    reports made of them (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.projects = projects_dir(root)
        self._base = len(self.projects.parts)
        self.files: dict[str, _File] = {}
        self.lock = threading.Lock()
        self.version = 0
        self.responses = 0
        self._answers: dict[tuple, tuple[int, SpendReport]] = {}
        self._restated: dict[tuple[str, ...] | None, float] = {}
        """When each scope was last re-stated; a scope not in it is re-stated
        before its next answer (observers clear it for what they cannot apply)."""
        self._revalidating: set[tuple[str, ...] | None] = set()
        self.prices = Prices.load()
        self.pricer = Pricer(self.prices)

    # -------------------------------------------------------------- observer

    def written(self, path: Path, lines: list[bytes], end: int) -> None:
        """Writer observer: ``lines`` now end ``path`` at byte ``end``. Parsed
        here when they continue what the book has read of the file; otherwise
        the next answer's re-stat reads them."""
        key = str(path)
        f = self.files.get(key)
        if f is None:  # a file the book has not read (a new session): the next answer looks
            if key.endswith(".jsonl") and self._restated:
                self._restated.clear()
            return
        start = end - sum(len(line) + 1 for line in lines)
        with self.lock:
            if f.offset != start:
                self._restated.clear()  # not what the book read up to: the next answer reads it
                return
            session, project = rules.session_of(f.relative)
            for line in lines:
                if rules.MARKER in line:
                    found = rules.charge_and_kind(line, session, project)
                    if found is not None:
                        self.responses += _fold(f.items, found)
            f.offset = end
            self.version += 1

    def gone(self, path: Path) -> None:
        """Writer gone-observer: what was read of ``path`` no longer stands."""
        with self.lock:
            self._restated.clear()  # the next answer looks again
            f = self.files.pop(str(path), None)
            if f is not None:
                self.responses -= len(f.items)
                self.version += 1

    def forget(self) -> None:
        """Drop everything (``reindex``): the next answer reads every file."""
        with self.lock:
            self.files.clear()
            self.responses = 0
            self.version += 1
            self._answers.clear()
            self._restated.clear()

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
            if f is None or f.inode != st.st_ino or st.st_size < f.offset:
                f = _File(relative, st.st_ino)
            self._read_from(key, f)
        with self.lock:
            for key in [k for k, f in self.files.items() if k not in seen and (names is None or f.relative[0] in names)]:
                self.responses -= len(self.files.pop(key).items)
                self.version += 1

    def stale(self, names: set[str] | None) -> bool:
        """Whether the scope's last re-stat is older than ``RESTAT_AFTER`` and
        none is under way: the handler then runs ``revalidate`` in the background."""
        scope = None if names is None else tuple(sorted(names))
        last = self._restated.get(scope)
        return scope not in self._revalidating and (last is None or time.monotonic() - last >= RESTAT_AFTER)

    def revalidate(self, names: set[str] | None) -> None:
        """Re-stat the scope and note when (worker thread)."""
        scope = None if names is None else tuple(sorted(names))
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
        items: list[tuple[rules.Charge, bool]] = []
        session, project = rules.session_of(f.relative)
        try:
            fd = open_regular(key)
        except OSError:
            return
        end = start
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
            self.responses -= replaced
            for found in items:
                self.responses += _fold(f.items, found)
            f.offset = end
            self.files[key] = f
            self.version += 1

    def answer(self, kind: str, names: set[str] | None, since, until, tz, tz_label: str, by_model: bool) -> SpendReport:
        """A report (worker thread), from the book as it stands, after a re-stat
        of the scope when it never had one (or an observer saw a file the book
        has not read); remembered until a file changes. A re-stat older than
        ``RESTAT_AFTER`` is redone after the answer (``stale``, ``revalidate``)."""
        scope = None if names is None else tuple(sorted(names))
        if scope not in self._restated:
            self.revalidate(names)
        key = (kind, None if names is None else tuple(sorted(names)), since, until, tz_label, by_model)
        with self.lock:
            kept = self._answers.get(key)
            if kept is not None and kept[0] == self.version and not any(b.is_active for b in kept[1].blocks):
                return kept[1]  # (an active block's rate and projection change with the time: made anew)
            version = self.version
            files = sorted((k, f) for k, f in self.files.items() if names is None or f.relative[0] in names)
            snapshot = [list(f.items) for _, f in files]
        ledger = rules.Ledger(progress=kind == "daily")
        for items in snapshot:
            for charge, progress_only in items:
                if kind == "daily" or not progress_only:
                    ledger.add(charge)
        out = report(kind, ledger.charges, self.pricer, tz, tz_label, "daemon", since, until, by_model)
        with self.lock:
            if len(self._answers) >= MAX_ANSWERS:
                self._answers.clear()
            self._answers[key] = (version, out)
        return out
