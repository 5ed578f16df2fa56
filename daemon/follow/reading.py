"""Reading what a foreign writer added to one transcript: whole lines only.

Why a separate piece: this is the only code that decides what counts as new
(the bytes after the last newline the follower passed on) and whether the file
under the path is still the one it was following (same inode, not shorter, the
bytes just before the offset unchanged). It runs in a worker thread and
touches no daemon state: it gets a snapshot of a file's state and returns what
it found, which the loop applies only if the state did not move meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from sessiond.protocol.transcript.regular import open_regular

FINGERPRINT = 64
"""Bytes before the offset kept to notice a file rewritten in place."""
MAX_READ = 8 * 1024 * 1024
"""At most this much is read per file per pass; the rest comes next pass."""
MAX_LINE = 256 * 1024 * 1024
"""Except a single line longer than that: read up to this much to find its end."""


class FileState(msgspec.Struct):
    """What the follower passed on of one file."""

    offset: int = 0
    """Bytes [0, offset) were passed on (they end with a newline, or offset is 0)."""
    ino: int = 0
    dev: int = 0
    tail: bytes = b""
    """The last bytes before ``offset``, to notice a rewrite in place."""
    head: bytes = b""
    """The first bytes of the file, for the same reason (a rewrite that keeps
    both and the size, changing only the middle, is not noticed)."""


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


def read_new(path: Path, state: FileState) -> Found:
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return Found(state.offset, state.offset, [], 0, 0, b"", reset="deleted")
    try:
        st = os.fstat(fd)
        if state.ino and (st.st_ino, st.st_dev) != (state.ino, state.dev):
            return Found(0, 0, [], st.st_ino, st.st_dev, b"", reset="replaced (a new inode)")
        if st.st_size < state.offset:
            return Found(0, 0, [], st.st_ino, st.st_dev, b"",
                         reset=f"shrank (followed to {state.offset} bytes, now {st.st_size})")
        back = len(state.tail)
        avail = st.st_size - state.offset
        want = min(avail, MAX_READ) + back
        data = os.pread(fd, want, state.offset - back) if want else b""
        if avail > MAX_READ and b"\n" not in data[back:]:  # one line longer than a read: up to its end
            data += os.pread(fd, min(avail, MAX_LINE) - MAX_READ, state.offset + MAX_READ)
        head = state.head or os.pread(fd, FINGERPRINT, 0)
        if state.head and os.pread(fd, len(state.head), 0) != state.head:
            data = None
    finally:
        os.close(fd)
    if data is None or data[:back] != state.tail:
        return Found(0, 0, [], st.st_ino, st.st_dev, b"", reset="rewritten in place")
    body = data[back:]
    cut = body.rfind(b"\n") + 1
    whole = body[:cut]
    lines = whole.split(b"\n")[:-1] if cut else []
    end = state.offset + cut
    tail = (state.tail + whole)[-FINGERPRINT:] if cut else state.tail
    head = head[:end] if end < len(head) else head  # only bytes passed on are a fingerprint
    return Found(state.offset, end, lines, st.st_ino, st.st_dev, tail, head, more=st.st_size - state.offset > MAX_READ)


def start_state(path: Path) -> FileState | None:
    """The state of a file that exists when following starts: its whole lines
    are old news (``push`` mirrors them), what comes after is followed."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        size = st.st_size
        chunk = os.pread(fd, min(size, 64 * 1024), max(0, size - 64 * 1024)) if size else b""
    finally:
        os.close(fd)
    end = size - len(chunk) + chunk.rfind(b"\n") + 1 if b"\n" in chunk else (0 if size <= len(chunk) else size)
    body_end = end - (size - len(chunk))
    head = chunk[:min(end, FINGERPRINT)] if size <= len(chunk) else b""
    return FileState(end, st.st_ino, st.st_dev, chunk[max(0, body_end - FINGERPRINT):body_end], head)
