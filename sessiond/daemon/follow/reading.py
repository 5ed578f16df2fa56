"""Reading what a foreign writer added to one transcript: whole lines only.

Why a separate piece: this is the only code that decides what counts as new
(the bytes after the last newline the follower passed on) and whether the file
under the path is still the one it was following (same inode, not shorter, the
bytes already passed on unchanged). It runs in a worker thread and touches no
daemon state: it gets a snapshot of a file's state and returns what it found,
which the loop applies only if the state did not move meanwhile.

A rewrite in place is looked for two ways. Every read compares the first 64
bytes and the 64 before the offset (cheap, catches a file rewritten from the
start and then grown). And the follower keeps a running CRC-32 of the bytes
it passed on (it reads them anyway): a look that finds the file no longer but
its mtime or ctime moved (a write that did not append) re-reads the prefix and
compares, within the re-hash budget the caller grants (``Budget``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from sessiond.store.crc import crc32
from sessiond.store.linecap import MAX_LINE, read_span
from sessiond.store.regular import open_regular
from sessiond.store.safeopen import open_regular as open_in_dir

FINGERPRINT = 64
"""Bytes before the offset kept to notice a file rewritten in place."""
MAX_READ = 8 * 1024 * 1024
"""At most this much is read, and looked at for newlines, per file per pass;
the rest comes next pass, after the other files' turn (except one line longer
than that, up to the shared ``linecap.MAX_LINE``, read whole once its end is
found: longer ones are passed over, ``linecap.read_span``). A line without its
newline is looked at once: where the look got to is kept (``FileState.scanned``),
so a file growing a byte at a time without a newline, or a 1 GB line, costs
its size in reads, not its size at every pass."""
NO_LINK = os.O_RDONLY | os.O_NOFOLLOW
"""A transcript path that is a symlink is not followed (the store's own rule,
``safeopen``): one swapped in would have the follower pass on another file."""
_DIR_NO_LINK = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DELETED = "deleted"
LINKED = "reached through a symlink"
"""The two resets that end the following of a path: no file there, or one
only a symlinked directory below ``projects/`` leads to (swapped in for a
project or session dir: followed, it would have the follower pass on files
from anywhere, outside the root included)."""
HASH_CHUNK = 1024 * 1024
START_HASH = 64 * 1024
"""A file found at start with at most this much in whole lines is hashed by the walk."""


class FileState(msgspec.Struct):
    """What the follower passed on of one file, and how the file looked then."""

    offset: int = 0
    """Bytes [0, offset) were passed on (they end with a newline, or offset is 0)."""
    ino: int = 0
    dev: int = 0
    tail: bytes = b""
    """The last bytes before ``offset``, to notice a rewrite in place."""
    head: bytes = b""
    """The first bytes of the file, for the same reason."""
    crc: int = 0
    """CRC-32 of bytes [0, offset) when ``hashed``."""
    hashed: bool = False
    """False until the prefix was hashed: a file found at start (its bytes are
    hashed the first time it grows or is touched, within the budget) or one
    the daemon wrote into without the follower reading the bytes before."""
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    """The file's size and times at the last look: a look with the same size
    and other times is a write that did not append."""
    own: bool = False
    """The last change seen was the daemon's own write (its times are not
    known): the next look takes the file's times without re-hashing."""
    scanned: int = 0
    """Bytes [offset, scanned) were looked at and hold no newline: the line
    being written there is looked at from ``scanned`` on (``Span.scanned``)."""
    scanned_crc: int | None = None
    """``crc`` continued to ``scanned`` (None: not kept, the look starts over
    once the prefix is hashed)."""


class Found(msgspec.Struct):
    """One read: new whole lines from ``start``, or why the file must be read again from 0."""

    start: int
    end: int
    lines: list[bytes]
    ino: int
    dev: int
    tail: bytes
    head: bytes = b""
    reset: str | None = None
    """Set when the file is not the one followed: shrank, replaced, rewritten, gone."""
    more: bool = False
    """The read stopped at ``MAX_READ``, not at the file's end: read on next pass."""
    crc: int = 0
    hashed: bool = False
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    deferred: bool = False
    """The file needs its prefix re-hashed and the budget is spent: look again later."""
    skipped: int = 0
    """Lines over the cap passed over before ``lines`` (``end`` is past them)."""
    scanned: int = 0
    """``FileState.scanned`` after this read, and its CRC."""
    scanned_crc: int | None = None


