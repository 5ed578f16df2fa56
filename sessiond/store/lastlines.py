"""The last lines of a transcript, read from its end.

``tail`` shows the last N entries of files that grow to gigabytes: reading
the whole file to keep its end would cost the file's size in memory and time.
``last_lines`` reads backwards in chunks from the last newline (a torn last
line is not a line yet) and stops once it holds N non-blank lines, so what it
reads and keeps is those lines plus a chunk, whatever the file's size.

Line numbers (for a report of unreadable lines) would need every newline
before the window; ``line_numbers`` counts them only when asked, streaming.
"""

from __future__ import annotations

import os

import msgspec

from .linecap import MAX_LINE

CHUNK = 1 << 16


class Line(msgspec.Struct, frozen=True):
    """One whole line of a file and the offset it starts at."""

    offset: int
    """Where the line starts in the file."""
    data: bytes
    """The line without its newline."""


class LastLines(msgspec.Struct, frozen=True):
    """What ``last_lines`` read from a file's end: the last whole lines, where they
    end (where a follower goes on), and whether the file is blank."""

    lines: list[Line]
    """The last non-blank whole lines (at most the count asked for), in file order."""
    end: int
    """Just past the last newline: where the whole lines end and a follower goes on."""
    blank: bool
    """Nothing but whitespace in what was read, and what was read is the whole
    file (only then: a file with a line somewhere is not blank)."""


def last_lines(fd: int, count: int, chunk: int = CHUNK, max_line: int = MAX_LINE) -> LastLines:
    """The last ``count`` non-blank ``\\n``-terminated lines of the open file ``fd``.
    A line over ``max_line`` (the shared cap, ``linecap.MAX_LINE``) comes with an empty
    ``data`` (no entry: an unreadable line), never assembled whole."""
    size = os.fstat(fd).st_size
    end, torn_blank = _last_newline(fd, size, chunk)
    found: list[Line] = []  # newest first
    pieces: list[bytes] = []  # the line being assembled, its last piece first
    held = 0  # its length so far
    pos = end - 1 if end else 0  # [0, pos) is whole lines joined by newlines
    everything_blank = torn_blank
    while pos > 0 and len(found) < count:
        n = min(chunk, pos)
        pos -= n
        block = os.pread(fd, n, pos)
        stop = len(block)
        while len(found) < count:
            nl = block.rfind(b"\n", 0, stop)
            pieces.append(block[nl + 1 : stop])
            held += stop - nl - 1
            if held > max_line:  # over the cap: its bytes are not kept
                pieces[:] = [b"\0"]
            if nl < 0:
                break
            everything_blank &= _take(found, pieces, pos + nl + 1, held > max_line)
            held = 0
            stop = nl
    if pos == 0 and len(found) < count and pieces:
        everything_blank &= _take(found, pieces, 0, held > max_line)
    found.reverse()
    return LastLines(found, end, everything_blank and pos == 0 and len(found) < count)


def line_numbers(fd: int, offsets: list[int], chunk: int = 1 << 20) -> list[int]:
    """The 1-based numbers of the lines starting at ``offsets`` (ascending): one
    streaming pass counting newlines up to the last of them."""
    numbers: list[int] = []
    newlines = pos = 0
    for offset in offsets:
        while pos < offset:
            block = os.pread(fd, min(chunk, offset - pos), pos)
            if not block:
                break
            newlines += block.count(b"\n")
            pos += len(block)
        numbers.append(newlines + 1)
    return numbers


def _take(found: list[Line], pieces: list[bytes], offset: int, over: bool = False) -> bool:
    """Keep the assembled line if it is not blank; True when it was blank.
    ``over``: the line is over the cap, kept as an empty (unreadable) line."""
    data = b"" if over else b"".join(reversed(pieces))
    pieces.clear()
    if over:
        found.append(Line(offset, data))
        return False
    if not data.strip():
        return True
    found.append(Line(offset, data.removesuffix(b"\r")))
    return False


def _last_newline(fd: int, size: int, chunk: int) -> tuple[int, bool]:
    """(offset just past the last newline, 0 when there is none; whether the
    torn bytes after it are blank), reading back from the end."""
    pos = size
    blank = True
    while pos > 0:
        n = min(chunk, pos)
        pos -= n
        block = os.pread(fd, n, pos)
        nl = block.rfind(b"\n")
        if nl >= 0:
            return pos + nl + 1, blank and not block[nl + 1 :].strip()
        blank = blank and not block.strip()
    return 0, blank
