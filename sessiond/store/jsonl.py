"""Reading JSONL transcripts: chunked line iteration and the session scan.

Pure readers over files, shared by the daemon (lazy uuid loading) and offline
tools. A torn line (no trailing newline, or not one JSON object) is skipped and
counted, never fatal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from sessiond.wire.core import MAX_UUID

from .entries import REAPPENDED_SET, is_chain_participant, try_header
from .linecap import MAX_LINE, find_newline
from .recording import Cursor, advance, settle
from .regular import open_regular

CHUNK = 1 << 20


def iter_line_views(path: Path | str | int, chunk: int = CHUNK, max_line: int = MAX_LINE,
                    containing: bytes | None = None) -> Iterator[memoryview]:
    """Every non-empty line of the file, without its newline, as a memoryview;
    with ``containing`` (bytes without a newline), only the lines holding it,
    found a buffer at a time (``bytes.find`` over the buffer, not line by line:
    a reader that wants one kind of line never touches the others).

    A view is only valid until the next one is requested (the buffer is reused):
    copy what you keep. A last line without a newline is yielded too. ``path``
    may be a descriptor the caller opened (and closes), read from where it
    stands: the daemon opens its files through ``safeopen`` and scans them by
    descriptor. A line longer than ``max_line`` (``linecap``) is yielded as an
    EMPTY view, which no reader takes for an entry (it counts as a damaged
    line): its end is looked for a scan chunk at a time, so the buffer grows
    to hold a line only once that line's end is known to be within the cap.
    """
    buf = bytearray(chunk)
    view = memoryview(buf)
    owned = not isinstance(path, int)
    fd = path if isinstance(path, int) else open_regular(path)
    try:
        base = os.lseek(fd, 0, os.SEEK_CUR)  # the file offset of buf[0]
        start = end = 0
        while True:
            if start:  # move the incomplete tail to the front
                view[: end - start] = view[start:end]
                end -= start
                base += start
                start = 0
            if end == len(buf):  # one line fills the buffer: how long is it?
                nl = find_newline(fd, base + end, base + max_line + 1)
                if nl >= 0:
                    want = nl + 1 - base  # to its newline
                elif (file_size := os.fstat(fd).st_size) <= base + max_line:
                    want = file_size - base + 1  # the last line, without a newline: whole
                else:  # over the cap: yield its stand-in and read on after it
                    yield view[:0]
                    nl = find_newline(fd, base + max_line + 1)
                    if nl < 0:
                        return  # the file ends inside it
                    base = os.lseek(fd, nl + 1, os.SEEK_SET)
                    end = 0
                    continue
                bigger = bytearray(want)
                bigger[:end] = view[:end]
                buf, view = bigger, memoryview(bigger)
            n = os.readv(fd, [view[end:]])
            if not n:
                break
            end += n
            find = buf.find
            if containing is not None:  # only the lines holding it, up to the buffer's last newline
                last = buf.rfind(b"\n", start, end)
                if last < 0:
                    continue
                while (at := find(containing, start, last)) >= 0:
                    nl = find(b"\n", at, last + 1)
                    yield view[max(buf.rfind(b"\n", start, at) + 1, start):nl]
                    start = nl + 1
                start = last + 1
                continue
            while (nl := find(b"\n", start, end)) >= 0:
                if nl > start:
                    yield view[start:nl]
                start = nl + 1
        if end > start and (containing is None or buf.find(containing, start, end) >= 0):
            yield view[start:end]
    finally:
        if owned:
            os.close(fd)


def iter_lines(path: Path | str | int, chunk: int = CHUNK, max_line: int = MAX_LINE) -> Iterator[bytes]:
    """Every non-empty line as its own bytes (a copy of each view)."""
    for view in iter_line_views(path, chunk, max_line):
        yield bytes(view)


class SessionScan(msgspec.Struct):
    """What the daemon needs to know about an existing transcript before appending."""

    uuids: set[str]
    """uuids of non-sidechain entries (the dedup set), each of at most
    ``MAX_UUID`` characters: an append with a longer one is refused, so the set
    never holds one (a file's megabyte uuids would be held for nothing)."""
    sidechain_uuids: set[str]
    """uuids of inline sidechain entries (1.0.x files keep them in the main file)."""
    cursor: Cursor
    """Where recording continues after the file's non-sidechain chain participants
    (recording.py: the same links a record of them would have written)."""
    metadata: dict[str, bytes]
    """Latest raw line of each re-appended metadata kind."""
    lines: int
    skipped: int


def scan_session(path: Path | str | int) -> SessionScan:
    uuids: set[str] = set()
    side: set[str] = set()
    meta: dict[str, bytes] = {}
    cursor = Cursor()
    pending: list[bytes] = []
    lines = skipped = 0
    for line in iter_lines(path):
        lines += 1
        header = try_header(line)
        if header is None:
            skipped += 1
            continue
        if header.type in REAPPENDED_SET:
            meta[header.type] = line
        if header.uuid is None:
            continue
        if header.isSidechain:
            if len(header.uuid) <= MAX_UUID:
                side.add(header.uuid)
            continue
        if len(header.uuid) <= MAX_UUID:  # a longer one no append may carry: nothing to tell apart from it
            uuids.add(header.uuid)
        if is_chain_participant(header):
            advance(cursor, header, line, pending)
    settle(cursor, pending)
    return SessionScan(uuids, side, cursor, meta, lines, skipped)


def scan_uuids(path: Path | str | int) -> set[str]:
    """Every uuid in a file (agent transcripts: their own dedup set)."""
    out: set[str] = set()
    for line in iter_lines(path):
        header = try_header(line)
        if header is not None and header.uuid is not None and len(header.uuid) <= MAX_UUID:
            out.add(header.uuid)
    return out


def head_lines(path: Path | str, window: int) -> set[bytes]:
    """The whole lines within the first ``window`` bytes of a file."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return set()
    try:
        data = os.pread(fd, window, 0)
    finally:
        os.close(fd)
    return set(data[: data.rfind(b"\n") + 1].split(b"\n"))
