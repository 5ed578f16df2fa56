"""One cap on the length of a transcript line, shared by every reader.

Why: a reader that looks for the end of a line by reading until it finds a
newline holds the whole line, however long; a corrupt file or a foreign writer
with one 10 MB (or 1 GB) line then costs that much memory in every reader at
once (the watcher, the follower, the search indexer, a scan), or wedges a
reader that re-reads it forever. No sessiond-written line is longer than
``MAX_LINE``: an entry comes in one frame, whose default cap is the same. So a
longer line is not an entry: every reader skips it, looking for its end one
``SCAN_CHUNK`` at a time (never holding more than that of it), and counts it
as skipped where it reports damage.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from sessiond.wire.frames import DEFAULT_MAX_FRAME

from .crc import crc32

MAX_LINE = DEFAULT_MAX_FRAME
"""The longest transcript line any reader takes (bytes, without its newline):
the most one frame of the wire carries by default."""
SCAN_CHUNK = 1024 * 1024
"""What a reader holds of an over-long line while it looks for its end."""


def find_newline(fd: int, pos: int, stop: int | None = None, chunk: int = SCAN_CHUNK) -> int:
    """Where the next newline at or after ``pos`` is (before ``stop`` when given),
    reading ``chunk`` at a time; -1 when the file (or ``stop``) comes first."""
    return search(fd, pos, stop, chunk)[0]


def search(fd: int, pos: int, stop: int | None = None, chunk: int = SCAN_CHUNK,
           crc: int | None = None) -> tuple[int, int, int | None]:
    """``find_newline``; how far the bytes were looked at (past the newline
    found, or to where the file or ``stop`` came); and ``crc`` continued over
    the bytes looked at, when given."""
    while stop is None or pos < stop:
        want = chunk if stop is None else min(chunk, stop - pos)
        data = os.pread(fd, want, pos)
        if not data:
            return -1, pos, crc
        at = data.find(b"\n")
        if at >= 0:
            return pos + at, pos + at + 1, None if crc is None else crc32(memoryview(data)[: at + 1], crc)
        pos += len(data)
        if crc is not None:
            crc = crc32(data, crc)
    return -1, pos, crc


class Span(NamedTuple):
    """Whole lines read from a file: ``data`` (each line with its newline) from
    ``start`` on; ``skipped`` over-long lines, ``start - offset`` bytes with their
    newlines, were passed over between the offset asked for and ``start``.
    ``scanned``: the bytes from ``end`` up to there were looked at and hold no
    newline (the start of a line still being written, or of one whose end a
    ``limit`` stopped the search for); a reader that keeps it and passes it
    back looks at each byte of such a line once, not once per read. ``crc``
    and ``scanned_crc`` (when a CRC was asked for): the CRC-32 of the file up
    to ``start`` and up to ``scanned``."""

    offset: int
    start: int
    data: bytes
    skipped: int
    scanned: int = 0
    crc: int = 0
    scanned_crc: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    @property
    def skipped_bytes(self) -> int:
        return self.start - self.offset

    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")[:-1]


def read_span(fd: int, offset: int, want: int, max_line: int = MAX_LINE, scanned: int = 0,
              limit: int | None = None, crc: int | None = None, scanned_crc: int = 0) -> Span:
    """The whole lines of ``fd`` from ``offset``: those within ``want`` bytes,
    or, when the first is longer than that, that line alone if it is at most
    ``max_line`` long (read once, after its end was found). Lines longer than
    ``max_line`` are skipped, each held at most ``SCAN_CHUNK`` at a time. A
    line without its newline yet (still being written) is not taken: ``data``
    ends before it, empty when it comes first.

    ``scanned`` (a ``Span.scanned`` of an earlier read from the same
    ``offset``, with its ``scanned_crc``): the bytes before it are known to
    hold no newline, and the search for the line's end goes on from there.
    ``limit``: at most about this many bytes are looked at in the search for
    newlines (the line found within it is then read whole, up to
    ``max_line``); a search it stops returns like a line not ended yet, with
    ``scanned`` where it stopped; ``want`` and ``limit`` both 0 read nothing
    (a look at a file's state only: ``scanned`` comes back as given).
    ``crc`` (of the bytes before ``offset``): continued over the bytes passed
    over, as they are looked at, so that a reader keeping a CRC of what it
    passed reads a skipped line once."""
    pos = offset
    skipped = 0
    seen = max(offset, scanned)  # bytes [pos, seen) hold no newline
    c_pos = crc  # the CRC up to pos, and up to seen
    c_seen = crc if crc is None or seen == offset else scanned_crc
    left = limit

    def span(data: bytes, scanned: int, c_scanned: int | None) -> Span:
        return Span(offset, pos, data, skipped, scanned, c_pos or 0, c_scanned or 0)

    if want <= 0 and left is not None and left <= 0:  # asked to look at nothing: what is known stands
        return span(b"", seen, c_seen)
    while True:
        if left is not None and left <= 0 and pos > offset:  # the limit, after lines passed over
            return span(b"", seen, c_seen)
        if seen == pos:
            data = os.pread(fd, want, pos)
            cut = data.rfind(b"\n") + 1
            c_seen = None if c_pos is None else crc32(data, c_pos)
            seen = pos + len(data)
            if cut:
                return span(data[:cut], seen, c_seen)
            if left is not None:
                left -= len(data)
            if len(data) < want:  # the file ends inside the line: wait for its newline
                return span(b"", seen, c_seen)
            del data
        before = seen
        nl, seen, c_seen = search(fd, seen, None if left is None else seen + max(left, SCAN_CHUNK), crc=c_seen)
        if left is not None:
            left -= seen - before
        if nl < 0:  # the file (or the limit) ends inside the line: its end is looked for from seen on
            return span(b"", seen, c_seen)
        if nl - pos <= max_line:  # not over the cap: the line, with those after it within a read
            data = os.pread(fd, max(want, nl + 1 - pos), pos)
            return span(data[: data.rfind(b"\n") + 1], pos + len(data),
                        None if c_pos is None else crc32(data, c_pos))
        skipped += 1
        pos = seen = nl + 1
        c_pos = c_seen


def too_long(line: bytes | memoryview, max_line: int = MAX_LINE) -> bool:
    """Whether a line in hand is one every reader skips."""
    return len(line) > max_line
