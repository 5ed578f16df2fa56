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

from ..wire.frames import DEFAULT_MAX_FRAME

MAX_LINE = DEFAULT_MAX_FRAME
"""The longest transcript line any reader takes (bytes, without its newline):
the most one frame of the wire carries by default."""
SCAN_CHUNK = 1024 * 1024
"""What a reader holds of an over-long line while it looks for its end."""


def find_newline(fd: int, pos: int, stop: int | None = None, chunk: int = SCAN_CHUNK) -> int:
    """Where the next newline at or after ``pos`` is (before ``stop`` when given),
    reading ``chunk`` at a time; -1 when the file (or ``stop``) comes first."""
    while stop is None or pos < stop:
        want = chunk if stop is None else min(chunk, stop - pos)
        data = os.pread(fd, want, pos)
        if not data:
            return -1
        at = data.find(b"\n")
        if at >= 0:
            return pos + at
        pos += len(data)
    return -1


class Span(NamedTuple):
    """Whole lines read from a file: ``data`` (each line with its newline) from
    ``start`` on; ``skipped`` over-long lines, ``start - offset`` bytes with their
    newlines, were passed over between the offset asked for and ``start``."""

    offset: int
    start: int
    data: bytes
    skipped: int

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    @property
    def skipped_bytes(self) -> int:
        return self.start - self.offset

    def lines(self) -> list[bytes]:
        return self.data.split(b"\n")[:-1]


def read_span(fd: int, offset: int, want: int, max_line: int = MAX_LINE) -> Span:
    """The whole lines of ``fd`` from ``offset``: those within ``want`` bytes,
    or, when the first is longer than that, that line alone if it is at most
    ``max_line`` long (read once, after its end was found). Lines longer than
    ``max_line`` are skipped, each held at most ``SCAN_CHUNK`` at a time. A
    line without its newline yet (still being written) is not taken: ``data``
    ends before it, empty when it comes first."""
    pos = offset
    skipped = 0
    while True:
        data = os.pread(fd, want, pos)
        cut = data.rfind(b"\n") + 1
        if cut:
            return Span(offset, pos, data[:cut], skipped)
        if len(data) < want:  # the file ends inside the line: wait for its newline
            return Span(offset, pos, b"", skipped)
        del data
        nl = find_newline(fd, pos + want, pos + max_line + 1)
        if nl >= 0:  # longer than a read, not over the cap: the line alone
            return Span(offset, pos, os.pread(fd, nl + 1 - pos, pos), skipped)
        if os.fstat(fd).st_size <= pos + max_line:  # not known yet to be too long: wait for it
            return Span(offset, pos, b"", skipped)
        nl = find_newline(fd, pos + max_line + 1)
        if nl < 0:  # too long, and not ended yet: nothing past it to read
            return Span(offset, pos, b"", skipped)
        skipped += 1
        pos = nl + 1


def too_long(line: bytes | memoryview, max_line: int = MAX_LINE) -> bool:
    """Whether a line in hand is one every reader skips."""
    return len(line) > max_line
