"""Reading a transcript file as blocks of whole lines, for the resume loader.

This module owns the bytes: how they get from the file into memory, and where its
lines are. It knows nothing of JSON: loader.py hands the blocks it yields to
chainentry.py to decode.

Why it is built this way:

- What is kept is never copied: the file is mapped read-only and an entry keeps a
  reference to its block of lines (:class:`Lines`) and its line number, slicing its
  bytes out on demand. Copying every kept line into its own ``bytes`` would build
  one object per line and as much fresh memory as the file, a large part of a
  load's cost; reading the file into fresh anonymous memory pays a page fault per
  page too, where mapping the page cache does not. The price: the mapping also
  holds the lines nobody keeps (progress, metadata: a small share of the bytes of
  real transcripts). Only whole lines are read through the mapping
  (:func:`mapped_blocks`).
- History the loader's skip discards is read with ``read`` into ONE reused buffer
  (:func:`reused_blocks`), page-aligned: the kernel copies into a page-aligned
  buffer several times faster than into a bytearray (whose data starts 16 bytes
  off a page).
- A file that cannot be mapped is read into buffers that are never reused
  (:func:`kept_blocks`).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence

from sessiond.store.linecap import MAX_LINE, find_newline


class Lines:
    """A block of whole lines in a read buffer, for the entries decoded from it.

    ``first`` is the number of its first line; line ``k`` of the block spans
    ``starts[k]:ends[k]``, or, when ``starts`` is an int (a block without blank
    lines), from ``starts`` (k = 0) or the end of line k - 1 plus its newline.
    """

    __slots__ = ("buf", "first", "starts", "ends")

    def __init__(self, buf: mmap.mmap | bytes, first: int, starts: int | Sequence[int], ends: Sequence[int]) -> None:
        self.buf = buf
        self.first = first
        self.starts = starts
        self.ends = ends

    def span(self, index: int) -> tuple[int, int]:
        k = index - self.first
        starts = self.starts
        if isinstance(starts, int):
            return (self.ends[k - 1] + 1 if k else starts), self.ends[k]
        return starts[k], self.ends[k]

    def line(self, index: int) -> bytes:
        start, end = self.span(index)
        return self.buf[start:end]

    def view(self, index: int) -> memoryview:
        start, end = self.span(index)
        return memoryview(self.buf)[start:end]


class Block:
    """Whole lines ``buf[start:stop]`` (the last one may lack its newline at EOF);
    ``base`` is the file offset of ``buf[0]``."""

    __slots__ = ("buf", "view", "start", "stop", "base")

    def __init__(self, buf: mmap.mmap | bytes, view: memoryview, start: int, stop: int, base: int) -> None:
        self.buf = buf
        self.view = view
        self.start = start
        self.stop = stop
        self.base = base


def map_file(fd: int, size: int) -> mmap.mmap | None:
    """The file mapped read-only, or None (empty, or a file that cannot be mapped)."""
    if not size:
        return None
    try:
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # pragma: no cover - special files, some FUSE mounts
        return None


_STAND_IN = b"\x00"
_OVERLONG = Block(_STAND_IN, memoryview(_STAND_IN), 0, 1, 0)
"""One line that is no JSON object: what a line over ``linecap.MAX_LINE`` reads as."""


def reused_blocks(fd: int, offset: int, chunk: int) -> Iterator[Block]:
    """The file from ``offset`` in blocks that all live in ONE buffer, reused: a
    block is only valid until the next one is requested. A line over the
    shared cap comes as ``_OVERLONG`` (one damaged line), looked through a scan
    chunk at a time: the buffer never grows to hold it."""
    buf = _buffer(chunk)
    view = memoryview(buf)
    start = end = 0
    base = offset
    eof = False
    os.lseek(fd, offset, os.SEEK_SET)
    while not eof:
        if start:  # move the incomplete tail to the front
            buf.move(0, start, end - start)
            end -= start
            base += start
            start = 0
        if end == len(buf):  # one line fills the buffer: grow it, unless it is over the cap
            nl = find_newline(fd, base + end, base + MAX_LINE + 1)
            if nl < 0 and os.fstat(fd).st_size > base + MAX_LINE:
                yield _OVERLONG  # a damaged line in its place (its number kept), never held
                nl = find_newline(fd, base + MAX_LINE + 1)
                if nl < 0:
                    return
                base = os.lseek(fd, nl + 1, os.SEEK_SET)
                end = 0
                continue
            bigger = _buffer(2 * len(buf))
            bigger[:end] = buf[:end]
            buf, view = bigger, memoryview(bigger)
        end, eof = _fill(fd, view, end)
        for block in _split(buf, view, start, end, base, chunk):
            start = block.stop
            yield block
    if end > start:
        yield Block(buf, view, start, end, base)


def mapped_blocks(mapped: mmap.mmap, fd: int, offset: int, size: int, chunk: int) -> Iterator[Block]:
    """The mapped file from ``offset`` in blocks: the lines stay in the page cache,
    never copied (entries keep pointing into the mapping).

    Only whole lines are read through the mapping. A writer may cut a torn last line
    off (the daemon moves it aside: appendfile.cut_torn_tail), and a mapped page
    beyond the end of the file faults (SIGBUS); so the bytes after the last newline
    are read with pread instead. Each line is then in a page that stays inside the file.
    """
    last = mapped.rfind(b"\n", offset, size)
    end = last + 1 if last >= 0 else offset
    yield from _split(mapped, memoryview(mapped), offset, end, 0, chunk)
    if size - end > MAX_LINE:
        yield _OVERLONG  # a last line over the cap: not read
    elif size > end:
        tail = b"".join(pread_all(fd, size - end, end))
        if tail:
            yield Block(tail, memoryview(tail), 0, len(tail), end)


def kept_blocks(fd: int, offset: int, chunk: int) -> Iterator[Block]:
    """The file from ``offset`` in blocks in buffers that are never reused (entries
    keep pointing into them): one buffer for the whole rest of the file unless the
    file grows while it is read. For files that cannot be mapped."""
    tail = b""
    base = offset
    os.lseek(fd, offset, os.SEEK_SET)
    while True:
        remaining = max(os.fstat(fd).st_size - base - len(tail), 0)
        # +1: a full buffer means "maybe more"; one byte spare lets the read see EOF
        buf = _buffer(max(len(tail) + remaining + 1, chunk, 2 * len(tail)))
        view = memoryview(buf)
        buf[: len(tail)] = tail
        end, eof = _fill(fd, view, len(tail))
        start = 0
        for block in _split(buf, view, 0, end, base, chunk):
            start = block.stop
            yield block
        if eof:
            if end > start:
                yield Block(buf, view, start, end, base)
            return
        tail = buf[start:end]
        base += start


def _buffer(size: int) -> mmap.mmap:
    """A page-aligned buffer (the kernel copies into it faster than into a bytearray).
    Private: shared anonymous memory never gets transparent huge pages."""
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if size >= 1 << 21 and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)  # fewer page faults on fresh memory
        except OSError:  # pragma: no cover - kernels without THP
            pass
    return buf


def _fill(fd: int, view: memoryview, end: int) -> tuple[int, bool]:
    """Read on into ``view[end:]`` until it is full or EOF: (new end, eof)."""
    cap = len(view)
    while end < cap:
        n = os.readv(fd, [view[end:]])
        if not n:
            return end, True
        end += n
    return end, False


def _split(buf: mmap.mmap, view: memoryview, start: int, end: int, base: int, chunk: int) -> Iterator[Block]:
    """Blocks of whole lines of about ``chunk`` bytes in ``buf[start:end]``; stops
    before the incomplete last line (the caller's ``start`` is where it begins)."""
    find, rfind = buf.find, buf.rfind
    while start < end:
        cut = start + chunk
        nl = find(b"\n", cut - 1, end) if cut < end else -1
        if nl < 0:
            nl = rfind(b"\n", start, end)
            if nl < 0:
                return
        yield Block(buf, view, start, nl + 1, base)
        start = nl + 1


def pread_all(fd: int, length: int, offset: int) -> Iterator[bytes]:
    while length > 0 and (data := os.pread(fd, length, offset)):
        yield data
        length -= len(data)
        offset += len(data)
