"""Whether the file at the index's path may be handed to SQLite, and setting it aside.

SQLite opens the index (and its ``-wal`` and ``-shm`` side files) by path: it
follows a symlink (and would write where it leads), blocks forever on a FIFO,
and reads a file someone replaced, truncated or wrote garbage over as if it
were the index (a truncated file is an empty database: every search would
answer "no matches"). So every user of the index, the indexer before it
writes, the daemon and the CLI before they read, first asks ``problem``:
``lstat`` of the three paths (only regular files, never a symlink), the
file's identity when the caller knows which file it should be, and its
header read through ``open_regular`` (which never blocks). What it names is
never used; the indexer ``set_aside`` it (renamed, never deleted: a regular
file there may be someone's data) and rebuilds the index from the
transcripts, which it is only a cache of.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from sessiond.store.regular import describe, open_regular
from sessiond.store.statefile import rename_aside

if TYPE_CHECKING:
    import sqlite3  # the CLI's daemon path never loads the library

MAGIC = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm")
"""SQLite's side files of a WAL database, opened by the name of the index plus these."""

MISSING = "missing"
EMPTY = "truncated to 0 bytes"
Identity = tuple[int, int]
"""``(st_dev, st_ino)`` of the index file the indexer writes."""


_SQLITE_ERROR, _SQLITE_CORRUPT, _SQLITE_CANTOPEN, _SQLITE_SCHEMA, _SQLITE_NOTADB = 1, 11, 14, 17, 26
_DAMAGE_CODES = frozenset({_SQLITE_CORRUPT, _SQLITE_CANTOPEN, _SQLITE_SCHEMA, _SQLITE_NOTADB})


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite's error says the index is not the one written (damaged,
    truncated, another database, gone): it is then set aside and rebuilt. Any
    other (full, read-only, busy, a query stopped) leaves the file as it is."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # the primary code of an extended one
    if code == _SQLITE_ERROR:
        return str(exc).startswith("no such")  # a table gone: another database, or an emptied file
    return code in _DAMAGE_CODES


def _kind(st: os.stat_result) -> str | None:
    """None for a regular file, else what it is."""
    if stat.S_ISREG(st.st_mode):
        return None
    return "a symlink" if stat.S_ISLNK(st.st_mode) else describe(st.st_mode)


def unsafe_side_files(path: Path) -> list[tuple[Path, str]]:
    """The paths among ``path`` and its side files that hold something other
    than a regular file, with what it is."""
    out = []
    for p in (path, *(Path(f"{path}{s}") for s in SIDE_FILES)):
        try:
            kind = _kind(os.lstat(p))
        except FileNotFoundError:
            continue
        except OSError as exc:
            kind = f"not to be looked at ({exc.strerror or exc})"
        if kind is not None:
            out.append((p, kind))
    return out


def problem(path: Path, identity: Identity | None = None) -> str | None:
    """Why the index at ``path`` must not be opened, as words after "the index
    is unusable" (None: it may be):
    missing, not a regular file (or a side file that is not), another file
    than ``identity``, empty, or without SQLite's header. Never blocks."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return MISSING
    except OSError as exc:
        return f"cannot be looked at: {exc.strerror or exc}"
    for p, kind in unsafe_side_files(path):
        return f"{p.name} is {kind}"
    if identity is not None and (st.st_dev, st.st_ino) != identity:
        return "replaced by another file"
    try:
        fd = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"cannot be opened: {exc.strerror or exc}"
    try:
        head = os.pread(fd, len(MAGIC), 0)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if not head:
        return EMPTY
    if head != MAGIC:
        return "overwritten: no SQLite header"
    return None


def set_aside(path: Path) -> list[Path]:
    """Rename the index and its side files (whatever they are) each to
    ``<its name>.bad-<UTC time>[.n]``, the names the daemon's other state files
    are set aside under, so the next open creates a new index; returns the new
    names. ``X-wal.bad-…`` is not the WAL SQLite pairs with ``X.bad-…``, so a
    WAL of the old index is never replayed into what was found at the path.
    Renaming moves a symlink itself, never what it points at; nothing is
    deleted."""
    return [rename_aside(p) for p in (path, *(Path(f"{path}{s}") for s in SIDE_FILES)) if os.path.lexists(p)]
