"""The session catalog: what ``List`` answers from, instead of scanning the disk.

The daemon sees every write, so it keeps, per project dir, the stat of each
``<uuid>.jsonl`` and its lite info (SPEC 5), updated by a writer observer. A page
of 20 is then a sort of cached stats and at most a few lite reads of files that
changed. Other writers (Claude Code itself writing into the same root) reach
the observer through the follower (``sessiond/daemon/follow``); a re-stat of the dir,
run in the background after an answer when the index is older than
``REFRESH_AFTER`` (stale-while-revalidate), still catches what no watch saw.
The files stay the only truth: the catalog is a cache rebuilt from them at any time.

Pages are made in a worker thread (a cold full listing reads thousands of
files) by ``sessiond/daemon/pages.py``, which keeps each answer and patches it with the
changes every project logs; the index is shared with the loop's observer under
one lock held only for dict operations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from sessiond.store.listing import session_candidates
from sessiond.store.lite import METADATA_ONLY, LiteInfo, read_lite
from sessiond.store.paths import is_session_id
from sessiond.wire.fsnames import pack

from .workers import BACKGROUND, FairShare

log = logging.getLogger("sessiond")

_encoder = msgspec.msgpack.Encoder()
REFRESH_AFTER = 2.0
MAX_NOTES = 4096
MAX_KEYS = 10_000
MAX_LOG = 512
"""Changes a project remembers; a List answer older than that is made anew."""


class _File:
    __slots__ = ("mtime_ns", "size", "lite", "encoded")

    def __init__(self, mtime_ns: int, size: int) -> None:
        self.mtime_ns = mtime_ns
        self.size = size
        self.lite: LiteInfo | None = None  # None: not read yet, or changed since
        self.encoded: tuple[LiteInfo, msgspec.Raw] | None = None
        """The listing record of ``lite`` as msgpack, built once per change, so
        a warm List joins ready bytes instead of building and encoding a record
        per session each time."""

    def record(self, lite: LiteInfo) -> msgspec.Raw:
        encoded = self.encoded
        if encoded is None or encoded[0] is not lite:
            encoded = self.encoded = (lite, msgspec.Raw(pack(_encoder, lite.session_info())))
        return encoded[1]


class _Project:
    __slots__ = ("files", "refreshed", "order", "refreshing", "version", "log")

    def __init__(self) -> None:
        self.files: dict[str, _File] = {}
        self.refreshed = 0.0
        self.order: list[tuple[int, str, _File]] | None = None  # newest first; None after a change
        self.refreshing = False
        self.version = 0
        self.log: deque[tuple[int, str]] = deque(maxlen=MAX_LOG)
        """(version, path) of the latest changes: a cached List answer
        (``sessiond/daemon/pages.py``) patches what changed since it was made instead
        of sorting and walking every file again."""

    def changed(self, path: str) -> None:
        """``path`` changed (written, gone, new); caller holds the lock."""
        self.order = None
        self.version += 1
        self.log.append((self.version, path))


class Catalog:
    """The daemon's cache of each listed project's session files (stat and lite
    info), kept current by the writer's observer and background re-stats, so a
    ``List`` sorts cached stats instead of reading the disk."""

    def __init__(self, root: Path, loop: asyncio.AbstractEventLoop, fair: FairShare | None = None) -> None:
        self.root = root
        self.loop = loop
        self.fair = fair  # refreshes are the daemon's own work in the read pool's round-robin
        self.projects: dict[str, _Project] = {}
        self.lock = threading.Lock()
        self._notes: dict[tuple[str, str], tuple[int, int]] = {}
        """The last write the observer saw of each file, (mtime_ns, size),
        applied by the next reader under the lock (a dict's item assignment and
        ``popitem`` are atomic: no lock on the loop). One note per file, not
        per write, and only for projects a listing has indexed: a note made in
        the middle of a big load and kept until the next ``List`` pins the
        allocator's arena it sits in, so many notes would keep an idle daemon's
        heap large after its sessions were evicted."""
        self._scanning: set[str] = set()
        """Project dirs being scanned for their first listing: their writes are
        noted, as the scan's stat may predate them."""
        self.changed: Callable[[list[str]], object] | None = None
        """Told (from the refreshing thread) which files a re-stat found new,
        changed or gone: the search indexer follows other writers through it."""
        self._keys: dict[Path, tuple[str, str] | None] = {}
        """Per written path: its (project dir, file) index keys, or None when it is
        not a session file; the observer runs on every write."""

    # ------------------------------------------------------------ following writes

    def written(self, path: Path, lines: list[bytes], size: int) -> None:
        """Writer observer: a session file of an indexed project changed."""
        keys: tuple[str, str] | None | Literal[False] = self._keys.get(path, False)
        if keys is False:
            name = path.name
            keys = (str(path.parent), str(path)) if name.endswith(".jsonl") and is_session_id(name[:-6]) else None
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()
            self._keys[path] = keys
        if keys is None or (keys[0] not in self.projects and keys[0] not in self._scanning):
            return  # no listing has indexed its project: the scan of the first one stats it
        self._notes[keys] = (time.time_ns(), size)
        if len(self._notes) > MAX_NOTES:  # nobody lists: apply them here rather than hold them all
            with self.lock:
                self._apply_notes()

    def _apply_notes(self) -> None:
        """Apply the writes the observer noted (caller holds the lock). The
        observer runs on the loop and never takes the lock itself: a page of
        3,000 sessions being sorted in a worker made every write wait for it."""
        notes = self._notes
        while notes:
            (d, path), (mtime_ns, size) = notes.popitem()
            project = self.projects.get(d)
            if project is None:
                continue
            f = project.files.get(path)
            if f is None:
                f = project.files[path] = _File(0, 0)
            f.mtime_ns = mtime_ns
            f.size = size
            f.lite = None
            project.changed(path)

    def gone(self, path: Path) -> None:
        """Gone observer: a session file shrank, was replaced or rewritten (its
        lite info is stale), or was deleted (it leaves the listing)."""
        with self.lock:
            project = self.projects.get(str(path.parent))
            if project is None or str(path) not in project.files:
                return
        deleted = not path.exists()  # rare: one stat decides
        with self.lock:
            if deleted:
                project.files.pop(str(path), None)
            elif (f := project.files.get(str(path))) is not None:
                f.mtime_ns, f.lite = time.time_ns(), None
            project.changed(str(path))

    def forget(self, path: Path) -> None:
        """A session file left its project (trashed): gone from listings at once."""
        self._notes.pop((str(path.parent), str(path)), None)  # a write noted before must not bring it back
        with self.lock:
            project = self.projects.get(str(path.parent))
            if project is not None and project.files.pop(str(path), None) is not None:
                project.changed(str(path))
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
            project.changed(str(path))

    def main_stats(self, dirs: list[str]) -> list[tuple[str, int, int]]:
        """(path, size, mtime_ns) of every session file of ``dirs`` (for ``du``)."""
        projects = [self._project(d) for d in dirs]
        with self.lock:
            return [(path, f.size, f.mtime_ns) for p in projects for path, f in p.files.items()]

    # ------------------------------------------------------------------ scanning

    def _scan(self, d: str) -> dict[str, _File]:
        return {path: _File(mtime, size) for mtime, path, size in session_candidates([d], stat=True)}

    def _project(self, d: str) -> _Project:
        """The index of one dir, scanned on first use (in the calling thread).

        A dir with no session file (none yet, or no such dir: a request may
        name 4,096 of them) is not kept: an empty index of version 0 answers
        for it, scanned again when asked again. Kept, every dir ever named
        would be held for the daemon's life. A kept index starts at version 1,
        so a page of the empty one is made anew once the dir has files."""
        with self.lock:
            project = self.projects.get(d)
            if project is None:
                self._scanning.add(d)
        if project is not None:
            return project
        try:
            files = self._scan(d)
        except BaseException:
            with self.lock:
                self._scanning.discard(d)
            raise
        with self.lock:
            self._scanning.discard(d)
            project = self.projects.get(d)
            if project is None:
                if not files:
                    return _Project()
                project = self.projects[d] = _Project()
            if not project.files:
                project.files = files
                project.refreshed = time.monotonic()
                project.order = None
                project.version += 1
                project.log.clear()  # nothing to patch from: every answer of it is made anew
        return project

    def refresh(self, d: str) -> None:
        """Re-stat a dir and merge: files changed by writers we did not see lose
        their lite info, new ones appear, deleted ones go."""
        fresh = self._scan(d)
        seen: list[str] = []
        with self.lock:
            self._apply_notes()
            project = self.projects.get(d)
            if project is None:  # only a kept index is refreshed (``_refresh_stale``)
                return
            for path, new in fresh.items():
                old = project.files.get(path)
                if old is None:
                    project.files[path] = new
                    seen.append(path)
                elif (new.mtime_ns, new.size) != (old.mtime_ns, old.size) and new.mtime_ns >= old.mtime_ns:
                    old.mtime_ns, old.size, old.lite = new.mtime_ns, new.size, None
                    seen.append(path)
            for path in [p for p in project.files if p not in fresh]:
                del project.files[path]
                seen.append(path)
            for path in seen:
                project.changed(path)
            project.refreshed = time.monotonic()
            project.refreshing = False
        if seen and self.changed is not None:
            self.changed(seen)

    def _maybe_refresh(self, d: str, project: _Project) -> None:
        if project.refreshing or time.monotonic() - project.refreshed < REFRESH_AFTER:
            return
        project.refreshing = True
        if self.fair is not None:
            self.loop.call_soon_threadsafe(
                lambda: self.fair.submit(self.refresh, d, owner=BACKGROUND))  # type: ignore[union-attr]  # checked just above
        else:
            self.loop.call_soon_threadsafe(lambda: self.loop.run_in_executor(None, self.refresh, d))

    # ------------------------------------------------------------------- listing
    # Meant for a worker thread (``sessiond/daemon/pages.py`` keeps the answers built
    # from these and patches them with ``changes``).

    def candidates(self, dirs: list[str]) -> tuple[list[tuple[int, str, _File]], list[int]]:
        """Every session file of ``dirs`` newest first (``(mtime_ns, path,
        file)``), and each dir's version they reflect."""
        projects = [(d, self._project(d)) for d in dirs]
        with self.lock:
            self._apply_notes()
            candidates: list[tuple[int, str, _File]] = []
            for _, project in projects:
                if project.order is None:  # sorted once per change, not per request
                    project.order = sorted(((f.mtime_ns, path, f) for path, f in project.files.items()),
                                           key=lambda c: (-c[0], c[1]))
                candidates += project.order
            versions = [project.version for _, project in projects]
        if len(projects) > 1:
            candidates.sort(key=lambda c: (-c[0], c[1]))
        self._refresh_stale(projects)
        return candidates, versions

    def changes(self, dirs: list[str], versions: list[int]) -> tuple[list[tuple[str, _File | None]], list[int]] | None:
        """What changed in ``dirs`` since ``versions`` (``candidates``' or an
        earlier ``changes``'): each changed path with its file now (None: gone
        from the listing), and the versions now; None when the log does not
        reach that far back (make the answer anew)."""
        projects = [(d, self._project(d)) for d in dirs]
        out: list[tuple[str, _File | None]] = []
        now: list[int] = []
        with self.lock:
            self._apply_notes()
            for (_, project), seen in zip(projects, versions):
                now.append(project.version)
                if project.version == seen:
                    continue
                log = project.log
                if not log or log[0][0] > seen + 1:
                    return None
                paths: set[str] = set()
                for version, path in reversed(log):
                    if version <= seen:
                        break
                    paths.add(path)
                out += [(path, project.files.get(path)) for path in paths]
        self._refresh_stale(projects)
        return out, now

    def record_of(self, path: str, f: _File, every: bool = False) -> msgspec.Raw | None:
        """The listing record of one file (its lite info read when changed
        since the last read), or None when it is not listed (empty, a
        sidechain-only or, unless ``every``, a metadata-only file). Raises
        ``OSError`` when the file cannot be read now."""
        if f.size == 0:
            return None
        lite = f.lite
        if lite is None:
            lite = read_lite(path)
            with self.lock:
                if f.lite is None and (lite.size, lite.mtime_ns) >= (f.size, 0):
                    f.lite = lite
        return f.record(lite) if lite.listable or (every and lite.state == METADATA_ONLY) else None

    def _refresh_stale(self, projects: list[tuple[str, _Project]]) -> None:
        for d, project in projects:
            if self.projects.get(d) is project:  # an empty one not kept is scanned anew when asked
                self._maybe_refresh(d, project)
