"""Telling the writer when a transcript it holds open may have left its path.

A transcript renamed, replaced or deleted under the daemon must be reopened at
its path, not written into a file nobody will read. Checking that with a
``stat`` of the path before every write cost one path walk per write (9 % of
the loop's time at 16-entry appends). Instead each open file gets an inotify
watch for what can take it off its path (moved, unlinked or renamed over: the
open inode sees ``IN_MOVE_SELF`` / ``IN_ATTRIB``), and so does every directory
from its parent up to the daemon's root (moved or deleted: ``IN_MOVE_SELF`` /
``IN_DELETE_SELF``, shared by every file beneath). An event only marks files
*suspect*: the writer then does the one ``stat`` that decides. So inotify is a
gate, never the judge: a spurious event (a chmod, a touch) costs one stat, and
where inotify is missing (not Linux) or out of watches, a file stays suspect
and is stat'ed before every write, as before. What no watch sees (a symlinked
ancestor re-pointed, a mount on top) the writer's periodic recheck of the files
it has open does (``path_recheck``, 1 s).

The inotify fd is read by the event loop in the same poll as the client
sockets: a rename done before a client sent its append has been seen by the
time that append's drain runs, which is a later callback.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .inotify import (
    AVAILABLE,
    IN_ATTRIB,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MOVE_SELF,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    read_events,
)
from .inotify import add_watch as _add
from .inotify import init as _init
from .inotify import rm_watch as _rm

log = logging.getLogger("sessiond")

FILE_MASK = IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
DIR_MASK = IN_MOVE_SELF | IN_DELETE_SELF | IN_ONLYDIR


class _Dir:
    """One directory's watch and how many open files beneath it use it."""

    __slots__ = ("path", "wd", "files")

    def __init__(self, path: Path, wd: int) -> None:
        self.path = path
        self.wd = wd
        self.files = 0


class PathWatch:
    """Watches on open transcripts and their directories; calls ``suspect(key)``
    when a file may have left its path, ``everything()`` when any may have (a
    directory moved, the event queue overflowed)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, root: Path, suspect: Callable[[Any], None],
                 everything: Callable[[], None]) -> None:
        self._loop = loop
        self._root = root
        self._suspect = suspect
        self._everything = everything
        self._keys: dict[int, object] = {}  # file wd -> key
        self._wds: dict[object, tuple[int, list[_Dir]]] = {}  # key -> (file wd, its watched dirs)
        self._dirs: dict[Path, _Dir] = {}  # the watch on each directory, while files beneath are open
        self._dir_wds: dict[int, _Dir] = {}
        self._fd: int | None = None
        self._warned = False
        if AVAILABLE and _init is not None:
            try:
                self._fd = _init(os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                log.info("no inotify (%s): transcripts are stat'ed before every write", exc)
                return
            try:
                loop.add_reader(self._fd, self._read)
            except (OSError, NotImplementedError) as exc:
                log.info("cannot poll inotify (%s): transcripts are stat'ed before every write", exc)
                os.close(self._fd)
                self._fd = None

    def watching(self, key: object) -> bool:
        return key in self._wds

    def watch(self, key: object, path: Path) -> bool:
        """Watch the file at ``path`` (just opened by the caller) for ``key``;
        False when it cannot be: the caller must then keep it suspect."""
        if self._fd is None:
            return False
        try:
            wd = _add(self._fd, os.fsencode(path), FILE_MASK)  # type: ignore[misc]  # inotify exists: self._fd is set only then
        except OSError as exc:
            self._cannot(path, exc)
            return False
        try:
            dirs = self._watch_dirs(path.parent)
        except OSError as exc:
            self._cannot(path.parent, exc)
            if wd not in self._keys:
                self._drop_wd(wd)
            return False
        # Two paths of one inode (hard links) share a wd: the last key wins, the
        # other is left unwatched and stays suspect for good.
        other = self._keys.get(wd)
        if other is not None and other is not key:
            self._release_dirs(self._wds.pop(other)[1])
            self._suspect(other)
        self._keys[wd] = key
        self._wds[key] = (wd, dirs)
        return True

    def unwatch(self, key: object) -> None:
        entry = self._wds.pop(key, None)
        if entry is None:
            return
        wd, dirs = entry
        if self._keys.get(wd) is key:
            del self._keys[wd]
            self._drop_wd(wd)
        self._release_dirs(dirs)

    # ------------------------------------------------------------------ details

    def _watch_dirs(self, d: Path) -> list[_Dir]:
        """Watch ``d`` and its parents up to the root (outside the root: only
        ``d``); each watch is shared by the open files beneath it."""
        chain = [d]
        if d.is_relative_to(self._root):
            while chain[-1] != self._root:
                chain.append(chain[-1].parent)
        held: list[_Dir] = []
        try:
            for p in chain:
                w = self._dirs.get(p)
                if w is None:
                    w = _Dir(p, _add(self._fd, os.fsencode(p), DIR_MASK))  # type: ignore[misc]  # inotify exists: self._fd is set only then
                    self._dirs[p] = self._dir_wds[w.wd] = w
                w.files += 1
                held.append(w)
        except OSError:
            self._release_dirs(held)
            raise
        return held

    def _release_dirs(self, held: list[_Dir]) -> None:
        for w in held:
            w.files -= 1
            if w.files <= 0:
                self._forget_dir(w)

    def _forget_dir(self, w: _Dir) -> None:
        if self._dirs.get(w.path) is w:
            del self._dirs[w.path]
        if self._dir_wds.get(w.wd) is w:
            del self._dir_wds[w.wd]
            self._drop_wd(w.wd)

    def _drop_wd(self, wd: int) -> None:
        if self._fd is not None:
            try:
                _rm(self._fd, wd)  # type: ignore[misc]  # inotify exists: self._fd is set only then
            except OSError:
                pass  # already gone with its inode

    def _cannot(self, path: Path, exc: OSError) -> None:
        """Out of watches (``fs.inotify.max_user_watches`` is shared with every
        program of the user): said once, then the files go unwatched quietly."""
        level = logging.DEBUG if self._warned else logging.WARNING
        log.log(level, "cannot watch %s (%s): such files are stat'ed before every write", path, exc.strerror or exc)
        self._warned = True

    def _read(self) -> None:
        assert self._fd is not None
        try:
            pending = read_events(self._fd)
        except OSError as exc:
            log.error("reading inotify events failed: %s; every write stats its path", exc)
            self.close()
            self._everything()
            return
        for wd, mask, _name in pending:
            if mask & IN_Q_OVERFLOW:
                self._everything()
                continue
            moved = self._dir_wds.get(wd)
            if moved is not None:
                # Its watch no longer stands for the path (moved elsewhere,
                # or gone): drop it; the files beneath are re-checked and,
                # reopened, watch the directories at their paths anew.
                self._forget_dir(moved)
                self._everything()
                continue
            key = self._keys.get(wd)
            if key is None:
                continue
            if mask & IN_IGNORED:  # the kernel dropped the watch
                del self._keys[wd]
                self._release_dirs(self._wds.pop(key)[1])
            self._suspect(key)

    def close(self) -> None:
        if self._fd is not None:
            try:
                self._loop.remove_reader(self._fd)
            except (RuntimeError, ValueError):
                pass
            os.close(self._fd)
            self._fd = None
        self._keys.clear()
        self._wds.clear()
        self._dirs.clear()
        self._dir_wds.clear()
