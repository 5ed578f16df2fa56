"""``last_lines`` (read from a file's end) agrees with reading the whole file."""

from __future__ import annotations

import os
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from sessiond.store.lastlines import last_lines, line_numbers

PIECES = st.sampled_from([b"", b" ", b"\r", b"\t \r", b"{}", b'{"type":"user"}', b"x" * 70, "é".encode()])


def whole_file_answer(data: bytes, count: int) -> list[tuple[int, bytes]]:
    """What reading everything gives: the last ``count`` non-blank whole lines."""
    whole = data[: data.rfind(b"\n") + 1]
    out, offset = [], 0
    for text in whole.split(b"\n")[:-1]:
        if text.strip():
            out.append((offset, text.removesuffix(b"\r")))
        offset += len(text) + 1
    return out[-count:] if count else []


@given(lines=st.lists(PIECES, max_size=12), ends=st.booleans(), torn=st.sampled_from([b"", b"  ", b'{"type":"us']),
       count=st.integers(0, 6), chunk=st.integers(1, 9))
def test_the_end_read_backwards_is_the_end_read_whole(lines, ends, torn, count, chunk):
    data = b"\n".join(lines) + (b"\n" if ends else b"") + torn
    fd, name = tempfile.mkstemp()
    try:
        os.write(fd, data)
        got = last_lines(fd, count, chunk)
        assert [(x.offset, x.data) for x in got.lines] == whole_file_answer(data, count)
        assert got.end == data.rfind(b"\n") + 1
        if count:
            assert got.blank == (not data.strip())
        offsets = [x.offset for x in got.lines]
        assert line_numbers(fd, offsets, chunk) == [data[:o].count(b"\n") + 1 for o in offsets]
    finally:
        os.close(fd)
        os.unlink(name)


def test_a_gigabyte_before_the_end_is_never_read():
    """A sparse 1 GiB file: what is read is the lines asked for plus a chunk,
    measured by the bytes the kernel reports this process read."""
    with tempfile.TemporaryFile(dir="/tmp") as f:
        f.truncate(1 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + b"".join(b'{"n":%d}\n' % i for i in range(100)))
        f.flush()
        before = _read_bytes()
        got = last_lines(f.fileno(), 3)
        read = _read_bytes() - before
    assert [x.data for x in got.lines] == [b'{"n":97}', b'{"n":98}', b'{"n":99}']
    assert read < 1 << 20, read


def _read_bytes() -> int:
    """``rchar`` of /proc/self/io: bytes this process asked read(2)/pread(2) for."""
    with open("/proc/self/io") as io:
        return next(int(v) for k, v in (row.split(":") for row in io) if k == "rchar")
