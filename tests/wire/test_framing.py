"""Framing and message decoding: any split decodes the same; junk is a typed error."""

import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiond.wire import messages as m
from sessiond.wire.errors import FrameTooLarge, ProtocolError
from sessiond.wire.framing import FrameBuffer, decode_request, decode_response, encode, request_id_of

entries = st.lists(st.binary(max_size=64), max_size=5)
requests = st.one_of(
    st.builds(m.Append, id=st.integers(0, 2**32), session=st.text(max_size=40), cwd=st.text(max_size=40), entries=entries,
              durability=st.sampled_from(m.DURABILITIES)),
    st.builds(m.Flush, id=st.integers(0, 2**32), session=st.none() | st.text(max_size=36), durable=st.booleans()),
    st.builds(m.Status, id=st.integers(0, 2**32)),
    st.builds(m.Close, id=st.integers(0, 2**32), session=st.text(max_size=36)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(requests, min_size=1, max_size=8), st.data())
def test_any_split_of_a_stream_decodes_the_same(reqs, data):
    stream = b"".join(encode(r) for r in reqs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    buf = FrameBuffer()
    bodies = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        bodies += buf.feed(stream[prev:cut])
        prev = cut
    assert buf.pending == 0
    assert [decode_request(b) for b in bodies] == reqs


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_the_typed_error(junk):
    for decode in (decode_request, decode_response):
        try:
            decode(junk)
        except ProtocolError:
            pass
    request_id_of(junk)  # never raises


def test_oversized_frame_is_refused_from_the_header_alone():
    buf = FrameBuffer(max_frame=1024)
    with pytest.raises(FrameTooLarge):
        buf.feed(struct.pack(">I", 1025))  # no body sent at all


def test_valid_msgpack_of_the_wrong_shape_is_a_protocol_error():
    for raw in ({"op": "Append", "id": 1}, {"op": "Nope", "id": 1}, [1, 2, 3], {"op": "Status", "id": "x"}):
        with pytest.raises(ProtocolError):
            decode_request(msgspec.msgpack.encode(raw))
    assert request_id_of(msgspec.msgpack.encode({"op": "Nope", "id": 7})) == 7


def test_each_frame_is_a_new_buffer():
    a = encode(m.Status(id=1))
    b = encode(m.Status(id=2))
    assert a != b and decode_request(a[4:]) == m.Status(id=1)


def test_a_big_frame_is_held_once_and_its_id_found_without_building_it():
    """A frame received in pieces is handed out as the buffer itself (never a
    second copy), and a malformed one's id is read without decoding its body."""
    import tracemalloc

    n = 8 * 1024 * 1024
    head = b"\x83\xa2op\xa6Append\xa2id\xcd\x1e\x61\xa1x"  # {"op": "Append", "id": 7777, "x": [[], [], ...]}
    body = head + b"\xdd" + struct.pack(">I", n) + b"\x90" * n
    stream = struct.pack(">I", len(body)) + body
    buf = FrameBuffer(16 * 1024 * 1024)
    for i in range(0, len(stream) - 65536, 65536):
        assert buf.feed(stream[i : i + 65536]) == []
    assert buf.announced == len(body)
    tracemalloc.start()
    try:
        (got,) = buf.feed(stream[i + 65536 :])
        assert bytes(got[:16]) == body[:16] and len(got) == len(body)
        copied = tracemalloc.get_traced_memory()[1] - 16
        with pytest.raises(ProtocolError):
            decode_request(got)
        assert request_id_of(got) == 7777
        decoded = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert copied < n // 8, f"the body was copied ({copied} bytes)"
    assert decoded < n // 8, f"finding the id built the body ({decoded} bytes)"
    assert buf.pending == 0 and buf.announced == 0


def test_whole_frames_of_a_read_are_handed_out_without_a_copy():
    """The usual read (whole frames, nothing buffered): the bodies are views
    of the bytes read, so a watcher's big frame is copied once, by its
    decoding; only an incomplete frame at the end is kept (copied)."""
    import tracemalloc

    lines = [b"x" * 1000] * 1000
    frames = [encode(m.Entries(id=i, file="s.jsonl", offset=0, lines=lines)) for i in range(3)]
    tail = encode(m.Status(id=9))
    read = b"".join(frames) + tail[:5]
    buf = FrameBuffer()
    tracemalloc.start()
    try:
        bodies = buf.feed(read)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert held < 64 * 1024, f"the bodies were copied ({held} bytes for {len(read)} read)"
    assert [decode_response(b).id for b in bodies] == [0, 1, 2]
    assert buf.pending == 5 and buf.feed(tail[5:]) and buf.pending == 0


def test_bodies_decoded_from_a_reused_buffer_do_not_change_with_it():
    """How the blocking client reads: into one buffer, decoded, then read into
    again. What was decoded holds its own bytes."""
    recv = bytearray(1 << 16)
    buf = FrameBuffer()
    got = []
    for i in range(3):
        frame = encode(m.Entries(id=i, file="s.jsonl", offset=i, lines=[bytes([65 + i]) * 100] * 5))
        recv[: len(frame)] = frame
        got += [decode_response(b) for b in buf.feed(memoryview(recv)[: len(frame)])]
        recv[:] = b"\0" * len(recv)
    assert [(e.id, e.lines[0][:1]) for e in got] == [(0, b"A"), (1, b"B"), (2, b"C")]


def test_deep_nesting_is_a_protocol_error_not_a_recursion_error():
    deep = b"\x91" * 100_000 + b"\xc0"
    request = b"\x83\xa2op\xa6Status\xa2id\x01\xa1x" + deep  # {"op": "Status", "id": 1, "x": [[[...]]]}
    with pytest.raises(ProtocolError, match="nested too deeply"):
        decode_request(request)
    assert request_id_of(request) == 0  # the id decoder meets the nesting too: the answer goes with id 0
    with pytest.raises(ProtocolError, match="nested too deeply"):
        decode_response(b"\x83\xa2op\xa4Done\xa2id\x01\xa1x" + deep)


def test_a_batch_past_the_entry_cap_is_refused_before_it_is_built():
    count = m.MAX_BATCH_ENTRIES + 1
    head = msgspec.msgpack.encode({"op": "Append", "id": 1, "session": "s", "cwd": "/"})
    body = b"\x85" + head[1:] + b"\xa7entries\xdd" + struct.pack(">I", count) + b"\xc4\x00" * count
    with pytest.raises(ProtocolError, match="length <= 100000"):
        decode_request(body)


def test_entries_skipped_is_optional_both_ways():
    """``Entries.skipped`` (bytes of a line no frame can carry, passed over) is
    left out at 0: a frame without it (a daemon of the builds that had no
    such field) decodes as 0 skipped, and one with it keeps the count."""
    old = msgspec.msgpack.encode({"op": "Entries", "id": 3, "file": "s.jsonl", "offset": 10, "lines": [b"{}"]})
    assert decode_response(old) == m.Entries(id=3, file="s.jsonl", offset=10, lines=[b"{}"], skipped=0)
    new = msgspec.msgpack.encode(m.Entries(id=3, file="s.jsonl", offset=10, lines=[], skipped=10_000_000))
    assert decode_response(new).skipped == 10_000_000
