"""The shared line cap: an over-long line is skipped holding at most one scan
chunk of it; the lines around it are read as ever (real files, tracemalloc)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from sessiond.store.linecap import MAX_LINE, SCAN_CHUNK, read_span
from sessiond.wire.frames import DEFAULT_MAX_FRAME

MiB = 1024 * 1024


def write_huge(path: Path, before: bytes, size: int, after: bytes, newline: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(before)
        block = b"x" * MiB
        for _ in range(size // MiB):
            f.write(block)
        f.write(b"x" * (size % MiB) + (b"\n" if newline else b""))
        f.write(after)


def spans(fd: int, want: int, max_line: int) -> list:
    out, pos = [], 0
    while True:
        span = read_span(fd, pos, want, max_line)
        if span.end == pos:
            return out
        out.append(span)
        pos = span.end


def test_the_cap_is_the_frame_cap():
    assert MAX_LINE == DEFAULT_MAX_FRAME  # every entry a frame can carry is read back


def test_a_64_mib_line_is_skipped_holding_one_chunk(tmp_path: Path):
    """A line over the cap between two entries: both entries read, the line
    counted as one skipped, and the reader's peak allocation about one read."""
    path = tmp_path / "t.jsonl"
    before, after = b'{"a":1}\n', b'{"b":2}\n{"c":3}\n'
    write_huge(path, before, 64 * MiB + 5, after)
    fd = os.open(path, os.O_RDONLY)
    try:
        tracemalloc.start()
        got = spans(fd, 256 * 1024, max_line=64 * MiB)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        os.close(fd)
    assert [line for s in got for line in s.lines()] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert sum(s.skipped for s in got) == 1
    assert got[1].skipped_bytes == 64 * MiB + 6 and got[1].start == len(before) + 64 * MiB + 6
    assert peak < 2 * SCAN_CHUNK + MiB, f"peak {peak / MiB:.1f} MiB"


def test_a_line_longer_than_a_read_but_under_the_cap_comes_alone(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    write_huge(path, b'{"a":1}\n', 3 * MiB, b'{"b":2}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        got = spans(fd, 64 * 1024, max_line=4 * MiB)
    finally:
        os.close(fd)
    lines = [line for s in got for line in s.lines()]
    assert lines[0] == b'{"a":1}' and len(lines[1]) == 3 * MiB and lines[2] == b'{"b":2}'
    assert not any(s.skipped for s in got)


@pytest.mark.parametrize("size", [2 * MiB, 5 * MiB])
def test_an_unfinished_long_line_is_waited_for(tmp_path: Path, size: int):
    """No newline yet: whether or not it is already over the cap, nothing is
    taken past the line's start (its end, and what follows, are not there yet)."""
    path = tmp_path / "t.jsonl"
    write_huge(path, b'{"a":1}\n', size, b"", newline=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        first = read_span(fd, 0, 64 * 1024, 4 * MiB)
        assert first.lines() == [b'{"a":1}']
        again = read_span(fd, first.end, 64 * 1024, 4 * MiB)
        assert again.data == b"" and again.start == first.end and again.skipped == 0
        with open(path, "ab") as f:
            f.write(b'\n{"b":2}\n')
        done = spans(fd, 64 * 1024, 4 * MiB)
    finally:
        os.close(fd)
    assert [line for s in done for line in s.lines() if len(line) < 100] == [b'{"a":1}', b'{"b":2}']
    assert sum(s.skipped for s in done) == (1 if size > 4 * MiB else 0)


def test_iter_lines_stands_an_empty_line_for_one_over_the_cap(tmp_path: Path):
    """The streaming reader every scan uses: lines around an over-long one
    come as ever, it comes as b"" (no entry: a damaged line to every reader),
    and the reader's buffer never grows to hold it."""
    from sessiond.store.jsonl import iter_lines

    path = tmp_path / "t.jsonl"
    write_huge(path, b'{"a":1}\n', 64 * MiB + 5, b'{"b":2}\n' + b"y" * (3 * MiB) + b'\n{"c":3}')
    tracemalloc.start()
    got = [line if len(line) < 100 else len(line) for line in iter_lines(path, chunk=64 * 1024, max_line=4 * MiB)]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == [b'{"a":1}', b"", b'{"b":2}', 3 * MiB, b'{"c":3}']
    assert peak < 2 * 3 * MiB + 2 * SCAN_CHUNK, f"peak {peak / MiB:.1f} MiB"  # the 3 MiB line, held and copied once


def test_last_lines_keeps_no_more_than_a_chunk_of_a_line_over_the_cap(tmp_path: Path):
    """``tail -n`` reads back from the end: a line over the cap among the last
    lines comes as an empty (unreadable) line at its offset, never joined whole."""
    from sessiond.store import lastlines

    path = tmp_path / "t.jsonl"
    write_huge(path, b'{"a":1}\n', 5 * MiB, b'{"b":2}\n{"c":3}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        tracemalloc.start()
        window = lastlines.last_lines(fd, 10, max_line=4 * MiB)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        os.close(fd)
    assert [(x.offset, x.data) for x in window.lines] == [(0, b'{"a":1}'), (8, b""), (8 + 5 * MiB + 1, b'{"b":2}'),
                                                          (8 + 5 * MiB + 9, b'{"c":3}')]
    assert peak < 4 * MiB + 2 * SCAN_CHUNK, f"peak {peak / MiB:.1f} MiB"


def test_want_and_limit_of_zero_look_at_nothing(tmp_path):
    """A look at a file's state only (the follower's look after the daemon's own
    write): the lines after ``offset`` are not read, nor searched for."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"known\n" + b"new line\n" + b"partial")
    fd = os.open(path, os.O_RDONLY)
    try:
        span = read_span(fd, 6, 0, limit=0)
        assert (span.end, span.data, span.scanned) == (6, b"", 6)
        span = read_span(fd, 6, 0, limit=0, scanned=15)  # what an earlier look knew stands
        assert (span.end, span.data, span.scanned) == (6, b"", 15)
        assert read_span(fd, 6, 64).data == b"new line\n"  # and a look that may read, reads
    finally:
        os.close(fd)
