"""A watcher's ``Entries`` frame built from a write's shared lines is exactly the
frame ``encode(Entries(...))`` makes, whatever its fields: the wire does not
change when the lines are encoded once for many watchers."""

from __future__ import annotations

import pytest

from sessiond.daemon.watchers import EntriesFrame
from sessiond.wire import messages as m
from sessiond.wire.framing import decode_response, encode

LINES = [
    [],
    [b'{"type":"user"}'],
    [b'{"n":%d}' % i for i in range(40)],
    [b"x" * 70_000, b"y"],  # a line past msgpack's 16-bit bin length
]
NAMES = ["0b7e.jsonl", "0b7e/subagents/agent-" + "a" * 200 + ".jsonl", "caf\udcc3.jsonl"]  # the last not UTF-8


@pytest.mark.parametrize("lines", LINES, ids=["none", "one", "forty", "long"])
@pytest.mark.parametrize("name", NAMES, ids=["main", "long-name", "not-utf8"])
@pytest.mark.parametrize(("reset", "skipped"), [(False, 0), (True, 0), (False, 7), (True, 2**40)])
def test_a_shared_frame_is_the_frame_encode_makes(lines, name, reset, skipped):
    frame = EntriesFrame(lines)
    for rid, offset in ((1, 0), (2**31, 123_456_789)):  # one encoding, several watchers' frames
        expected = m.Entries(id=rid, file=name, offset=offset, lines=lines, reset=reset, skipped=skipped)
        parts = frame.parts(rid, name, offset, reset, skipped)
        assert b"".join(parts) == encode(expected)
        assert decode_response(b"".join(parts)[4:]) == expected
        assert parts[1] is frame.packed()  # the lines' bytes are the same object in every frame


@pytest.mark.parametrize("sizes", [[1, 1], [10, 5], [10, 6], [3, 0, 40], [65_000, 535], [65_000, 536]],
                         ids=["two", "fifteen", "sixteen", "with-empty", "65535", "65536"])
@pytest.mark.parametrize("reset", [False, True])
def test_writes_joined_are_the_frame_encode_makes_of_all_their_lines(sizes, reset):
    """The lines of several writes in a row, held for a watcher and sent as one
    frame (``EntriesFrame.joined``), are exactly ``encode(Entries(...))`` of all
    of them, whatever array header their count takes (fix, 16-bit, 32-bit);
    each write's lines are encoded once, shared by every watcher's frame."""
    writes = [[b'{"w":%d,"n":%d}' % (w, i) for i in range(n)] for w, n in enumerate(sizes)]
    frames = [EntriesFrame(lines) for lines in writes]
    every = [line for lines in writes for line in lines]
    name = NAMES[1]
    for rid, offset in ((1, 0), (7, 99)):
        parts = EntriesFrame.joined(frames, len(every), rid, name, offset, reset)
        expected = m.Entries(id=rid, file=name, offset=offset, lines=every, reset=reset)
        assert b"".join(parts) == encode(expected)
        assert decode_response(b"".join(parts)[4:]) == expected
    assert all(f.is_packed for f in frames)


def test_one_write_joined_is_its_shared_frame():
    frame = EntriesFrame([b'{"a":1}', b'{"b":2}'])
    parts = EntriesFrame.joined([frame], 2, 3, "s.jsonl", 10, False)
    assert parts == frame.parts(3, "s.jsonl", 10, False, 0)
    assert parts[1] is frame.packed()
