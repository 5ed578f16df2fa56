"""Listing sessions (SPEC 5): stat everything, read only the page.

Why two phases: with thousands of sessions a list must not read thousands of
files. With a ``limit``, phase one stats every ``<uuid>.jsonl`` of the project
dirs (no content read) and sorts by mtime, newest first; phase two lite-reads
files in that order only until the page is full. A file that turns out not to be
a session (a sidechain, a teammate transcript, an empty or metadata-only file)
does not shrink the page: the next file is read instead. ``limit=20`` thus reads
about 20 files, plus those skipped before and inside the page. ``offset`` counts
listed sessions, not files, so consecutive pages never overlap or leave gaps;
the price is that page N reads the files of the pages before it.

Without a limit every candidate is read anyway, so the stat pass is skipped and
the order comes from the ``fstat`` each lite read does.

Which files are sessions (the state rule, see ``lite``): a file is listed when
its first entry is not a sidechain, no entry carries a ``teamName``, and it holds
at least one user or assistant message — the entries that materialize a session
(SPEC 3.2), hence exactly what ``resume`` can continue. Empty files and files of
only metadata (summaries, snapshots, titles) are skipped and counted, never an
error; so are files that vanish or cannot be read between the two phases.
Only files named ``<uuid>.jsonl`` are candidates: resume takes a UUID, and the
old flat ``agent-<id>.jsonl`` layout is thereby excluded without a read.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from sessiond.wire.errors import bad_request
from sessiond.wire.session_info import SessionInfo

from .entries import entry_time
from .lite import EMPTY, LITE_WINDOW, LiteInfo, Opener, read_lite
from .paths import is_session_id, projects_dir

__all__ = [
    "ListStats",
    "SessionInfo",
    "list_sessions",
    "list_all_sessions",
    "project_dirs",
    "session_candidates",
]

Progress = Callable[[int, int], None]
"""``progress(done, total)`` during the read phase (for a stderr indicator)."""

PROGRESS_EVERY = 256


class ListStats:
    """What a listing cost and skipped: a test or benchmark checks ``files_read``."""

    __slots__ = ("dirs", "files_seen", "files_read", "skipped", "errors")

    def __init__(self) -> None:
        self.dirs = 0
        self.files_seen = 0  # <uuid>.jsonl candidates found
        self.files_read = 0  # lite reads (each one open + at most two preads)
        self.skipped: dict[str, int] = {}  # not listed, by lite state
        self.errors = 0  # vanished or unreadable between stat and read

    def skip(self, state: str) -> None:
        self.skipped[state] = self.skipped.get(state, 0) + 1

    def __repr__(self) -> str:
        return (f"ListStats(dirs={self.dirs}, files_seen={self.files_seen}, "
                f"files_read={self.files_read}, skipped={self.skipped}, errors={self.errors})")


def project_dirs(root: Path | str) -> list[Path]:
    """Every project dir of the store (the all-projects listing)."""
    try:
        with os.scandir(projects_dir(Path(root))) as it:
            return [Path(e.path) for e in it if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def session_candidates(dirs: Iterable[Path | str], *, stat: bool = True,
                       stats: ListStats | None = None) -> list[tuple[int, str, int]]:
    """``(mtime_ns, path, size)`` of every ``<uuid>.jsonl`` directly in ``dirs``.

    ``stat=False`` skips the stat calls (mtime and size are then 0): the
    no-limit path gets both from the read itself. A missing dir is just empty.
    """
    out: list[tuple[int, str, int]] = []
    for d in dirs:
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        if stats is not None:
            stats.dirs += 1
        with it:
            for entry in it:
                name = entry.name
                if not name.endswith(".jsonl") or not is_session_id(name[:-6]):
                    continue
                if not stat:
                    if entry.is_file():
                        out.append((0, entry.path, 0))
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                if st.st_mode & 0o170000 == 0o100000:  # regular file
                    out.append((st.st_mtime_ns, entry.path, st.st_size))
    if stats is not None:
        stats.files_seen += len(out)
    return out


def _newest_first(item: tuple[int, str, object]) -> tuple[int, str]:
    # Path breaks mtime ties, so a page boundary is the same on every call.
    return (-item[0], item[1])


def last_activity(info: SessionInfo) -> str:
    """When a session was last active: its newest entry's own ``timestamp``
    (a copied or imported file's mtime is the copy's time, not the
    conversation's), else the file's mtime; never later than the mtime, as no
    entry is written after its file last was (a clock-skewed writer's future
    stamp is not believed). What ``list`` sorts by and shows; it being at most
    the mtime lets a page stop reading files early (``list_sessions``)."""
    entry, mtime = _ns(info.lastEntryAt), _ns(info.modifiedAt)
    if info.lastEntryAt and entry is not None and (mtime is None or entry <= mtime):
        return info.lastEntryAt
    return info.modifiedAt


def _ns(iso: str | None) -> int | None:
    when = entry_time(iso)
    return None if when is None else int(when.timestamp() * 1_000_000) * 1000


def activity_ns(info: SessionInfo) -> int:
    """``last_activity`` as nanoseconds since the epoch (0 when unreadable)."""
    entry, mtime = _ns(info.lastEntryAt), _ns(info.modifiedAt)
    if entry is None:
        return mtime or 0
    return entry if mtime is None else min(entry, mtime)


def by_activity(sessions: Iterable[SessionInfo]) -> list[SessionInfo]:
    """``sessions`` most recently active first; the file's mtime, then its path
    break ties (stable pages)."""
    return sorted(sessions, key=lambda s: (-activity_ns(s), -(_ns(s.modifiedAt) or 0), s.path))


def list_sessions(dirs: Path | str | Iterable[Path | str], *, limit: int | None = None,
                  offset: int = 0, stats: ListStats | None = None,
                  opener: Opener | None = None, progress: Progress | None = None,
                  window: int = LITE_WINDOW) -> list[SessionInfo]:
    """Sessions of one or more project dirs, most recently active first
    (``last_activity``: the newest entry's timestamp).

    With a ``limit``, files are read in mtime order and reading stops once the
    page's sessions were all active after the next file's mtime: an entry is
    written no later than its file's mtime, so no unread file can be newer.

    ``limit``/``offset`` page over listed sessions. ``stats`` is filled in if
    given; ``opener`` is handed to every lite read (to count or fault opens);
    ``progress(done, total)`` is called every few hundred reads and at the end.
    """
    if limit is not None and limit < 0:
        raise bad_request(f"limit must be >= 0: {limit}")
    if offset < 0:
        raise bad_request(f"offset must be >= 0: {offset}")
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    stats = stats if stats is not None else ListStats()
    if limit == 0:
        return []

    if limit is None:
        cands = session_candidates(dirs, stat=False, stats=stats)
        found: list[SessionInfo] = []
        for i, (_, path, _) in enumerate(cands, 1):
            lite = _read(path, stats, opener, window)
            if lite is not None:
                found.append(lite.session_info())
            if progress is not None and (i % PROGRESS_EVERY == 0 or i == len(cands)):
                progress(i, len(cands))
        return by_activity(found)[offset:]

    cands = session_candidates(dirs, stat=True, stats=stats)
    cands.sort(key=_newest_first)
    read: list[SessionInfo] = []
    newest: list[int] = []  # a min-heap of the ``wanted`` latest activities read so far
    wanted = offset + limit
    total = len(cands)
    for i, (mtime_ns, path, size) in enumerate(cands, 1):
        if len(newest) >= wanted and newest[0] >= mtime_ns:
            break  # every unread file was last written before the page's sessions were active
        if size == 0:  # known empty from the stat: no need to open it
            stats.skip(EMPTY)
            continue
        lite = _read(path, stats, opener, window)
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(i, total)
        if lite is not None:
            info = lite.session_info()
            read.append(info)
            (heapq.heappush if len(newest) < wanted else heapq.heappushpop)(newest, activity_ns(info))
    if progress is not None:
        progress(total, total)
    return by_activity(read)[offset:wanted]


def list_all_sessions(root: Path | str, *, limit: int | None = None, offset: int = 0,
                      stats: ListStats | None = None, opener: Opener | None = None,
                      progress: Progress | None = None, window: int = LITE_WINDOW) -> list[SessionInfo]:
    """Sessions of every project of the store (``sessiond list --all``), in one
    activity order across all projects; the keywords are those of ``list_sessions``."""
    return list_sessions(project_dirs(root), limit=limit, offset=offset, stats=stats,
                         opener=opener, progress=progress, window=window)


def _read(path: str, stats: ListStats, opener: Opener | None, window: int) -> LiteInfo | None:
    """Lite info of a listable file, else None (skip counted in ``stats``)."""
    stats.files_read += 1
    try:
        lite = read_lite(path, opener=opener, window=window)
    except OSError:
        stats.errors += 1
        return None
    if not lite.listable:
        stats.skip(lite.state)
        return None
    return lite
