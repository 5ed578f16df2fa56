"""The session catalog: what ``List`` answers from, instead of scanning the disk.

The daemon sees every write, so it keeps, per project dir, the stat of each
``<uuid>.jsonl`` and its lite info (SPEC 5), updated by a writer observer. A page
of 20 is then a sort of cached stats and at most a few lite reads of files that
changed. Writers the daemon does not see (Claude Code itself writing into the same
root) are caught by a re-stat of the dir, run in the background after an answer
when the index is older than ``REFRESH_AFTER`` (stale-while-revalidate). The files
stay the only truth: the catalog is a cache rebuilt from them at any time.

Page computation runs in a worker thread (a cold full listing reads thousands of
files); the index is shared with the loop's observer under one lock held only
for dict operations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path

from sessiond.protocol.transcript.listing import ListStats, session_candidates
from sessiond.protocol.transcript.lite import LiteInfo, SessionInfo, read_lite
from sessiond.protocol.transcript.paths import is_session_id

log = logging.getLogger("sessiond")

REFRESH_AFTER = 2.0
MAX_KEYS = 10_000


class _File:
    __slots__ = ("mtime_ns", "size", "lite")

    def __init__(self, mtime_ns: int, size: int) -> None:
        self.mtime_ns = mtime_ns
        self.size = size
        self.lite: LiteInfo | None = None  # None: not read yet, or changed since


class _Project:
    __slots__ = ("files", "refreshed", "order", "refreshing")

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.refreshed = 0.0
        self.order: list[tuple[int, str, _File]] | None = None  # newest first; None after a change
        self.refreshing = False


class Catalog:
    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.root = root
        self.loop = loop
        self.projects: dict[str, _Project] = {}
        self.lock = threading.Lock()
        self._keys: dict[Path, tuple[str, str] | None] = {}
        """Per written path: its (project dir, file) index keys, or None when it is
        not a session file; the observer runs on every write."""

    # ------------------------------------------------------------ following writes

    def written(self, path: Path, lines: list[bytes], size: int) -> None:
        """Writer observer: a session file of an indexed project changed."""
        keys = self._keys.get(path, False)
        if keys is False:
            name = path.name
            keys = (str(path.parent), str(path)) if name.endswith(".jsonl") and is_session_id(name[:-6]) else None
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()
            self._keys[path] = keys
        if keys is None:
            return
        with self.lock:
            project = self.projects.get(keys[0])
            if project is None:
                return
            f = project.files.get(keys[1])
            if f is None:
                f = project.files[keys[1]] = _File(0, 0)
            f.mtime_ns = time.time_ns()
            f.size = size
            f.lite = None
            project.order = None

    def forget(self, path: Path) -> None:
        """A session file left its project (trashed): gone from listings at once."""
        with self.lock:
            project = self.projects.get(str(path.parent))
            if project is not None and project.files.pop(str(path), None) is not None:
                project.order = None
        self._keys.pop(path, None)

    def learn(self, path: Path) -> None:
        """A session file appeared or changed behind the writer (restored,
        imported): listed at once, its lite info read on the next page."""
        try:
            st = os.stat(path)
        except OSError:
            return self.forget(path)
        with self.lock:
            project = self.projects.get(str(path.parent))
            if project is None:
                return
            f = project.files.get(str(path))
            if f is None:
                f = project.files[str(path)] = _File(0, 0)
            f.mtime_ns, f.size, f.lite = st.st_mtime_ns, st.st_size, None
            project.order = None

    def main_stats(self, dirs: list[str]) -> list[tuple[str, int, int]]:
        """(path, size, mtime_ns) of every session file of ``dirs`` (for ``du``)."""
        projects = [self._project(d) for d in dirs]
        with self.lock:
            return [(path, f.size, f.mtime_ns) for p in projects for path, f in p.files.items()]

    # ------------------------------------------------------------------ scanning

    def _scan(self, d: str) -> dict[str, _File]:
        return {path: _File(mtime, size) for mtime, path, size in session_candidates([d], stat=True)}

    def _project(self, d: str) -> _Project:
        """The index of one dir, scanned on first use (in the calling thread)."""
        with self.lock:
            project = self.projects.get(d)
        if project is not None:
            return project
        files = self._scan(d)
        with self.lock:
            project = self.projects.setdefault(d, _Project())
            if not project.files:
                project.files = files
                project.refreshed = time.monotonic()
                project.order = None
        return project

    def refresh(self, d: str) -> None:
        """Re-stat a dir and merge: files changed by writers we did not see lose
        their lite info, new ones appear, deleted ones go."""
        fresh = self._scan(d)
        with self.lock:
            project = self.projects.setdefault(d, _Project())
            for path, new in fresh.items():
                old = project.files.get(path)
                if old is None:
                    project.files[path] = new
                elif (new.mtime_ns, new.size) != (old.mtime_ns, old.size) and new.mtime_ns >= old.mtime_ns:
                    old.mtime_ns, old.size, old.lite = new.mtime_ns, new.size, None
            for path in [p for p in project.files if p not in fresh]:
                del project.files[path]
            project.order = None
            project.refreshed = time.monotonic()
            project.refreshing = False

    def _maybe_refresh(self, d: str, project: _Project) -> None:
        if project.refreshing or time.monotonic() - project.refreshed < REFRESH_AFTER:
            return
        project.refreshing = True
        self.loop.call_soon_threadsafe(lambda: self.loop.run_in_executor(None, self.refresh, d))

    # ------------------------------------------------------------------- listing

    def page(self, dirs: list[str], limit: int | None, offset: int, stats: ListStats | None = None) -> list[SessionInfo]:
        """Sessions of ``dirs`` newest first; meant for a worker thread."""
        stats = stats or ListStats()
        projects = [(d, self._project(d)) for d in dirs]
        with self.lock:
            candidates: list[tuple[int, str, _File]] = []
            for _, project in projects:
                if project.order is None:  # sorted once per change, not per request
                    project.order = sorted(((f.mtime_ns, path, f) for path, f in project.files.items()),
                                           key=lambda c: (-c[0], c[1]))
                candidates += project.order
        if len(projects) > 1:
            candidates.sort(key=lambda c: (-c[0], c[1]))
        stats.files_seen += len(candidates)
        out: list[SessionInfo] = []
        listed = 0
        for _, path, f in candidates:
            if limit is not None and len(out) >= limit:
                break
            if f.size == 0:
                continue
            lite = f.lite
            if lite is None:
                try:
                    lite = read_lite(path)
                except OSError:
                    stats.errors += 1
                    continue
                stats.files_read += 1
                with self.lock:
                    if f.lite is None and (lite.size, lite.mtime_ns) >= (f.size, 0):
                        f.lite = lite
            if not lite.listable:
                stats.skip(lite.state)
                continue
            if listed >= offset:
                out.append(lite.session_info())
            listed += 1
        for d, project in projects:
            self._maybe_refresh(d, project)
        return out
