"""The blocking client's reads: one buffer for the connection's life, answers
of any size (a watcher's frames bigger than one read) byte-exact."""

from __future__ import annotations

import json
import tracemalloc
import uuid

from sessiond.client.connection import RECV_SIZE
from sessiond.client.watch import subscribe
from sessiond.wire import messages as m
from tests.helpers import main_path

CWD = "/work/recvbuf"


def _line(i: int, size: int) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "x" * size},
                       "n": i}).encode()


def test_reading_answers_allocates_no_read_sized_buffer_per_read(daemon):
    """Each answer is read into the client's one buffer and copied out at its
    length: a fresh read-sized buffer per read (what ``recv(RECV_SIZE)`` allocates)
    would show as a peak of at least RECV_SIZE."""
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_line(0, 10)], durability="written"))
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            for i in range(1, 30):
                c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_line(i, 10)], durability="written"))
            c.status()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < RECV_SIZE // 2, f"reading 30 small answers peaked at {peak} bytes"


def test_a_watcher_gets_frames_bigger_than_one_read_byte_exact(daemon):
    """One write bigger than a read (several frames, each split across reads)
    reaches a watcher as the file holds it."""
    sid = str(uuid.uuid4())
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=[_line(-1, 10)], durability="written"))
    path = main_path(daemon.root, CWD, sid)
    start = path.stat().st_size
    watcher = daemon.client()
    stream = subscribe(watcher, m.Subscribe(id=watcher.next_id(), session=sid, cwd=CWD))
    assert isinstance(next(stream), m.Subscribed)
    lines = [_line(i, 100_000) for i in range(3 * RECV_SIZE // 100_000)]
    with daemon.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, entries=lines, durability="written"))
    got: list[bytes] = []
    for frame in stream:
        assert isinstance(frame, m.Entries)
        got.extend(frame.lines)
        if len(got) >= len(lines):
            break
    watcher.close()
    assert got == lines
    assert path.read_bytes()[start:] == b"".join(x + b"\n" for x in lines)
