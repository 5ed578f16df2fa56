"""The follower's view of the project tree: which directories have an inotify
watch, which are re-stat'ed instead, and what a walk of them finds.

Why apart from ``tree``: this part owns the kernel's side (the inotify fd, the
bound on watches, the fallback to re-stat) and the walks that run in worker
threads; ``tree`` owns what was passed on of each file. One inotify watch per
*directory* (``IN_MODIFY`` and friends name the file), never per file.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from .. import inotify
from .reading import FileState, start_state

log = logging.getLogger("sessiond")

MAX_DEPTH = 5
"""projects/<project>/<session>/subagents/<run>: deeper dirs are not transcripts."""
POLL_EVERY = 1.0
DIR_MASK = (inotify.IN_MODIFY | inotify.IN_CREATE | inotify.IN_MOVED_TO | inotify.IN_MOVED_FROM
            | inotify.IN_DELETE | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF | inotify.IN_ONLYDIR)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NONBLOCK

Found = list[tuple[Path, FileState | None, bool]]
"""Per transcript a walk found: its state, and whether it is to be read now."""


class Watches:
    """The follower's inotify watches on the project tree: which dirs are watched,
    which are re-stat'ed instead (no inotify, or past ``max_watches``), and the walks
    that find the transcripts in them."""

    def __init__(self, projects: Path, max_watches: int) -> None:
        self.projects = projects
        self.max_watches = max_watches
        self.fd: int | None = None
        self.dirs: dict[int, Path] = {}  # wd -> dir
        self.watched: set[Path] = set()
        self.polled: set[Path] = set()  # dirs without a watch: re-stat'ed

    def open(self) -> int | None:
        """The inotify fd, or None (then every dir is re-stat'ed)."""
        try:
            self.fd = inotify.open_fd()
        except (OSError, NotImplementedError) as exc:
            log.info("no inotify (%s): foreign writes are found by a re-stat every %.0f s", exc, POLL_EVERY)
            self.fd = None
        return self.fd

    def depth(self, path: Path) -> int | None:
        """How deep ``path`` is below ``projects/`` (0 for it), None outside or too deep."""
        if path == self.projects:
            return 0
        try:
            depth = len(path.relative_to(self.projects).parts)
        except ValueError:
            return None
        return depth if depth <= MAX_DEPTH else None

    def walk(self, d: Path, depth: int, new: bool) -> Found:
        """Watch ``d`` and the dirs beneath; per transcript in them, its state
        and whether it is to be read now. Worker thread.

        At start (not ``new``) a dir's files are sized *before* its watch is
        taken: those sizes are what is known. A byte written after that
        either comes before the watch (the file is then longer than its size
        when it is read: read now) or after it (an event): followed either way,
        and nothing the sizes cover is passed on. A file that appeared between
        the sizing and the listing is read from 0; in a ``new`` dir, all are."""
        out: Found = []
        if depth == 0 and not d.is_dir():
            self.watch(d.parent, False)  # the root: to see projects/ appear
            if d.parent not in self.watched:
                self.polled.add(d)  # re-stat'ed until it appears, then walked
            return out
        try:
            fd = self.open_dir(d)
        except OSError:
            return out
        try:  # the entries are looked at while their dir is open (a DirEntry of an fd stats through it)
            sizes = {} if new else _sizes(fd)
            self.watch(d, True)
            for e in _entries(fd):
                try:
                    if e.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH:
                            out += self.walk(d / e.name, depth + 1, new)
                    elif e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False):
                        p = d / e.name
                        known = sizes.get(e.name)
                        if known is None:
                            out.append((p, FileState(), True))
                        else:
                            state = start_state(p, known, fd)
                            out.append((p, state, state is not None and state.size > known))
                except OSError:
                    continue
        finally:
            os.close(fd)
        return out

    def _below(self, d: Path) -> bool:
        """Below ``projects/``, a dir is never looked at through a symlink: one
        swapped in for a dir after it was seen as one (between two looks, or
        between an event and its walk) would lead the walk anywhere, ``/``
        included. The root and ``projects/`` themselves may be symlinks (the
        user's choice, followed as the writer's ``StoreRoot`` follows the root)."""
        return d not in (self.projects, self.projects.parent)

    def open_dir(self, d: Path) -> int:
        """A descriptor on the directory ``d`` (OSError when it is not one, or a symlink below ``projects/``)."""
        return os.open(d, _DIR_FLAGS | (os.O_NOFOLLOW if self._below(d) else 0))

    def watch(self, d: Path, polled_fallback: bool) -> None:
        if d in self.watched:
            return
        if self.fd is not None and len(self.dirs) < self.max_watches:
            try:
                wd = inotify.add_watch(self.fd, os.fsencode(d), DIR_MASK | (inotify.IN_DONT_FOLLOW if self._below(d) else 0))  # type: ignore[misc]  # inotify exists: self.fd is set only then
            except OSError as exc:
                log.warning("cannot watch %s (%s): it is re-stat'ed every %.0f s", d, exc.strerror or exc, POLL_EVERY)
            else:
                self.dirs[wd] = d
                self.watched.add(d)
                self.polled.discard(d)
                return
        if polled_fallback:
            self.polled.add(d)

    def forget(self, wd: int, mask: int) -> None:
        """The watched dir went away or moved (a moved dir keeps its watch:
        it is dropped, and its new path is walked anew)."""
        d = self.dirs.pop(wd, None)
        if d is not None:
            self.watched.discard(d)
        if not mask & inotify.IN_IGNORED and self.fd is not None:
            try:
                inotify.rm_watch(self.fd, wd)  # type: ignore[misc]  # inotify exists: self.fd is set only then
            except OSError:
                pass

    def forget_below(self, left: set[Path]) -> None:
        """The directories ``left`` left their paths (deleted, or moved away):
        the watches and re-stats of them and of the dirs beneath go, so a
        directory made again at such a path is watched anew. A directory's
        own watch may outlive it (whatever holds a file in it open, the
        daemon's writer included, keeps the kernel from dropping it), and
        would name the path for good."""
        below = under(left)
        for wd in [wd for wd, p in self.dirs.items() if p in left or str(p).startswith(below)]:
            self.forget(wd, 0)
        self.polled.difference_update([p for p in self.polled if p in left or str(p).startswith(below)])

    def scan_polled(self, dirs: set[Path], known: dict[Path, tuple[int, int, int]]) -> tuple[list[Path], Found]:
        """Worker thread: the files of ``dirs`` whose (size, inode, mtime)
        differ from ``known`` (grew, replaced or touched), and what a walk of
        the dirs that appeared beneath them finds."""
        seen = self.watched | self.polled
        changed: list[Path] = []
        new: Found = []
        for d in dirs:
            try:
                fd = self.open_dir(d)
            except OSError:
                continue
            try:
                for e in _entries(fd):
                    p = d / e.name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            depth = self.depth(p)
                            if p not in seen and depth is not None:
                                new += self.walk(p, depth, True)
                            continue
                        if not e.name.endswith(".jsonl"):
                            continue
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if known.get(p) != (st.st_size, st.st_ino, st.st_mtime_ns):
                        changed.append(p)
            finally:
                os.close(fd)
        return changed, new

    def close(self) -> None:
        """No more watches: every dir is re-stat'ed from now on."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.polled.update(self.watched)
        self.dirs.clear()
        self.watched.clear()


def under(dirs: set[Path]) -> tuple[str, ...]:
    """What the path of anything beneath one of ``dirs`` starts with (for ``str.startswith``)."""
    return tuple(os.path.join(d, "") for d in dirs)


def _entries(fd: int) -> list[os.DirEntry]:
    """The entries of the directory open as ``fd`` (their ``path`` is their
    name alone: joined to the dir's path by the caller)."""
    try:
        return list(os.scandir(fd))
    except OSError:
        return []


def _sizes(fd: int) -> dict[str, int]:
    """The size of each transcript in the directory ``fd`` now (what the start walk takes as known)."""
    out: dict[str, int] = {}
    for e in _entries(fd):
        if e.name.endswith(".jsonl"):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[e.name] = st.st_size
    return out