class Budget:
    """Bytes the worker may re-hash in one pass (it may overdraw by one file,
    which the follower pays back before it grants more)."""

    __slots__ = ("left", "used")

    def __init__(self, left: float) -> None:
        self.left = left
        self.used = 0

    def take(self, n: int) -> bool:
        if self.left <= 0:
            return False
        self.left -= n
        self.used += n
        return True


def read_new(path: Path, state: FileState, budget: Budget | None = None, until: int | None = None,
             top: Path | None = None) -> Found:
    """The whole lines of ``path`` after what ``state`` passed on, and how the
    file looks now (a reset when it was replaced, shrank or rewritten).
    ``until``: read no further than that offset (the daemon's own write starts
    there: the foreign lines before it only). ``top``: the directory below
    which no symlink is followed (``projects/``), checked for a file the state
    does not know yet (a new file, or another inode at the path): the inode
    followed is reached without one."""
    try:
        fd = open_regular(path, NO_LINK)
    except FileNotFoundError:
        return Found(state.offset, state.offset, [], 0, 0, b"", reset=DELETED)
    try:
        st = os.fstat(fd)
        if (st.st_ino, st.st_dev) != (state.ino, state.dev) and top is not None and not unlinked(top, path, st):
            return Found(state.offset, state.offset, [], 0, 0, b"", reset=LINKED)
        if state.ino and (st.st_ino, st.st_dev) != (state.ino, state.dev):
            return Found(0, 0, [], st.st_ino, st.st_dev, b"", reset="replaced (a new inode)")
        if st.st_size < state.offset:
            return Found(0, 0, [], st.st_ino, st.st_dev, b"",
                         reset=f"shrank (followed to {state.offset} bytes, now {st.st_size})")
        look: dict[str, Any] = dict(size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
        crc, hashed = state.crc, state.hashed
        touched = (st.st_size == state.size and not state.own and state.offset
                   and (st.st_mtime_ns, st.st_ctime_ns) != (state.mtime_ns, state.ctime_ns))
        if touched or (not hashed and st.st_size > state.offset and state.offset):
            # A write that did not append (or a prefix never hashed): hash what was passed on.
            if budget is None or not budget.take(state.offset):
                if touched:
                    return Found(state.offset, state.offset, [], st.st_ino, st.st_dev, state.tail, state.head,
                                 crc=crc, hashed=hashed, deferred=True,
                                 size=state.size, mtime_ns=state.mtime_ns, ctime_ns=state.ctime_ns)
            else:
                now = prefix_crc(fd, state.offset)
                if hashed and now != crc:
                    return Found(0, 0, [], st.st_ino, st.st_dev, b"", reset="rewritten in place")
                crc, hashed = now, True
        back = len(state.tail)
        rewritten = back and os.pread(fd, back, state.offset - back) != state.tail
        track = hashed or state.offset == 0  # the CRC covers every byte passed on, skipped ones too
        scanned = state.scanned if not track or state.scanned_crc is not None else 0
        want = MAX_READ if until is None else min(MAX_READ, until - state.offset)
        span = (read_span(fd, state.offset, want, scanned=scanned, limit=want,
                          crc=crc if track else None, scanned_crc=state.scanned_crc or 0)
                if not rewritten else None)
        head = state.head or os.pread(fd, FINGERPRINT, 0)
        if state.head and os.pread(fd, len(state.head), 0) != state.head:
            span = None
        tail = state.tail
        if span is not None and span.end > state.offset:
            n = min(FINGERPRINT, span.end)
            tail = span.data[-n:] if len(span.data) >= n else os.pread(fd, n, span.end - n)
    finally:
        os.close(fd)
    if span is None:
        return Found(0, 0, [], st.st_ino, st.st_dev, b"", reset="rewritten in place")
    whole = span.data
    if len(whole) > HASH_CHUNK and whole.find(b"\n") == len(whole) - 1:
        lines: list = [memoryview(whole)[:-1]]  # one long line: passed on without a second copy of it
    else:
        lines = span.lines()
    end = span.end
    head = head[:end] if end < len(head) else head  # only bytes passed on are a fingerprint
    if track:
        crc, hashed = crc32(whole, span.crc), True
    more = span.scanned < st.st_size  # stopped by MAX_READ: the rest next pass
    # Bytes written after the fstat were read too: the look's size is theirs (its
    # times stay the fstat's, older), so a look at that size with other times
    # re-hashes what was passed on, not taking the file for grown since.
    look["size"] = max(st.st_size, span.scanned)
    return Found(state.offset, end, lines, st.st_ino, st.st_dev, tail, head, crc=crc, hashed=hashed,
                 more=more, skipped=span.skipped, scanned=span.scanned,
                 scanned_crc=span.scanned_crc if track else None, **look)


def unlinked(top: Path, path: Path, st: os.stat_result) -> bool:
    """Whether ``st`` (the file just opened at ``path``) is the file reached
    from ``top`` down without following a symlink (each directory opened
    relative to the last with ``O_NOFOLLOW``): a symlinked directory on the
    way, or a path outside ``top``, is not. A handful of opens, paid only for
    a file the follower did not know."""
    try:
        names = path.relative_to(top).parts
    except ValueError:
        return False
    try:
        fd = os.open(top, _DIR_NO_LINK & ~os.O_NOFOLLOW)  # ``top`` itself may be a symlink (the user's choice)
    except OSError:
        return False
    try:
        for name in names[:-1]:
            nxt = os.open(name, _DIR_NO_LINK, dir_fd=fd)
            os.close(fd)
            fd = nxt
        there = os.stat(names[-1], dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(fd)
    return (there.st_ino, there.st_dev) == (st.st_ino, st.st_dev)


def prefix_crc(fd: int, n: int) -> int:
    """CRC-32 of the first ``n`` bytes of ``fd`` (a file shorter than that is
    caught before: it shrank)."""
    return crc_range(fd, 0, n, 0)


def crc_range(fd: int, pos: int, stop: int, crc: int) -> int:
    """``crc`` continued over bytes [pos, stop) of ``fd``, ``HASH_CHUNK`` at a time."""
    while pos < stop:
        chunk = os.pread(fd, min(HASH_CHUNK, stop - pos), pos)
        if not chunk:
            break
        crc = crc32(chunk, crc)
        pos += len(chunk)
    return crc


def start_state(path: Path, known: int, dir_fd: int) -> FileState | None:
    """The state of a file that exists when following starts: its whole lines
    within the first ``known`` bytes (its size when the walk looked, before
    the watch) are known; what comes after is followed. A prefix of up to
    ``START_HASH`` is hashed now, a longer one the first time the file grows
    or is touched. Opened by its name in the directory the walk holds open
    (``dir_fd``), so it is the file the walk listed there."""
    try:
        fd = open_in_dir(path.name, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        size = min(known, st.st_size)  # shorter now: the first read finds it shrank
        end = whole_end(fd, size)
        if end <= START_HASH:
            prefix = os.pread(fd, end, 0) if end else b""
            head, tail, crc, hashed = prefix[:FINGERPRINT], prefix[-FINGERPRINT:], crc32(prefix), True
        else:
            head, tail = os.pread(fd, FINGERPRINT, 0), os.pread(fd, FINGERPRINT, end - FINGERPRINT)
            crc, hashed = 0, False
    finally:
        os.close(fd)
    return FileState(end, st.st_ino, st.st_dev, tail, head, crc=crc, hashed=hashed,
                     size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)


def whole_end(fd: int, size: int) -> int:
    """Where the whole lines of the first ``size`` bytes end: after the last
    newline (looked for back to ``MAX_LINE``; a file with none that near is
    taken whole, as a line that long is not a transcript's)."""
    pos = size
    while pos > 0 and size - pos < MAX_LINE:
        n = min(START_HASH, pos)
        chunk = os.pread(fd, n, pos - n)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return pos - n + i + 1
        pos -= n
    return 0 if pos == 0 else size
